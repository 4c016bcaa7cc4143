"""Pre-train a model of one of the package's families from raw text with the stock ``Trainer``.

``pretrain(args, training_args)`` drives any objective of ``hf_plm_ext.training.objectives.OBJECTIVES`` (whose
arguments ``args`` are) through the same steps: tokenizer, model (fresh or ``--model``), collator, data, trainer,
train with a first evaluation inside ``train()``, final evaluation, save. Everything specific to an objective is a
hook of its class.
"""

import json
from dataclasses import asdict
from pathlib import Path

from huggingface_hub.errors import StrictDataclassError
from transformers import AutoConfig, AutoTokenizer, TrainingArguments, set_seed

from hf_plm_ext.checkpoints.loading import load_pretrained
from hf_plm_ext.checkpoints.resuming import checkpoint_to_resume, checkpoints_folder, checkpoints_of_the_run
from hf_plm_ext.checkpoints.saving import save_final
from hf_plm_ext.data.token_store.datasets import STORE_EVAL_SAMPLES, EpochToDatasets, at_most
from hf_plm_ext.errors import UserInputError, last_line
from hf_plm_ext.files import staged_output
from hf_plm_ext.training.objectives import Objective, PretrainArguments, objective_for


def build_model(objective: Objective, tokenizer):
    """``--model`` (checked against the objective, its settings kept), or a fresh model of the objective's config
    with ``--config_overrides``."""
    args = objective.args
    model = objective.start_from(tokenizer)
    if model is not None:
        return model
    if args.model is not None:
        config = load_pretrained(AutoConfig, args.model, "model config")
        objective.check_checkpoint(config, args.model)
        model = objective.load_checkpoint(config, args.model)
        objective.configure_checkpoint(model, tokenizer, args.model)
        return model
    config = objective.fresh_config(tokenizer)
    if args.config_overrides:
        try:
            config.update_from_string(args.config_overrides)
            config.validate()
        except (ValueError, AttributeError, TypeError, StrictDataclassError) as err:
            raise UserInputError(f"--config_overrides {args.config_overrides!r}: {last_line(err)}") from None
    return objective.head.from_config(config)


def initial_evaluation(log_history: list[dict]) -> dict:
    """The run's first evaluation (``eval_on_start``, before any update), as ``initial_*`` metrics. A resumed run's
    history, restored from its checkpoint, starts with the stopped run's first evaluation."""
    first = next(entry for entry in log_history if "eval_loss" in entry)
    return {"initial" + name.removeprefix("eval"): value for name, value in first.items() if name.startswith("eval_")}


def build_trainer(objective: Objective, model, tokenizer, data, collator, training_args: TrainingArguments):
    """The objective's trainer class with its keyword arguments and the objective's training settings."""
    kwargs = objective.trainer_kwargs()
    training_args.remove_unused_columns = False  # the builders make exactly what the collators read
    if kwargs.get("compute_metrics") is None:
        training_args.prediction_loss_only = True  # nothing reads the logits: do not gather them
    objective.configure_training(training_args)
    # The first evaluation runs inside train(), after the model is wrapped for DDP: an evaluate() before train()
    # marks it prepared (accelerate 1.15, transformers 5.24), train() then leaves it unwrapped, and every rank
    # trains its own copy
    training_args.eval_on_start = True
    trainer = objective.trainer_class(model=model, args=training_args, train_dataset=data["train"],
                                      eval_dataset=data["test"], processing_class=tokenizer, data_collator=collator,
                                      **kwargs)
    trainer.model_accepts_loss_kwargs = False  # heads return batch means
    if hasattr(data["train"], "set_epoch"):  # a token store's examples draw each epoch's masks
        trainer.add_callback(EpochToDatasets(data["train"]))
    return trainer


def pretrain(args: PretrainArguments, training_args: TrainingArguments) -> dict:
    """Pre-train with the objective whose arguments ``args`` are; write the model, tokenizer and
    ``pretrain_results.json`` into ``args.output`` (all or nothing).

    Checkpoints go to ``args.checkpoints`` (default ``OUTPUT.checkpoints``), where a stopped run
    leaves them for ``--resume_from_checkpoint last``; they are removed once the model is saved.
    """
    objective = objective_for(args)
    set_seed(training_args.seed)  # the fresh model is made here, before the Trainer seeds itself
    checkpoints = checkpoints_folder(args.output, args.checkpoints)
    resume = checkpoint_to_resume(training_args.resume_from_checkpoint, checkpoints)
    tokenizer = load_pretrained(AutoTokenizer, args.tokenizer, "tokenizer")
    objective.prepare_tokenizer(tokenizer)
    model = build_model(objective, tokenizer)
    collator = objective.collator(tokenizer, training_args.seed)
    if args.data and training_args.dataloader_persistent_workers:
        raise UserInputError("--dataloader_persistent_workers with --data: persistent workers would keep the first "
                             "epoch's masks; leave it out")
    with training_args.main_process_first(desc="pre-training data"):
        data = (objective.build_store_data if args.data else objective.build_data)(tokenizer, training_args)
    evaluated = args.max_eval_samples or (STORE_EVAL_SAMPLES if args.data else None)
    data = {**data, "test": at_most(data["test"], evaluated)}
    training_args.output_dir = str(checkpoints)
    num_parameters = model.num_parameters()  # before the Trainer wraps it: FSDP2 counted a tied weight twice
    trainer = build_trainer(objective, model, tokenizer, data, collator, training_args)
    with checkpoints_of_the_run(checkpoints), staged_output(args.output) as staging:
        train_result = trainer.train(resume_from_checkpoint=resume)
        initial = initial_evaluation(trainer.state.log_history)
        final = trainer.evaluate()
        results = {
            "objective": objective.name,
            "arguments": asdict(args),
            "model_type": model.config.model_type,
            "num_parameters": num_parameters,
            "world_size": training_args.world_size,
            "train_examples": len(data["train"]),
            "validation_examples": len(data["test"]),
            "resumed_from": resume,
            "initial_eval_loss": initial["initial_loss"],
            "final_eval_loss": final["eval_loss"],
            "initial_eval_metrics": initial,
            "final_eval_metrics": final,
            "train_metrics": train_result.metrics,
            "train_sub_losses": trainer.sub_loss_history,
            **objective.extra_results(final),
        }
        save_final(trainer, staging)
        if trainer.is_world_process_zero():
            (staging / "pretrain_results.json").write_text(json.dumps(results, indent=2) + "\n")
    return results

