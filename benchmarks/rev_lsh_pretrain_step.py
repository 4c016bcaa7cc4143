"""Issue 40, item 6: a ``pretrain rev-lsh`` training step against the same step written by hand.

The same tiny model (``RevLSHConfig.from_size("tiny")``, masked LM), the same batches (the command's own data and
collator: 256-token blocks of a Gutenberg book, batch 8), the same optimizer settings (AdamW, lr 5e-5, gradient
clipping at 1.0): the Trainer run of ``hf_plm_ext.training.pretrain`` timed by a callback between consecutive
steps (after ``--warmup`` steps), against a loop of forward, backward, clipping, AdamW and zero_grad. Median
seconds per step of each and their ratio, one process, the hand-written loop first.

    .venv/bin/python benchmarks/rev_lsh_pretrain_step.py --tokenizer TOKENIZER_DIR
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from transformers import TrainerCallback, TrainingArguments

from hf_plm_ext.training.objectives.rev_lsh import RevLSHArguments, RevLSHPretraining
from hf_plm_ext.training.pretrain import pretrain

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT.parent / "shared/data/corpus/en/gutenberg/11-0.txt"


class StepTimes(TrainerCallback):
    def __init__(self):
        self.ends = []

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.perf_counter())


def hand_written(model, batches, steps):
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.0)
    model.train()
    times = []
    for step in range(steps):
        batch = batches[step % len(batches)]
        started = time.perf_counter()
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        times.append(time.perf_counter() - started)
    return times


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--out", default="benchmarks/results/rev_lsh_pretrain_step")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        pretrain_args = RevLSHArguments(corpus=[str(BOOK)], tokenizer=args.tokenizer, output=f"{scratch}/run",
                                        size="tiny", max_seq_length=256)
        training_args = TrainingArguments(output_dir=scratch, max_steps=args.steps, per_device_train_batch_size=8,
                                          report_to="none", disable_tqdm=True, save_strategy="no", seed=0,
                                          use_cpu=True)
        objective = RevLSHPretraining(pretrain_args)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
        data = objective.build_data(tokenizer, training_args)
        collator = objective.collator(tokenizer, 0)
        torch.manual_seed(0)
        batches = [collator([data["train"][i] for i in range(start, start + 8)]) for start in range(0, 64, 8)]
        model = objective.head.from_config(objective.fresh_config(tokenizer))
        by_hand = hand_written(model, batches, args.steps)[args.warmup:]

        timer = StepTimes()
        import hf_plm_ext.training.pretrain as pretraining

        original = pretraining.build_trainer

        def with_timer(*a, **k):
            trainer = original(*a, **k)
            trainer.add_callback(timer)
            return trainer

        pretraining.build_trainer = with_timer
        try:
            pretrain(pretrain_args, training_args)
        finally:
            pretraining.build_trainer = original
        trainer_steps = [b - a for a, b in zip(timer.ends, timer.ends[1:])][args.warmup:]
    result = {"hand_written_s": statistics.median(by_hand), "pretrain_s": statistics.median(trainer_steps),
              "steps_timed": len(trainer_steps)}
    result["ratio"] = result["pretrain_s"] / result["hand_written_s"]
    print(json.dumps(result))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
