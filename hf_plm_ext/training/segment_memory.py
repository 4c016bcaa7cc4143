"""Carry a segment-memory model's ``mems`` from batch to batch through the stock ``Trainer``.

transformers 5 removed the Trainer's ``past_index`` (Transformer-XL's memory support). Here the
memory lives on the Trainer: each batch gets the previous batch's ``mems`` and leaves its own.
Training and evaluation keep separate memories; evaluation and prediction start empty every time
(and leave the training memory alone: the training streams go on where they were), training starts
empty at every epoch. In evaluation the model's ``mem_key_values`` (if it returns them) travel with
the ``mems``. With gradient accumulation every micro-batch continues the one before, exactly as
without it. The data must come in stream order (:class:`~hf_plm_ext.data.segment_streams.StreamSegments`
with ``train_sampling_strategy="sequential"``; another strategy is refused). Memories are not
checkpointed: a resumed run starts its streams with an empty memory.
"""

import math

import torch
from transformers import TrainerCallback
from transformers.trainer_utils import has_length

from hf_plm_ext.training.trainer import SubLossTrainer


def carried_memory(outputs) -> dict:
    """The next segment's memory arguments from a model's outputs: ``mems``, and ``mem_key_values`` when
    the model returned them (its key/value cache, under ``no_grad`` only)."""
    memory = {"mems": outputs.get("mems")}
    if outputs.get("mem_key_values") is not None:
        memory["mem_key_values"] = outputs["mem_key_values"]
    return memory


def predicted_tokens(inputs) -> torch.Tensor:
    """How many targets a causal language-model batch has: ``shift_labels``, or ``labels`` shifted by one (the
    model predicts ``labels[t + 1]`` at position ``t``)."""
    if inputs.get("shift_labels") is not None:
        return (inputs["shift_labels"] != -100).sum()
    return (inputs["labels"][:, 1:] != -100).sum()


class ForgetAtEpochStart(TrainerCallback):
    def __init__(self, memory: dict):
        self.memory = memory

    def on_train_begin(self, args, state, control, **kwargs):
        self.memory["train"] = None

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.memory["train"] = None


class SegmentMemoryTrainer(SubLossTrainer):
    """A ``Trainer`` for models whose forward takes ``mems`` and returns the next ``mems``."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if has_length(self.train_dataset) and self.args.train_sampling_strategy != "sequential":
            raise ValueError(f"SegmentMemoryTrainer carries each batch's memory into the next, so the batches must "
                             f"continue each other: set TrainingArguments(train_sampling_strategy='sequential') "
                             f"(got {self.args.train_sampling_strategy!r}, which reorders them)")
        self.memory = {"train": None, "eval": None}
        self.add_callback(ForgetAtEpochStart(self.memory))

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        slot = "train" if model.training else "eval"
        loss, outputs = super().compute_loss(model, {**inputs, **(self.memory[slot] or {})}, return_outputs=True,
                                             num_items_in_batch=num_items_in_batch)
        self.memory[slot] = carried_memory(outputs)
        if slot == "eval":  # the loss is a mean over the batch's targets: weigh it by their number
            targets = predicted_tokens(inputs).to(self.eval_totals.dtype)
            self.eval_totals += torch.stack([loss.detach().to(targets.dtype) * targets, targets])
        return (loss, outputs) if return_outputs else loss

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        # without all of label_names in the batch the Trainer calls the model directly, and the memory is lost
        missing = [name for name in self.label_names if inputs.get(name) is None]
        if missing:
            raise ValueError(f"SegmentMemoryTrainer evaluates through compute_loss, which carries the memory, and the "
                             f"Trainer only calls it when the batch holds every one of label_names "
                             f"{list(self.label_names)}; this one lacks {missing}. Set TrainingArguments(label_names="
                             f"['shift_labels']) (or ['labels']) to what the data has")
        return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys)

    def evaluation_loop(self, dataloader, description, prediction_loss_only=None, ignore_keys=None,
                        metric_key_prefix="eval"):
        """Each evaluate() and predict() starts from an empty memory. Adds ``{prefix}_perplexity``: exp of the mean
        loss per predicted token (``{prefix}_loss`` is a mean of batch means, so a shorter last segment would
        weigh as much as a full one)."""
        self.memory["eval"] = None
        exact = self.args.device.type not in ("mps", "xla")  # neither has float64
        self.eval_totals = torch.zeros(2, dtype=torch.float64 if exact else torch.float32, device=self.args.device)
        try:
            output = super().evaluation_loop(dataloader, description, prediction_loss_only, ignore_keys,
                                             metric_key_prefix)
        finally:
            self.memory["eval"] = None
        nll, targets = self.accelerator.reduce(self.eval_totals, reduction="sum").tolist()
        if targets:
            output.metrics[f"{metric_key_prefix}_perplexity"] = math.exp(min(nll / targets, 700))
        return output
