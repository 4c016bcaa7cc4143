"""What a benchmark's result depends on beyond its grid, recorded in ``results.json`` so that ``--resume`` adds
only runs made the same way: the Trainer's flags the grid does not own, the benchmark's own flags, the data's and
the model's hashes, the versions of the code."""

import hashlib
import json
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

# TrainingArguments fields that change nothing a run produces (where it writes, what it prints), or that the
# grid owns (learning_rate, seed), or that must never be written down (a Hub token)
NOT_A_SETTING = {"output_dir", "logging_dir", "run_name", "disable_tqdm", "report_to", "logging_strategy",
                 "logging_steps", "logging_first_step", "logging_nan_inf_filter", "log_level", "log_level_replica",
                 "log_on_each_node", "learning_rate", "seed", "resume_from_checkpoint", "dataloader_num_workers",
                 "dataloader_prefetch_factor", "dataloader_persistent_workers", "dataloader_pin_memory",
                 "save_strategy", "save_steps", "save_total_limit", "ddp_timeout"}
BENCHMARK_SETTINGS = ("max_seq_length", "max_train_samples", "ignore_mismatched_sizes", "adapter")
CODE = ("hf-plm-ext", "transformers", "torch", "peft")


def file_digest(path: Path) -> str:
    with open(path, "rb") as stream:
        return hashlib.file_digest(stream, "sha256").hexdigest()


def folder_digest(folder: Path, skip=("README.md",)) -> str:
    """One sha256 over every file of ``folder`` (names and contents, in name order; hidden files and a card left
    out): a model checkpoint or a task's data."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        relative = path.relative_to(folder)
        if path.name in skip or any(part.startswith(".") for part in relative.parts):
            continue
        digest.update(f"{relative.as_posix()}\0{file_digest(path)}\n".encode())
    return digest.hexdigest()


def model_digest(model: str) -> str:
    """A local checkpoint's :func:`folder_digest`; a Hub model id as it is named (its revision is the Hub's)."""
    return f"sha256:{folder_digest(Path(model))}" if Path(model).is_dir() else f"hub:{model}"


def data_digests(sources: dict) -> dict:
    """``{"data:TASK": digest}``: a task folder's files (``--data-dir``), or the datasets library's fingerprint of
    each split (``--dataset``)."""
    digests = {}
    for task, source in sources.items():
        if isinstance(source, Path):
            digests[f"data:{task}"] = f"sha256:{folder_digest(source)}"
        else:
            digests[f"data:{task}"] = ",".join(f"{split}={getattr(data, '_fingerprint', '?')}"
                                               for split, data in sorted(source.items()))
    return digests


def code_versions() -> dict:
    versions = {}
    for package in CODE:
        try:
            versions[f"version:{package}"] = version(package)
        except PackageNotFoundError:
            versions[f"version:{package}"] = None
    return versions


def benchmark_settings(args, training_args, sources: dict) -> dict:
    """Everything that changes a benchmark run's result beyond its (task, learning rate, seed), flat and
    JSON-able: compared field by field on ``--resume``."""
    trainer = {f"trainer:{name}": value for name, value in training_args.to_dict().items()
               if name not in NOT_A_SETTING and "hub" not in name}
    own = {f"benchmark:{name}": getattr(args, name) for name in BENCHMARK_SETTINGS}
    if args.peft_config:
        own["benchmark:peft_config"] = f"sha256:{file_digest(Path(args.peft_config))}"
    settings = {**trainer, "trainer:world_size": training_args.world_size, **own, "model": model_digest(args.model),
                **data_digests(sources), **code_versions()}
    return json.loads(json.dumps(settings, default=str))  # as results.json gives it back (tuples as lists)


def differences(recorded: dict, current: dict) -> list[str]:
    """``name: recorded -> now`` for each setting that differs (one missing on one side included)."""
    names = sorted(set(recorded) | set(current))
    return [f"{name}: {recorded.get(name)!r} -> {current.get(name)!r}" for name in names
            if recorded.get(name) != current.get(name)]


