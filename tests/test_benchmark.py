"""``hf-plm-ext benchmark glue|clue``: the whole grid from one checkpoint, the papers' table recomputed from
``results.json``, resumption after a kill, the leaderboard's files and bad input (issue 61)."""

import json
import os
import signal
import statistics
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from conftest import run_cli

GRID = ["--seeds", "2", "--learning-rates", "2e-5,1e-3", "--max_steps", "2", "--per_device_train_batch_size", "8",
        "--max-seq-length", "32", "--seed", "7"]
TIMING = ("train_seconds", "eval_seconds")


def glue_folder(shared_data, tmp_path, tasks=("MRPC", "SST-2"), rows=60, dev_rows=24):
    """A GLUE download's layout with the first rows of the real splits; each task's test file is its dev file
    without the label column (MRPC: the first, SST-2: the last)."""
    root = tmp_path / "glue"
    for task in tasks:
        (root / task).mkdir(parents=True)
        for split, count in (("train", rows), ("dev", dev_rows)):
            lines = (shared_data / "glue" / task / f"{split}.tsv").read_text(encoding="utf-8-sig").splitlines()
            (root / task / f"{split}.tsv").write_text("\n".join(lines[:count + 1]) + "\n", encoding="utf-8")
        dev = (root / task / "dev.tsv").read_text(encoding="utf-8").splitlines()
        label_column = dev[0].split("\t").index("Quality" if task == "MRPC" else "label")
        (root / task / "test.tsv").write_text(
            "".join("\t".join(f for i, f in enumerate(line.split("\t")) if i != label_column) + "\n" for line in dev),
            encoding="utf-8")
    return root


def without_timing(state: dict) -> dict:
    return {**state, "runs": [{k: v for k, v in run.items() if k not in TIMING} for run in state["runs"]]}


def test_the_glue_grid_gives_the_papers_table_recomputed_from_its_runs_and_the_leaderboard_files(
        tmp_path, shared_data, tiny_classifier_dir, capsys):
    data = glue_folder(shared_data, tmp_path)
    out = tmp_path / "bench"
    code, stdout, stderr = run_cli(["benchmark", "glue", tiny_classifier_dir, "--output", out, "--data-dir", data,
                                    *GRID], capsys)
    assert code == 0, stderr
    progress = [line for line in stdout.splitlines() if " seed=" in line]
    assert len(progress) == 8 and "0 left" in progress[-1]
    state = json.loads((out / "results.json").read_text())
    assert state["complete"] and state["tasks"] == ["sst2", "mrpc"] and state["seeds"] == [7, 8]
    assert sorted((r["task"], r["lr"], r["seed"]) for r in state["runs"]) == sorted(
        (t, lr, s) for t in ("sst2", "mrpc") for lr in (2e-5, 1e-3) for s in (7, 8))
    assert all(r["steps"] == 2 and r["train_seconds"] > 0 for r in state["runs"])

    # the table, by hand: per task the lr with the best median score, its median and the mean of the task scores
    table = (out / "results.md").read_text()
    scores = {}
    for task, metrics in (("sst2", ["accuracy"]), ("mrpc", ["f1", "accuracy"])):
        runs = [r for r in state["runs"] if r["task"] == task]
        for run in runs:
            assert run["score"] == pytest.approx(100 * statistics.fmean(run["results"][0]["metrics"][m]
                                                                          for m in metrics))
        medians = {lr: statistics.median(r["score"] for r in runs if r["lr"] == lr) for lr in (2e-5, 1e-3)}
        chosen = max(medians, key=medians.get)
        scores[task] = medians[chosen]
        chosen_runs = [r for r in runs if r["lr"] == chosen]
        cell = "/".join(f"{statistics.median(100 * r['results'][0]['metrics'][m] for r in chosen_runs):.1f}"
                        for m in metrics)
        assert f"| {cell} |" in table.split("\n\n")[1]
        assert f"| {task} | {' / '.join(metrics)} | {chosen:g} | {medians[chosen]:.2f} |" in table
        kept = [r for r in runs if r["model_dir"]]
        assert len(kept) == 1 and kept[0]["lr"] == chosen and Path(kept[0]["model_dir"]).is_dir()
    assert f"| {statistics.fmean(scores.values()):.1f} |" in table.split("\n\n")[1]
    assert "Incomplete" not in table and "of 9: not comparable" in table
    assert len(list((out / "runs").glob("*/*"))) == 2  # only the chosen models stay

    # the leaderboard's files: the chosen runs' predictions, one row per test row, GLUE's header and labels
    with zipfile.ZipFile(out / "submission.zip") as archive:
        assert sorted(archive.namelist()) == ["MRPC.tsv", "SST-2.tsv"]
        for name in archive.namelist():
            rows = archive.read(name).decode().splitlines()
            test_rows = (data / name.removesuffix(".tsv") / "test.tsv").read_text().splitlines()
            assert rows[0] == "index\tprediction" and len(rows) == len(test_rows)
            assert [row.split("\t")[0] for row in rows[1:]] == [str(i) for i in range(len(rows) - 1)]
            assert {row.split("\t")[1] for row in rows[1:]} <= {"0", "1"}


def test_a_killed_benchmark_resumes_to_the_same_results_and_a_partial_one_never_looks_complete(
        tmp_path, shared_data, tiny_classifier_dir, capsys):
    data = glue_folder(shared_data, tmp_path, tasks=("MRPC",))
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert run_cli(["benchmark", "glue", tiny_classifier_dir, "--output", whole, "--data-dir", data, *GRID],
                   capsys)[0] == 0
    command = [sys.executable, "-m", "hf_plm_ext_cli", "benchmark", "glue", str(tiny_classifier_dir), "--output",
               str(killed), "--data-dir", str(data), *GRID]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:  # kill it inside its third run
        results = killed / "results.json"
        if results.is_file() and len(json.loads(results.read_text() or '{"runs": []}')["runs"]) >= 2 \
                and list((killed / "runs" / "mrpc").glob(".*partial*")):
            process.send_signal(signal.SIGKILL)
            break
        time.sleep(0.02)
    process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL, "the benchmark ended before it could be killed"
    partial = json.loads((killed / "results.json").read_text())
    assert not partial["complete"] and 2 <= len(partial["runs"]) < 4
    table = (killed / "results.md").read_text()
    assert "**Incomplete**" in table and "| — | — |" in table and not (killed / "submission.zip").exists()

    code, _, stderr = run_cli(["benchmark", "glue", tiny_classifier_dir, "--output", killed, "--data-dir", data,
                               *GRID], capsys)
    assert code == 2 and "--resume" in stderr.strip().splitlines()[-1]
    code, _, stderr = run_cli(["benchmark", "glue", tiny_classifier_dir, "--output", killed, "--data-dir", data,
                               *GRID, "--resume"], capsys)
    assert code == 0, stderr
    resumed, uninterrupted = (json.loads((folder / "results.json").read_text()) for folder in (killed, whole))
    for state, folder in ((resumed, killed), (uninterrupted, whole)):
        for run in state["runs"]:
            run["model_dir"] = run["model_dir"] and str(Path(run["model_dir"]).relative_to(folder))
            for split in run["results"]:
                split["file"] = Path(split["file"]).name
    assert without_timing(resumed) == without_timing(uninterrupted)
    assert not list((killed / "runs" / "mrpc").glob(".*partial*"))
    assert (killed / "submission.zip").is_file()


def test_the_clue_grid_writes_clue_s_prediction_files_with_its_label_names(tmp_path, shared_data,
                                                                            tiny_classifier_dir, capsys):
    folder = tmp_path / "clue" / "tnews_public"
    folder.mkdir(parents=True)
    source = shared_data / "clue" / "tnews"
    (folder / "labels.json").write_text((source / "labels.json").read_text(encoding="utf-8"), encoding="utf-8")
    for split, count in (("train", 60), ("dev", 20)):
        lines = (source / f"{split}.json").read_text(encoding="utf-8").splitlines()[:count]
        (folder / f"{split}.json").write_text("\n".join(lines) + "\n", encoding="utf-8")
    test = [{k: v for k, v in json.loads(line).items() if k not in ("label", "label_desc")} | {"id": 100 + i}
            for i, line in enumerate((folder / "dev.json").read_text(encoding="utf-8").splitlines())]
    (folder / "test.json").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in test),
                                      encoding="utf-8")
    out = tmp_path / "bench"
    code, _, stderr = run_cli(["benchmark", "clue", tiny_classifier_dir, "--output", out, "--data-dir",
                               tmp_path / "clue", "--seeds", "1", "--learning-rates", "1e-3", "--max_steps", "1",
                               "--max-seq-length", "32", "--ignore-mismatched-sizes"], capsys)
    assert code == 0, stderr
    with zipfile.ZipFile(out / "submission.zip") as archive:
        assert archive.namelist() == ["tnews_predict.json"]
        rows = [json.loads(line) for line in archive.read("tnews_predict.json").decode().splitlines()]
    labels = {json.loads(line)["label"] for line in (folder / "labels.json").read_text().splitlines()}
    assert [r["id"] for r in rows] == [r["id"] for r in test] and {r["label"] for r in rows} <= labels
    table = (out / "results.md").read_text()
    assert "| tnews | Score |" in table and "of 7: not comparable" in table


def test_the_dry_run_prints_the_plan_and_writes_nothing(tmp_path, shared_data, tiny_classifier_dir, capsys):
    data = glue_folder(shared_data, tmp_path)
    code, stdout, stderr = run_cli(["benchmark", "glue", tiny_classifier_dir, "--output", tmp_path / "plan",
                                    "--data-dir", data, *GRID, "--dry-run"], capsys)
    assert code == 0, stderr
    assert "sst2: 60 training examples, 4 runs of 2 steps; test sets: test" in stdout
    assert "8 runs in all" in stdout and not (tmp_path / "plan").exists()


@pytest.mark.parametrize("case", ["unknown task", "no files", "unknown benchmark", "exists", "resume nothing",
                                  "lr flag", "bad grid", "bad labels"])
def test_bad_input_is_one_line_exit_2_and_nothing_written(case, tmp_path, shared_data, tiny_classifier_dir, capsys):
    data = glue_folder(shared_data, tmp_path, tasks=("MRPC",))
    out = tmp_path / "bench"
    extra, expected = {
        "unknown task": (["--tasks", "mrpc,nope"], "unknown GLUE task 'nope'"),
        "no files": (["--tasks", "rte"], "no folder with a train.tsv"),
        "unknown benchmark": ([], "invalid choice"),
        "exists": ([], "already exists"),
        "resume nothing": (["--resume"], "results.json not found"),
        "lr flag": (["--learning_rate", "1e-4"], "--learning-rates"),
        "bad grid": (["--learning-rates", "2e-5,fast"], "--learning-rates must be positive numbers"),
        "bad labels": ([], "label '7' is not one of the mrpc labels"),
    }[case]
    if case in ("exists", "resume nothing"):
        out.mkdir()
    if case == "bad labels":
        lines = (data / "MRPC" / "train.tsv").read_text().splitlines()
        lines[3] = "7" + lines[3][1:]
        (data / "MRPC" / "train.tsv").write_text("\n".join(lines) + "\n")
    benchmark = "superglue" if case == "unknown benchmark" else "glue"
    code, stdout, stderr = run_cli(["benchmark", benchmark, tiny_classifier_dir, "--output", out, "--data-dir",
                                    data, *GRID, *extra], capsys)
    assert code == 2 and expected in stderr.strip().splitlines()[-1], stderr
    assert not out.exists() or not any(out.iterdir())


def test_a_head_that_cannot_take_the_task_is_refused_before_any_run(tiny_classifier_dir):
    """STS-B is a regression: a classifier whose head can only classify fails the check on two examples."""
    from datasets import Dataset
    from transformers import AutoTokenizer

    from hf_plm_ext import MacBertForSequenceClassification
    from hf_plm_ext.errors import UserInputError
    from hf_plm_ext.finetuning.benchmark import check_classifier

    tokenizer = AutoTokenizer.from_pretrained(tiny_classifier_dir)
    rows = Dataset.from_dict({"input_ids": [[2, 5, 6, 3], [2, 7, 3]], "attention_mask": [[1] * 4, [1] * 3],
                              "labels": [3.2, 1.0]})
    classifying = MacBertForSequenceClassification.from_pretrained(tiny_classifier_dir, num_labels=1,
                                                                   problem_type="single_label_classification",
                                                                   ignore_mismatched_sizes=True)
    with pytest.raises(UserInputError, match="stsb: the model's classification head cannot take this task"):
        check_classifier(classifying, tokenizer, rows, "stsb")
    regressing = MacBertForSequenceClassification.from_pretrained(tiny_classifier_dir, num_labels=1,
                                                                  problem_type="regression",
                                                                  ignore_mismatched_sizes=True)
    check_classifier(regressing, tokenizer, rows, "stsb")
    assert all(p.grad is None for p in regressing.parameters())  # the check leaves no gradients behind


def test_the_datasets_library_s_glue_gives_the_same_runs_as_the_download_s_files(tmp_path, shared_data,
                                                                                 tiny_classifier_dir, capsys,
                                                                                 monkeypatch):
    """``--dataset nyu-mll/glue``: the library's MRPC (its column names, a ClassLabel, ``idx``, a test split
    labelled -1), here made from the same rows as the files, gives the same results and submission."""
    import datasets

    data = glue_folder(shared_data, tmp_path, tasks=("MRPC",))

    def rows(split):
        lines = (data / "MRPC" / f"{split}.tsv").read_text().splitlines()[1:]
        fields = [line.split("\t") for line in lines]
        return {"sentence1": [f[3] for f in fields], "sentence2": [f[4] for f in fields],
                "label": [int(f[0]) for f in fields], "idx": list(range(len(fields)))}

    features = datasets.Features({"sentence1": datasets.Value("string"), "sentence2": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["not_equivalent", "equivalent"]),
                                  "idx": datasets.Value("int32")})
    test = {**rows("dev"), "label": [-1] * len(rows("dev")["idx"])}
    library_mrpc = datasets.DatasetDict({
        "train": datasets.Dataset.from_dict(rows("train"), features=features),
        "validation": datasets.Dataset.from_dict(rows("dev"), features=features),
        "test": datasets.Dataset.from_dict(test, features=features)})
    asked = []

    def load_dataset(name, config):
        asked.append((name, config))
        if config != "mrpc":
            raise FileNotFoundError(f"{name}/{config} is not in the cache")
        return library_mrpc

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    from_files, from_library = tmp_path / "files", tmp_path / "library"
    assert run_cli(["benchmark", "glue", tiny_classifier_dir, "--output", from_files, "--data-dir", data, *GRID],
                   capsys)[0] == 0
    code, _, stderr = run_cli(["benchmark", "glue", tiny_classifier_dir, "--output", from_library, "--dataset",
                               "nyu-mll/glue", *GRID], capsys)
    assert code == 0, stderr
    assert ("nyu-mll/glue", "cola") in asked  # every task tried; only MRPC is in this cache
    assert asked.count(("nyu-mll/glue", "mrpc")) == 1  # found and read once
    files_state, library_state = (json.loads((folder / "results.json").read_text())
                                  for folder in (from_files, from_library))
    assert [(r["lr"], r["seed"], r["score"]) for r in files_state["runs"]] == \
        [(r["lr"], r["seed"], r["score"]) for r in library_state["runs"]]
    with zipfile.ZipFile(from_files / "submission.zip") as one, zipfile.ZipFile(from_library / "submission.zip") as two:
        assert one.read("MRPC.tsv") == two.read("MRPC.tsv")
    code, _, stderr = run_cli(["benchmark", "glue", tiny_classifier_dir, "--output", tmp_path / "none", "--dataset",
                               "nyu-mll/glue", "--tasks", "rte", *GRID], capsys)
    assert code == 2 and "no 'rte' configuration in the datasets cache" in stderr


def test_the_library_s_label_names_map_onto_the_task_s_label_order():
    """CLUE's label names whatever the library's order; GLUE's order is the library's; -1 is a test row."""
    import datasets

    from hf_plm_ext.eval.library_datasets import label_text
    from hf_plm_ext.eval.tasks import get_task

    cmnli, mnli, stsb = get_task("clue", "cmnli"), get_task("glue", "mnli"), get_task("glue", "stsb")
    library_order = datasets.ClassLabel(names=["neutral", "entailment", "contradiction"])
    assert [label_text(cmnli, library_order, i) for i in (0, 1, 2)] == ["neutral", "entailment", "contradiction"]
    assert [label_text(mnli, datasets.ClassLabel(num_classes=3), i) for i in (0, 2)] == ["entailment",
                                                                                          "contradiction"]
    assert label_text(mnli, None, -1) is None and label_text(stsb, None, 3.25) == "3.25"


def test_an_adapter_benchmark_trains_only_the_adapter_and_keeps_only_it(tmp_path, shared_data, tiny_classifier_dir,
                                                                        capsys):
    """``--adapter lora``, as the adapter papers report GLUE: every run a LoRA adapter on MODEL; the kept run is an
    adapter folder, not a whole model."""
    data = glue_folder(shared_data, tmp_path, tasks=("MRPC",))
    out = tmp_path / "bench"
    code, _, stderr = run_cli(["benchmark", "glue", tiny_classifier_dir, "--output", out, "--data-dir", data,
                               "--adapter", "lora", "--seeds", "1", "--learning-rates", "1e-3", "--max_steps", "1",
                               "--max-seq-length", "32"], capsys)
    assert code == 0, stderr
    state = json.loads((out / "results.json").read_text())
    kept = Path(state["runs"][0]["model_dir"])
    assert (kept / "adapter_config.json").is_file() and not (kept / "model.safetensors").exists()


def _one_run_then_stopped(tmp_path, data, model, capsys, *extra):
    """A benchmark stopped (Ctrl-C) after its first run: ``(code, stderr, output folder)``."""
    from unittest import mock

    from hf_plm_ext.finetuning import benchmark

    run_one, calls = benchmark.run_one, []

    def first_run_only(*args, **kwargs):
        calls.append(1)
        if len(calls) > 1:
            raise KeyboardInterrupt
        return run_one(*args, **kwargs)

    out = tmp_path / "bench"
    with mock.patch("hf_plm_ext.finetuning.benchmark.run_one", first_run_only):
        code, _, stderr = run_cli(["benchmark", "glue", model, "--output", out, "--data-dir", data, *GRID, *extra],
                                  capsys)
    return code, stderr, out


@pytest.mark.parametrize("change", ["max_steps", "smaller data", "model", "max-seq-length"])
def test_a_resume_that_would_mix_runs_made_otherwise_is_refused_naming_what_differs(change, tmp_path, shared_data,
                                                                                    tiny_classifier_dir, capsys):
    import shutil

    data = glue_folder(shared_data, tmp_path, tasks=("MRPC",))
    model = tmp_path / "model"
    shutil.copytree(tiny_classifier_dir, model)
    code, stderr, out = _one_run_then_stopped(tmp_path, data, model, capsys)
    assert code == 130 and "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == (
        f"hf-plm-ext benchmark glue: interrupted; continue the benchmark with: hf-plm-ext benchmark glue "
        f"{model} --output {out} --data-dir {data} {' '.join(GRID)} --resume")
    state = json.loads((out / "results.json").read_text())
    assert len(state["runs"]) == 1 and state["settings"]["trainer:max_steps"] == 2

    extra, expected = [], None
    if change == "max_steps":
        extra, expected = ["--max_steps", "6"], "trainer:max_steps: 2 -> 6"
    elif change == "smaller data":
        smaller = glue_folder(shared_data, tmp_path / "smaller", tasks=("MRPC",), dev_rows=10)
        data, expected = smaller, "data:mrpc: 'sha256:"
    elif change == "model":  # trained further in place: the same folder, other weights
        import torch

        from hf_plm_ext import MacBertForSequenceClassification

        retrained = MacBertForSequenceClassification.from_pretrained(model)
        with torch.no_grad():
            retrained.classifier.weight.add_(0.1)
        retrained.save_pretrained(model)
        expected = "model: 'sha256:"
    else:
        extra, expected = ["--max-seq-length", "48"], "benchmark:max_seq_length: 32 -> 48"
    argv = [*GRID, *extra] if change != "max-seq-length" else [*GRID[:-4], "--max-seq-length", "48", *GRID[-2:]]
    code, _, stderr = run_cli(["benchmark", "glue", model, "--output", out, "--data-dir", data, *argv, "--resume"],
                              capsys)
    last = stderr.strip().splitlines()[-1]
    assert code == 2 and "was run with other settings" in last and expected in last, stderr[-2000:]
    if change != "model":
        assert "; model:" not in last and "settings, and its runs would not compare with new ones: model" not in \
            last  # only what differs is named
    assert json.loads((out / "results.json").read_text()) == state  # nothing added


def test_the_plan_says_each_folder_it_skips_and_why(tmp_path, shared_data, tiny_classifier_dir, capsys):
    data = glue_folder(shared_data, tmp_path, tasks=("MRPC",))
    (data / "RTE").mkdir()  # a task folder with its dev split only
    (data / "RTE" / "dev.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\tentailment\n")
    (data / "extras").mkdir()  # not a task
    code, stdout, stderr = run_cli(["benchmark", "glue", tiny_classifier_dir, "--output", tmp_path / "plan",
                                    "--data-dir", data, *GRID, "--dry-run"], capsys)
    assert code == 0, stderr
    assert f"skipping {data / 'RTE'}/: no train.tsv (a rte folder without its training split)" in stdout
    assert f"skipping {data / 'extras'}/: not a GLUE task folder" in stdout
    assert "mrpc: 60 training examples" in stdout and "4 runs in all" in stdout


def test_the_shared_clue_folder_plans_tnews_and_says_why_not_the_others(tmp_path, shared_data, tiny_classifier_dir,
                                                                         capsys):
    code, stdout, stderr = run_cli(["benchmark", "clue", tiny_classifier_dir, "--output", tmp_path / "plan",
                                    "--data-dir", shared_data / "clue", *GRID, "--dry-run", "--ignore_mismatched_sizes"],
                                   capsys)
    assert code == 0, stderr
    skipped = [line for line in stdout.splitlines() if line.startswith("skipping")]
    assert any("afqmc" in line and "no train.json" in line for line in skipped), stdout
    assert any("fewclue/: not a CLUE task folder" in line for line in skipped), stdout
    assert "tnews:" in stdout
