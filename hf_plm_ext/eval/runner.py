"""Fine-tune and evaluate any ``AutoModelForSequenceClassification`` checkpoint on a GLUE/CLUE task, in steps.

:func:`finetune` is :func:`load_task_data` -> :func:`build_classifier` -> :func:`encode_splits` ->
:func:`classification_trainer` -> ``trainer.train()`` -> :func:`evaluate_splits` -> :func:`save_run`; a recipe
with another trainer (distillation, adapters) composes the same steps with its own.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from datasets import Dataset
from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
    set_seed,
)

from hf_plm_ext.checkpoints.loading import check_sequence_length, check_tokenizer_fits, load_pretrained
from hf_plm_ext.checkpoints.results import write_results
from hf_plm_ext.checkpoints.saving import save_final
from hf_plm_ext.data.tokenizer_training import pad_with_eos
from hf_plm_ext.errors import UserInputError
from hf_plm_ext.eval.readers import Examples, read_examples, read_label_list
from hf_plm_ext.eval.tasks import Task, get_task, load_metric
from hf_plm_ext.files import staged_output
from hf_plm_ext.training.layerwise_decay import LayerwiseLRDecayTrainer


@dataclass
class FinetuneArguments:
    task: str = field(metadata={"help": "task name (see the task table)"})
    model: str = field(metadata={"help": "checkpoint directory (or Hub id, when online)"})
    output: str = field(metadata={"help": "new directory for the fine-tuned model and eval_results.json"})
    data_dir: str | None = field(default=None, metadata={"help": "folder with the task's files under their "
                                                                  "official names (train.tsv/dev.tsv, ...)"})
    train_file: str | None = field(default=None, metadata={"help": "training file (overrides --data-dir's)"})
    validation_file: str | None = field(default=None, metadata={"help": "validation file (overrides "
                                                                        "--data-dir's)"})
    max_seq_length: int = field(default=128, metadata={"help": "longer inputs are truncated"})
    max_train_samples: int | None = field(default=None, metadata={"help": "use only the first N training "
                                                                         "examples"})
    ignore_mismatched_sizes: bool = field(default=False, metadata={"help": "replace a checkpoint's classifier "
                                                                           "whose label count differs"})
    layerwise_lr_decay: float | None = field(default=None, metadata={"help": "layer-wise learning-rate decay for "
                                                                            "BERT-like encoders (ELECTRA: 0.8)"})
    peft_config: str | None = field(default=None, metadata={"help": "a PEFT config JSON (e.g. {\"peft_type\": "
                                                                     "\"LORA\", \"r\": 8, \"target_modules\": "
                                                                     "[\"query\", \"value\"]}): train only that "
                                                                     "adapter and the task head, save only them"})
    adapter: str | None = field(default=None, metadata={
        "help": "train an adapter and the task head only: houlsby, pfeiffer or parallel (this package's bottleneck "
                "adapters, AdapterHub's presets) or lora (PEFT's, r=8 on the attention's query and value)",
        "choices": ["houlsby", "pfeiffer", "parallel", "lora"]})
    freeze_adapters: bool = field(default=False, metadata={
        "help": "a K-Adapter checkpoint: keep its knowledge adapters frozen, train the fusion and the head only "
                "(the paper's --freeze_adapter)"})


def read_peft_config(config_file: str):
    """The ``PeftConfig`` in ``config_file`` (a PEFT config as JSON), task type ``SEQ_CLS`` so that PEFT
    also trains and saves the classifier."""
    from peft import get_peft_config
    from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING  # PEFT's methods and any registered since

    path = Path(config_file)
    if not path.is_file():
        raise UserInputError(f"--peft-config {path} not found")
    try:
        fields = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise UserInputError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from None
    methods = sorted(str(t.value) for t in PEFT_TYPE_TO_CONFIG_MAPPING)
    if not isinstance(fields, dict) or fields.get("peft_type") not in methods:
        raise UserInputError(f"{path}: \"peft_type\" must be one of PEFT's methods ({', '.join(methods)})")
    if fields.setdefault("task_type", "SEQ_CLS") != "SEQ_CLS":
        raise UserInputError(f"{path}: task_type must be SEQ_CLS for GLUE/CLUE (got {fields['task_type']!r})")
    try:
        return get_peft_config(fields)
    except (TypeError, ValueError) as err:
        raise UserInputError(f"{path}: {err}") from None


def adapter_config(name: str, model_type: str):
    """The PEFT config of ``--adapter name`` for a sequence classifier of ``model_type``."""
    if name == "lora":
        from peft import LoraConfig
        from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as LORA_TARGETS

        targets = None if model_type in LORA_TARGETS else ["query", "value"]  # e.g. macbert: BERT's names
        return LoraConfig(task_type="SEQ_CLS", r=8, lora_alpha=16, lora_dropout=0.1, target_modules=targets)
    from hf_plm_ext.adapters import BottleneckConfig

    return BottleneckConfig.from_preset(name, task_type="SEQ_CLS")


def with_adapter(model, peft_config, source: str):
    from peft import get_peft_model

    try:
        return get_peft_model(model, peft_config)
    except ValueError as err:  # e.g. target modules the model does not have
        raise UserInputError(f"{source}: {err}") from None


def task_files(task: Task, args: FinetuneArguments) -> tuple[Path, dict[str, Path]]:
    if args.data_dir is None and (args.train_file is None or args.validation_file is None):
        raise UserInputError("give --data-dir, or both --train-file and --validation-file")
    data_dir = Path(args.data_dir) if args.data_dir else None
    if data_dir is not None and not data_dir.is_dir():
        raise UserInputError(f"--data-dir {data_dir} is not a directory")
    train = Path(args.train_file) if args.train_file else data_dir / task.train_file
    if args.validation_file:
        validation = {"dev": Path(args.validation_file)}
    else:
        validation = {split: data_dir / name for split, name in task.validation_files.items()}
    return train, validation


def check_labels_file(task: Task, data_dir):
    if task.labels_file is None or data_dir is None:
        return
    path = Path(data_dir) / task.labels_file
    if not path.is_file():
        return
    listed = read_label_list(path)
    unknown = sorted(set(listed) - set(task.labels))
    if unknown:
        raise UserInputError(f"{path}: labels {unknown} are not in the {task.name} label set {list(task.labels)}")


def tokenize(examples, tokenizer, max_seq_length):
    columns = examples.to_dict()
    dataset = Dataset.from_dict(columns)

    def encode(batch):
        pair = (batch["text_a"], batch["text_b"]) if "text_b" in batch else (batch["text_a"],)
        return tokenizer(*pair, truncation=True, max_length=max_seq_length)

    text_columns = [c for c in ("text_a", "text_b", "line") if c in columns]
    return dataset.map(encode, batched=True, remove_columns=text_columns).rename_column("label", "labels")


def make_compute_metrics(task: Task):
    metric = load_metric(task)

    def compute_metrics(eval_prediction):
        logits = eval_prediction.predictions
        logits = logits[0] if isinstance(logits, tuple) else logits
        predictions = logits[:, 0] if task.is_regression else np.argmax(logits, axis=-1)
        return metric.compute(predictions=predictions, references=eval_prediction.label_ids)

    return compute_metrics


@dataclass
class TaskData:
    """A task's examples as read from its files (step 1 of :func:`finetune`)."""

    task: Task
    train_file: Path
    validation_files: dict[str, Path]
    train: Examples
    validation: dict[str, Examples]


def load_task_data(benchmark: str, args: FinetuneArguments) -> TaskData:
    """The task's training split and every validation split (MNLI: matched and mismatched), checked."""
    task = get_task(benchmark, args.task)
    train_file, validation_files = task_files(task, args)
    check_labels_file(task, args.data_dir)
    return TaskData(task, train_file, validation_files, read_examples(task, train_file),
                    {split: read_examples(task, path) for split, path in validation_files.items()})


def build_classifier(task: Task, args: FinetuneArguments, peft_config=None):
    """``(model, tokenizer)``: ``args.model`` with a head for ``task``'s labels, and ``peft_config``'s adapter."""
    label_kwargs = {"num_labels": task.num_labels}
    if task.is_regression:
        label_kwargs["problem_type"] = "regression"
    else:
        label_kwargs["id2label"] = dict(enumerate(task.labels))
        label_kwargs["label2id"] = {label: i for i, label in enumerate(task.labels)}
    tokenizer = load_pretrained(AutoTokenizer, args.model, "tokenizer")
    config = load_pretrained(AutoConfig, args.model, "config", **label_kwargs)
    config.finetuning_task = task.name
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise UserInputError(f"the tokenizer at {args.model} has neither a pad nor an eos token to pad batches "
                                 f"with; give it one (tokenizer.pad_token = ...) and save it with the model")
        pad_with_eos(tokenizer)  # a causal LM's (GPT-2's, a Transformer-XL's words), as transformers users do
        config.pad_token_id = tokenizer.pad_token_id
    if args.freeze_adapters:
        if not callable(getattr(config, "freeze_adapters", None)):  # the family's rule: K-Adapter's config has one
            raise UserInputError(f"--freeze-adapters is for K-Adapter checkpoints; {args.model} is a "
                                 f"{config.model_type!r} one")
        config.freeze_adapters()
    model = load_pretrained(AutoModelForSequenceClassification, args.model, "model", config=config,
                            ignore_mismatched_sizes=args.ignore_mismatched_sizes)
    check_tokenizer_fits(tokenizer, model, args.model)
    check_sequence_length(model, args.max_seq_length)
    if args.adapter is not None:
        peft_config = adapter_config(args.adapter, model.config.model_type)
    if peft_config is not None:
        # what the checkpoint lacked (a pooler, beside the head) trains and is saved with the adapter: frozen at
        # its random start it would differ at every load
        new_modules = getattr(model, "newly_initialised_modules", [])
        peft_config.modules_to_save = sorted(set(peft_config.modules_to_save or []) | set(new_modules)) or None
        model = with_adapter(model, peft_config, args.peft_config or f"--adapter {args.adapter}")
    return model, tokenizer


def encode_splits(data: TaskData, tokenizer, args: FinetuneArguments, transform_train=None):
    """``(train_dataset, {split: eval_dataset})``, tokenised and truncated to ``args.max_seq_length``;
    ``transform_train``: a function of the training examples (the first ``args.max_train_samples``) that returns
    the ones to train on (a recipe's augmentation)."""
    train_examples = data.train if args.max_train_samples is None else data.train.first(args.max_train_samples)
    if transform_train is not None:
        train_examples = transform_train(train_examples)
    return (tokenize(train_examples, tokenizer, args.max_seq_length),
            {split: tokenize(examples, tokenizer, args.max_seq_length) for split, examples in data.validation.items()})


def classification_trainer(model, tokenizer, task: Task, train_dataset, eval_datasets, training_args,
                           trainer_class=Trainer, **trainer_kwargs):
    """A ``trainer_class`` (the stock ``Trainer``, or e.g. a distillation or layer-wise-decay one) set up for
    ``task``: padding collator, the task's metrics."""
    trainer = trainer_class(model=model, args=training_args, train_dataset=train_dataset, eval_dataset=eval_datasets,
                            processing_class=tokenizer,
                            data_collator=DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8),
                            compute_metrics=make_compute_metrics(task), **trainer_kwargs)
    # Sequence-classification heads return batch means: let the Trainer scale for gradient accumulation.
    trainer.model_accepts_loss_kwargs = False
    return trainer


def evaluate_splits(trainer, data: TaskData, eval_datasets: dict) -> list[dict]:
    """The task's metrics on every validation split."""
    results = []
    for split, dataset in eval_datasets.items():
        metrics = trainer.evaluate(dataset, metric_key_prefix="eval")
        results.append({
            "split": split,
            "file": str(data.validation_files[split]),
            "num_examples": len(dataset),
            "metrics": {name: metrics[f"eval_{name}"] for name in data.task.metrics},
            "eval_loss": metrics.get("eval_loss"),
        })
    return results


def evaluate_models(models: dict, tokenizer, data: TaskData, eval_datasets: dict, training_args) -> dict:
    """``{name: (evaluation trainer, results of evaluate_splits, parameter counts)}`` for each model of ``models``
    (e.g. a distilled student and its teacher) on every validation split."""
    evaluated = {}
    for name, model in models.items():
        trainer = classification_trainer(model, tokenizer, data.task, None, eval_datasets, training_args)
        evaluated[name] = (trainer, evaluate_splits(trainer, data, eval_datasets), parameter_counts(model))
    return evaluated


def parameter_counts(model) -> dict:
    """``{"trainable", "total", "trainable_percent"}``, as PEFT's ``print_trainable_parameters`` counts them."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    return {"trainable": trainable, "total": total, "trainable_percent": round(100 * trainable / total, 3)}


def save_run(trainer, directory, results: dict) -> None:
    """The trained model (or adapter), its tokenizer, JSON training arguments and the results files."""
    save_final(trainer, directory)
    if trainer.is_world_process_zero():
        write_results(directory, results)


def finetune(benchmark: str, args: FinetuneArguments, training_args: TrainingArguments) -> dict:
    """Fine-tune ``args.model`` on one task, evaluate every validation split, write the model,
    ``eval_results.json`` and ``eval_results.md`` into ``args.output`` (all or nothing)."""
    set_seed(training_args.seed)  # the new head and adapter are made here, before the Trainer seeds itself
    peft_config = None
    if args.peft_config is not None and args.adapter is not None:
        raise UserInputError("--adapter and --peft-config do not go together: --adapter is a ready-made PEFT config")
    if args.layerwise_lr_decay is not None and (args.peft_config or args.adapter):
        raise UserInputError("--layerwise_lr_decay and an adapter do not go together (the decay is for full "
                             "fine-tuning of an encoder's layers)")
    if args.peft_config is not None:
        peft_config = read_peft_config(args.peft_config)
    data = load_task_data(benchmark, args)
    model, tokenizer = build_classifier(data.task, args, peft_config)
    train_dataset, eval_datasets = encode_splits(data, tokenizer, args)
    trainer_class, trainer_kwargs = Trainer, {}
    if args.layerwise_lr_decay is not None:
        trainer_class, trainer_kwargs = LayerwiseLRDecayTrainer, {"layerwise_lr_decay": args.layerwise_lr_decay}

    with staged_output(args.output) as staging:
        training_args.output_dir = str(staging)
        trainer = classification_trainer(model, tokenizer, data.task, train_dataset, eval_datasets, training_args,
                                         trainer_class, **trainer_kwargs)
        train_result = trainer.train()
        results = {
            "benchmark": benchmark,
            "task": data.task.name,
            "model": str(args.model),
            "train_file": str(data.train_file),
            "num_train_examples": len(train_dataset),
            "layerwise_lr_decay": args.layerwise_lr_decay,
            "peft_config": args.peft_config,
            "adapter": args.adapter,
            "world_size": training_args.world_size,
            "parameters": parameter_counts(model),
            "train_metrics": train_result.metrics,
            "results": evaluate_splits(trainer, data, eval_datasets),
        }
        save_run(trainer, staging, results)
    return results
