"""Issue 70, item 3: Transformer-XL's cached decode step (d 256, 6 layers, mem_len 512, 1k context, batch 1, as
``causal_decoding.py``'s XL): the median time per step over 50 steps after 4 untimed ones, and the profiler's
``aten::copy_`` calls and self-time share over 10 more. Run it at two commits to compare (one job at a time).

    .venv/bin/python benchmarks/txl_decode_step.py
"""

import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from hf_plm_ext import TransfoXLConfig, TransfoXLLMHeadModel
from hf_plm_ext.modeling.transfo_xl import TransfoXLCache

CONTEXT, SEGMENT, WARM_UP, TIMED, PROFILED = 1024, 512, 4, 50, 10


@torch.no_grad()
def main():
    torch.manual_seed(0)
    config = TransfoXLConfig(vocab_size=320, d_model=256, d_embed=256, n_head=4, d_head=64, d_inner=1024, n_layer=6,
                             mem_len=512, cutoffs=[])
    model = TransfoXLLMHeadModel(config).eval()
    cache = TransfoXLCache(config.n_layer)
    ids = torch.randint(0, config.vocab_size, (1, CONTEXT))
    for start in range(0, CONTEXT, SEGMENT):
        model(ids[:, start:start + SEGMENT], past_key_values=cache, use_cache=True)
    token = ids[:, -1:]
    seconds = []
    for _ in range(WARM_UP + TIMED):
        started = time.perf_counter()
        model(token, past_key_values=cache, use_cache=True)
        seconds.append(time.perf_counter() - started)
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for _ in range(PROFILED):
            model(token, past_key_values=cache, use_cache=True)
    events = profiler.key_averages()
    copies = next((event for event in events if event.key == "aten::copy_"), None)
    total = sum(event.self_cpu_time_total for event in events)
    calls = copies.count / PROFILED if copies else 0
    share = copies.self_cpu_time_total / total if copies else 0
    print(f"median step {statistics.median(seconds[WARM_UP:]) * 1e3:.2f} ms; aten::copy_ calls/step {calls:.0f}, "
          f"self share {share:.1%}")


if __name__ == "__main__":
    main()
