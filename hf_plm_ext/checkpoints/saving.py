"""Save a trained model without pickles: safetensors weights, code, tokenizer, JSON arguments."""

import json
from pathlib import Path

from transformers.trainer import TRAINING_ARGS_NAME

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
    (directory / TRAINING_ARGS_NAME).unlink(missing_ok=True)
    if card.exists() and not had_card:
        card.unlink()  # PEFT writes a generic card; `hf-plm-ext push` renders one from the run
    recorded = {**trainer.args.to_dict(), "output_dir": str(unstaged(trainer.args.output_dir))}  # not the staging
    (directory / "training_args.json").write_text(json.dumps(recorded, indent=2) + "\n")
