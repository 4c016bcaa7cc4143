"""Transformer-XL language-model throughput: hf-plm-ext vs the last transformers TransfoXL, x-transformers'
XL-memory decoder and an equal-size GPT-2 without memory; generation with memory vs recomputing.

Workload (../shared/notes/peers.md, "txl_lm"): 4 layers, d_model 256, 4 heads x 64, FFN 1024,
vocabulary 8,000, plain softmax, segments of 128 tokens, memory 128, batch 8, dropout 0.1 (none on
the attention probabilities: transformers' ``dropatt`` default 0.0, so x-transformers gets ``attn_dropout=0``).
Training = consecutive segments with the detached memory carried, forward + backward + AdamW;
evaluation = the same segments under ``no_grad``. GPT-2 sees each 128-token segment alone.

* ``ours``: ``hf_plm_ext.TransfoXLLMHeadModel``; in evaluation its ``mem_key_values`` go back with the
  ``mems``, so the memory's keys and values are not recomputed (the peers have no such cache).
* ``legacy``: transformers 4.37.2 ``TransfoXLLMHeadModel`` (``cutoffs=[]``: a plain tied softmax), run
  with ``--legacy-python`` (a virtual environment with transformers==4.37.2; recipe in peers.md).
* ``x_transformers``: ``TransformerWrapper(max_mem_len=128)`` + ``Decoder(rel_pos_bias=True)``
  (``pip install x-transformers``, torch pinned).
* ``gpt2``: transformers 5 ``GPT2LMHeadModel`` (n_positions 128), no memory.

Each implementation lives in its own process (the legacy one in its own virtual environment), and
they run in lockstep: one segment of the first, one of the next, ..., then the next segment, the
order rotating every segment, so that all of them see the same stretch of this shared machine's
speed (it drifts by +-15 % within minutes). Reported: tokens/s over all timed segments, and
ours/peer as the median of the per-segment ratios (neighbouring in time). Peak memory: the rise
of VmHWM over the two warm-up training segments, taken before the lockstep starts (glibc set to
return freed memory at once, as in peers.md).

Generation (ours only): greedy decoding of 512 tokens after a 16-token prompt, batch 1,
``mem_len`` 640 (covers the whole text, so both ways give the same tokens), ``use_cache=True``
(one new token per step, the memory is the cache) vs ``use_cache=False`` (the whole prefix every step).

    .venv/bin/python benchmarks/txl_lm.py --legacy-python /tmp/v4/bin/python [--segments 60]

Writes benchmarks/results/txl_lm.json and .md, with the machine (CPU model and SIMD level, cores, torch: the
ratios depend on them). ``--device cuda`` runs every implementation on the GPU (timed with
``torch.cuda.synchronize``; peak memory = the rise of ``max_memory_allocated``), ``--bf16`` under
``torch.autocast(dtype=bfloat16)``, ``--threads N`` sets ``torch.set_num_threads`` in each worker; results
other than CPU float32 go to ``txl_lm_<device>[_bf16].json`` / ``.md``.
"""

import argparse
import ctypes
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
VOCAB, LAYERS, D_MODEL, HEADS, D_INNER, TGT_LEN, MEM_LEN, BATCH, DROPOUT = 8000, 4, 256, 4, 1024, 128, 128, 8, 0.1
WARMUP = 2


def vm_kib(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def glibc_returns_memory(immediately: bool):
    libc = ctypes.CDLL("libc.so.6")
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    libc.mallopt(M_MMAP_THRESHOLD, 64 * 1024 if immediately else 32 * 1024 * 1024)
    libc.mallopt(M_TRIM_THRESHOLD, 128 * 1024 if immediately else 64 * 1024 * 1024)


def build(impl):
    """(model, step) where step(segment, mems) -> (loss, new mems)."""
    import torch

    if impl in ("ours", "legacy"):
        fields = dict(vocab_size=VOCAB, cutoffs=[], div_val=1, d_model=D_MODEL, d_embed=D_MODEL, n_head=HEADS,
                      d_head=D_MODEL // HEADS, d_inner=D_INNER, n_layer=LAYERS, mem_len=MEM_LEN, clamp_len=-1,
                      same_length=False, dropout=DROPOUT, dropatt=0.0)
        if impl == "ours":
            from hf_plm_ext import TransfoXLConfig, TransfoXLLMHeadModel

            fields["adaptive"] = False
        else:
            from transformers import TransfoXLConfig, TransfoXLLMHeadModel
        model = TransfoXLLMHeadModel(TransfoXLConfig(**fields))

        def step(segment, mems):
            outputs = model(segment, mems=mems, labels=segment)
            return outputs.loss, outputs.mems

        if impl == "ours":  # the memory's key/value cache travels with it (returned under no_grad only)
            def step(segment, memory):
                outputs = model(segment, labels=segment, **(memory or {}))
                return outputs.loss, {"mems": outputs.mems, "mem_key_values": outputs.mem_key_values}
    elif impl == "x_transformers":
        import torch.nn.functional as F
        from x_transformers import Decoder, TransformerWrapper

        model = TransformerWrapper(num_tokens=VOCAB, max_seq_len=TGT_LEN, max_mem_len=MEM_LEN, use_abs_pos_emb=False,
                                   emb_dropout=DROPOUT, tie_embedding=True,
                                   attn_layers=Decoder(dim=D_MODEL, depth=LAYERS, heads=HEADS, rel_pos_bias=True,
                                                       attn_dropout=0.0, ff_dropout=DROPOUT))

        def step(segment, mems):
            logits, new_mems = model(segment, mems=mems, return_mems=True)
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), segment[:, 1:].reshape(-1))
            return loss, new_mems
    elif impl == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        model = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=TGT_LEN, n_embd=D_MODEL, n_layer=LAYERS,
                                           n_head=HEADS, n_inner=D_INNER, resid_pdrop=DROPOUT, embd_pdrop=DROPOUT,
                                           attn_pdrop=DROPOUT))

        def step(segment, mems):
            return model(segment, labels=segment).loss, None
    else:
        raise ValueError(impl)
    return model, step


def worker(impl, device, bf16, threads):
    """Build ``impl``, run the warm-up, then one segment per command read from stdin (answers start with @@)."""
    import contextlib

    import torch

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    model, step = build(impl)
    model.to(device)
    cuda = device.startswith("cuda")
    precision = torch.autocast(device.split(":")[0], dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    stream = torch.Generator().manual_seed(1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    mems = None

    def run(command):
        nonlocal mems
        segment = torch.randint(0, VOCAB, (BATCH, TGT_LEN), generator=stream).to(device)
        if cuda:
            torch.cuda.synchronize()
        started = time.perf_counter()
        if command == "train":
            model.train()
            with precision:
                loss, mems = step(segment, mems)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        else:
            model.eval()
            with torch.no_grad(), precision:
                _, mems = step(segment, mems)
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - started

    def answer(value):
        print("@@" + json.dumps(value), flush=True)

    if cuda:  # the same keys as on the CPU: KiB of device memory allocated
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated() / 1024
    else:
        glibc_returns_memory(True)
        before = vm_kib("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")
    for _ in range(WARMUP):
        run("train")
    peak = torch.cuda.max_memory_allocated() / 1024 if cuda else vm_kib("VmHWM")
    glibc_returns_memory(False)
    answer({"impl": impl, "parameters": sum(p.numel() for p in model.parameters()),
            "train_peak_rss_mib": peak / 1024, "train_peak_rss_rise_mib": (peak - before) / 1024})
    for line in sys.stdin:
        command = line.strip()
        if command == "forget":  # evaluation starts from an empty memory
            mems = None
            answer(None)
        else:
            answer(run(command))


class Worker:
    def __init__(self, impl, python, options):
        self.process = subprocess.Popen([python, __file__, "--worker", impl, *options], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        self.info = self._read()

    def _read(self):
        for line in self.process.stdout:
            if line.startswith("@@"):
                return json.loads(line[2:])
        raise SystemExit(f"a worker stopped (exit {self.process.wait()}); see its stderr above")

    def ask(self, command):
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self):
        self.process.stdin.close()
        self.process.wait()


def lockstep(workers, command, segments):
    """{impl: [seconds per segment]}, the implementations taking turns segment by segment."""
    names = list(workers)
    seconds = {name: [] for name in names}
    for i in range(segments):
        for name in names[i % len(names):] + names[:i % len(names)]:
            seconds[name].append(workers[name].ask(command))
    return seconds


def generation(device, new_tokens=512, prompt_length=16):
    import torch

    from hf_plm_ext import TransfoXLConfig, TransfoXLLMHeadModel

    torch.manual_seed(0)
    config = TransfoXLConfig(vocab_size=VOCAB, adaptive=False, div_val=1, d_model=D_MODEL, d_embed=D_MODEL,
                             n_head=HEADS, d_head=D_MODEL // HEADS, d_inner=D_INNER, n_layer=LAYERS,
                             mem_len=new_tokens + prompt_length, clamp_len=-1, same_length=False, eos_token_id=None)
    model = TransfoXLLMHeadModel(config).to(device).eval()
    prompt = torch.randint(0, VOCAB, (1, prompt_length), generator=torch.Generator().manual_seed(2)).to(device)
    out, seconds = {}, {}
    for use_cache in (True, False):
        started = time.perf_counter()
        out[use_cache] = model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                        do_sample=False, use_cache=use_cache).cpu()
        seconds[use_cache] = time.perf_counter() - started
    return {"new_tokens": new_tokens, "prompt_tokens": prompt_length, "seconds_with_memory": seconds[True],
            "seconds_recomputing": seconds[False], "speedup": seconds[False] / seconds[True],
            "same_tokens": bool(torch.equal(out[True], out[False]))}


def machine(device):
    """What the ratios depend on: the CPU (its model and SIMD level decide how far the matrix products outrun the
    rest), the cores, torch, and the GPU when one is used."""
    import os

    import torch

    models = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
              if line.startswith("model name")] if Path("/proc/cpuinfo").exists() else []
    return {"cpu": models[0] if models else None, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "cpus": os.cpu_count(), "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name() if device.startswith("cuda") else None}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--legacy-python", help="python of a transformers==4.37.2 environment (omit: skip legacy)")
    parser.add_argument("--segments", type=int, default=60, help="timed segments per implementation and phase")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--bf16", action="store_true", help="run the segments under bfloat16 autocast")
    parser.add_argument("--threads", type=int, default=0, help="torch threads per worker (default: torch's)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.device, args.bf16, args.threads)
        return
    options = ["--device", args.device, "--threads", str(args.threads)] + ["--bf16"] * args.bf16
    pythons = {"ours": sys.executable, "x_transformers": sys.executable, "gpt2": sys.executable}
    if args.legacy_python:
        pythons["legacy"] = args.legacy_python
    workers = {impl: Worker(impl, python, options) for impl, python in pythons.items()}  # warm-ups one after another
    train = lockstep(workers, "train", args.segments)
    for process in workers.values():
        process.ask("forget")
    lockstep(workers, "eval", WARMUP)
    evaluation = lockstep(workers, "eval", args.segments)
    for process in workers.values():
        process.close()
    tokens = BATCH * TGT_LEN * args.segments
    summary = {impl: {**{k: v for k, v in process.info.items() if k != "impl"},
                      "train_tokens_per_second": tokens / sum(train[impl]),
                      "eval_tokens_per_second": tokens / sum(evaluation[impl]),
                      "train_seconds": [round(t, 4) for t in train[impl]],
                      "eval_seconds": [round(t, 4) for t in evaluation[impl]]}
               for impl, process in workers.items()}
    ratios = {f"ours/{impl}": {phase: statistics.median(peer / ours for ours, peer in zip(times["ours"], times[impl]))
                               for phase, times in (("train", train), ("eval", evaluation))}
              for impl in workers if impl != "ours"}
    generate = generation(args.device)
    host = machine(args.device)
    print(f"generation: {generate}", flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "txl_lm" if args.device == "cpu" and not args.bf16 else f"txl_lm_{args.device}" + "_bf16" * args.bf16
    (RESULTS / f"{name}.json").write_text(json.dumps({"segments": args.segments, "device": args.device,
                                                      "bf16": args.bf16, "threads": args.threads, "machine": host,
                                                      "summary": summary, "ratios": ratios, "generation": generate},
                                                     indent=2) + "\n")
    memory = "allocated on the GPU" if args.device != "cpu" else "RSS"
    lines = [f"| implementation | parameters | train tokens/s | eval tokens/s | train peak, {memory} (MiB) | "
             "rise over 2 warm-up segments (MiB) |", "|---|---:|---:|---:|---:|---:|"]
    for impl, row in summary.items():
        lines.append(f"| {impl} | {row['parameters']:,.0f} | {row['train_tokens_per_second']:.0f} | "
                     f"{row['eval_tokens_per_second']:.0f} | {row['train_peak_rss_mib']:.0f} | "
                     f"{row['train_peak_rss_rise_mib']:.0f} |")
    lines += ["", "| ratio (median over segments of peer time / our time) | train | eval |", "|---|---:|---:|"]
    lines += [f"| {name} | {r['train']:.2f} | {r['eval']:.2f} |" for name, r in ratios.items()]
    lines += ["", "Machine: " + ", ".join(f"{k} {v}" for k, v in host.items() if v is not None) + "."]
    lines += ["", f"Generation of {generate['new_tokens']} tokens (greedy, batch 1): with memory "
                  f"{generate['seconds_with_memory']:.2f} s, recomputing {generate['seconds_recomputing']:.2f} s "
                  f"({generate['speedup']:.1f}x; same tokens: {generate['same_tokens']})."]
    text = "\n".join(lines) + "\n"
    (RESULTS / f"{name}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
