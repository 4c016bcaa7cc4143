"""Save a trained model without pickles: safetensors weights, code, tokenizer, JSON arguments."""

import json
from pathlib import Path

from transformers import TrainerCallback
from transformers.trainer import TRAINING_ARGS_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from hf_plm_ext.files import unstaged


def save_final(trainer, directory) -> None:
    """``Trainer.save_model`` (a PEFT model saves only its adapter), with ``training_args.json`` in place of the
    pickled ``training_args.bin``.

    Call it on every process: under FSDP or DeepSpeed ZeRO-3 ``save_model`` gathers the sharded weights there, and
    only the main process writes.
    """
    directory = Path(directory)
    card = directory / "README.md"
    had_card = card.exists()
    trainer.save_model(str(directory))
    if not trainer.is_world_process_zero():
        return
    if card.exists() and not had_card:
        card.unlink()  # PEFT writes a generic card; `hf-plm-ext push` renders one from the run
    arguments_as_json(trainer.args, directory)


def arguments_as_json(args, directory) -> None:
    """``training_args.json`` in place of the Trainer's pickled ``training_args.bin`` (nothing reads it back: a
    resume takes the arguments of the command line)."""
    directory = Path(directory)
    (directory / TRAINING_ARGS_NAME).unlink(missing_ok=True)
    recorded = {**args.to_dict(), "output_dir": str(unstaged(args.output_dir))}  # not the staging folder
    (directory / "training_args.json").write_text(json.dumps(recorded, indent=2) + "\n")


class CheckpointArgumentsAsJson(TrainerCallback):
    """Each checkpoint's ``training_args.bin`` becomes ``training_args.json`` as soon as the checkpoint is written.
    (Its optimizer, scheduler and RNG files stay the Trainer's own, which it reads back with ``weights_only``.)"""

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            checkpoint = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
            if checkpoint.is_dir():
                arguments_as_json(args, checkpoint)
