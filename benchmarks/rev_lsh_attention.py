"""Issue 21, benchmark 1: one attention layer, forward + backward, d_model 256, 4 heads x 64, batch 1, over n.

This package's ``LSHSelfAttention`` (2 hashes, chunks of 64, buckets chosen from n) against SDPA full attention
(this package's ``FullSelfAttention``), transformers' ``LSHSelfAttention`` (same settings) and reformer-pytorch's
``LSHSelfAttention`` (bucket 64, 2 hashes). Every point runs in a fresh process (for its peak memory); time is the
median of ``--repeats`` steps after one warm-up step, peak memory the peak RSS growth over the warm-up step.
``*_eager``: the plain path (the scores materialised); ``ours_local_core*``: the local layer without its projections
(the input's heads as queries, keys and values), the chunk attention alone.

    .venv/bin/python benchmarks/rev_lsh_attention.py --out benchmarks/results/rev_lsh_attention

``--device cuda``: every point in one process on the GPU (float32, TF32 off), time the median of ``--repeats`` steps
after two warm-up steps (synchronised), memory the peak of ``torch.cuda.max_memory_allocated`` over a step above
what was allocated before it.

needs reformer-pytorch (``pip install reformer-pytorch==1.4.4``), psutil and matplotlib in the venv.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from peak_rss import peak_rss_growth

IMPLEMENTATIONS = ("ours_lsh", "ours_lsh_eager", "ours_local", "ours_local_eager", "ours_local_core",
                   "ours_local_core_eager", "sdpa_full", "hf_reformer_lsh", "lucid_lsh")
LENGTHS = (1024, 2048, 4096, 8192, 16384, 32768)
D_MODEL, HEADS, HEAD_SIZE, CHUNK, HASHES = 256, 4, 64, 64, 2


def build(name, n, device="cpu"):
    layer = build_layer(name, n).to(device)
    if name.startswith("ours_"):  # eager: the plain path (scores materialised), as before issue 39
        return lambda x: layer(x, sdpa=not name.endswith("_eager"))[0]
    if name == "sdpa_full":
        return lambda x: layer(x)[0]
    if name == "hf_reformer_lsh":
        return lambda x: layer(x).hidden_states
    return layer


def build_layer(name, n):
    if name in ("ours_lsh", "ours_lsh_eager"):
        from hf_plm_ext.modeling.rev_lsh import LSHSelfAttention

        return LSHSelfAttention(D_MODEL, HEADS, HEAD_SIZE, chunk_length=CHUNK, num_hashes=HASHES,
                                max_position_embeddings=n)
    if name in ("ours_local", "ours_local_eager", "ours_local_core", "ours_local_core_eager"):
        import torch.nn as nn

        from hf_plm_ext.modeling.rev_lsh import LocalSelfAttention

        layer = LocalSelfAttention(D_MODEL, HEADS, HEAD_SIZE, chunk_length=CHUNK)
        if "_core" in name:  # the chunk attention alone: the input's heads as queries, keys and values
            layer.query = layer.key = layer.value = nn.Identity()
        return layer
    if name == "sdpa_full":
        from hf_plm_ext.modeling.rev_lsh import FullSelfAttention

        return FullSelfAttention(D_MODEL, HEADS, HEAD_SIZE)
    if name == "hf_reformer_lsh":
        from transformers import ReformerConfig
        from transformers.models.reformer.modeling_reformer import LSHSelfAttention

        config = ReformerConfig(hidden_size=D_MODEL, num_attention_heads=HEADS, attention_head_size=HEAD_SIZE,
                                lsh_attn_chunk_length=CHUNK, num_hashes=HASHES, max_position_embeddings=n)
        return LSHSelfAttention(config)
    if name == "lucid_lsh":
        from reformer_pytorch import LSHSelfAttention

        return LSHSelfAttention(dim=D_MODEL, heads=HEADS, dim_head=HEAD_SIZE, bucket_size=CHUNK, n_hashes=HASHES)
    raise ValueError(name)


def one_point(name, n, repeats):
    """Run in a fresh process: ``{"ms": median step, "all_ms": [...], "peak_mib": RSS growth}``."""
    import torch

    torch.manual_seed(0)
    forward = build(name, n)
    x = torch.randn(1, n, D_MODEL, requires_grad=True)
    _, peak_bytes = peak_rss_growth(lambda: forward(x).sum().backward())  # warm-up, and the memory point
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        forward(x).sum().backward()
        times.append(1000 * (time.perf_counter() - started))
    return {"ms": statistics.median(times), "all_ms": [round(t, 1) for t in times],
            "peak_mib": round(peak_bytes / 2 ** 20, 1)}


def cuda_point(name, n, repeats):
    """On the GPU, in this process: ``{"ms": median step, "all_ms": [...], "peak_mib": peak above the start}``."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    forward = build(name, n, "cuda")
    x = torch.randn(1, n, D_MODEL, device="cuda", requires_grad=True)
    for _ in range(2):
        forward(x).sum().backward()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start_bytes = torch.cuda.memory_allocated()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        forward(x).sum().backward()
        torch.cuda.synchronize()
        times.append(1000 * (time.perf_counter() - started))
    peak_bytes = torch.cuda.max_memory_allocated() - start_bytes
    del forward, x
    torch.cuda.empty_cache()
    return {"ms": statistics.median(times), "all_ms": [round(t, 2) for t in times],
            "peak_mib": round(peak_bytes / 2 ** 20, 1)}


def profile(names, n, device):
    """Where the time goes: ``torch.profiler`` over 3 steps of each layer after 3 warm-up steps, the kernels (or
    ops) with the most time first."""
    import torch

    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA]
                                                         if device == "cuda" else [])
    torch.backends.cuda.matmul.allow_tf32 = False
    for name in names:
        torch.manual_seed(0)
        forward = build(name, n, device)
        x = torch.randn(1, n, D_MODEL, device=device, requires_grad=True)
        for _ in range(3):
            forward(x).sum().backward()
        with torch.profiler.profile(activities=activities) as profiler:
            for _ in range(3):
                forward(x).sum().backward()
            if device == "cuda":
                torch.cuda.synchronize()
        events = profiler.key_averages()
        kernels = sum(e.count for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
        print(f"=== {name} n={n}" + (f": {kernels / 3:.0f} GPU kernels per step" if device == "cuda" else ""))
        print(events.table(sort_by="cuda_time_total" if device == "cuda" else "cpu_time_total", row_limit=14,
                           max_name_column_width=60))


def paired(names, n, repeats):
    """Two layers in one process, their steps alternating (after a warm-up step each): each one's median step and
    the median of the per-pair time ratios (the first over the second), which the VM's drift affects least."""
    import torch

    torch.manual_seed(0)
    steps = [build(name, n) for name in names]
    x = torch.randn(1, n, D_MODEL, requires_grad=True)
    times = [[], []]
    for repeat in range(repeats + 1):
        for index, forward in enumerate(steps):
            started = time.perf_counter()
            forward(x).sum().backward()
            if repeat:
                times[index].append(1000 * (time.perf_counter() - started))
    ratios = [first / second for first, second in zip(*times)]
    return {"impls": list(names), "n": n, "ms": [round(statistics.median(t), 1) for t in times],
            "ratio": round(statistics.median(ratios), 3), "ratios": [round(r, 3) for r in ratios]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results/rev_lsh_attention")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--point", nargs=2, metavar=("IMPL", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--paired", nargs=3, metavar=("IMPL", "PEER", "N"),
                        help="time two layers in one process, alternating steps; the median per-pair ratio")
    parser.add_argument("--skip-full-above", type=int, default=16384, help="SDPA full attention up to this n")
    parser.add_argument("--lengths", type=int, nargs="+", default=LENGTHS)
    parser.add_argument("--impls", nargs="+", default=IMPLEMENTATIONS, choices=IMPLEMENTATIONS)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--profile", type=int, metavar="N", help="profile --impls at N tokens instead")
    args = parser.parse_args()
    if args.profile:
        profile(args.impls, args.profile, args.device)
        return
    if args.paired:
        print("RESULT " + json.dumps(paired(args.paired[:2], int(args.paired[2]), args.repeats)))
        return
    if args.point:
        print("RESULT " + json.dumps(one_point(args.point[0], int(args.point[1]), args.repeats)))
        return
    results = []
    for n in args.lengths:
        for name in args.impls:
            if name == "sdpa_full" and n > args.skip_full_above:
                continue
            if args.device == "cuda":
                try:
                    results.append({"impl": name, "n": n, **cuda_point(name, n, args.repeats)})
                except Exception as error:  # (an out-of-memory point is a result too)
                    results.append({"impl": name, "n": n, "error": f"{type(error).__name__}: {error}"[:300]})
                print(json.dumps(results[-1]), flush=True)
                continue
            completed = subprocess.run([sys.executable, __file__, "--point", name, str(n), "--repeats",
                                        str(args.repeats)], capture_output=True, text=True)
            if completed.returncode != 0:
                results.append({"impl": name, "n": n, "error": completed.stderr.strip().splitlines()[-1]})
            else:
                line = next(line for line in completed.stdout.splitlines() if line.startswith("RESULT "))
                results.append({"impl": name, "n": n, **json.loads(line[7:])})
            print(json.dumps(results[-1]), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    out.with_suffix(".md").write_text(table(results, args.device))
    plot(results, out.with_suffix(".png"), args.device)


def table(results, device="cpu") -> str:
    lengths = sorted({r["n"] for r in results})
    names = [name for name in IMPLEMENTATIONS if any(r["impl"] == name for r in results)]
    lines = ["| impl | " + " | ".join(f"n={n}" for n in lengths) + " |", "|---|" + "---:|" * len(lengths)]
    for name in names:
        cells = []
        for n in lengths:
            point = next((r for r in results if r["impl"] == name and r["n"] == n), None)
            cells.append("-" if point is None else "error" if "error" in point else
                         f"{point['ms']:.4g} / {point['peak_mib']:.0f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    memory = "peak RSS growth" if device == "cpu" else "peak CUDA memory above the start"
    return f"time (ms, median) / {memory} (MiB), forward + backward\n\n" + "\n".join(lines) + "\n"


def plot(results, path, device="cpu"):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (time_axis, memory_axis) = plt.subplots(1, 2, figsize=(11, 4))
    for name in IMPLEMENTATIONS:
        points = [r for r in results if r["impl"] == name and "error" not in r]
        lengths = [p["n"] for p in points]
        time_axis.plot(lengths, [p["ms"] for p in points], marker="o", label=name)
        memory_axis.plot(lengths, [p["peak_mib"] for p in points], marker="o", label=name)
    memory = "peak RSS growth (MiB)" if device == "cpu" else "peak CUDA memory (MiB)"
    for axis, label in ((time_axis, "forward + backward (ms)"), (memory_axis, memory)):
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("sequence length n")
        axis.set_ylabel(label)
        axis.grid(True, which="both", alpha=0.3)
    time_axis.legend()
    figure.suptitle("one attention layer, d_model 256, 4 heads, batch 1 "
                    + ("(2-core CPU)" if device == "cpu" else "(GPU, float32)"))
    figure.tight_layout()
    figure.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
