"""Issue 52, items 4 and 5: how close one rev-lsh layer's training step runs to the machine's matmul throughput,
and what each attention kind costs in time and memory at 4k / 16k / 64k tokens.

One reversible layer (attention block + feed-forward block: hidden 256, 4 heads x 64, feed-forward 512, chunks of
64 with one chunk before, LSH with 2 rounds and the bucket count chosen from n, rotary positions, no dropout), as
``RevLSHModel`` with ``attn_layers=[kind]``, batch 1, float32, one training step: forward, ``sum().backward()``
(the reversible backward recomputes the layer's forward from its output). Each point runs in a fresh process:
time is the median of ``--repeats`` steps after one warm-up step, memory the peak RSS growth over the warm-up step.

Model FLOPs of a step (matmuls only; softmax, norms, sorting and gathers are counted as free): the layer's
forward F (projections, feed-forward, the chunk attention's QK^T and PV over each query's window, LSH's hashing
matmul), counted 4 times (forward, backward = 2x forward, the reversible recompute), except the hashing, which
has no gradient and is not recomputed (the backward reuses the buckets): once. The kernel's own recompute of the
scores in its backward is not counted (it is work the machine does, not work the model needs).

After each timed step, in the same process, the fp32 matmul throughput of the layer's own shapes (``torch.mm``
of [n, 256] x [256, 256], [n, 256] x [256, 512], [n, 512] x [512, 256]: total FLOPs over total time, median of
5), and of one chunk's attention shapes (``torch.bmm`` of [heads x chunks, 64, 64] x [.., 64, 128], the size the chunk
attention's matmuls have); the share of torch.mm is the median over the steps of each step's GFLOP/s over the
throughput measured right after it.

Memory: as ``hf-plm-ext pretrain`` trains on a CPU, each point's process keeps what a step frees for the next
(``hf_plm_ext.training.cpu_memory.retain_freed_memory``); ``--default-malloc`` measures glibc's defaults instead,
under which each step's large tensors take fresh pages from the kernel (both sides of the share: the step and
``torch.mm``). A compiled point's memory is measured only with ``--default-malloc``: retained, its step reuses
what the compiling step freed, so the growth over it is not the step's memory.

    .venv/bin/python benchmarks/rev_lsh_flops.py --out benchmarks/results/rev_lsh_flops    # about 5 minutes
    .venv/bin/python benchmarks/rev_lsh_flops.py --profile lsh 16384   # where the time goes
    .venv/bin/python benchmarks/rev_lsh_flops.py --device cuda --out benchmarks/results/rev_lsh_flops_cuda
    .venv/bin/python benchmarks/rev_lsh_flops.py --compile --lengths 16384 --kinds lsh local \
        --out benchmarks/results/rev_lsh_flops_compiled    # torch.compile's step (each point compiles first)

needs psutil in the venv.
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

KINDS = ("lsh", "local", "full")
LENGTHS = (4096, 16384, 65536)
HIDDEN, HEADS, HEAD_SIZE, FEED_FORWARD, CHUNK, BEFORE, HASHES = 256, 4, 64, 512, 64, 1, 2
INNER = HEADS * HEAD_SIZE
WINDOW = CHUNK * (1 + BEFORE)


def build(kind, n):
    import torch

    from hf_plm_ext import RevLSHConfig, RevLSHModel

    torch.manual_seed(0)
    config = RevLSHConfig(attn_layers=[kind], hidden_size=HIDDEN, num_attention_heads=HEADS,
                          attention_head_size=HEAD_SIZE, feed_forward_size=FEED_FORWARD, num_hashes=HASHES,
                          lsh_attn_chunk_length=CHUNK, local_attn_chunk_length=CHUNK, lsh_num_chunks_before=BEFORE,
                          local_num_chunks_before=BEFORE, max_position_embeddings=n,
                          position_embedding_type="rotary", hidden_dropout_prob=0.0,
                          local_attention_probs_dropout_prob=0.0, full_attention_probs_dropout_prob=0.0)
    return RevLSHModel(config).train()


def hashing_buckets(n):
    """The bucket count LSH chooses for n (``auto_num_buckets``), as the sum of its factors (the rotations' width
    is half of it)."""
    from hf_plm_ext.modeling.rev_lsh.attention_rev_lsh import auto_num_buckets

    buckets = auto_num_buckets(n, CHUNK, n)
    return sum(buckets) if isinstance(buckets, list) else buckets


def step_flops(kind, n):
    """``(FLOPs of one training step, of which the attention's)``: see the module's docstring."""
    projections = (2 if kind == "lsh" else 3) * 2 * n * HIDDEN * INNER + 2 * n * INNER * HIDDEN
    feed_forward = 2 * (2 * n * HIDDEN * FEED_FORWARD)
    attention = {"lsh": HASHES * 4 * n * WINDOW * INNER, "local": 4 * n * WINDOW * INNER,
                 "full": 4 * n * n * INNER}[kind]
    hashing = 2 * n * INNER * HASHES * hashing_buckets(n) // 2 if kind == "lsh" else 0
    return 4 * (projections + feed_forward + attention) + hashing, 4 * attention


def synchronized(call, device):
    """``call`` that returns once the device has finished it (a CUDA call returns when queued)."""
    import torch

    if device == "cpu":
        return call
    return lambda: (call(), torch.cuda.synchronize())


def timed(call, repeats=5):
    call()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def matmul_throughput(n, device="cpu"):
    """``(GFLOP/s of the layer's torch.mm shapes, GFLOP/s of the chunk attention's torch.bmm shapes)``."""
    import torch

    shapes = [(n, HIDDEN, INNER), (n, HIDDEN, FEED_FORWARD), (n, FEED_FORWARD, HIDDEN)]
    operands = [(torch.randn(m, k, device=device), torch.randn(k, p, device=device)) for m, k, p in shapes]
    seconds = sum(timed(synchronized(lambda a=a, b=b: torch.mm(a, b), device)) for a, b in operands)
    mm = sum(2 * m * k * p for m, k, p in shapes) / seconds / 1e9
    batch = HEADS * (n // CHUNK)
    queries = torch.randn(batch, CHUNK, HEAD_SIZE, device=device)
    keys = torch.randn(batch, HEAD_SIZE, WINDOW, device=device)
    bmm_seconds = timed(synchronized(lambda: torch.bmm(queries, keys), device))
    return mm, 2 * batch * CHUNK * HEAD_SIZE * WINDOW / bmm_seconds / 1e9


def peak_growth(step, device):
    """``step()``'s peak memory above what was in use before it: RSS on the CPU, the caching allocator's on CUDA."""
    import torch

    if device == "cpu":
        return peak_rss_growth(step)[1]
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    step()
    return torch.cuda.max_memory_allocated() - before


def one_point(kind, n, repeats, device="cpu", compiled=False, retain=True):
    """In a fresh process: the step's time and memory, and the same process's matmul throughput (CUDA: float32
    with TF32 off, so that both sides do the same arithmetic). ``compiled``: the model through ``torch.compile``
    (inductor), compiled by a first step that is neither timed nor measured. ``retain``: freed memory kept for
    the next step (see the module's docstring)."""
    import torch

    from hf_plm_ext.training.cpu_memory import retain_freed_memory

    retained = retain and device == "cpu" and retain_freed_memory()

    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    model = build(kind, n).to(device)
    if compiled:
        model = torch.compile(model, fullgraph=True)
    x = torch.randn(1, n, HIDDEN, device=device, requires_grad=True)
    step = synchronized(lambda: model(inputs_embeds=x).last_hidden_state.sum().backward(), device)
    if compiled:
        started = time.perf_counter()
        step()
        compile_seconds = time.perf_counter() - started
    peak_bytes = peak_growth(step, device)  # warm-up, and the memory point
    if compiled and retained:  # the step reuses what the compiling step freed: its growth is not its memory
        peak_bytes = None
    flops, attention_flops = step_flops(kind, n)
    # each step paired with a measure of the matmul throughput right after it: this machine's throughput drifts
    # (93-140 GFLOP/s between three runs a minute apart on 12-07, 285-300 on an earlier day)
    times, throughputs, shares = [], [], []
    for _ in range(repeats):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
        throughputs.append(matmul_throughput(n, device))
        shares.append(flops / times[-1] / 1e9 / throughputs[-1][0])
    seconds = statistics.median(times)
    mm, bmm = (statistics.median(measure) for measure in zip(*throughputs))
    return {"ms": round(1000 * seconds, 1), "all_ms": [round(1000 * t, 1) for t in times],
            "peak_mib": None if peak_bytes is None else round(peak_bytes / 2 ** 20, 1), "gflop": round(flops / 1e9, 2),
            "attention_gflop": round(attention_flops / 1e9, 2), "gflops": round(flops / seconds / 1e9, 1),
            "mm_gflops": round(mm, 1), "bmm_gflops": round(bmm, 1),
            "share_of_mm": round(statistics.median(shares), 3),
            "all_shares": [round(share, 3) for share in shares], "threads": torch.get_num_threads(),
            "device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "retained_freed_memory": retained,
            **({"compile_s": round(compile_seconds, 1)} if compiled else {})}


def profile(kind, n, compiled=False, retain=True):
    """``torch.profiler`` over 2 steps after one warm-up: the ops with the most time first."""
    import torch

    from hf_plm_ext.training.cpu_memory import retain_freed_memory

    if retain:
        retain_freed_memory()

    model = build(kind, n)
    if compiled:
        model = torch.compile(model, fullgraph=True)
    x = torch.randn(1, n, HIDDEN, requires_grad=True)
    model(inputs_embeds=x).last_hidden_state.sum().backward()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        for _ in range(2):
            model(inputs_embeds=x).last_hidden_state.sum().backward()
    print(f"=== {kind} n={n}, 2 steps{', compiled' if compiled else ''}")
    print(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=18, max_name_column_width=55))


def table(results, device="cpu", compiled=False, retain=True) -> str:
    lengths = sorted({r["n"] for r in results})
    memory = "peak RSS growth" if device == "cpu" else "peak CUDA memory above the start"
    lines = [f"| layer | n | step (ms) | {memory} (MiB) | model GFLOP (attention) | GFLOP/s | torch.mm GFLOP/s "
             "| share of torch.mm | chunk torch.bmm GFLOP/s |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for kind in KINDS:
        for n in lengths:
            point = next((r for r in results if r["kind"] == kind and r["n"] == n), None)
            if point is None:
                continue
            if "error" in point or "skipped" in point:
                lines.append(f"| {kind} | {n} | {point.get('error') or point['skipped']} | | | | | | |")
                continue
            memory = "not measured" if point["peak_mib"] is None else f"{point['peak_mib']:.0f}"
            lines.append(f"| {kind} | {n} | {point['ms']:.0f} | {memory} | {point['gflop']:.1f} "
                         f"({point['attention_gflop']:.1f}) | {point['gflops']:.1f} | {point['mm_gflops']:.1f} | "
                         f"{point.get('share_of_mm', point['gflops'] / point['mm_gflops']):.0%} | "
                         f"{point['bmm_gflops']:.1f} |")
    where = "" if device == "cpu" else f", on {results[0].get('device', 'cuda')} (TF32 off)"
    how = ", through torch.compile (inductor; the compiling step not counted)" if compiled else ""
    malloc = ("" if device != "cpu" else ", freed memory kept for the next step (retain_freed_memory)" if retain
              else ", glibc's malloc at its defaults")
    return ("One rev-lsh layer's training step (forward, backward, the reversible recompute), batch 1, float32, "
            f"each point a fresh process{where}{how}{malloc}\n\n" + "\n".join(lines) + "\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results/rev_lsh_flops")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lengths", type=int, nargs="+", default=LENGTHS)
    parser.add_argument("--kinds", nargs="+", default=KINDS, choices=KINDS)
    parser.add_argument("--full-up-to", type=int, default=65536,
                        help="full attention up to this n (at 64k one step took 92 s here)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                        help="cuda: the same table on the GPU (memory: the caching allocator's peak)")
    parser.add_argument("--compile", action="store_true", help="the model through torch.compile (inductor)")
    parser.add_argument("--default-malloc", action="store_true",
                        help="glibc's malloc at its defaults, not retain_freed_memory (as the CLI trains)")
    parser.add_argument("--point", nargs=2, metavar=("KIND", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--profile", nargs=2, metavar=("KIND", "N"), help="profile one point instead")
    args = parser.parse_args()
    if args.compile:  # inductor's pool of compile workers stays alive and took CPU from the timed steps (mm 0.7x)
        os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    if args.profile:
        profile(args.profile[0], int(args.profile[1]), args.compile, not args.default_malloc)
        return
    if args.point:
        print("RESULT " + json.dumps(one_point(args.point[0], int(args.point[1]), args.repeats, args.device,
                                               args.compile, not args.default_malloc)))
        return
    results = []
    for n in args.lengths:
        for kind in args.kinds:
            if kind == "full" and n > args.full_up_to:
                flops = step_flops(kind, n)[0]
                results.append({"kind": kind, "n": n, "skipped": f"not run ({flops / 1e12:.0f} TFLOP a step)"})
                continue
            repeats = 1 if kind == "full" and n > 8192 and args.device == "cpu" else args.repeats
            point = ["--point", kind, str(n), "--repeats", str(repeats), "--device", args.device]
            flags = [*(["--compile"] if args.compile else []), *(["--default-malloc"] if args.default_malloc else [])]
            completed = subprocess.run([sys.executable, __file__, *point, *flags], capture_output=True, text=True)
            if completed.returncode != 0:
                results.append({"kind": kind, "n": n, "error": completed.stderr.strip().splitlines()[-1][:200]})
            else:
                line = next(line for line in completed.stdout.splitlines() if line.startswith("RESULT "))
                results.append({"kind": kind, "n": n, **json.loads(line[7:])})
            print(json.dumps(results[-1]), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    out.with_suffix(".md").write_text(table(results, args.device, args.compile, not args.default_malloc))
    print(table(results, args.device, args.compile, not args.default_malloc))


if __name__ == "__main__":
    main()
