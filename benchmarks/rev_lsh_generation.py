"""Issue 21: generation from the RevLSHCache vs recomputing the prefix (``use_cache=False``), in one process.

A causal ``RevLSHConfig.from_size("small")`` (6 layers: local / LSH alternating, d 256, chunks 64, hash_seed 0,
random weights), greedy, batch 1: ``--prompt`` tokens, then ``--new`` tokens. Reported: seconds for each way
(alternating, median of ``--rounds``), their ratio, and how many of the generated tokens agree (full and local
layers decode exactly; below an LSH layer the cache keeps earlier positions as they were, see ``RevLSHCache``),
also for the same model with full attention in place of LSH.

    .venv/bin/python benchmarks/rev_lsh_generation.py --out benchmarks/results/rev_lsh_generation
"""

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from hf_plm_ext import RevLSHConfig, RevLSHForCausalLM


def timed_generate(model, prompt, new, use_cache):
    started = time.perf_counter()
    with torch.no_grad():
        out = model.generate(prompt, max_new_tokens=new, min_new_tokens=new, do_sample=False, use_cache=use_cache)
    return time.perf_counter() - started, out[0, prompt.shape[1]:]


def measure(pattern, args):
    torch.manual_seed(0)
    config = RevLSHConfig.from_size("small", vocab_size=320, is_decoder=True, hash_seed=0, num_buckets=16,
                                    attn_layers=pattern, max_position_embeddings=args.prompt + args.new,
                                    pad_token_id=None, eos_token_id=None)
    model = RevLSHForCausalLM(config).eval()
    prompt = torch.randint(5, 320, (1, args.prompt), generator=torch.Generator().manual_seed(1))
    timings = {True: [], False: []}
    for _ in range(args.rounds):
        for use_cache in (True, False):
            seconds, tokens = timed_generate(model, prompt, args.new, use_cache)
            timings[use_cache].append(seconds)
            if use_cache:
                cached = tokens
            else:
                recomputed = tokens
    cache_s, recompute_s = statistics.median(timings[True]), statistics.median(timings[False])
    return {"attn_layers": pattern, "cached_seconds": round(cache_s, 3), "recomputed_seconds": round(recompute_s, 3),
            "speedup": round(recompute_s / cache_s, 2),
            "tokens_agreeing": int((cached == recomputed).sum()), "tokens": args.new}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/rev_lsh_generation")
    args = parser.parse_args()
    results = [measure(["local", "lsh"] * 3, args), measure(["local", "full"] * 3, args)]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"arguments": vars(args), "results": results}, indent=1) + "\n")
    rows = ["| layers | cached (s) | recomputed (s) | speed-up | generated tokens agreeing |", "|---|---:|---:|---:|---:|"]
    for r in results:
        rows.append(f"| {' / '.join(r['attn_layers'][:2])} x 3 | {r['cached_seconds']} | {r['recomputed_seconds']} | "
                    f"{r['speedup']}x | {r['tokens_agreeing']} / {r['tokens']} |")
    out.with_suffix(".md").write_text("\n".join(rows) + "\n")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
