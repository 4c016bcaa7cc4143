"""Model cards: one Jinja template per family in ``hub_cards/``, filled from a checkpoint's own files.

A checkpoint folder written by ``hf-plm-ext`` holds ``config.json`` and ``training_args.json``,
plus ``pretrain_results.json`` (pre-training) or ``eval_results.json`` (GLUE/CLUE fine-tuning);
the card's metadata and ``model-index`` come from them, so the card states what the run did.
"""

import json
import re
from importlib import resources
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from hf_plm_ext.errors import UserInputError

# Which Auto class and pipeline a checkpoint's head belongs to, by the architecture's suffix.
HEADS = {
    "ForSequenceClassification": ("AutoModelForSequenceClassification", "text-classification"),
    "ForTokenClassification": ("AutoModelForTokenClassification", "token-classification"),
    "ForQuestionAnswering": ("AutoModelForQuestionAnswering", "question-answering"),
    "ForPreTraining": ("AutoModelForPreTraining", "feature-extraction"),
    "ForMaskedLM": ("AutoModelForMaskedLM", "feature-extraction"),
    "LMHeadModel": ("AutoModelForCausalLM", "text-generation"),
    "Model": ("AutoModel", "feature-extraction"),
}
TRAINING_FIELDS = ("learning_rate", "per_device_train_batch_size", "gradient_accumulation_steps", "max_steps",
                   "num_train_epochs", "warmup_steps", "weight_decay", "seed")
PRETRAINING_FIELDS = ("objective", "corpus", "train_examples", "world_size", "initial_eval_loss", "final_eval_loss")
MASKED_LM_FIELDS = ("mlm_probability", "max_seq_length")
OBJECTIVE_FIELDS = {"mlm": MASKED_LM_FIELDS,
                    "macbert": MASKED_LM_FIELDS + ("masking", "similar_words", "segmenter", "short_seq_prob"),
                    "electra": MASKED_LM_FIELDS + ("size",),
                    "transfo-xl": ("size", "tgt_len", "mem_len", "cutoffs", "validation_corpus")}


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise UserInputError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from None


def template_for(model_type: str) -> str:
    template = resources.files("hf_plm_ext.hub_cards").joinpath(f"{model_type}.md")
    if not template.is_file():
        raise UserInputError(f"no model-card template for model_type {model_type!r} in hub_cards/")
    return template.read_text(encoding="utf-8")


def eval_results_of(results: dict) -> list[EvalResult]:
    """``model-index`` entries from an ``eval_results.json`` written by the GLUE/CLUE runner."""
    benchmark, task = results["benchmark"], results["task"]
    return [EvalResult(task_type="text-classification", dataset_type=benchmark, dataset_name=f"{benchmark.upper()} "
                       f"{task.upper()}", dataset_config=task, dataset_split=split["split"], metric_type=name,
                       metric_value=round(float(value), 4))
            for split in results["results"] for name, value in split["metrics"].items()]


def render_card(checkpoint, repo_id=None, language=None, license=None, base_model=None, datasets=None) -> ModelCard:
    """The model card of ``checkpoint`` (a folder written by ``hf-plm-ext``)."""
    checkpoint = Path(checkpoint)
    if not (checkpoint / "config.json").is_file():
        raise UserInputError(f"{checkpoint} is not a checkpoint folder (no config.json)")
    config = _read_json(checkpoint / "config.json")
    architecture = (config.get("architectures") or ["Model"])[0]
    auto_class, pipeline_tag = next((v for suffix, v in HEADS.items() if architecture.endswith(suffix)),
                                    HEADS["Model"])
    pretrained = _optional(checkpoint / "pretrain_results.json")
    evaluated = _optional(checkpoint / "eval_results.json")
    training_args = _optional(checkpoint / "training_args.json") or {}

    pretraining = {}
    if pretrained:
        merged = {**pretrained.get("arguments", {}), **pretrained}
        fields = PRETRAINING_FIELDS + OBJECTIVE_FIELDS.get(merged.get("objective"), ())
        pretraining = {k: _show(merged[k]) for k in fields if merged.get(k) is not None}
        auc = merged.get("final_eval_metrics", {}).get("eval_discriminator_auc")
        if auc is not None:
            pretraining["held-out discriminator AUC"] = round(auc, 4)
        if merged.get("final_eval_perplexity") is not None:
            pretraining["held-out perplexity"] = round(merged["final_eval_perplexity"], 2)
    training = {k: _show(training_args[k]) for k in TRAINING_FIELDS if training_args.get(k) not in (None, -1)}
    objective = (pretrained or {}).get("objective")
    name = repo_id.split("/")[-1] if repo_id else checkpoint.name
    card_data = ModelCardData(
        model_name=name, library_name="transformers", pipeline_tag=pipeline_tag, language=language, license=license,
        base_model=base_model, datasets=datasets,
        tags=list(dict.fromkeys(["hf-plm-ext", config["model_type"], *([objective] if objective else []),
              *(["custom_code"] if config.get("auto_map") else [])])),
        eval_results=eval_results_of(evaluated) if evaluated else None,
    )
    if evaluated:
        what = (f"This checkpoint is fine-tuned on {evaluated['benchmark'].upper()} {evaluated['task'].upper()} "
                f"({evaluated['num_train_examples']} training examples).")
    elif pretrained:
        what = (f"This checkpoint is the model with its pre-training heads (`{architecture}`), pre-trained with the "
                f"`{objective}` objective" + (f", `{pretraining['masking']}` masking." if "masking" in pretraining
                                              else "."))
    else:
        what = f"This checkpoint is a `{architecture}`; its folder holds no record of how it was trained."
    from hf_plm_ext.eval.runner import results_table

    card = ModelCard.from_template(
        card_data, template_str=template_for(config["model_type"]), model_name=name,
        repo_id=repo_id or f"path/to/{checkpoint.name}", auto_class=auto_class, architecture=architecture,
        what_this_checkpoint_is=what, pretraining=pretraining, training=training,
        results_table=results_table([evaluated]) if evaluated else "",
        num_parameters=_parameter_count(checkpoint), config=config, **{k: config.get(k) for k in (
            "num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")},
    )
    return ModelCard(re.sub(r"\n{3,}", "\n\n", str(card)))  # the template's optional sections leave blank runs


def _optional(path: Path):
    return _read_json(path) if path.is_file() else None


def _show(value):
    if isinstance(value, list):
        return ", ".join(Path(v).name for v in value)
    return round(value, 4) if isinstance(value, float) else value


def _parameter_count(checkpoint: Path) -> str:
    from math import prod

    from safetensors import safe_open

    total = 0
    for weights in checkpoint.glob("*.safetensors"):
        with safe_open(str(weights), framework="pt") as handle:
            total += sum(prod(handle.get_slice(name).get_shape()) for name in handle.keys())
    return f"{total / 1e6:.2f} M" if total else "not recorded"
