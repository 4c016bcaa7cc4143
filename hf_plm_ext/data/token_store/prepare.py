"""``corpus prepare``: a corpus tokenised once into a token store, by datatrove's pipeline and executors.

The pipeline is two steps of datatrove's kind (:mod:`steps`): ``ReadPieces`` yields task ``rank``'s documents,
``WriteShard`` tokenises them and writes shard ``rank``. datatrove's
``LocalPipelineExecutor`` runs the tasks on this machine's cores, ``SlurmPipelineExecutor`` as a Slurm job array,
``RayPipelineExecutor`` on a Ray cluster; each marks a task done when it ends, and a relaunch runs only the tasks
that are not (a failed one, alone). Everything is written under ``.NAME.staging`` beside the store, which
:func:`finish_store` checks and renames to ``NAME`` once every task is done: a store is complete or absent.
"""

import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path

import numpy as np

from hf_plm_ext.data.token_store.format import FORMAT, MANIFEST, VERSION, shard_name, token_dtype, tokenizer_digest
from hf_plm_ext.data.token_store.sources import (DOCUMENT_SPLITS, PIECE_BYTES, check_source, corpus_files,
                                                 pieces_of, record_of)
from hf_plm_ext.errors import UserInputError

EXECUTORS = ("local", "slurm", "ray")
SEGMENTERS = ("jieba",)
EXTRAS = {"datatrove": "corpus", "ray": "ray", "jieba": "zh"}  # a package -> the extra that installs it


def require(package: str, why: str):
    """``import package``, or one line naming the extra that installs it."""
    import importlib

    try:
        return importlib.import_module(package)
    except ImportError:
        raise UserInputError(f"{why} needs {package}, which is not installed: pip install "
                             f"'hf-plm-ext[{EXTRAS[package]}]'") from None


def staging_folder(output: Path) -> Path:
    return output.parent / f".{output.name}.staging"


def settings_of(args, files, pieces, tokenizer_dir: Path, digest: str, vocab_size: int) -> dict:
    """What makes the store what it is: a relaunch with other settings must not mix into a staged one."""
    return {"sources": record_of(files), "pieces": [asdict(piece) for piece in pieces],
            "tokenizer": {"path": str(tokenizer_dir.resolve()), "sha256": digest,
                          "vocab_size": vocab_size},
            "dtype": np.dtype(token_dtype(vocab_size)).name, "documents": args.documents,
            "text_field": args.text_field, "segmenter": args.segmenter,
            "boundaries": ["documents"] + [name for name, asked in (("sentences", args.sentences),
                                                                    ("words", args.words or args.segmenter))
                                           if asked]}


def prepare_corpus(args, progress=print) -> dict:
    """Run ``corpus prepare`` (``args``: :class:`~hf_plm_ext_cli.corpus` flags); returns the manifest, or None
    when Slurm jobs were submitted (the store appears when they end)."""
    output = Path(args.output)
    if output.exists():
        raise UserInputError(f"--output {output} already exists; give a new folder or remove it")
    if args.documents not in DOCUMENT_SPLITS:
        raise UserInputError(f"--documents must be one of {', '.join(DOCUMENT_SPLITS)}, got {args.documents!r}")
    if args.segmenter not in (None, *SEGMENTERS):
        raise UserInputError(f"unknown --segmenter {args.segmenter!r}; choose {', '.join(SEGMENTERS)}")
    if args.executor not in EXECUTORS:
        raise UserInputError(f"unknown --executor {args.executor!r}; choose one of {', '.join(EXECUTORS)}")
    require("datatrove", "corpus prepare")
    if args.executor == "ray":
        require("ray", "--executor ray")
    if args.executor == "slurm" and not (args.slurm_partition and args.slurm_time):
        raise UserInputError("--executor slurm needs --slurm-partition and --slurm-time (e.g. 4:00:00)")
    tokenizer_dir = Path(args.tokenizer)
    from tokenizers import Tokenizer

    digest = tokenizer_digest(tokenizer_dir)  # a folder with a tokenizer.json, or one line
    vocab_size = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json")).get_vocab_size()
    if args.segmenter == "jieba":
        require("jieba", "--segmenter jieba")
    files = corpus_files(args.corpus)
    for path in files:
        check_source(path, args.text_field)
    pieces = pieces_of(files, args.piece_megabytes << 20 if args.piece_megabytes else PIECE_BYTES)
    settings = settings_of(args, files, pieces, tokenizer_dir, digest, vocab_size)
    staging = open_staging(output, settings)
    from hf_plm_ext.data.token_store.steps import ReadPieces, WriteShard  # datatrove's steps (an optional extra)

    pipeline = [ReadPieces(pieces, args.documents, args.text_field),
                WriteShard(str(staging), str(tokenizer_dir / "tokenizer.json"), settings["dtype"],
                           "sentences" in settings["boundaries"], "words" in settings["boundaries"], args.segmenter)]
    logs = staging / "logs"
    done = len(list((logs / "completions").glob("*"))) if (logs / "completions").is_dir() else 0
    progress(f"{len(files)} file(s), {len(pieces)} task(s)" + (f"; continuing: {done} done before" if done else ""))
    if args.executor == "slurm":
        submit_slurm(args, pipeline, len(pieces), staging, output)
        return None
    try:
        if args.executor == "ray":
            run_on_ray(args, pipeline, len(pieces), logs)
        else:
            from datatrove.executor import LocalPipelineExecutor

            LocalPipelineExecutor(pipeline, tasks=len(pieces), workers=min(args.workers, len(pieces)),
                                  logging_dir=str(logs)).run()
    except UserInputError:
        raise
    except Exception as err:  # a task's failure, raised again here by the executor: its log says the rest
        failed = (unfinished(logs, len(pieces)) or [0])[0]
        raise UserInputError(f"task {failed} failed ({type(err).__name__}: {' '.join(str(err).split())[:200]}); its "
                             f"log: {logs / 'logs' / f'task_{failed:05d}.log'}; the same command reruns the "
                             f"unfinished tasks alone") from None
    return finish_store(staging, output)


def unfinished(logs: Path, tasks: int) -> list[int]:
    """The tasks without datatrove's completion marker."""
    return [rank for rank in range(tasks) if not (logs / "completions" / f"{rank:05d}").is_file()]


def open_staging(output: Path, settings: dict) -> Path:
    """``.NAME.staging``, new, or left by a stopped run of the same settings (its finished tasks are kept); one of
    other settings is refused."""
    staging = staging_folder(output)
    record = staging / "settings.json"
    if staging.exists():
        try:
            before = json.loads(record.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            before = None
        if before != settings:
            raise UserInputError(f"{staging} holds a stopped `corpus prepare` of other settings (corpus, tokenizer or "
                                 f"flags); run that command again to finish it, or remove the folder")
        return staging
    staging.mkdir(parents=True)
    record.write_text(json.dumps(settings, indent=2) + "\n")
    return staging


def run_on_ray(args, pipeline, tasks: int, logs: Path) -> None:
    """On the Ray cluster ``RAY_ADDRESS`` names (``ray start --head`` on one machine, ``ray start --address`` on
    the others), or a local one that ``ray.init`` starts."""
    import ray
    from datatrove.executor import RayPipelineExecutor

    address = os.environ.get("RAY_ADDRESS") or None
    if not ray.is_initialized():
        ray.init(address=address, num_cpus=None if address else args.workers, log_to_driver=False,
                 include_dashboard=False)
    RayPipelineExecutor(pipeline, tasks=tasks, workers=args.workers, logging_dir=str(logs)).run()
    incomplete = unfinished(logs, tasks)
    if incomplete:
        raise UserInputError(f"{len(incomplete)} Ray task(s) failed (ranks {incomplete[:10]}); their logs are in "
                             f"{logs}/logs; the same command reruns them alone")


def submit_slurm(args, pipeline, tasks: int, staging: Path, output: Path) -> None:
    """Two Slurm jobs: an array of ``tasks`` tokenising tasks, then one that checks and renames the store
    (datatrove's ``depends``): this command returns once they are submitted."""
    from datatrove.executor import SlurmPipelineExecutor

    common = dict(time=args.slurm_time, partition=args.slurm_partition, cpus_per_task=1,
                  venv_path=os.environ.get("VIRTUAL_ENV"), job_name=f"corpus-prepare-{output.name}")
    tokenise = SlurmPipelineExecutor(pipeline, tasks=tasks, workers=args.workers, logging_dir=str(staging / "logs"),
                                     **common)
    finish = SlurmPipelineExecutor([FinishStore(str(staging), str(output))], tasks=1, depends=tokenise,
                                   logging_dir=str(staging.parent / f".{output.name}.finish-logs"), **common)
    finish.run()


class FinishStore:
    """:func:`finish_store` as a pipeline step (a callable of ``(data, rank, world_size)``), for the Slurm job
    that runs after the tokenising array."""

    def __init__(self, staging: str, output: str):
        self.staging, self.output = staging, output

    def __call__(self, data, rank: int = 0, world_size: int = 1):
        finish_store(Path(self.staging), Path(self.output))
        return []


def finish_store(staging: Path, output: Path) -> dict:
    """Check that every task wrote its shard, write ``store.json``, drop the working files and rename the staging
    folder to ``output``."""
    settings = json.loads((staging / "settings.json").read_text(encoding="utf-8"))
    shards, totals = [], {"tokens": 0, "documents": 0, "empty_documents": 0, "seconds": 0.0}
    for rank in range(len(settings["pieces"])):
        counts_file = staging / f"{shard_name(rank)}.json"
        if not counts_file.is_file():
            raise UserInputError(f"task {rank} did not finish (no {counts_file.name} in {staging}); the same command "
                                 f"reruns the unfinished tasks alone")
        counts = json.loads(counts_file.read_text())
        shards.append({"name": shard_name(rank), "tokens": counts["tokens"], "documents": counts["documents"]})
        for name in totals:
            totals[name] += counts[name]
    if totals["tokens"] == 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise UserInputError("the corpus holds no text the tokenizer turns into tokens (an empty corpus)")
    task_seconds = round(totals.pop("seconds"), 3)  # the tasks' own time, reading to writing, summed
    manifest = {"format": FORMAT, "version": VERSION, **{k: v for k, v in settings.items() if k != "pieces"},
                "tasks": len(settings["pieces"]), "shards": shards, **totals, "task_seconds": task_seconds,
                "bytes": sum(source["bytes"] for source in settings["sources"])}
    for rank in range(len(shards)):
        (staging / f"{shard_name(rank)}.json").unlink()
    shutil.rmtree(staging / "logs", ignore_errors=True)
    (staging / "settings.json").unlink()
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    if output.exists():
        raise UserInputError(f"--output {output} appeared while the corpus was prepared; the store stays in {staging}")
    staging.rename(output)
    return manifest
