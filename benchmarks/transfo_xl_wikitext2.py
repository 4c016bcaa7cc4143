"""The Transformer-XL paper's claim, small: segment memory lowers perplexity, and a longer memory at
evaluation lowers it further (relative positions generalise past the training span).

One Transformer-XL (``--size small``: 4 layers x 256, 4 heads x 64, FFN 1024; adaptive softmax
over cutoffs 2000/10000) is trained on WikiText-2 train (the standard word-level split and its
33,278-word vocabulary) with ``tgt_len`` = ``mem_len``, then the same checkpoint is evaluated
on the test split with ``mem_len`` 0, = ``tgt_len`` and 4 x ``tgt_len`` (every test token
counted once, one stream).

    .venv/bin/python benchmarks/transfo_xl_wikitext2.py [--steps 3000] [--tgt-len 64] [--work DIR]

Writes benchmarks/results/transfo_xl_wikitext2.json and .md (with every command).
"""

import argparse
import json
import os
import tempfile
from pathlib import Path

from macbert_small_scale import RESULTS, run

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("HF_PLM_EXT_SHARED_DATA", ROOT.parent / "shared" / "data"))
WT2 = DATA / "corpus" / "en" / "wikitext-2"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000, help="training steps (batch 16 x tgt_len tokens)")
    parser.add_argument("--tgt-len", type=int, default=64)
    parser.add_argument("--work", help="working folder (default: a new temporary one)")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="transfo-xl-wt2-"))
    work.mkdir(parents=True, exist_ok=True)
    log = []
    tokenizer, model = work / "wt2-words", work / "transfo-xl-wt2"
    run(["tokenizer", "train", "--corpus", str(WT2 / "wiki.train.tokens"), "--kind", "words", "--vocab-size",
         "100000", "--min-frequency", "1", "--no-lowercase", "--output", str(tokenizer)], log)
    length = str(args.tgt_len)
    run(["pretrain", "transfo-xl", "--corpus", str(WT2 / "wiki.train.tokens"), "--validation_corpus",
         str(WT2 / "wiki.valid.tokens"), "--tokenizer", str(tokenizer), "--size", "small", "--cutoffs", "2000,10000",
         "--tgt-len", length, "--mem-len", length, "--per_device_train_batch_size", "16",
         "--per_device_eval_batch_size", "16", "--max_steps", str(args.steps), "--learning_rate", "1e-3",
         "--lr_scheduler_type", "cosine", "--warmup_steps", "0.05", "--max_grad_norm", "0.25", "--logging_steps",
         "100", "--save_strategy", "no", "--seed", "0", "--disable_tqdm", "true", "--output", str(model)], log)
    training = json.loads((model / "pretrain_results.json").read_text())
    evaluations = {}
    for mem_len in (0, args.tgt_len, 4 * args.tgt_len):
        output = work / f"test-mem{mem_len}.json"
        run(["eval", "lm", "--model", str(model), "--corpus", str(WT2 / "wiki.test.tokens"), "--tgt-len", length,
             "--mem-len", str(mem_len), "--output", str(output)], log)
        evaluations[mem_len] = json.loads(output.read_text())

    RESULTS.mkdir(parents=True, exist_ok=True)
    summary = {"steps": args.steps, "tgt_len": args.tgt_len, "num_parameters": training["num_parameters"],
               "train_seconds": training["train_metrics"]["train_runtime"],
               "valid_perplexity_during_training": training["final_eval_perplexity"],
               "test": {str(k): v for k, v in evaluations.items()}, "commands": log}
    (RESULTS / "transfo_xl_wikitext2.json").write_text(json.dumps(summary, indent=2) + "\n")
    table = [f"Transformer-XL 4 x 256 ({training['num_parameters']:,} parameters), {args.steps} steps of 16 x "
             f"{args.tgt_len} tokens on WikiText-2 train ({training['train_metrics']['train_runtime']:.0f} s), "
             f"trained with mem_len {args.tgt_len}.", "",
             "| evaluation mem_len | test perplexity | test tokens |", "|---:|---:|---:|"]
    for mem_len, result in evaluations.items():
        table.append(f"| {mem_len} | {result['perplexity']:.2f} | {result['tokens']:,} |")
    text = "\n".join(table) + "\n\nCommands (seconds):\n\n" + "\n".join(
        f"    {entry['command']}    # {entry['seconds']} s" for entry in log) + "\n"
    (RESULTS / "transfo_xl_wikitext2.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
