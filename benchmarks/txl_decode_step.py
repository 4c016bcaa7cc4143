"""Issue 70, item 3: Transformer-XL's cached decode step (d 256, 6 layers, mem_len 512, 1k context, batch 1, as
``causal_decoding.py``'s XL): the median seconds per step over 50 steps after 4 untimed ones, and the profiler's
``aten::copy_`` calls and self-time share over 10 more. Run it at two commits to compare (one job at a time).

    .venv/bin/python benchmarks/txl_decode_step.py
"""

import statistics, time, torch
from torch.profiler import profile, ProfilerActivity
from hf_plm_ext import TransfoXLConfig, TransfoXLLMHeadModel
from hf_plm_ext.modeling.transfo_xl import TransfoXLCache

torch.manual_seed(0)
config = TransfoXLConfig(vocab_size=320, d_model=256, d_embed=256, n_head=4, d_head=64, d_inner=1024, n_layer=6, mem_len=512, cutoffs=[])
model = TransfoXLLMHeadModel(config).eval()
cache = TransfoXLCache(6)
ids = torch.randint(0, 320, (1, 1024))
with torch.no_grad():
    for start in range(0, 1024, 512):
        model(ids[:, start:start + 512], past_key_values=cache, use_cache=True)
    token = ids[:, -1:]
    times = []
    for step in range(54):
        t = time.perf_counter(); model(token, past_key_values=cache, use_cache=True); times.append(time.perf_counter() - t)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(10):
            model(token, past_key_values=cache, use_cache=True)
copies = [e for e in prof.key_averages() if e.key == "aten::copy_"]
total = sum(e.self_cpu_time_total for e in prof.key_averages())
print(f"median step {statistics.median(times[4:]) * 1e3:.2f} ms; aten::copy_ calls/step {copies[0].count / 10 if copies else 0:.0f}, self share {copies[0].self_cpu_time_total / total if copies else 0:.1%}")
