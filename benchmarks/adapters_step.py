"""Issue 22, item 5: training-step time and peak memory of adapters on a BERT-base-sized classifier.

BERT-base shape (12 layers, 768 hidden, 12 heads, FFN 3072, vocabulary 30522), random weights (seed 0), 2 labels,
batch 8 x 128 random tokens; one forward + backward + AdamW step over the trainable parameters. Implementations:

* ``full``: full fine-tuning; ``ours_pfeiffer`` / ``ours_houlsby``: this package's bottleneck adapters
  (``BottleneckConfig.from_preset``); ``peft_lora``: PEFT's LoRA, r = 8 on query and value;
* ``ah_seq_bn`` / ``ah_double_seq_bn``: AdapterHub 1.3 (``adapters.init`` + ``SeqBnConfig`` /
  ``DoubleSeqBnConfig``, reduction 16, ``train_adapter``), in its own virtual environment (it pins transformers
  4.57; see ../shared/notes/peers.md): ``--adapterhub-python /tmp/vad/bin/python``.

Each point is one fresh process (so that peak memory is its own): median seconds per step over ``--steps`` after
two warm-up steps, and the rise of VmHWM over the first three steps. ``--rounds`` repeats every implementation,
in alternating order.

    .venv/bin/python benchmarks/adapters_step.py --adapterhub-python /tmp/vad/bin/python

Writes benchmarks/results/adapters_step.json and .md.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
OURS = ["full", "ours_pfeiffer", "ours_houlsby", "peft_lora"]
ADAPTERHUB = ["ah_seq_bn", "ah_double_seq_bn"]
BATCH, LENGTH = 8, 128


def vm_hwm() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def build(impl):
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(num_labels=2))
    if impl.startswith("ours_"):
        from peft import get_peft_model

        from hf_plm_ext import BottleneckConfig

        model = get_peft_model(model, BottleneckConfig.from_preset(impl.removeprefix("ours_"), task_type="SEQ_CLS"))
    elif impl == "peft_lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(task_type="SEQ_CLS", r=8, lora_alpha=16,
                                                 target_modules=["query", "value"]))
    elif impl.startswith("ah_"):
        import adapters
        from adapters import DoubleSeqBnConfig, SeqBnConfig

        adapters.init(model)
        config = SeqBnConfig(reduction_factor=16) if impl == "ah_seq_bn" else DoubleSeqBnConfig(reduction_factor=16)
        model.add_adapter("bench", config=config)
        model.train_adapter("bench")  # (also unfreezes nothing else: the head is trained by name below)
        for parameter in model.classifier.parameters():
            parameter.requires_grad_(True)
    return model


def run_one(impl, steps):
    import torch

    model = build(impl).train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(1000, 30000, (BATCH, LENGTH), generator=generator)
    labels = torch.randint(0, 2, (BATCH,), generator=generator)
    before, times = vm_hwm(), []
    for step in range(2 + steps):
        started = time.perf_counter()
        loss = model(input_ids=ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - started)
        if step == 2:
            peak = vm_hwm() - before
    return {"impl": impl, "seconds_per_step": statistics.median(times[2:]), "peak_rise_bytes": peak,
            "trainable_parameters": sum(p.numel() for p in trainable),
            "all_parameters": sum(p.numel() for p in model.parameters())}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", help="run one implementation in this process and print its JSON")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--adapterhub-python", help="python of a virtual environment with adapters 1.3")
    parser.add_argument("--out", default=str(RESULTS / "adapters_step"))
    args = parser.parse_args()
    if args.impl:
        print("RESULT " + json.dumps(run_one(args.impl, args.steps)), flush=True)
        return
    impls = OURS + (ADAPTERHUB if args.adapterhub_python else [])
    runs = {impl: [] for impl in impls}
    for round_ in range(args.rounds):
        for impl in impls if round_ % 2 == 0 else list(reversed(impls)):
            python = args.adapterhub_python if impl.startswith("ah_") else sys.executable
            done = subprocess.run([python, __file__, "--impl", impl, "--steps", str(args.steps)], capture_output=True,
                                  text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"{impl} failed:\n{done.stderr[-3000:]}")
            result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])
            print(result, flush=True)
            runs[impl].append(result)
    summary = {impl: {"seconds_per_step": statistics.median(r["seconds_per_step"] for r in results),
                      "peak_rise_mib": statistics.median(r["peak_rise_bytes"] for r in results) / 2 ** 20,
                      "trainable_parameters": results[0]["trainable_parameters"],
                      "all_parameters": results[0]["all_parameters"]} for impl, results in runs.items()}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"arguments": vars(args), "runs": runs, "summary": summary},
                                                   indent=1) + "\n")
    lora = summary["peft_lora"]["seconds_per_step"]
    peer = {"ours_pfeiffer": "ah_seq_bn", "ours_houlsby": "ah_double_seq_bn"}
    rows = ["| implementation | s / step | vs LoRA | vs AdapterHub, same preset | peak memory rise (MiB) | "
            "vs AdapterHub | trainable parameters |", "|---|---:|---:|---:|---:|---:|---:|"]
    for impl, s in summary.items():
        ah = summary.get(peer.get(impl, ""))
        time_vs_ah = f"{s['seconds_per_step'] / ah['seconds_per_step']:.2f}x" if ah else "-"
        memory_vs_ah = f"{s['peak_rise_mib'] / ah['peak_rise_mib']:.2f}x" if ah else "-"
        share = 100 * s["trainable_parameters"] / s["all_parameters"]
        rows.append(f"| {impl} | {s['seconds_per_step']:.3f} | {s['seconds_per_step'] / lora:.2f}x | {time_vs_ah} | "
                    f"{s['peak_rise_mib']:.0f} | {memory_vs_ah} | {s['trainable_parameters']:,} ({share:.2f} %) |")
    out.with_suffix(".md").write_text("\n".join(rows) + "\n")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
