"""The ELECTRA paper's claim, small: at equal pre-training wall-clock, an RTD discriminator
fine-tunes better than an MLM-only encoder of the same size.

One WordPiece tokenizer on WikiText-2 train + the Gutenberg books of ../shared/data/corpus/en;
a short calibration run measures each objective's seconds per step on this machine, so that
each arm then gets ``--minutes`` of pre-training (its own number of steps, the full
learning-rate schedule); the ELECTRA discriminator is exported as a stock ``electra``
checkpoint; both encoders are fine-tuned on SST-2 (a seeded subset of the training set) and
MRPC with the same settings and scored on the dev sets.

    .venv/bin/python benchmarks/electra_vs_mlm.py [--minutes 10] [--work DIR]

Writes benchmarks/results/electra_vs_mlm.json and .md (with every command).
"""

import argparse
import json
import os
import tempfile
from pathlib import Path

from macbert_small_scale import RESULTS, run

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("HF_PLM_EXT_SHARED_DATA", ROOT.parent / "shared" / "data"))
EN = DATA / "corpus" / "en"
CORPUS = [str(EN / "wikitext-2" / "wiki.train.tokens"), *sorted(str(p) for p in (EN / "gutenberg").glob("*.txt"))]
# The MLM encoder has the discriminator's shape: ELECTRA "tiny" is 2 layers x 128, 2 heads, FFN 512.
MLM_ENCODER = "hidden_size=128,num_hidden_layers=2,num_attention_heads=2,intermediate_size=512"


def pretrain_command(objective, tokenizer, steps, output):
    shape = ["--size", "tiny"] if objective == "electra" else ["--model_type", "macbert", "--config_overrides",
                                                               MLM_ENCODER]
    return ["pretrain", objective, "--corpus", *CORPUS, "--tokenizer", str(tokenizer), *shape,
            "--max_seq_length", "128", "--max_steps", str(steps), "--per_device_train_batch_size", "32",
            "--learning_rate", "1e-3", "--warmup_steps", "0.1", "--weight_decay", "0.01", "--logging_steps", "50",
            "--save_strategy", "no", "--seed", "0", "--output", str(output)]


def seconds_per_step(output):
    metrics = json.loads((Path(output) / "pretrain_results.json").read_text())["train_metrics"]
    return 1.0 / metrics["train_steps_per_second"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="pre-training wall-clock per arm")
    parser.add_argument("--sst2-train-samples", type=int, default=20000)
    parser.add_argument("--work", help="working folder (default: a new temporary one)")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="electra-vs-mlm-"))
    work.mkdir(parents=True, exist_ok=True)
    log = []

    tokenizer = work / "en-tokenizer"
    run(["tokenizer", "train", "--corpus", *CORPUS, "--vocab-size", "8000", "--output", str(tokenizer)], log)
    arms = {"electra": "electra", "mlm": "mlm"}
    steps = {}
    for arm, objective in arms.items():
        calibration = work / f"calibrate-{arm}"
        run(pretrain_command(objective, tokenizer, 40, calibration), log)
        steps[arm] = max(10, int(args.minutes * 60 / seconds_per_step(calibration)))

    finetune_common = ["--num_train_epochs", "3", "--per_device_train_batch_size", "32",
                       "--per_device_eval_batch_size", "128", "--learning_rate", "1e-4", "--warmup_steps", "0.1",
                       "--weight_decay", "0.01", "--seed", "0", "--max_seq_length", "128"]
    results = {}
    for arm, objective in arms.items():
        pretrained = work / f"pretrained-{arm}"
        run(pretrain_command(objective, tokenizer, steps[arm], pretrained), log)
        record = json.loads((pretrained / "pretrain_results.json").read_text())
        encoder = pretrained
        if arm == "electra":
            encoder = work / "discriminator"
            run(["export", "electra", "--part", "discriminator", str(pretrained), str(encoder)], log)
        results[arm] = {"pretrain_steps": steps[arm], "pretrain_seconds": record["train_metrics"]["train_runtime"]}
        for task, extra in (("sst2", ["--max_train_samples", str(args.sst2_train_samples), "--num_train_epochs", "1"]),
                            ("mrpc", [])):
            output = work / f"{task}-{arm}"
            run(["finetune", "glue", "--task", task, "--model", str(encoder), "--data-dir",
                 str(DATA / "glue" / ("SST-2" if task == "sst2" else "MRPC")), *finetune_common, *extra,
                 "--output", str(output)], log)
            results[arm][task] = json.loads((output / "eval_results.json").read_text())["results"][0]["metrics"]

    RESULTS.mkdir(parents=True, exist_ok=True)
    summary = {"minutes_per_arm": args.minutes, "results": results, "commands": log}
    (RESULTS / "electra_vs_mlm.json").write_text(json.dumps(summary, indent=2) + "\n")
    table = ["| pre-training (2 x 128 encoder) | steps | seconds | SST-2 dev acc | MRPC dev F1 | MRPC dev acc |",
             "|---|---:|---:|---:|---:|---:|"]
    for arm, row in results.items():
        table.append(f"| {arm} | {row['pretrain_steps']} | {row['pretrain_seconds']:.0f} | "
                     f"{row['sst2']['accuracy']:.4f} | {row['mrpc']['f1']:.4f} | {row['mrpc']['accuracy']:.4f} |")
    text = "\n".join(table) + "\n\nCommands (seconds):\n\n" + "\n".join(
        f"    {entry['command']}    # {entry['seconds']} s" for entry in log) + "\n"
    (RESULTS / "electra_vs_mlm.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
