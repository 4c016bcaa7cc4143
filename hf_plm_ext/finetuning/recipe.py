"""``finetune glue|clue``: any ``AutoModelForSequenceClassification`` checkpoint on one GLUE/CLUE task.

:func:`finetune` is ``load_task_data`` (eval) -> :func:`build_classifier` (with an adapter, if asked) ->
:func:`encode_splits` -> :func:`classification_trainer` -> ``trainer.train()`` -> ``evaluate_splits`` (eval) ->
:func:`save_run`.
"""

from transformers import Trainer, TrainingArguments, set_seed

from hf_plm_ext.checkpoints.resuming import refuse_resume
from hf_plm_ext.eval.readers import load_task_data
from hf_plm_ext.eval.scoring import evaluate_splits
from hf_plm_ext.files import staged_output
from hf_plm_ext.finetuning.arguments import FinetuneArguments
from hf_plm_ext.finetuning.steps import (
    build_classifier,
    classification_trainer,
    encode_splits,
    parameter_counts,
    save_run,
)
from hf_plm_ext.training.layerwise_decay import LayerwiseLRDecayTrainer


def finetune(benchmark: str, args: FinetuneArguments, training_args: TrainingArguments) -> dict:
    """Fine-tune ``args.model`` on one task, evaluate every validation split, write the model,
    ``eval_results.json`` and ``eval_results.md`` into ``args.output`` (all or nothing)."""
    refuse_resume(training_args, f"finetune {benchmark}", "run it again")
    set_seed(training_args.seed)  # the new head and adapter are made here, before the Trainer seeds itself
    data = load_task_data(benchmark, args)
    model, tokenizer = build_classifier(data.task, args)
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
