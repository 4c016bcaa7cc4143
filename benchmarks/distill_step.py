"""Issue 23, item 7: one distillation step with all four TinyBERT losses, three ways.

Teacher BERT-base (12 x 768, 12 heads), student TinyBERT4 (4 x 312, FFN 1200, 12 heads), random weights (seed
0), 2 labels, batch 8 x 128 random tokens, eager attention in both (TextBrewer needs ``output_attentions``);
one teacher forward (no grad), one student forward + backward + AdamW step. Implementations:

* ``ours``: ``DistillationTrainer`` (the stock ``Trainer`` loop; embedding, hidden (one shared projection),
  attention-score MSE and soft cross-entropy);
* ``hand_loop``: the same losses written out in a plain PyTorch loop (hooks on query/key for the scores);
* ``textbrewer``: TextBrewer 0.2.1's ``GeneralDistiller`` with TinyBERT's matches (``attention_mse`` on the
  attention probabilities, ``hidden_mse`` through one projection per match, ``ce`` on the logits), in a virtual
  environment with TextBrewer and transformers 5 (../shared/notes/peers.md): ``--textbrewer-python``.

Each point is one fresh process: median seconds per step over ``--steps`` after two warm-up steps (from the start
of one step to the start of the next), and the rise of VmHWM from the built models to the end of the run. ``--rounds`` repeats every
implementation, in alternating order.

    .venv/bin/python benchmarks/distill_step.py --textbrewer-python /tmp/peers/v5/bin/python

Writes benchmarks/results/distill_step.json and .md.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
IMPLS = ["ours", "hand_loop", "textbrewer"]
BATCH, LENGTH, WARMUP = 8, 128, 2
SIZES = {"full": ({}, {"num_hidden_layers": 4, "hidden_size": 312, "intermediate_size": 1200}),
         # --tiny: a quick check that every implementation runs
         "tiny": ({"num_hidden_layers": 4, "hidden_size": 48, "intermediate_size": 64, "num_attention_heads": 4},
                  {"num_hidden_layers": 2, "hidden_size": 24, "intermediate_size": 32, "num_attention_heads": 4})}


def vm_hwm() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


MEMORY = {}


def models(size):
    """Teacher and student; VmHWM is read after they are built (the rise counts the step, not the imports)."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    teacher_fields, student_fields = SIZES[size]
    torch.manual_seed(0)
    teacher = BertForSequenceClassification(BertConfig(num_labels=2, attn_implementation="eager", **teacher_fields))
    student = BertForSequenceClassification(BertConfig(num_labels=2, attn_implementation="eager", **student_fields))
    MEMORY["before"] = vm_hwm()
    return teacher.eval(), student.train()


def batches(count):
    import torch

    generator = torch.Generator().manual_seed(1)
    return [{"input_ids": torch.randint(1000, 30000, (BATCH, LENGTH), generator=generator),
             "attention_mask": torch.ones(BATCH, LENGTH, dtype=torch.long),
             "labels": torch.randint(0, 2, (BATCH,), generator=generator)} for _ in range(count)]


def run_ours(size, steps, marks):
    import torch
    from transformers import TrainerCallback, TrainingArguments

    from hf_plm_ext import DistillationArguments, DistillationTrainer

    teacher, student = models(size)

    class Marks(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            marks.append(time.perf_counter())

    data = batches(WARMUP + steps + 1)
    dataset = [{key: value[i] for key, value in batch.items()} for batch in data for i in range(BATCH)]
    with tempfile.TemporaryDirectory() as folder:
        args = TrainingArguments(output_dir=folder, per_device_train_batch_size=BATCH, max_steps=len(data),
                                 learning_rate=1e-4, report_to="none", save_strategy="no", disable_tqdm=True,
                                 use_cpu=True, logging_steps=10_000, dataloader_drop_last=True,
                                 remove_unused_columns=False, train_sampling_strategy="sequential")
        trainer = DistillationTrainer(model=student, teacher=teacher, args=args, train_dataset=dataset,
                                      distillation_args=DistillationArguments(attention_loss="mse"),
                                      data_collator=lambda rows: {k: torch.stack([r[k] for r in rows]) for k in rows[0]},
                                      callbacks=[Marks()])
        trainer.train()
    return sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)


def run_hand_loop(size, steps, marks):
    import torch
    import torch.nn.functional as F

    teacher, student = models(size)
    projection = torch.nn.Linear(student.config.hidden_size, teacher.config.hidden_size)
    trainable = [*student.parameters(), *projection.parameters()]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4)
    heads = teacher.config.num_attention_heads

    def record_scores(model):
        recorded = {"query": [], "key": []}
        for name, module in model.named_modules():
            kind = name.rsplit(".", 1)[-1]
            if kind in recorded:
                module.register_forward_hook(lambda m, a, out, kind=kind: recorded[kind].append(out))
        return recorded

    def scores(recorded, layer):
        q, k = (recorded[kind][layer].view(BATCH, LENGTH, heads, -1).transpose(1, 2) for kind in ("query", "key"))
        return q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5

    teacher_records, student_records = record_scores(teacher), record_scores(student)
    every = teacher.config.num_hidden_layers // student.config.num_hidden_layers
    for batch in batches(WARMUP + steps + 1):
        marks.append(time.perf_counter())
        for recorded in (*teacher_records.values(), *student_records.values()):
            recorded.clear()
        inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
        with torch.no_grad():
            t = teacher(**inputs, output_hidden_states=True)
        s = student(**inputs, output_hidden_states=True)
        loss = F.mse_loss(projection(s.hidden_states[0]), t.hidden_states[0])
        for m in range(1, student.config.num_hidden_layers + 1):
            loss = loss + F.mse_loss(projection(s.hidden_states[m]), t.hidden_states[m * every])
            loss = loss + F.mse_loss(scores(student_records, m - 1), scores(teacher_records, m * every - 1))
        loss = loss - (t.logits.softmax(-1) * s.logits.log_softmax(-1)).sum(-1).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return sum(p.numel() for p in trainable)


def run_textbrewer(size, steps, marks):
    import torch
    from textbrewer import DistillationConfig, GeneralDistiller, TrainingConfig

    teacher, student = models(size)
    every = teacher.config.num_hidden_layers // student.config.num_hidden_layers
    dims = [student.config.hidden_size, teacher.config.hidden_size]
    matches = [{"layer_T": 0, "layer_S": 0, "feature": "hidden", "loss": "hidden_mse", "weight": 1,
                "proj": ["linear", *dims]}]
    for m in range(1, student.config.num_hidden_layers + 1):
        matches.append({"layer_T": m * every, "layer_S": m, "feature": "hidden", "loss": "hidden_mse", "weight": 1,
                        "proj": ["linear", *dims]})
        matches.append({"layer_T": m * every - 1, "layer_S": m - 1, "feature": "attention", "loss": "attention_mse",
                        "weight": 1})

    def adaptor(batch, outputs):
        return {"logits": outputs.logits, "hidden": outputs.hidden_states, "attention": outputs.attentions,
                "inputs_mask": batch["attention_mask"]}

    class Model(torch.nn.Module):  # GeneralDistiller calls model(**batch); the batch carries no labels
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, **batch):
            return self.inner(**batch, output_hidden_states=True, output_attentions=True)

    def mark(batch):
        marks.append(time.perf_counter())
        return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}

    with tempfile.TemporaryDirectory() as folder:
        distiller = GeneralDistiller(
            train_config=TrainingConfig(device="cpu", log_dir=folder, output_dir=folder, ckpt_frequency=1),
            distill_config=DistillationConfig(temperature=1, intermediate_matches=matches, kd_loss_type="ce"),
            model_T=Model(teacher), model_S=Model(student), adaptor_T=adaptor, adaptor_S=adaptor)
        student_model = distiller.model_S
        optimizer = torch.optim.AdamW(student_model.parameters(), lr=1e-4)
        distiller.train(optimizer, batches(WARMUP + steps + 1), num_epochs=1, batch_postprocessor=mark)
        trainable = sum(p.numel() for group in optimizer.param_groups for p in group["params"])
    return trainable


def run_one(impl, size, steps):
    marks = []
    trainable = {"ours": run_ours, "hand_loop": run_hand_loop, "textbrewer": run_textbrewer}[impl](size, steps, marks)
    intervals = [b - a for a, b in zip(marks, marks[1:])][WARMUP:WARMUP + steps]
    return {"impl": impl, "seconds_per_step": statistics.median(intervals), "intervals": intervals,
            "peak_rise_bytes": vm_hwm() - MEMORY["before"], "trainable_parameters": trainable}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", help="run one implementation in this process and print its JSON")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tiny", action="store_true", help="tiny models: check that everything runs")
    parser.add_argument("--textbrewer-python", help="python of a virtual environment with textbrewer 0.2.1")
    parser.add_argument("--out", default=str(RESULTS / "distill_step"))
    args = parser.parse_args()
    size = "tiny" if args.tiny else "full"
    if args.impl:
        print("RESULT " + json.dumps(run_one(args.impl, size, args.steps)), flush=True)
        return
    impls = IMPLS if args.textbrewer_python else IMPLS[:2]
    runs = {impl: [] for impl in impls}
    for round_ in range(args.rounds):
        for impl in impls if round_ % 2 == 0 else list(reversed(impls)):
            python = args.textbrewer_python if impl == "textbrewer" else sys.executable
            command = [python, __file__, "--impl", impl, "--steps", str(args.steps)] + (["--tiny"] if args.tiny else [])
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"{impl} failed:\n{done.stderr[-3000:]}")
            result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])
            print(result, flush=True)
            runs[impl].append(result)
    summary = {impl: {"seconds_per_step": statistics.median(r["seconds_per_step"] for r in results),
                      "peak_rise_mib": statistics.median(r["peak_rise_bytes"] for r in results) / 2 ** 20,
                      "trainable_parameters": results[0]["trainable_parameters"]} for impl, results in runs.items()}
    rows = ["| implementation | s / step | ours vs it | peak memory rise (MiB) | trainable parameters |",
            "|---|---:|---:|---:|---:|"]
    ours = summary["ours"]["seconds_per_step"]
    for impl, s in summary.items():
        rows.append(f"| {impl} | {s['seconds_per_step']:.3f} | {ours / s['seconds_per_step']:.2f}x | "
                    f"{s['peak_rise_mib']:.0f} | {s['trainable_parameters']:,} |")
    print("\n".join(rows))
    if not args.tiny:
        out = Path(args.out)
        out.with_suffix(".json").write_text(json.dumps({"arguments": vars(args), "runs": runs, "summary": summary},
                                                       indent=1) + "\n")
        out.with_suffix(".md").write_text("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
