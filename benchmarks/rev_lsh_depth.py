"""Issue 21, benchmark 2: activation memory and step time of 6 / 12 / 24 reversible layers against the same layers
without the reversible function (``reversible=False``).

d_model 256 per half, 4 heads x 64, FFN 1024, LSH layers (2 hashes, chunks of 64), n = 1024, batch 1, forward +
backward of ``last_hidden_state.sum()``, no optimizer, as workload 3 of ../shared/notes/peers.md. Every point runs in
a fresh process; activation peak = peak RSS growth over the first step minus the fp32 gradient bytes; time = median
of ``--repeats`` later steps.

    .venv/bin/python benchmarks/rev_lsh_depth.py --out benchmarks/results/rev_lsh_depth
    .venv/bin/python benchmarks/rev_lsh_depth.py --malloc-mmap-threshold 65536 --out benchmarks/results/rev_lsh_depth_mmap

With glibc's defaults freed blocks stay in the heap, so peak RSS also counts memory that was live at some point and
then reused or fragmented; ``--malloc-mmap-threshold`` (``MALLOC_MMAP_THRESHOLD_`` for the point processes) gives
blocks above it back at once, so RSS follows the live tensors more closely (and steps are slower).

``--device cuda --length N``: on the GPU, in one process (float32, TF32 off): activation peak = the peak of
``torch.cuda.max_memory_allocated`` over a step (the gradients set to None before it) above what was allocated
before it, minus the fp32 gradient bytes;
time = median of ``--repeats`` steps, the two stacks alternating, with the median per-pair ratio.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from peak_rss import peak_rss_growth

DEPTHS = (6, 12, 24)


def build(reversible, depth, length=1024):
    import torch

    from hf_plm_ext import RevLSHConfig, RevLSHModel

    torch.manual_seed(0)
    config = RevLSHConfig(vocab_size=320, hidden_size=256, num_attention_heads=4, attention_head_size=64,
                          feed_forward_size=1024, attn_layers=["lsh"] * depth, num_hashes=2, lsh_attn_chunk_length=64,
                          max_position_embeddings=length, reversible=reversible, hidden_dropout_prob=0.0,
                          lsh_attention_probs_dropout_prob=0.0)
    return RevLSHModel(config).train()


def paired(depth, repeats):
    """The reversible and the plain stack (the same weights) in one process, their steps alternating after a
    warm-up step each: each one's median step and the median per-pair ratio (reversible over plain)."""
    import torch

    models = [build(True, depth), build(False, depth)]
    ids = torch.randint(0, 320, (1, 1024))
    times = [[], []]
    for repeat in range(repeats + 1):
        for index, model in enumerate(models):
            model.zero_grad(set_to_none=False)
            started = time.perf_counter()
            model(ids).last_hidden_state.sum().backward()
            if repeat:
                times[index].append(1000 * (time.perf_counter() - started))
    ratios = [first / second for first, second in zip(*times)]
    return {"layers": depth, "ms": [round(statistics.median(t), 1) for t in times],
            "ratio": round(statistics.median(ratios), 3), "ratios": [round(r, 3) for r in ratios]}


def cuda_points(depth, length, repeats):
    """Both stacks on the GPU in this process: their activation peaks, median steps and per-pair ratio."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    models = {reversible: build(reversible, depth, length).cuda() for reversible in (True, False)}
    ids = torch.randint(0, 320, (1, length), device="cuda")

    def step(model):
        model(ids).last_hidden_state.sum().backward()

    activation_bytes = {}
    for reversible, model in models.items():
        step(model)  # warm-up
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start_bytes = torch.cuda.memory_allocated()
        step(model)
        torch.cuda.synchronize()
        gradient_bytes = sum(p.numel() * 4 for p in model.parameters())
        activation_bytes[reversible] = torch.cuda.max_memory_allocated() - start_bytes - gradient_bytes
    times = {True: [], False: []}
    for _ in range(repeats):
        for reversible, model in models.items():
            started = time.perf_counter()
            step(model)
            torch.cuda.synchronize()
            times[reversible].append(1000 * (time.perf_counter() - started))
    ratio = statistics.median(first / second for first, second in zip(times[True], times[False]))
    return [{"reversible": reversible, "layers": depth, "length": length, "device": "cuda",
             "ms": statistics.median(times[reversible]), "all_ms": [round(t, 2) for t in times[reversible]],
             "activation_mib": round(activation_bytes[reversible] / 2 ** 20, 1), "ratio_to_plain": round(ratio, 3)}
            for reversible in (True, False)]


def one_point(reversible, depth, repeats):
    import torch

    model = build(reversible, depth)
    ids = torch.randint(0, 320, (1, 1024))
    _, peak_bytes = peak_rss_growth(lambda: model(ids).last_hidden_state.sum().backward())
    gradient_bytes = sum(p.numel() * 4 for p in model.parameters())
    times = []
    for _ in range(repeats):
        model.zero_grad(set_to_none=False)
        started = time.perf_counter()
        model(ids).last_hidden_state.sum().backward()
        times.append(1000 * (time.perf_counter() - started))
    return {"ms": statistics.median(times), "all_ms": [round(t, 1) for t in times],
            "activation_mib": round((peak_bytes - gradient_bytes) / 2 ** 20, 1),
            "peak_delta_mib": round(peak_bytes / 2 ** 20, 1)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results/rev_lsh_depth")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--malloc-mmap-threshold", type=int, help="MALLOC_MMAP_THRESHOLD_ of the point processes")
    parser.add_argument("--point", nargs=2, metavar=("REVERSIBLE", "DEPTH"), help=argparse.SUPPRESS)
    parser.add_argument("--paired", type=int, metavar="DEPTH",
                        help="time the reversible and the plain stack in one process, alternating steps")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--length", type=int, default=1024, help="tokens per step (--device cuda)")
    args = parser.parse_args()
    if args.paired:
        print("RESULT " + json.dumps(paired(args.paired, args.repeats)))
        return
    if args.point:
        print("RESULT " + json.dumps(one_point(args.point[0] == "1", int(args.point[1]), args.repeats)))
        return
    env = dict(os.environ)
    if args.malloc_mmap_threshold:
        env["MALLOC_MMAP_THRESHOLD_"] = str(args.malloc_mmap_threshold)
    results = []
    for depth in DEPTHS:
        if args.device == "cuda":
            results.extend(cuda_points(depth, args.length, args.repeats))
            print(json.dumps(results[-2:]), flush=True)
            continue
        for reversible in (True, False):
            completed = subprocess.run([sys.executable, __file__, "--point", str(int(reversible)), str(depth),
                                        "--repeats", str(args.repeats)], capture_output=True, text=True, check=True, env=env)
            line = next(line for line in completed.stdout.splitlines() if line.startswith("RESULT "))
            results.append({"reversible": reversible, "layers": depth,
                            "malloc_mmap_threshold": args.malloc_mmap_threshold, **json.loads(line[7:])})
            print(json.dumps(results[-1]), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    rows = ["| stack | " + " | ".join(f"L={d}" for d in DEPTHS) + " |", "|---|" + "---:|" * len(DEPTHS)]
    for reversible, name in ((True, "ours, reversible"), (False, "ours, reversible=False (plain autograd)")):
        cells = [next(f"{r['activation_mib']:.1f} / {r['ms']:.4g}" for r in results
                      if r["reversible"] == reversible and r["layers"] == d) for d in DEPTHS]
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    out.with_suffix(".md").write_text("activation peak (MiB) / step time (ms)\n\n" + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
