"""GLUE and CLUE as benchmarks: where each task sits in a download, its test set, the leaderboard's prediction
files, and the benchmark's score from the tasks' scores.

Scores are on the dev sets, in points (metric x 100). A task's score is the mean of its metrics (MRPC and QQP: F1
and accuracy; STS-B: Pearson and Spearman) over its dev sets (MNLI: matched and mismatched). The GLUE score is the
GLUE paper's: the unweighted mean of the task scores, WNLI included, MNLI one task. BERT's table differs: it counts
MNLI-m and MNLI-mm as two entries, takes F1 alone for MRPC and QQP and Spearman alone for STS-B, and leaves WNLI
out; ``results.md`` gives that average too. The CLUE score is the mean of the task scores (accuracies).
"""

import json
import statistics
from pathlib import Path

from hf_plm_ext.errors import UserInputError
from hf_plm_ext.eval.tasks import TASKS, Task

GLUE_FOLDERS = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "qqp": "QQP", "mnli": "MNLI",
                "qnli": "QNLI", "rte": "RTE", "wnli": "WNLI"}
# BERT's table: the metric each task enters its average with (MNLI's two dev sets as two entries; WNLI left out)
BERT_TABLE_METRICS = {"cola": "matthews_correlation", "sst2": "accuracy", "mrpc": "f1", "stsb": "spearmanr",
                      "qqp": "f1", "mnli": "accuracy", "qnli": "accuracy", "rte": "accuracy"}


def task_folder(task: Task, data_dir: Path) -> Path | None:
    """The task's folder in ``data_dir``, named as GLUE's download script and CLUE's releases name it (CLUE's with
    or without ``_public``), or None."""
    names = [GLUE_FOLDERS[task.name]] if task.benchmark == "glue" else [task.name, f"{task.name}_public"]
    return next((data_dir / name for name in names if (data_dir / name).is_dir()), None)


def tasks_in(benchmark: str, data_dir: Path, asked: list[str] | None) -> tuple[dict[str, Path], list[str]]:
    """``({task name: folder}, [a folder passed over, and why])``: the tasks asked for (default: every task whose
    folder is there), checked."""
    if benchmark not in TASKS:
        raise UserInputError(f"unknown benchmark {benchmark!r}; choose one of {', '.join(TASKS)}")
    if not data_dir.is_dir():
        raise UserInputError(f"--data-dir {data_dir} is not a directory")
    known = TASKS[benchmark]
    for name in asked or []:
        if name not in known:
            raise UserInputError(f"unknown {benchmark.upper()} task {name!r}; choose from {', '.join(known)}")
    found = {name: task_folder(task, data_dir) for name, task in known.items() if name in (asked or known)}
    missing = [name for name, folder in found.items() if folder is None or not (folder / known[name].train_file)
               .is_file()]
    if asked and missing:
        raise UserInputError(f"--tasks {','.join(missing)}: no folder with a {known[missing[0]].train_file} for it in "
                             f"{data_dir} (expected {task_folder_names(known[missing[0]])})")
    present = {name: folder for name, folder in found.items() if name not in missing}
    if not present:
        raise UserInputError(f"{data_dir} holds no {benchmark.upper()} task: expected folders such as "
                             f"{', '.join(task_folder_names(task) for task in list(known.values())[:3])}")
    skipped = [f"{found[name].name}/: no {known[name].train_file} (a {name} folder without its training split)"
               for name in missing if found[name] is not None]
    if not asked:
        task_folders = {folder.name for folder in found.values() if folder is not None}
        skipped += [f"{folder.name}/: not a {benchmark.upper()} task folder (expected "
                    f"{', '.join(task_folder_names(task) for task in list(known.values())[:3])}, ...)"
                    for folder in sorted(data_dir.iterdir()) if folder.is_dir() and folder.name not in task_folders
                    and not folder.name.startswith(".")]
    return present, skipped


def task_folder_names(task: Task) -> str:
    return GLUE_FOLDERS[task.name] + "/" if task.benchmark == "glue" else f"{task.name}/ or {task.name}_public/"


def test_splits(task: Task) -> dict[str, tuple[str, str]]:
    """``{split: (test file in the task's folder, the leaderboard's file)}``."""
    if task.benchmark == "clue":
        return {"test": ("test.json", f"{task.name}_predict.json")}
    if task.name == "mnli":
        return {"test_matched": ("test_matched.tsv", "MNLI-m.tsv"),
                "test_mismatched": ("test_mismatched.tsv", "MNLI-mm.tsv")}
    return {"test": ("test.tsv", f"{GLUE_FOLDERS[task.name]}.tsv")}


def prediction_values(task: Task, logits) -> list:
    """The leaderboard's values: a label name (GLUE's NLI tasks: ``entailment`` ...; CLUE's as in its
    ``labels.json``), or STS-B's score as a float."""
    if task.is_regression:
        return [float(value) for value in logits[:, 0]]
    return [task.labels[index] for index in logits.argmax(axis=-1)]


def write_predictions(task: Task, ids: list, values: list, path: Path) -> None:
    if task.benchmark == "glue":
        text = "index\tprediction\n" + "".join(
            f"{i}\t{value:.3f}\n" if task.is_regression else f"{i}\t{value}\n" for i, value in zip(ids, values))
    else:
        text = "".join(json.dumps({"id": i, "label": value}, ensure_ascii=False) + "\n"
                       for i, value in zip(ids, values))
    path.write_text(text, encoding="utf-8")


def run_score(task: Task, results: list[dict]) -> float:
    """A run's task score, in points: the mean of the task's metrics over its dev sets."""
    return 100 * statistics.fmean(split["metrics"][name] for split in results for name in task.metrics)


def split_metric(results: list[dict], split: str, name: str) -> float:
    return 100 * next(r for r in results if r["split"] == split)["metrics"][name]
