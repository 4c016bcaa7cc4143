"""Model cards: one Jinja template per family in ``hub_cards/``, filled from a checkpoint's own files.

A checkpoint folder written by ``hf-plm-ext`` holds ``config.json`` and ``training_args.json``,
plus ``pretrain_results.json`` (pre-training) or ``eval_results.json`` (GLUE/CLUE fine-tuning);
the card's metadata and ``model-index`` come from them, so the card states what the run did.
An adapter folder (``adapter_config.json``, PEFT's format) gets ``hub_cards/adapter.md``.
"""

import json
import re
from importlib import resources
from math import prod
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData
from safetensors import SafetensorError, safe_open

from hf_plm_ext.checkpoints.results import results_table
from hf_plm_ext.errors import UserInputError
from hf_plm_ext.files import unstaged
from hf_plm_ext.training.objectives import OBJECTIVES

# Which Auto class and pipeline a checkpoint's head belongs to, by the architecture's suffix.
HEADS = {
    "ForSequenceClassification": ("AutoModelForSequenceClassification", "text-classification"),
    "ForTokenClassification": ("AutoModelForTokenClassification", "token-classification"),
    "ForQuestionAnswering": ("AutoModelForQuestionAnswering", "question-answering"),
    "ForSpellingCorrection": ("AutoModelForSpellingCorrection", "text2text-generation"),  # hf_plm_ext's Auto class
    "ForPreTraining": ("AutoModelForPreTraining", "feature-extraction"),
    "ForMaskedLM": ("AutoModelForMaskedLM", "feature-extraction"),
    "LMHeadModel": ("AutoModelForCausalLM", "text-generation"),
    "ForCausalLM": ("AutoModelForCausalLM", "text-generation"),
    "Model": ("AutoModel", "feature-extraction"),
}
TRAINING_FIELDS = ("learning_rate", "per_device_train_batch_size", "gradient_accumulation_steps", "max_steps",
                   "num_train_epochs", "warmup_steps", "weight_decay", "seed")
PRETRAINING_FIELDS = ("objective", "corpus", "data", "train_examples", "world_size", "initial_eval_loss", "final_eval_loss")


def read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise UserInputError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from None


def template_for(model_type: str) -> str:
    """The family's card template, or the generic one for any other model type (stock ``bert``, ``electra``, ...)."""
    cards = resources.files("hf_plm_ext.hub_cards")
    template = cards.joinpath(f"{model_type}.md")
    return (template if template.is_file() else cards.joinpath("generic.md")).read_text(encoding="utf-8")


def eval_results_of(results: dict) -> list[EvalResult]:
    """``model-index`` entries from an ``eval_results.json`` written by the GLUE/CLUE runner (or the CSC one)."""
    benchmark, task = results["benchmark"], results["task"]
    return [EvalResult(task_type=results.get("task_type", "text-classification"), dataset_type=benchmark,
                       dataset_name=f"{benchmark.upper()} "
                       f"{task.upper()}", dataset_config=task, dataset_split=split["split"], metric_type=name,
                       metric_value=round(float(value), 4))
            for split in results["results"] for name, value in split["metrics"].items()]


def render_card(checkpoint, repo_id=None, language=None, license=None, base_model=None, datasets=None,
                eval_results=None) -> ModelCard:
    """The model card of ``checkpoint`` (a folder written by ``hf-plm-ext``); ``eval_results`` (as
    ``eval_results.json`` holds them) in place of the folder's own, e.g. a later evaluation's."""
    checkpoint = Path(checkpoint)
    if (checkpoint / "adapter_config.json").is_file():
        return render_adapter_card(checkpoint, repo_id, language, license, base_model, datasets)
    if not (checkpoint / "config.json").is_file():
        raise UserInputError(f"{checkpoint} is not a checkpoint folder (no config.json)")
    config = read_json(checkpoint / "config.json")
    architecture = (config.get("architectures") or ["Model"])[0]
    auto_class, pipeline_tag = next((v for suffix, v in HEADS.items() if architecture.endswith(suffix)),
                                    HEADS["Model"])
    pretrained = _optional(checkpoint / "pretrain_results.json")
    evaluated = _optional(checkpoint / "eval_results.json")
    scored = eval_results or evaluated
    training_args = _optional(checkpoint / "training_args.json") or {}

    pretraining = {}
    if pretrained:
        merged = {**pretrained.get("arguments", {}), **pretrained}
        objective_class = OBJECTIVES.get(merged.get("objective"))
        fields = PRETRAINING_FIELDS + (objective_class.card_fields if objective_class else ())
        pretraining = {k: _show(merged[k]) for k in fields if merged.get(k) is not None}
        if objective_class:
            pretraining.update(objective_class.card_rows(merged))
    distilled = (evaluated or {}).get("distillation") or _optional(checkpoint / "distill_results.json")
    training = {k: _show(training_args[k]) for k in TRAINING_FIELDS if training_args.get(k) not in (None, -1)}
    objective = (pretrained or {}).get("objective")
    name = repo_id.split("/")[-1] if repo_id else unstaged(checkpoint).name  # rendered while staging: the output's
    card_data = ModelCardData(
        model_name=name, library_name="transformers", pipeline_tag=pipeline_tag, language=language, license=license,
        base_model=base_model, datasets=datasets,
        tags=list(dict.fromkeys(["hf-plm-ext", config["model_type"], *([objective] if objective else []),
              *(["custom_code"] if config.get("auto_map") else [])])),
        eval_results=eval_results_of(scored) if scored else None,
    )
    if distilled:
        what = (f"This checkpoint is a student distilled from `{distilled['teacher']}` (TinyBERT's layer-wise "
                f"distillation; {distilled['student_parameters']:,} parameters, the teacher "
                f"{distilled['teacher_parameters']:,})" + (f" on {evaluated['benchmark'].upper()} "
                                                            f"{evaluated['task'].upper()}." if evaluated else
                                                            " on unlabelled text (general distillation)."))
    elif evaluated:
        what = f"This checkpoint is {fine_tuned_on(evaluated)}."
    elif pretrained:
        what = (f"This checkpoint is the model with its pre-training heads (`{architecture}`), pre-trained with the "
                f"`{objective}` objective" + (f", `{pretraining['masking']}` masking." if "masking" in pretraining
                                              else "."))
    else:
        what = f"This checkpoint is a `{architecture}`; its folder holds no record of how it was trained."
    card = ModelCard.from_template(
        card_data, template_str=template_for(config["model_type"]), model_name=name,
        repo_id=repo_id or f"path/to/{name}", auto_class=auto_class, architecture=architecture,
        what_this_checkpoint_is=what, pretraining=pretraining, training=training,
        distillation=distillation_rows(distilled) if distilled else {},
        results_table=results_table([scored]) if scored else "",
        spelling_correction=architecture.endswith("ForSpellingCorrection"),
        num_parameters=_parameter_count(checkpoint), config=config, **{k: config.get(k) for k in (
            "num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")},
    )
    return ModelCard(re.sub(r"\n{3,}", "\n\n", str(card)))  # the template's optional sections leave blank runs


# What PEFT's ``task_type`` loads with and which pipeline it serves.
PEFT_TASKS = {
    "SEQ_CLS": ("AutoPeftModelForSequenceClassification", "text-classification"),
    "TOKEN_CLS": ("AutoPeftModelForTokenClassification", "token-classification"),
    "QUESTION_ANS": ("AutoPeftModelForQuestionAnswering", "question-answering"),
    "CAUSAL_LM": ("AutoPeftModelForCausalLM", "text-generation"),
    "FEATURE_EXTRACTION": ("AutoPeftModelForFeatureExtraction", "feature-extraction"),
}
PEFT_METHODS = {
    "LORA": ("adds a trainable low-rank update `B A` (rank `r`, scaled by `lora_alpha / r`) to each target "
             "weight matrix.",
             "@inproceedings{hu2022lora,\n  title = {{LoRA}: Low-Rank Adaptation of Large Language Models},\n"
             "  author = {Hu, Edward J. and Shen, Yelong and Wallis, Phillip and Allen-Zhu, Zeyuan and Li, Yuanzhi "
             "and Wang, Shean and Wang, Lu and Chen, Weizhu},\n  booktitle = {International Conference on Learning "
             "Representations},\n  year = {2022},\n}"),
    "BOTTLENECK": ("adds small bottleneck blocks (down-projection, non-linearity, up-projection, with a residual) "
                   "after the layers' attention and / or feed-forward outputs (Houlsby et al., 2019; Pfeiffer et "
                   "al., 2020; the parallel form of He et al., 2022), in AdapterHub's arrangement.",
                   "@inproceedings{houlsby2019parameter,\n  title = {Parameter-Efficient Transfer Learning for "
                   "{NLP}},\n  author = {Houlsby, Neil and Giurgiu, Andrei and Jastrzebski, Stanislaw and Morrone, "
                   "Bruna and de Laroussilhe, Quentin and Gesmundo, Andrea and Attariyan, Mona and Gelly, Sylvain},\n"
                   "  booktitle = {International Conference on Machine Learning},\n  year = {2019},\n}\n"
                   "@inproceedings{pfeiffer2021adapterfusion,\n  title = {{AdapterFusion}: Non-Destructive Task "
                   "Composition for Transfer Learning},\n  author = {Pfeiffer, Jonas and Kamath, Aishwarya and "
                   "R\u00fcckl\u00e9, Andreas and Cho, Kyunghyun and Gurevych, Iryna},\n  booktitle = {EACL},\n"
                   "  year = {2021},\n}"),
}
ADAPTER_FIELDS = ("r", "lora_alpha", "lora_dropout", "reduction_factor", "non_linearity", "mh_adapter",
                  "output_adapter", "original_ln_before", "is_parallel", "scaling", "target_modules")
# PEFT methods that this package registers with PEFT on `import hf_plm_ext`: an adapter of one of them loads only where hf-plm-ext is installed and imported, and its card says so
PACKAGE_PEFT_METHODS = {"BOTTLENECK"}


def distillation_rows(distilled: dict) -> dict:
    """The card's distillation table: teacher, where the student started, each stage, the losses."""
    arguments = distilled.get("arguments", {})
    rows = {"teacher": f"`{distilled['teacher']}`", "student initialised from": distilled["student_from"]}
    for number, stage in enumerate(distilled["stages"], start=1):
        steps = f"{stage['max_steps']} steps" if stage.get("max_steps") else f"{_show(stage['epochs'])} epochs"
        rows[f"stage {number}"] = f"{stage['stage']}, {steps}, learning rate {_show(stage['learning_rate'])}"
    augmentation = distilled.get("augmentation")
    if augmentation:
        rows["augmentation"] = (f"TinyBERT's: {augmentation['copies']} copies per example, {augmentation['candidates']} "
                                f"candidates per word, p = {augmentation['probability']} "
                                f"({augmentation['original_examples']:,} -> {augmentation['augmented_examples']:,} "
                                f"examples)")
    rows["layer map"] = arguments.get("layer_map")
    rows["losses"] = (f"attention {arguments.get('attention_loss')}, hidden states {arguments.get('hidden_loss')}, "
                      f"prediction {arguments.get('prediction_loss') or 'default'} (temperature "
                      f"{arguments.get('temperature')})")
    for split in distilled.get("teacher_results", []):
        rows[f"teacher on {split['split']}"] = ", ".join(f"{name} {value:.4f}" for name, value in
                                                         split["metrics"].items())
    if "final_eval_loss" in distilled:
        rows["held-out distillation loss"] = (f"{distilled['initial_eval_loss']:.4f} -> "
                                              f"{distilled['final_eval_loss']:.4f}")
    return {name: value for name, value in rows.items() if value is not None}


def fine_tuned_on(evaluated: dict) -> str:
    if evaluated["benchmark"] == "csc":
        return (f"a Chinese spelling-correction model (MacBERT4CSC: a correction and a detection head) fine-tuned on "
                f"{evaluated['num_train_examples']:,} pairs ({evaluated['train_data']})")
    return (f"fine-tuned on {evaluated['benchmark'].upper()} {evaluated['task'].upper()} "
            f"({evaluated['num_train_examples']} training examples)")


def is_local_path(name: str) -> bool:
    return Path(name).exists() or name.startswith((".", "/", "~")) or name.count("/") > 1


def render_adapter_card(checkpoint: Path, repo_id=None, language=None, license=None, base_model=None,
                        datasets=None) -> ModelCard:
    """The card of a PEFT adapter folder: the adapter, its base model, how it scored."""
    adapter = read_json(checkpoint / "adapter_config.json")
    peft_type = adapter.get("peft_type")
    if not peft_type:
        raise UserInputError(f"{checkpoint / 'adapter_config.json'}: no peft_type (not a PEFT adapter config)")
    local_base = adapter.get("base_model_name_or_path") or ""
    base = base_model or local_base
    base_config = Path(local_base) / "config.json"
    base_needs_remote_code = base_config.is_file() and bool(read_json(base_config).get("auto_map"))
    peft_auto_class, pipeline_tag = PEFT_TASKS.get(adapter.get("task_type"), ("AutoPeftModel", None))
    method, citation = PEFT_METHODS.get(peft_type, (f"trains the parameters that PEFT's `{peft_type}` method adds.",
                                                    None))
    evaluated = _optional(checkpoint / "eval_results.json")
    training_args = _optional(checkpoint / "training_args.json") or {}
    name = repo_id.split("/")[-1] if repo_id else unstaged(checkpoint).name  # rendered while staging: the output's
    card_data = ModelCardData(
        model_name=name, library_name="peft", pipeline_tag=pipeline_tag, language=language, license=license,
        base_model=base if base and not is_local_path(base) else None, datasets=datasets,
        tags=["hf-plm-ext", "peft", peft_type.lower(), "adapter"],
        eval_results=eval_results_of(evaluated) if evaluated else None,
    )
    weight_names = list(weight_shapes(checkpoint / "adapter_model.safetensors"))
    # PEFT lists every usual head name (classifier, score); keep those this model has
    saved_modules = [m for m in adapter.get("modules_to_save") or [] if any(f".{m}." in n for n in weight_names)]
    card = ModelCard.from_template(
        card_data, template_str=template_for("adapter"), model_name=name, repo_id=repo_id or str(checkpoint),
        peft_type=peft_type, base_model=base or "its base model", num_parameters=_parameter_count(checkpoint),
        saved_modules=", ".join(f"`{m}`" for m in saved_modules), method_in_one_sentence=method,
        peft_auto_class=peft_auto_class, base_needs_remote_code=base_needs_remote_code, citation=citation,
        needs_package=peft_type in PACKAGE_PEFT_METHODS,
        what_this_checkpoint_is=(f"This adapter is {fine_tuned_on(evaluated)}." if evaluated else ""),
        adapter={"PEFT method": peft_type, "task type": adapter.get("task_type"), "base model": base,
                 **{k: _show(sorted(v) if isinstance(v, (list, set)) else v) for k in ADAPTER_FIELDS
                    if (v := adapter.get(k)) not in (None, [], {})},
                 **({"modules_to_save": _show(saved_modules)} if saved_modules else {})},
        training={k: _show(training_args[k]) for k in TRAINING_FIELDS if training_args.get(k) not in (None, -1)},
        results_table=results_table([evaluated]) if evaluated else "",
    )
    return ModelCard(re.sub(r"\n{3,}", "\n\n", str(card)))


def weight_shapes(path: Path) -> dict[str, list[int]]:
    """``{tensor name: shape}`` of a safetensors file, read from its header; a broken file is one clear error."""
    try:
        with safe_open(str(path), framework="pt") as handle:
            return {name: handle.get_slice(name).get_shape() for name in handle.keys()}
    except SafetensorError as err:
        raise UserInputError(f"{path}: not a valid safetensors file ({err})") from None


def _optional(path: Path):
    return read_json(path) if path.is_file() else None


def _show(value):
    """A value as a card shows it: a list of paths by their names, a float to 4 significant digits (a learning
    rate of 2e-05 stays 2e-05)."""
    if isinstance(value, list):
        return ", ".join(Path(v).name for v in value)
    return float(f"{value:.4g}") if isinstance(value, float) else value


def _parameter_count(checkpoint: Path) -> str:
    total = 0
    for weights in checkpoint.glob("*.safetensors"):
        total += sum(prod(shape) for shape in weight_shapes(weights).values())
    if not total:
        return "not recorded"
    return f"{total / 1e6:.2f} M" if total >= 1e6 else f"{total:,}"
