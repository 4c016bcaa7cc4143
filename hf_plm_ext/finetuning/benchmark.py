"""``benchmark glue|clue MODEL``: every task of a benchmark from one checkpoint, over a grid of learning rates and
seeds, as the papers report them — per task the learning rate with the best median dev score, the median and
mean ± std over seeds, the benchmark's score — and the leaderboard's prediction files of the chosen runs.

:func:`run_benchmark` reads and tokenises each task once, checks every task's classifier on a batch before the
first run, then fine-tunes each (task, learning rate, seed) with the fine-tuning steps, recording each run in
``results.json`` as it ends: a killed benchmark continues with ``resume=True``.
"""

import dataclasses
import json
import logging
import math
import os
import shutil
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import DataCollatorWithPadding, PrinterCallback, TrainingArguments, set_seed
from transformers.utils import logging as transformers_logging

from hf_plm_ext.checkpoints.loading import load_pretrained
from hf_plm_ext.checkpoints.saving import save_final
from hf_plm_ext.errors import UserInputError
from hf_plm_ext.eval.leaderboard import (
    BERT_TABLE_METRICS,
    GLUE_FOLDERS,
    prediction_values,
    run_score,
    split_metric,
    tasks_in,
    test_splits,
    write_predictions,
)
from hf_plm_ext.eval.library_datasets import load_task_splits, test_examples
from hf_plm_ext.eval.library_datasets import task_data as library_task_data
from hf_plm_ext.eval.readers import load_task_data, read_test_file
from hf_plm_ext.eval.scoring import evaluate_splits
from hf_plm_ext.eval.tasks import TASKS as TASKS_OF, get_task
from hf_plm_ext.files import staged_output
from hf_plm_ext.finetuning.arguments import ADAPTERS, FinetuneArguments
from hf_plm_ext.finetuning.fingerprint import benchmark_settings, differences
from hf_plm_ext.finetuning.steps import build_classifier, classification_trainer, encode_splits, tokenize


@dataclass
class BenchmarkArguments:
    output: str = field(metadata={"help": "folder for results.json, results.md, submission.zip and the runs"})
    data_dir: str | None = field(default=None, metadata={
        "help": "a folder with one sub-folder per task, named as GLUE's download script and CLUE's releases name "
                "them (CoLA/, SST-2/, ...; afqmc/ or afqmc_public/, ...)"})
    dataset: str | None = field(default=None, metadata={
        "help": "instead of --data-dir: the datasets library's benchmark (nyu-mll/glue, clue/clue), one "
                "configuration per task, as load_dataset finds it (offline: from the cache)"})
    model: str | None = field(default=None, metadata={"help": "the checkpoint every run starts from (the "
                                                              "command's MODEL)"})
    tasks: str | None = field(default=None, metadata={"help": "comma-separated tasks (default: every task whose "
                                                              "folder is there)"})
    seeds: int = field(default=3, metadata={"help": "seeds per learning rate: --seed, --seed + 1, ..."})
    learning_rates: str = field(default="2e-5,3e-5,5e-5", metadata={"help": "comma-separated learning rates"})
    max_seq_length: int = field(default=128, metadata={"help": "longer inputs are truncated"})
    max_train_samples: int | None = field(default=None, metadata={"help": "train on the first N examples only"})
    ignore_mismatched_sizes: bool = field(default=False, metadata={"help": "replace a checkpoint's classifier "
                                                                           "whose label count differs"})
    adapter: str | None = field(default=None, metadata={"help": "train an adapter and the head only (see "
                                                                "finetune --help)", "choices": ADAPTERS})
    peft_config: str | None = field(default=None, metadata={"help": "a PEFT config JSON (see finetune --help)"})
    resume: bool = field(default=False, metadata={"help": "continue the benchmark in --output where it stopped"})
    dry_run: bool = field(default=False, metadata={"help": "print the plan (runs, steps per run) and stop"})
    keep_models: bool = field(default=False, metadata={"help": "keep every fine-tuned model (default: only each "
                                                               "task's chosen one)"})

    def __post_init__(self):
        if not self.model:
            raise UserInputError("give the checkpoint to start every run from: benchmark glue|clue MODEL ...")
        if (self.data_dir is None) == (self.dataset is None):
            raise UserInputError("give the tasks' data with one of --data-dir (a folder per task) or --dataset (the "
                                 "datasets library's nyu-mll/glue or clue/clue)")
        if self.seeds < 1:
            raise UserInputError(f"--seeds must be at least 1, got {self.seeds}")
        self.learning_rate_grid()
        FinetuneArguments(task="", model=self.model, output=self.output, adapter=self.adapter,
                          peft_config=self.peft_config)  # its checks of the adapter flags

    def learning_rate_grid(self) -> list[float]:
        try:
            grid = [float(text) for text in self.learning_rates.split(",") if text.strip()]
        except ValueError:
            grid = []
        if not grid or any(not math.isfinite(lr) or lr <= 0 for lr in grid):
            raise UserInputError(f"--learning-rates must be positive numbers separated by commas, got "
                                 f"{self.learning_rates!r}")
        return grid

    def finetune_arguments(self, task: str, data_dir: Path | None) -> FinetuneArguments:
        return FinetuneArguments(task=task, model=self.model, output=self.output,
                                 data_dir=None if data_dir is None else str(data_dir),
                                 max_seq_length=self.max_seq_length, max_train_samples=self.max_train_samples,
                                 ignore_mismatched_sizes=self.ignore_mismatched_sizes, adapter=self.adapter,
                                 peft_config=self.peft_config)


@dataclass
class PreparedTask:
    """A task read and tokenised once for all its runs."""

    name: str
    args: FinetuneArguments
    data: object
    train_dataset: object
    eval_datasets: dict
    tests: dict  # split -> (ids, tokenised dataset, leaderboard file name)


def plan(tasks, args: BenchmarkArguments, training_args: TrainingArguments) -> list[dict]:
    """Every run, in order: ``{"task", "lr", "seed"}``."""
    seeds = [training_args.seed + i for i in range(args.seeds)]
    return [{"task": task, "lr": lr, "seed": seed} for task in tasks for lr in args.learning_rate_grid()
            for seed in seeds]


def benchmark_tasks(benchmark: str, args: BenchmarkArguments, progress=print) -> dict:
    """``{task: where its data is}`` (a folder, or the library's ``DatasetDict``, loaded once): the tasks asked for,
    or every task whose data is there; each folder of ``--data-dir`` passed over is said with why."""
    asked = args.tasks.split(",") if args.tasks else None
    if args.data_dir is not None:
        present, skipped = tasks_in(benchmark, Path(args.data_dir), asked)
        for reason in skipped:
            progress(f"skipping {Path(args.data_dir) / reason}")
        return present
    names = [get_task(benchmark, name).name for name in asked] if asked else list(TASKS_OF[benchmark])
    present = {}
    for name in names:
        try:
            present[name] = load_task_splits(args.dataset, get_task(benchmark, name))
        except UserInputError as err:
            if asked:
                raise
            progress(f"skipping {name}: {err}")
    if not present:
        raise UserInputError(f"--dataset {args.dataset}: no {benchmark.upper()} task's configuration found")
    return present


def prepare_task(benchmark: str, name: str, source, args: BenchmarkArguments) -> PreparedTask:
    """``source``: the task's folder (``--data-dir``) or its splits (``--dataset``), as :func:`benchmark_tasks`
    found them."""
    task = get_task(benchmark, name)
    if isinstance(source, Path):
        finetune_args = args.finetune_arguments(name, source)
        data = load_task_data(benchmark, finetune_args)
        test_rows = {split: read_test_file(task, source / file_name)
                     for split, (file_name, _) in test_splits(task).items() if (source / file_name).is_file()}
    else:
        finetune_args = args.finetune_arguments(name, None)
        data, test_sets = library_task_data(args.dataset, task, source)
        test_rows = {split: test_examples(task, rows) for split, rows in test_sets.items()}
    model, tokenizer = build_classifier(data.task, finetune_args)
    train_dataset, eval_datasets = encode_splits(data, tokenizer, finetune_args)
    check_classifier(model, tokenizer, train_dataset, name)
    tests = {split: (ids, tokenize(examples, tokenizer, args.max_seq_length).remove_columns("labels"),
                     test_splits(task)[split][1])
             for split, (ids, examples) in test_rows.items()}
    return PreparedTask(name, finetune_args, data, train_dataset, eval_datasets, tests)


def check_classifier(model, tokenizer, train_dataset, task_name: str) -> None:
    """One forward and backward pass on two training examples, before any run: a head that cannot take the task
    (regression for STS-B) fails here, in one line, not hours in."""
    features = DataCollatorWithPadding(tokenizer)([train_dataset[i] for i in range(min(2, len(train_dataset)))])
    try:
        model(**features).loss.backward()
    except (RuntimeError, ValueError, TypeError) as err:
        raise UserInputError(f"{task_name}: the model's classification head cannot take this task: "
                             f"{' '.join(str(err).split())[:300]}") from None
    model.zero_grad(set_to_none=True)


def steps_per_run(prepared: PreparedTask, training_args: TrainingArguments) -> int:
    if training_args.max_steps > 0:
        return training_args.max_steps
    per_step = (training_args.per_device_train_batch_size * training_args.gradient_accumulation_steps
                * max(training_args.world_size, 1))
    return math.ceil(len(prepared.train_dataset) / per_step) * math.ceil(training_args.num_train_epochs)


def run_one(prepared: PreparedTask, run: dict, training_args: TrainingArguments, run_dir: Path) -> dict:
    """Fine-tune, score every dev split and predict every test split of one (task, lr, seed); the model and the
    predictions are written to ``run_dir`` (all or nothing)."""
    set_seed(run["seed"])  # the head and adapter are made here, before the Trainer seeds itself
    loading_logger = logging.getLogger(load_pretrained.__module__)
    said, loading_logger.disabled = loading_logger.disabled, True  # (its notes were said once, at the check)
    try:
        model, tokenizer = build_classifier(prepared.data.task, prepared.args)
    finally:
        loading_logger.disabled = said
    arguments = dataclasses.replace(training_args, learning_rate=run["lr"], seed=run["seed"])
    with staged_output(run_dir) as staging:
        arguments.output_dir = str(staging)
        trainer = classification_trainer(model, tokenizer, prepared.data.task, prepared.train_dataset,
                                         prepared.eval_datasets, arguments)
        trainer.remove_callback(PrinterCallback)  # one progress line per run, the benchmark's
        started = time.perf_counter()
        train_result = trainer.train()
        trained = time.perf_counter()
        results = evaluate_splits(trainer, prepared.data, prepared.eval_datasets)
        evaluated = time.perf_counter()
        for split, (ids, dataset, file_name) in prepared.tests.items():
            logits = trainer.predict(dataset).predictions
            logits = logits[0] if isinstance(logits, tuple) else logits
            write_predictions(prepared.data.task, ids, prediction_values(prepared.data.task, logits),
                              staging / file_name)
        save_final(trainer, staging)  # the model, its tokenizer, training_args.json (no pickle)
    return {**run, "results": results, "score": run_score(prepared.data.task, results),
            "steps": train_result.global_step, "train_seconds": round(trained - started, 3),
            "eval_seconds": round(evaluated - trained, 3), "model_dir": str(run_dir)}


def run_folder(output: Path, run: dict) -> Path:
    return output / "runs" / run["task"] / f"lr{run['lr']:g}-seed{run['seed']}"


@contextmanager
def without_progress_bars():
    """transformers' and datasets' bars off (loading, saving, tokenising at every run): the benchmark prints one
    line per run."""
    import datasets

    shown = transformers_logging.is_progress_bar_enabled(), datasets.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if shown[0]:
            transformers_logging.enable_progress_bar()
        if shown[1]:
            datasets.enable_progress_bars()


def run_benchmark(benchmark: str, args: BenchmarkArguments, training_args: TrainingArguments,
                  progress=print) -> dict:
    """Run (or continue, ``args.resume``) the benchmark; returns what ``results.json`` holds."""
    with without_progress_bars():
        return _run_benchmark(benchmark, args, training_args, progress)


def _run_benchmark(benchmark, args, training_args, progress):
    output = Path(args.output)
    if training_args.learning_rate != TrainingArguments.learning_rate:
        raise UserInputError(f"--learning_rate {training_args.learning_rate:g}: the benchmark runs every learning "
                             f"rate of --learning-rates ({args.learning_rates})")
    if training_args.resume_from_checkpoint:
        raise UserInputError("--resume_from_checkpoint: a benchmark continues where it stopped with --resume")
    sources = benchmark_tasks(benchmark, args, progress)
    runs = plan(sources, args, training_args)
    header = {"benchmark": benchmark, "model": str(args.model), "learning_rates": args.learning_rate_grid(),
              "seeds": sorted({run["seed"] for run in runs}), "tasks": list(sources)}
    if not args.dry_run:
        check_output(output, header, args.resume)
        header["settings"] = benchmark_settings(args, training_args, sources)
        check_settings(output, header["settings"], args.resume)
    prepared = {name: prepare_task(benchmark, name, source, args) for name, source in sources.items()}
    if args.dry_run:
        for name, task in prepared.items():
            progress(f"{name}: {len(task.train_dataset)} training examples, "
                     f"{args.seeds * len(header['learning_rates'])} runs of "
                     f"{steps_per_run(task, training_args)} steps; test sets: {', '.join(task.tests) or 'none'}")
        progress(f"{len(runs)} runs in all")
        return {**header, "runs": [], "plan": runs}
    state = start_or_resume(output, header, args.resume)
    done = {(r["task"], r["lr"], r["seed"]) for r in state["runs"]}
    todo = [run for run in runs if (run["task"], run["lr"], run["seed"]) not in done]
    started = time.perf_counter()
    for count, run in enumerate(todo, start=1):
        record = run_one(prepared[run["task"]], run, training_args, run_folder(output, run))
        state["runs"].append(record)
        keep_the_best_models(state, args.keep_models, finished_task=task_finished(state, runs, run["task"]))
        write_state(output, state, runs)
        left = len(todo) - count
        per_run = (time.perf_counter() - started) / count
        progress(f"{run['task']} lr={run['lr']:g} seed={run['seed']}: score {record['score']:.2f} "
                 f"({len(state['runs'])}/{len(runs)} runs, {left} left, about {left * per_run / 60:.1f} min left)")
    write_state(output, state, runs)
    return state


def check_output(output: Path, header: dict, resume: bool) -> None:
    """Refuse, before any data is read, an output folder that exists without ``--resume``, or a ``--resume`` of
    a benchmark with another model, grid or task list."""
    results = output / "results.json"
    if not resume:
        if output.exists():
            raise UserInputError(f"output directory {output} already exists; give a new folder, or --resume to "
                                 f"continue the benchmark in it")
        return
    if not results.is_file():
        raise UserInputError(f"--resume: {results} not found; start the benchmark without --resume")
    state = json.loads(results.read_text(encoding="utf-8"))
    changed = differences({key: state.get(key) for key in header}, header)
    if changed:
        raise UserInputError(f"--resume: {results} is another benchmark: {'; '.join(changed)}")


def check_settings(output: Path, settings: dict, resume: bool) -> None:
    """Refuse a ``--resume`` whose runs would not be made as the recorded ones were (:mod:`fingerprint`)."""
    if not resume:
        return
    recorded = json.loads((output / "results.json").read_text(encoding="utf-8")).get("settings", {})
    changed = differences(recorded, settings)
    if changed:
        raise UserInputError(f"--resume: {output / 'results.json'} was run with other settings, and its runs would "
                             f"not compare with new ones: {'; '.join(changed)}")


def start_or_resume(output: Path, header: dict, resume: bool) -> dict:
    if resume:
        return json.loads((output / "results.json").read_text(encoding="utf-8"))
    output.mkdir(parents=True)
    return {**header, "complete": False, "runs": []}


def task_finished(state: dict, runs: list[dict], task: str) -> bool:
    return sum(r["task"] == task for r in state["runs"]) == sum(r["task"] == task for r in runs)


def keep_the_best_models(state: dict, keep_all: bool, finished_task: bool) -> None:
    """Remove fine-tuned models no longer needed: while a task runs, each learning rate keeps its best seed's (one
    of them will be chosen); when it ends, only the chosen run's."""
    if keep_all:
        return
    task = state["runs"][-1]["task"]
    task_runs = [r for r in state["runs"] if r["task"] == task]
    if finished_task:
        chosen = chosen_run(task_runs)
        keep = {chosen["model_dir"]}
    else:
        keep = {max((r for r in task_runs if r["lr"] == lr), key=lambda r: r["score"])["model_dir"]
                for lr in {r["lr"] for r in task_runs}}
    for record in task_runs:
        if record["model_dir"] is not None and record["model_dir"] not in keep:
            shutil.rmtree(record["model_dir"], ignore_errors=True)
            record["model_dir"] = None


def chosen_learning_rate(task_runs: list[dict]) -> float:
    """The learning rate with the best median score over seeds (the first in the grid on a tie)."""
    by_lr = {}
    for record in task_runs:
        by_lr.setdefault(record["lr"], []).append(record["score"])
    return max(by_lr, key=lambda lr: statistics.median(by_lr[lr]))


def chosen_run(task_runs: list[dict]) -> dict:
    lr = chosen_learning_rate(task_runs)
    return max((r for r in task_runs if r["lr"] == lr), key=lambda r: r["score"])


def write_state(output: Path, state: dict, runs: list[dict]) -> None:
    """``results.json`` and ``results.md`` (through a hidden file renamed over the old one), and when every run has
    ended, ``submission.zip``."""
    state["complete"] = len(state["runs"]) == len(runs)
    replace_file(output / "results.json", json.dumps(state, indent=2, ensure_ascii=False) + "\n")
    replace_file(output / "results.md", results_table(state, runs))
    if state["complete"]:
        write_submission(state, output)


def replace_file(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.partial-{os.getpid()}")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


def write_submission(state: dict, output: Path) -> None:
    """``submission.zip``: the leaderboard's files of each task's chosen run (tasks with a test file)."""
    import zipfile

    files = []
    for task in state["tasks"]:
        chosen = chosen_run([r for r in state["runs"] if r["task"] == task])
        folder = Path(chosen["model_dir"]) if chosen["model_dir"] else None
        for _, file_name in test_splits(get_task(state["benchmark"], task)).values():
            if folder is not None and (folder / file_name).is_file():
                files.append((folder / file_name, file_name))
    if not files:
        return
    partial = output / f".submission.zip.partial-{os.getpid()}"
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, name in files:
            archive.write(path, name)
    os.replace(partial, output / "submission.zip")


def results_table(state: dict, runs: list[dict]) -> str:
    """``results.md``: the papers' table (one column per task, MNLI's two dev sets as two), then per task the
    chosen learning rate, the median and mean ± std over seeds. A task whose runs have not all ended is a "—" cell
    and there is no benchmark score."""
    benchmark, tasks = state["benchmark"], state["tasks"]
    planned = {task: sum(r["task"] == task for r in runs) for task in tasks}
    finished = {task: [r for r in state["runs"] if r["task"] == task] for task in tasks}
    complete = {task for task in tasks if len(finished[task]) == planned[task]}
    chosen_lr = {task: chosen_learning_rate(finished[task]) for task in complete}
    columns, cells, bert_entries = [], [], []
    for task_name in tasks:
        task = get_task(benchmark, task_name)
        splits = list(task.validation_files)
        chosen = [r for r in finished[task_name] if r["lr"] == chosen_lr.get(task_name)]
        for split in splits:
            columns.append(column_name(task, split, len(splits)))
            if not chosen:
                cells.append("—")
                continue
            medians = [statistics.median(split_metric(r["results"], split, name) for r in chosen)
                       for name in task.metrics]
            cells.append("/".join(f"{value:.1f}" for value in medians))
            if task_name in BERT_TABLE_METRICS:
                bert_entries.append(statistics.median(split_metric(r["results"], split, BERT_TABLE_METRICS[
                    task_name]) for r in chosen))
    scores = {task: statistics.median(r["score"] for r in finished[task] if r["lr"] == lr)
              for task, lr in chosen_lr.items()}
    all_there = len(complete) == len(tasks)
    score = f"{statistics.fmean(scores.values()):.1f}" if all_there else "—"
    lines = [f"# {benchmark.upper()} dev results: {state['model']}", ""]
    if not all_there:
        lines += [f"**Incomplete**: {sum(len(finished[t]) for t in tasks)} of {len(runs)} runs have ended; a task "
                  f"whose runs have not all ended shows —, and there is no score.", ""]
    known = len(TASKS_OF[benchmark])
    lines += [f"| {' | '.join(columns)} | Score |", "|" + "---:|" * (len(columns) + 1),
              f"| {' | '.join(cells)} | {score} |", ""]
    lines.append(f"Score: the mean of the task scores over the {len(tasks)} task(s) run"
                 + ("" if len(tasks) == known else f" (of {known}: not comparable with a full "
                                                    f"{benchmark.upper()} score)") + "; "
                 + ("a task's score is the mean of its metrics over its dev sets, WNLI included, MNLI one task "
                    "(the GLUE paper's)." if benchmark == "glue" else "a task's score is its accuracy."))
    if benchmark == "glue" and all_there and bert_entries:
        lines.append(f"BERT's table's average (MNLI-m and MNLI-mm as two entries, F1 for MRPC and QQP, Spearman "
                     f"for STS-B, WNLI left out): {statistics.fmean(bert_entries):.1f}.")
    lines += ["", "| task | metric | chosen lr | median | mean ± std | runs | median by lr |",
              "|---|---|---:|---:|---:|---:|---|"]
    for task_name in tasks:
        task = get_task(benchmark, task_name)
        records = finished[task_name]
        if not records:
            lines.append(f"| {task_name} | {' / '.join(task.metrics)} | — | — | — | 0/{planned[task_name]} | |")
            continue
        by_lr = {}
        for record in records:
            by_lr.setdefault(record["lr"], []).append(record["score"])
        lr = chosen_learning_rate(records)
        values = by_lr[lr]
        spread = statistics.stdev(values) if len(values) > 1 else 0.0
        done = task_name in complete
        lines.append(f"| {task_name} | {' / '.join(task.metrics)} | {f'{lr:g}' if done else '—'} | "
                     f"{statistics.median(values):.2f} | {statistics.fmean(values):.2f} ± {spread:.2f} | "
                     f"{len(records)}/{planned[task_name]} | "
                     + ", ".join(f"{lr_:g}: {statistics.median(v):.2f}" for lr_, v in by_lr.items()) + " |")
    lines += ["", "Scores in points (metric x 100) on the dev sets; median and mean ± std over the seeds at the "
                  "chosen learning rate; every run is in results.json."]
    return "\n".join(lines) + "\n"


def column_name(task, split: str, splits: int) -> str:
    name = GLUE_FOLDERS.get(task.name, task.name) if task.benchmark == "glue" else task.name
    if splits > 1:
        return f"{name}-{'mm' if 'mismatched' in split else 'm'}"
    return name
