"""What the ecosystem's own tools do with a checkpoint, call for call: transformers' example scripts
(``run_glue.py``, ``run_mlm.py``, ``run_clm.py``, reproduced: nothing of transformers is vendored), ``pipeline()``
and sentence-transformers. ``tests/test_ecosystem.py`` runs them with ``import hf_plm_ext`` and, through
``python tests/ecosystem_clients.py PLAN.json REPORT.json``, in a process where it cannot be imported (``trust_remote_code``
alone). Each call returns a small JSON-able report, or ``{"error": "Type: message"}``.
"""

import json
import sys
import tempfile
from pathlib import Path

TEXTS = ["the rabbit ran down the hole", "alice was tired of sitting by her sister", "a cat", "she sat"]


def trainer_step(model, tokenizer, dataset, collator):
    """One optimiser step with the stock Trainer, as the scripts train; the logged loss."""
    from transformers import Trainer, TrainingArguments

    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, max_steps=1, per_device_train_batch_size=2, report_to="none",
                                 use_cpu=True, save_strategy="no", disable_tqdm=True, logging_steps=1)
        trainer = Trainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                          data_collator=collator)
        return trainer.train().training_loss


def run_glue(path, trust):
    """run_glue.py: config with the task's labels, the classifier, ``padding="max_length"``, the default collator."""
    from datasets import Dataset
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer, default_data_collator

    config = AutoConfig.from_pretrained(path, num_labels=2, finetuning_task="sst2", trust_remote_code=trust)
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust)
    model = AutoModelForSequenceClassification.from_pretrained(path, config=config, trust_remote_code=trust)
    encoded = tokenizer(TEXTS, padding="max_length", max_length=16, truncation=True)
    dataset = Dataset.from_dict({**encoded, "label": [1, 0, 1, 0]})
    loss = trainer_step(model, tokenizer, dataset, default_data_collator)
    return {"model_class": type(model).__name__, "loss": loss}


def grown_tokenizer(path, trust):
    """The tokenizer with one token more, so that the scripts' ``len(tokenizer) > embedding_size`` resizes."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust)
    tokenizer.add_tokens(["zzyzx"])
    return tokenizer


def resize_as_the_scripts_do(model, tokenizer):
    embedding_size = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > embedding_size:
        model.resize_token_embeddings(len(tokenizer))
    return embedding_size


def run_mlm(path, trust):
    """run_mlm.py: the masked LM, ``get_input_embeddings().weight`` and resize, the MLM collator."""
    from datasets import Dataset
    from transformers import AutoModelForMaskedLM, DataCollatorForLanguageModeling

    tokenizer = grown_tokenizer(path, trust)
    model = AutoModelForMaskedLM.from_pretrained(path, trust_remote_code=trust)
    before = resize_as_the_scripts_do(model, tokenizer)
    dataset = Dataset.from_dict(tokenizer(TEXTS, return_special_tokens_mask=True, truncation=True, max_length=16))
    loss = trainer_step(model, tokenizer, dataset, DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.5))
    return {"model_class": type(model).__name__, "loss": loss, "rows": [before, model.get_input_embeddings().weight
                                                                        .shape[0]]}


def run_clm(path, trust):
    """run_clm.py: the causal LM, ``get_input_embeddings().weight`` and resize, text grouped in blocks, the default
    collator."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, default_data_collator

    tokenizer = grown_tokenizer(path, trust)
    model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=trust)
    before = resize_as_the_scripts_do(model, tokenizer)
    ids = [i for text in TEXTS * 4 for i in tokenizer(text)["input_ids"]]
    block = 8
    blocks = [ids[start:start + block] for start in range(0, len(ids) - block + 1, block)]
    dataset = Dataset.from_dict({"input_ids": blocks, "attention_mask": [[1] * block] * len(blocks),
                                 "labels": blocks})
    loss = trainer_step(model, tokenizer, dataset, default_data_collator)
    return {"model_class": type(model).__name__, "loss": loss, "rows": [before, model.get_input_embeddings().weight
                                                                        .shape[0]]}


def pipelines(path, trust, tasks):
    """``pipeline(task, model=path)`` for each task, batched where a list goes in."""
    from transformers import pipeline

    report = {}
    for task in tasks:
        try:
            report[task] = call_pipeline(task, path, trust, pipeline)
        except Exception as err:  # (one task's failure is its row's report, the others still run)
            report[task] = {"error": f"{type(err).__name__}: {err}"[:600]}
    return report


def call_pipeline(task, path, trust, pipeline):
    if task == "spelling-correction":
        # without hf-plm-ext the checkpoint names its pipeline (custom_pipelines); with it, the registered task
        pipe = pipeline(model=path, trust_remote_code=True) if trust else pipeline(task, model=path)
        out = pipe(["我跟我朋唷打算去法国玩儿。", "hello 42"], batch_size=2)
        return {"class": type(pipe).__name__, "out": out}
    pipe = pipeline(task, model=path, trust_remote_code=trust)
    if task == "fill-mask":
        return {"top": [guess["token_str"] for guess in pipe(f"the rabbit {pipe.tokenizer.mask_token} down")]}
    if task == "text-classification":
        return {"labels": [row["label"] for row in pipe(TEXTS, batch_size=2)]}
    if task == "text-generation":
        out = pipe("the rabbit", max_new_tokens=3, do_sample=False)[0]["generated_text"]
        return {"starts_with_prompt": out.startswith("the rabbit"), "longer": len(out) > len("the rabbit")}
    if task == "feature-extraction":
        features = pipe(TEXTS[:2], batch_size=2)
        return {"width": len(features[0][0][0]), "tokens": [len(f[0]) for f in features]}
    raise ValueError(f"no call for task {task}")


def sentence_transformers(path, trust):
    """sentence-transformers: encode a padded batch, save, reload, encode again."""
    import numpy as np
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(path), trust_remote_code=trust, device="cpu")
    embeddings = model.encode(TEXTS)
    with tempfile.TemporaryDirectory() as out:
        model.save(out)
        again = SentenceTransformer(out, trust_remote_code=trust, device="cpu").encode(TEXTS)
    dimension = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension  # (6.3: renamed)
    return {"dimension": dimension(), "width": int(embeddings.shape[1]),
            "same_after_reload": bool(np.allclose(embeddings, again, atol=1e-5))}


CLIENTS = {"run_glue": run_glue, "run_mlm": run_mlm, "run_clm": run_clm, "pipelines": pipelines,
           "sentence_transformers": sentence_transformers}


def run_plan(plan: dict, trust: bool) -> dict:
    """``plan``: ``{name: {"path": ..., "clients": {client: [arguments]}}}`` -> the same keys with reports."""
    report = {}
    for name, entry in plan.items():
        report[name] = {}
        for client, arguments in entry["clients"].items():
            try:
                report[name][client] = CLIENTS[client](entry["path"], trust, *arguments)
            except Exception as err:  # reported, so that one failure does not hide the others
                report[name][client] = {"error": f"{type(err).__name__}: {err}"[:600]}
    return report


if __name__ == "__main__":  # in a process where hf_plm_ext cannot be imported
    sys.modules["hf_plm_ext"] = None
    Path(sys.argv[2]).write_text(json.dumps(run_plan(json.loads(Path(sys.argv[1]).read_text()), trust=True)))
