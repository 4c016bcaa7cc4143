"""Pre-training data at corpus scale (issue 67): ``corpus prepare`` + ``pretrain --data`` against today's
``--corpus`` path and run_mlm.py's preprocessing, on the same text, one thing at a time.

    .venv/bin/python benchmarks/corpus_scale.py --megabytes 100 --out benchmarks/results/corpus_scale

Measures (each in a fresh process unless said):
- tokenising MB/s per process: ``corpus prepare --workers 1`` and ``--workers 2`` (wall time of the command);
  today's ``--corpus`` path (``token_blocks``: one ``datasets.map`` process); run_mlm.py's preprocessing (its two
  ``datasets.map`` calls, tokenise then ``group_texts``, ``num_proc=2``, as ``--preprocessing_num_workers 2``;
  reproduced here, the script is not vendored);
- bytes per token on disk: the store's files against the Arrow cache files of the two ``datasets`` paths;
- time from process start to the first training step, and the process's peak RSS then, for a 10 MB store and a
  1 GB store (the 1 GB store is the big store's shards listed again until it holds 1 GB: tokenising 2 GB of text
  does not fit this benchmark's 10 minutes; what the reader does depends only on the sizes);
- the data side's share of a tiny model's step (time in the Trainer's ``get_batch_samples`` / step time);
- resume time (process start to the first step after the resume) at step 10 and at step 10,000 (the 10,000-step
  checkpoint is the 10-step one with its ``trainer_state.json`` step count set to 10,000: the resume's cost is in
  skipping that many batches).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "corpus"
PYTHON = sys.executable
TINY = "hidden_size=64,num_hidden_layers=2,num_attention_heads=2,intermediate_size=128"

# a runner that stops the process at its first training step (after `--resume`: the first step trained) and
# prints the seconds since the process started and the peak RSS then
FIRST_STEP = r"""
import json, os, resource, sys, time
from hf_plm_ext.training.trainer import SubLossTrainer
stop_at, train = int(os.environ.get("STOP_AT_STEP", "-1")), SubLossTrainer.training_step
def first_step(self, *args, **kwargs):
    if self.state.global_step < stop_at:  # (train on to a checkpoint first)
        return train(self, *args, **kwargs)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps({"seconds": time.time() - float(os.environ["STARTED_AT"]), "peak_rss_mb": peak,
                                  "global_step": self.state.global_step}), flush=True)
    os._exit(0)
SubLossTrainer.training_step = first_step
from hf_plm_ext_cli.main import main
main(sys.argv[1:])
"""

# the data side's share of a step: time in get_batch_samples against the whole training loop
DATA_SHARE = r"""
import json, sys, time
from transformers import Trainer
spent = {"data": 0.0, "evaluation": 0.0}
def timing(name, into):
    method = getattr(Trainer, name)
    def timed(self, *args, **kwargs):
        start = time.perf_counter()
        result = method(self, *args, **kwargs)
        spent[into] += time.perf_counter() - start
        return result
    setattr(Trainer, name, timed)
timing("get_batch_samples", "data")
timing("evaluate", "evaluation")
train = Trainer.train
def timed_train(self, *args, **kwargs):
    start = time.perf_counter()
    result = train(self, *args, **kwargs)
    print("RESULT " + json.dumps({"data_seconds": spent["data"],
                                  "train_seconds": time.perf_counter() - start - spent["evaluation"]}), flush=True)
    return result
Trainer.train = timed_train
from hf_plm_ext_cli.main import main
main(sys.argv[1:])
"""

# run_mlm.py's preprocessing: tokenise with num_proc, then group_texts with num_proc (its block size)
RUN_MLM = r"""
import json, sys, time
from datasets import load_dataset
from transformers import AutoTokenizer
path, tokenizer_dir, cache = sys.argv[1:4]
start = time.perf_counter()
tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
raw = load_dataset("text", data_files={"train": [path]}, cache_dir=cache)["train"]
tokenized = raw.map(lambda b: tokenizer(b["text"], return_special_tokens_mask=True), batched=True, num_proc=2,
                    remove_columns=["text"])
block = 128
def group_texts(examples):
    joined = {k: sum(examples[k], []) for k in examples}
    total = len(joined["input_ids"]) // block * block
    return {k: [t[i:i + block] for i in range(0, total, block)] for k, t in joined.items()}
grouped = tokenized.map(group_texts, batched=True, num_proc=2)
tokens = sum(len(ids) for ids in tokenized["input_ids"])
print("RESULT " + json.dumps({"seconds": time.perf_counter() - start, "tokens": tokens}), flush=True)
"""

TEXT_PATH = r"""
import json, sys, time
from transformers import AutoTokenizer
from hf_plm_ext.data.token_blocks import token_blocks
path, tokenizer_dir = sys.argv[1:3]
start = time.perf_counter()
blocks = token_blocks([path], AutoTokenizer.from_pretrained(tokenizer_dir), 128)
print("RESULT " + json.dumps({"seconds": time.perf_counter() - start, "blocks": len(blocks["train"])}), flush=True)
"""


def run(argv, code=None, env=None, timeout=900) -> tuple[float, dict]:
    """Wall seconds of a fresh process and its RESULT line (if any)."""
    environment = {**os.environ, "STARTED_AT": repr(time.time()), "TOKENIZERS_PARALLELISM": "false", **(env or {})}
    command = [PYTHON, "-c", code, *map(str, argv)] if code else [PYTHON, "-m", "hf_plm_ext_cli", *map(str, argv)]
    started = time.perf_counter()
    environment["STARTED_AT"] = repr(time.time())
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environment, cwd=ROOT)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{argv[:3]} failed:\n{done.stderr[-3000:]}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    return seconds, json.loads(lines[-1][7:]) if lines else {}


def make_text(folder: Path, megabytes: int) -> Path:
    """``megabytes`` MB of English book text: the shared Gutenberg books, repeated."""
    books = "".join(p.read_text(encoding="utf-8-sig") for p in sorted((SHARED / "en" / "gutenberg").glob("*.txt")))
    path = folder / f"text-{megabytes}mb.txt"
    target = megabytes << 20
    with open(path, "w", encoding="utf-8") as stream:
        written = 0
        while written < target:
            piece = books[: target - written]
            stream.write(piece)
            written += len(piece.encode("utf-8"))
    return path


def folder_bytes(folder: Path, suffixes=None) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()
               and (suffixes is None or p.name.endswith(suffixes)))


def inflated_store(store: Path, out: Path, target_bytes: int) -> Path:
    """``store``'s shards listed again (hard links) until the store holds ``target_bytes`` of ids."""
    manifest = json.loads((store / "store.json").read_text())
    out.mkdir()
    shards, size, copy = [], 0, 0
    while size < target_bytes:
        for entry in manifest["shards"]:
            name = f"{len(shards):05d}.ds"
            for suffix in ("", ".index"):
                os.link(store / f"{entry['name']}{suffix}", out / f"{name}{suffix}")
            shards.append({**entry, "name": name})
            size += (store / entry["name"]).stat().st_size
        copy += 1
    manifest.update(shards=shards, tokens=sum(s["tokens"] for s in shards),
                    documents=sum(s["documents"] for s in shards))
    (out / "store.json").write_text(json.dumps(manifest))
    return out


EVAL = ["--max_eval_samples", 64]  # the initial evaluation (before step 1) costs what it evaluates, not the corpus


def first_step(store: Path, tokenizer: Path, out: Path, *extra) -> dict:
    _, result = run(["pretrain", "mlm", "--data", store, "--tokenizer", tokenizer, "--config_overrides", TINY,
                     "--max_seq_length", 128, "--output", out, "--max_steps", 10, "--per_device_train_batch_size",
                     8, "--disable_tqdm", "true", "--report_to", "none", *EVAL, *extra], code=FIRST_STEP)
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--out", default="benchmarks/results/corpus_scale")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="corpus-scale-"))
    results = {"megabytes": args.megabytes, "machine": f"{os.cpu_count()} cores"}
    try:
        tokenizer = work / "tokenizer"
        subprocess.run([PYTHON, "-m", "hf_plm_ext_cli", "tokenizer", "train", "--corpus",
                        *map(str, sorted((SHARED / "en" / "gutenberg").glob("*.txt"))), "--vocab-size", "16000",
                        "--output", str(tokenizer)], check=True, capture_output=True)
        text = make_text(work, args.megabytes)
        small_text = make_text(work, 10)
        megabytes = text.stat().st_size / 1e6

        # 1. tokenising throughput
        for workers in (1, 2):
            seconds, _ = run(["corpus", "prepare", "--corpus", text, "--tokenizer", tokenizer, "--output",
                              work / f"store-{workers}", "--workers", workers, "--piece-megabytes", 8])
            results[f"prepare_{workers}_workers_seconds"] = seconds
            results[f"prepare_{workers}_workers_mb_per_s"] = megabytes / seconds
            task_seconds = json.loads((work / f"store-{workers}" / "store.json").read_text())["task_seconds"]
            results[f"prepare_{workers}_workers_mb_per_task_second"] = megabytes / task_seconds
        seconds, _ = run(["corpus", "prepare", "--corpus", text, "--tokenizer", tokenizer, "--output",
                          work / "store-paragraphs", "--workers", 2, "--piece-megabytes", 8, "--documents",
                          "paragraphs"])
        paragraphs = json.loads((work / "store-paragraphs" / "store.json").read_text())
        results["store_bytes_per_token_paragraphs"] = folder_bytes(work / "store-paragraphs",
                                                                   (".ds", ".ds.index")) / paragraphs["tokens"]
        store = work / "store-2"
        manifest = json.loads((store / "store.json").read_text())
        seconds, _ = run([text, tokenizer], code=TEXT_PATH, env={"HF_DATASETS_CACHE": str(work / "text-cache")})
        results["text_path_seconds"], results["text_path_mb_per_s"] = seconds, megabytes / seconds
        seconds, run_mlm = run([text, tokenizer, work / "run-mlm-cache"], code=RUN_MLM)
        results["run_mlm_seconds"], results["run_mlm_mb_per_s"] = seconds, megabytes / seconds

        # 2. bytes per token
        tokens = manifest["tokens"]
        results["tokens"] = tokens
        results["store_bytes_per_token"] = folder_bytes(store, (".ds", ".ds.index")) / tokens
        results["text_path_cache_bytes_per_token"] = folder_bytes(work / "text-cache", ".arrow") / tokens
        results["run_mlm_cache_bytes_per_token"] = folder_bytes(work / "run-mlm-cache", ".arrow") / tokens

        # 3. first step and peak RSS: a 10 MB store and a 1 GB one
        run(["corpus", "prepare", "--corpus", small_text, "--tokenizer", tokenizer, "--output", work / "store-10mb"])
        big = inflated_store(store, work / "store-1gb", 1 << 30)
        for name, folder in (("10mb", work / "store-10mb"), ("1gb", big)):
            result = first_step(folder, tokenizer, work / f"first-{name}")
            results[f"first_step_seconds_{name}"] = result["seconds"]
            results[f"first_step_peak_rss_mb_{name}"] = result["peak_rss_mb"]
            results[f"store_bytes_{name}"] = folder_bytes(folder, ".ds")
        _, result = run(["pretrain", "mlm", "--corpus", small_text, "--tokenizer", tokenizer, "--config_overrides",
                         TINY, "--max_seq_length", 128, "--output", work / "first-text", "--max_steps", 10,
                         "--per_device_train_batch_size", 8, "--disable_tqdm", "true", "--report_to", "none", *EVAL],
                        code=FIRST_STEP, env={"HF_DATASETS_CACHE": str(work / "first-text-cache")})
        results["first_step_seconds_text_path_10mb"] = result["seconds"]

        # 4. the data side's share of a tiny model's step
        _, result = run(["pretrain", "mlm", "--data", big, "--tokenizer", tokenizer, "--config_overrides", TINY,
                         "--max_seq_length", 128, "--output", work / "share", "--max_steps", 200,
                         "--per_device_train_batch_size", 32, "--disable_tqdm", "true", "--report_to", "none",
                         *EVAL], code=DATA_SHARE)
        results["data_share_of_step"] = result["data_seconds"] / result["train_seconds"]

        # 5. resume at step 10 and at step 10,000
        checkpoints = work / "resume.checkpoints"
        run(["pretrain", "mlm", "--data", big, "--tokenizer", tokenizer, "--config_overrides", TINY,
             "--max_seq_length", 128, "--output", work / "resume-done", "--save_steps", 10,
             "--per_device_train_batch_size", 8, "--disable_tqdm", "true", "--report_to", "none",
             "--checkpoints", checkpoints, "--max_steps", 20, *EVAL], code=FIRST_STEP, env={"STOP_AT_STEP": "11"})
        ten = checkpoints / "checkpoint-10"
        far = work / "far.checkpoints"
        shutil.copytree(ten, far / "checkpoint-10000")
        state = json.loads((far / "checkpoint-10000" / "trainer_state.json").read_text())
        state["global_step"], state["max_steps"] = 10000, 10010
        (far / "checkpoint-10000" / "trainer_state.json").write_text(json.dumps(state))
        for name, folder, steps in (("10", checkpoints, 20), ("10000", far, 10010)):
            result = first_step(big, tokenizer, work / f"resumed-{name}", "--checkpoints", folder,
                                "--resume_from_checkpoint", "last", "--max_steps", steps)
            assert result["global_step"] == int(name), result
            results[f"resume_seconds_step_{name}"] = result["seconds"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(f"{args.out}.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
