"""Which Trainer checkpoint a run continues from: ``--resume_from_checkpoint last`` takes the newest *complete*
one, passing over a folder cut by a kill.

The Trainer writes a checkpoint in place (``checkpoint-N/``: weights, optimizer, scheduler, RNG states) and its
``trainer_state.json`` last of all (``Trainer._save_checkpoint``). A checkpoint is complete when that file reads as
JSON and the weights it was written after are there; a kill at any moment before leaves a folder without it, or
with a cut file that does not parse.
"""

import json
import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path

from transformers.utils import logging as transformers_logging

from hf_plm_ext.errors import UserInputError

logger = transformers_logging.get_logger(__name__)

CHECKPOINTS_HELP = ("folder for the Trainer's checkpoints (default: OUTPUT.checkpoints); kept if the run stops, "
                    "for --resume_from_checkpoint last; removed once the model is saved")
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "adapter_model.safetensors")


def checkpoints_folder(output, checkpoints=None) -> Path:
    """Where a run that writes ``output`` keeps its checkpoints: outside the staged output, so that they outlive a
    stop."""
    return Path(checkpoints or f"{output}.checkpoints")


@contextmanager
def checkpoints_of_the_run(folder):
    """Around a run that checkpoints into ``folder`` (outside its staged output): when the run ends, its
    checkpoints are removed, and ``folder`` if nothing else is in it; a stop (an error, Ctrl-C) keeps them for
    ``--resume_from_checkpoint last``, and removes the folder only when it holds none (the Trainer makes it at
    once). Under ``torchrun`` the first rank removes."""
    folder = Path(folder)
    main = int(os.environ.get("RANK", "0")) == 0
    try:
        yield folder
    except BaseException:
        if main and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
        raise
    if main:
        for checkpoint in folder.glob("checkpoint-*"):
            shutil.rmtree(checkpoint, ignore_errors=True)
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def checkpoint_problem(folder) -> str | None:
    """Why ``folder`` is not a checkpoint to resume from, or None when it is complete."""
    folder = Path(folder)
    state = folder / "trainer_state.json"
    if not state.is_file():
        return "no trainer_state.json (cut while it was written, or not a Trainer checkpoint)"
    try:
        json.loads(state.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return "its trainer_state.json is cut short"
    if not any((folder / name).is_file() for name in WEIGHT_FILES):
        return f"no weights ({' / '.join(WEIGHT_FILES)})"
    return None


def newest_complete_checkpoint(checkpoints: Path) -> tuple[Path | None, list[tuple[Path, str]]]:
    """``(the newest complete checkpoint-N in checkpoints or None, [(a newer cut one, why)])``."""
    numbered = sorted((int(match.group(1)), path) for path in Path(checkpoints).glob("checkpoint-*")
                      if path.is_dir() and (match := re.fullmatch(r"checkpoint-(\d+)", path.name)))
    passed_over = []
    for _, path in reversed(numbered):
        problem = checkpoint_problem(path)
        if problem is None:
            return path, passed_over
        passed_over.append((path, problem))
    return None, passed_over


def checkpoint_to_resume(resume_from_checkpoint, checkpoints: Path) -> str | None:
    """``--resume_from_checkpoint``: a checkpoint folder, or ``last`` for the newest complete one in
    ``checkpoints`` (each newer, cut one named in one warning line). Without the flag, a folder of an earlier
    run's checkpoints is refused: the run would silently start over beside them."""
    checkpoints = Path(checkpoints)
    if resume_from_checkpoint is None:
        if checkpoints.is_dir() and any(checkpoints.glob("checkpoint-*")):
            raise UserInputError(f"{checkpoints} holds checkpoints of an earlier run; continue it with "
                                 f"--resume_from_checkpoint last, or remove the folder")
        return None
    if resume_from_checkpoint == "last":
        last, passed_over = newest_complete_checkpoint(checkpoints) if checkpoints.is_dir() else (None, [])
        for path, problem in passed_over:
            logger.warning(f"--resume_from_checkpoint last: passing over {path}, cut by a stop while it was "
                           f"written ({problem})")
        if last is None:
            cut = f" (only cut ones: {', '.join(p.name for p, _ in passed_over)})" if passed_over else ""
            raise UserInputError(f"--resume_from_checkpoint last: no complete checkpoint-* folder in "
                                 f"{checkpoints}{cut}")
        return str(last)
    problem = checkpoint_problem(resume_from_checkpoint)
    if problem is not None:
        raise UserInputError(f"--resume_from_checkpoint {resume_from_checkpoint} cannot be resumed from: {problem}")
    return str(resume_from_checkpoint)


def refuse_resume(training_args, command: str, instead: str) -> None:
    """A command that does not continue from checkpoints refuses ``--resume_from_checkpoint`` instead of ignoring
    it."""
    if training_args.resume_from_checkpoint:
        raise UserInputError(f"--resume_from_checkpoint: `{command}` does not continue from checkpoints; {instead}")
