"""Small-scale check of MacBERT's idea: correction masking vs plain [MASK], same budget, on Chinese.

One WordPiece tokenizer trained on ../shared/data/corpus/zh; two tiny MacBERT models pre-trained
for the same steps, seed and data (jieba whole words, N-grams, MLM + SOP) that differ only in
``--masking``: ``correction`` (Cilin similar words) or ``mask``; each fine-tuned on TNEWS and on
AFQMC with the same settings. ../shared/data has only AFQMC's dev set, so it is split once
(seeded) into 3,316 training and 1,000 evaluation pairs.

    .venv/bin/python benchmarks/macbert_small_scale.py [--steps 2000] [--work DIR]

Runs the ``hf-plm-ext`` CLI for every step (the commands are printed and written to the
results) and writes benchmarks/results/macbert_small_scale.json and .md.
"""

import argparse
import json
import random
import tempfile
from pathlib import Path

from _common import DATA, RESULTS, run_cli

ZH_CORPUS = [str(DATA / "corpus" / "zh" / name) for name in ("zhwiki_bert_sampled.txt",
                                                             "CLUECorpusSmall_bert_sampled.txt")]
TINY = "hidden_size=128,num_hidden_layers=2,num_attention_heads=2,intermediate_size=512"




def split_afqmc(work: Path, eval_size=1000, seed=0):
    lines = (DATA / "clue" / "afqmc" / "dev.json").read_text(encoding="utf-8").splitlines()
    random.Random(seed).shuffle(lines)
    folder = work / "afqmc"
    folder.mkdir()
    (folder / "train.json").write_text("\n".join(lines[eval_size:]) + "\n", encoding="utf-8")
    (folder / "dev.json").write_text("\n".join(lines[:eval_size]) + "\n", encoding="utf-8")
    return folder


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000, help="pre-training steps per model")
    parser.add_argument("--finetune-epochs", type=float, default=3)
    parser.add_argument("--work", help="working folder (default: a new temporary one)")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="macbert-small-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    log = {}

    tokenizer = work / "zh-tokenizer"
    run_cli(["tokenizer", "train", "--corpus", *ZH_CORPUS, "--vocab-size", "8000", "--output", str(tokenizer)], log)
    afqmc = split_afqmc(work)
    pretrain_common = ["--corpus", *ZH_CORPUS, "--tokenizer", str(tokenizer), "--segmenter", "jieba",
                       "--config_overrides", TINY, "--max_seq_length", "128", "--max_steps", str(args.steps),
                       "--per_device_train_batch_size", "32", "--learning_rate", "1e-3",
                       "--warmup_steps", "0.1", "--weight_decay", "0.01", "--logging_steps", "50", "--seed", "0"]
    finetune_common = ["--num_train_epochs", str(args.finetune_epochs), "--per_device_train_batch_size", "32",
                       "--per_device_eval_batch_size", "128",
                       "--learning_rate", "1e-4", "--warmup_steps", "0.1", "--seed", "0"]
    results = {}
    for masking in ("correction", "mask"):
        model = work / f"pretrained-{masking}"
        extra = ["--similar_words", "cilin"] if masking == "correction" else []
        run_cli(["pretrain", "macbert", *pretrain_common, "--masking", masking, *extra, "--output", str(model)], log)
        pretrained = json.loads((model / "pretrain_results.json").read_text())
        results[masking] = {"pretrain_final_eval_loss": pretrained["final_eval_loss"]}
        for task, files in (("tnews", ["--data-dir", str(DATA / "clue" / "tnews"), "--max_seq_length", "64"]),
                            ("afqmc", ["--train-file", str(afqmc / "train.json"), "--validation-file",
                                       str(afqmc / "dev.json"), "--max_seq_length", "128"])):
            output = work / f"{task}-{masking}"
            run_cli(["finetune", "clue", "--task", task, "--model", str(model), *files, *finetune_common,
                     "--output", str(output)], log)
            evaluated = json.loads((output / "eval_results.json").read_text())["results"][0]
            results[masking][task] = evaluated["metrics"]["accuracy"]

    RESULTS.mkdir(parents=True, exist_ok=True)
    majority = {"tnews": majority_share(DATA / "clue" / "tnews" / "dev.json"),
                "afqmc": majority_share(afqmc / "dev.json")}
    summary = {"pretrain_steps": args.steps, "model": TINY, "dev_accuracy": results,
               "majority_class_accuracy": majority, "commands": list(log.values())}
    (RESULTS / "macbert_small_scale.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    table = ["| pre-training masking | held-out pre-training loss | TNEWS dev acc | AFQMC held-out acc |",
             "|---|---:|---:|---:|"]
    for masking, row in results.items():
        table.append(f"| {masking} | {row['pretrain_final_eval_loss']:.3f} | {row['tnews']:.4f} | {row['afqmc']:.4f} |")
    table.append(f"| (majority class) | | {majority['tnews']:.4f} | {majority['afqmc']:.4f} |")
    text = "\n".join(table) + "\n\nCommands (seconds):\n\n" + "\n".join(
        f"    {entry['command']}    # {entry['seconds']} s" for entry in log.values()) + "\n"
    (RESULTS / "macbert_small_scale.md").write_text(text)
    print(text)


def majority_share(path):
    labels = [json.loads(line)["label"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return max(labels.count(label) for label in set(labels)) / len(labels)


if __name__ == "__main__":
    main()
