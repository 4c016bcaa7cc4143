"""Output directories that appear whole or not at all."""

import codecs
import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path

from hf_plm_ext.errors import UserInputError


def check_new_output(path) -> Path:
    path = Path(path)
    if path.exists():
        raise UserInputError(f"output directory {path} already exists; give a new folder or remove it")
    return path


def check_new_file(path) -> Path:
    path = Path(path)
    if path.exists():
        raise UserInputError(f"output file {path} already exists; give a new file name or remove it")
    return path


def write_new_file(path, text: str) -> None:
    """Write ``text`` to ``path``, which must not exist, through a hidden sibling renamed when complete."""
    path = check_new_file(path)
    partial = _partial_path(path)
    partial.write_text(text, encoding="utf-8")
    partial.rename(path)


def unstaged(path) -> Path:
    """``path`` with each hidden ``.NAME.partial-PID`` folder of :func:`staged_output` named by its final ``NAME``:
    what a file written while staging should record of where it lives."""
    return Path(*(re.sub(r"^\.(.+)\.partial-\d+$", r"\1", part) for part in Path(path).parts))


def _partial_path(final: Path) -> Path:
    """``.NAME.partial-PID``, PID the process that owns the run: this one, or under ``torchrun`` / ``accelerate
    launch`` the launcher, which every rank shares as its parent. Leftovers of a killed run go first."""
    owner = os.getppid() if "TORCHELASTIC_RUN_ID" in os.environ else os.getpid()
    if _is_main_process():
        remove_leftovers(final)
    return final.parent / f".{final.name}.partial-{owner}"


def remove_leftovers(final) -> list[Path]:
    """Delete the hidden ``.NAME.partial-PID`` siblings of ``final`` whose process is gone (a killed run's);
    return them."""
    final = Path(final)
    stale = [partial for partial in final.parent.glob(f".{final.name}.partial-*")
             if not _is_running(partial.name.rsplit("-", 1)[1])]
    for partial in stale:
        shutil.rmtree(partial) if partial.is_dir() else partial.unlink()
    return stale


def _is_running(pid: str) -> bool:
    if os.name != "posix" or not pid.isdigit():
        return True  # not a PID this module wrote: leave it alone
    try:
        os.kill(int(pid), 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def check_file(path, what="file") -> Path:
    path = Path(path)
    if path.is_dir():
        raise UserInputError(f"{what} {path} is a directory; give the files in it (e.g. {path}/*.txt)")
    if not path.is_file():
        raise UserInputError(f"{what} not found: {path}")
    return path


def decode_utf8(data: bytes, where) -> str:
    """``data`` as text, or one clear error naming ``where`` it came from and the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UserInputError(f"{where}: not UTF-8 text ({err.reason} at byte {err.start})") from None


def read_utf8(path) -> str:
    """The text of a file (:func:`decode_utf8`)."""
    return decode_utf8(Path(path).read_bytes(), path)


def check_text_file(path, what="corpus file") -> Path:
    """An existing, non-empty UTF-8 text file (read through once, in 1 MiB blocks), or one clear error naming it."""
    path = check_file(path, what)
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    with path.open("rb") as stream:
        while True:
            block = stream.read(1 << 20)
            try:
                decoder.decode(block, final=not block)
            except UnicodeDecodeError as err:
                raise UserInputError(f"{path}: not UTF-8 text ({err.reason} at byte {offset + err.start})") from None
            if not block:
                break
            offset += len(block)
    if offset == 0:
        raise UserInputError(f"{what} {path} is empty")
    return path


def _is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


@contextmanager
def staged_output(final):
    """Yield a hidden sibling folder to write into; rename it to ``final`` on success, delete it on error.

    Under ``torchrun``/``accelerate launch`` every rank gets the same folder; only rank 0 renames or deletes it.
    A killed run's folder (its process gone) is deleted by the next run to the same ``final``.
    """
    final = check_new_output(final)
    staging = _partial_path(final)
    staging.mkdir(parents=True, exist_ok=True)
    try:
        yield staging
    except BaseException:
        if _is_main_process():
            shutil.rmtree(staging, ignore_errors=True)
        raise
    _wait_for_other_ranks()
    if _is_main_process():
        check_new_output(final)
        staging.rename(final)


def _wait_for_other_ranks():
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
