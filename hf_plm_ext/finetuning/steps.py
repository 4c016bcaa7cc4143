"""The steps of fine-tuning a classifier, which every recipe composes (``finetune`` here, task distillation,
spelling correction): build the classifier, encode the splits, a Trainer set up for the task, save the run."""

from datasets import Dataset
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding, Trainer

from hf_plm_ext.checkpoints.loading import check_sequence_length, check_tokenizer_fits, load_pretrained
from hf_plm_ext.checkpoints.results import write_results
from hf_plm_ext.checkpoints.saving import CheckpointArgumentsAsJson, save_final
from hf_plm_ext.data.tokenizer_training import pad_with_eos
from hf_plm_ext.errors import UserInputError
from hf_plm_ext.eval.scoring import evaluate_splits, make_compute_metrics
from hf_plm_ext.eval.tasks import Task
from hf_plm_ext.finetuning.adapters import add_adapter


def build_classifier(task: Task, args, peft_config=None):
    """``(model, tokenizer)``: ``args.model`` (``FinetuneArguments``) with a head for ``task``'s labels, and the
    adapter ``args`` asks for or ``peft_config``."""
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
    return add_adapter(model, args, peft_config), tokenizer


def tokenize(examples, tokenizer, max_seq_length):
    columns = examples.to_dict()
    dataset = Dataset.from_dict(columns)

    def encode(batch):
        pair = (batch["text_a"], batch["text_b"]) if "text_b" in batch else (batch["text_a"],)
        return tokenizer(*pair, truncation=True, max_length=max_seq_length)

    text_columns = [c for c in ("text_a", "text_b", "line") if c in columns]
    return dataset.map(encode, batched=True, remove_columns=text_columns).rename_column("label", "labels")


def encode_splits(data, tokenizer, args, transform_train=None):
    """``(train_dataset, {split: eval_dataset})`` of ``data`` (a ``TaskData``), tokenised and truncated to
    ``args.max_seq_length``; ``transform_train``: a function of the training examples (the first
    ``args.max_train_samples``) that returns the ones to train on (a recipe's augmentation)."""
    train_examples = data.train if args.max_train_samples is None else data.train.first(args.max_train_samples)
    if transform_train is not None:
        train_examples = transform_train(train_examples)
    return (tokenize(train_examples, tokenizer, args.max_seq_length),
            {split: tokenize(examples, tokenizer, args.max_seq_length) for split, examples in data.validation.items()})


def task_trainer(model, tokenizer, training_args, train_dataset, eval_datasets=None, *, data_collator,
                 trainer_class=Trainer, **trainer_kwargs):
    """A ``trainer_class`` (the stock ``Trainer``, or e.g. a distillation, layer-wise-decay or sub-loss one) for a
    head that returns batch means: the Trainer scales them for gradient accumulation itself."""
    trainer = trainer_class(model=model, args=training_args, train_dataset=train_dataset, eval_dataset=eval_datasets,
                            processing_class=tokenizer, data_collator=data_collator, **trainer_kwargs)
    trainer.model_accepts_loss_kwargs = False
    if not any(isinstance(callback, CheckpointArgumentsAsJson) for callback in trainer.callback_handler.callbacks):
        trainer.add_callback(CheckpointArgumentsAsJson)  # (a sub-loss trainer adds its own)
    return trainer


def classification_trainer(model, tokenizer, task: Task, train_dataset, eval_datasets, training_args,
                           trainer_class=Trainer, **trainer_kwargs):
    """A :func:`task_trainer` set up for ``task``: padding collator, the task's metrics."""
    return task_trainer(model, tokenizer, training_args, train_dataset, eval_datasets,
                        data_collator=DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8),
                        trainer_class=trainer_class, compute_metrics=make_compute_metrics(task), **trainer_kwargs)


def evaluate_models(models: dict, tokenizer, data, eval_datasets: dict, training_args) -> dict:
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
