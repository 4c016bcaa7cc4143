"""Issue 70: a CPU training step with glibc's malloc at its defaults against the same step after
``hf_plm_ext.retain_freed_memory()`` (what the training commands do on a CPU run).

Workloads, each a fresh process per point, the two kinds alternating (``--pairs`` of each):

- ``bert``: transformers' ``BertForMaskedLM`` (6 layers, hidden 384, 12 heads, vocabulary 30,522), batch 16 x 128,
  AdamW: forward, backward, optimizer step;
- ``rev-lsh``: one rev-lsh LSH layer at 16k tokens, as ``rev_lsh_flops.py`` builds it: forward and backward.

A point: one warm-up step, then the median of ``--repeats`` steps, and the minor page faults per step (getrusage)
over them. The ratio is retained over default, per pair, and its median.

    .venv/bin/python benchmarks/cpu_memory.py --out benchmarks/results/cpu_memory    # about 4 minutes
"""

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

WORKLOADS = ("bert", "rev-lsh")


def bert_step():
    import torch
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig(hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                                       intermediate_size=1536)).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(1000, 20000, (16, 128))

    def step():
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return step


def rev_lsh_step():
    import torch
    from rev_lsh_flops import HIDDEN, build

    model = build("lsh", 16384)
    x = torch.randn(1, 16384, HIDDEN, requires_grad=True)
    return lambda: model(inputs_embeds=x).last_hidden_state.sum().backward()


def one_point(workload, retain, repeats):
    from hf_plm_ext.training.cpu_memory import retain_freed_memory

    retained = retain and retain_freed_memory()
    step = {"bert": bert_step, "rev-lsh": rev_lsh_step}[workload]()
    step()
    times, faults = [], []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    return {"retained": retained, "ms": round(1000 * statistics.median(times), 1),
            "faults_per_step": int(statistics.median(faults)),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results/cpu_memory")
    parser.add_argument("--workloads", nargs="+", default=WORKLOADS, choices=WORKLOADS)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--point", nargs=2, metavar=("WORKLOAD", "RETAIN"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.point:
        print("RESULT " + json.dumps(one_point(args.point[0], args.point[1] == "1", args.repeats)))
        return
    results = []
    for workload in args.workloads:
        for pair in range(args.pairs):
            for retain in (False, True):
                completed = subprocess.run([sys.executable, __file__, "--point", workload, str(int(retain)),
                                            "--repeats", str(args.repeats)], capture_output=True, text=True,
                                           check=True, cwd=Path(__file__).parent)
                line = next(line for line in completed.stdout.splitlines() if line.startswith("RESULT "))
                results.append({"workload": workload, "pair": pair, "retain": retain, **json.loads(line[7:])})
                print(json.dumps(results[-1]), flush=True)
    rows = ["| workload | glibc's defaults: step (ms) / page faults per step / peak RSS (MiB) | retained | "
            "retained / defaults, median of the pairs |", "|---|---|---|---:|"]
    for workload in args.workloads:
        points = {retain: [r for r in results if r["workload"] == workload and r["retain"] == retain]
                  for retain in (False, True)}
        ratio = statistics.median(b["ms"] / a["ms"] for a, b in zip(points[False], points[True]))
        cell = lambda ps: (f"{min(p['ms'] for p in ps):.0f}-{max(p['ms'] for p in ps):.0f} / "  # noqa: E731
                           f"{statistics.median(p['faults_per_step'] for p in ps)} / "
                           f"{statistics.median(p['peak_rss_mib'] for p in ps):.0f}")
        rows.append(f"| {workload} | {cell(points[False])} | {cell(points[True])} | {ratio:.2f}x |")
    table = (f"A CPU training step, glibc's malloc at its defaults and after retain_freed_memory(), {args.pairs} "
             "alternating fresh-process pairs\n\n" + "\n".join(rows) + "\n")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    out.with_suffix(".md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
