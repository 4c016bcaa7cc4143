"""A ``Trainer`` that logs a model's named sub-losses and accuracies (``mlm_loss``, ``sop_loss``,
``discriminator_accuracy``, ...) next to ``loss``."""

import torch
from transformers import Trainer

from hf_plm_ext.checkpoints.saving import CheckpointArgumentsAsJson


class SubLossTrainer(Trainer):
    """Logs the mean of every ``*_loss`` and ``*_accuracy`` field of the model's output over the logging interval
    and over the processes.

    The fields are summed as detached tensors on their device (no host sync per micro-batch) and brought to the
    host once per log (and at the end of training, for the steps since the last), averaged over the ranks there
    (``Trainer.log`` runs on every rank). ``sub_loss_history`` keeps every logged average. Its checkpoints hold no pickled arguments (:class:`CheckpointArgumentsAsJson`), and a
    resume does not warn about tied weights, which a checkpoint leaves out and tying restores.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._sub_loss_sums, self._sub_loss_count, self.sub_loss_history = {}, 0, []
        self.add_callback(CheckpointArgumentsAsJson)

    def _issue_warnings_after_load(self, load_result):
        tied = tied_weight_names(self.model)
        untied = [key for key in load_result.missing_keys if key not in tied]
        if len(untied) < len(load_result.missing_keys):
            for module in self.model.modules():
                if getattr(module, "all_tied_weights_keys", None):
                    module.tie_weights()
        super()._issue_warnings_after_load(load_result._replace(missing_keys=untied))

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch)
        if model.training and hasattr(outputs, "keys"):
            for name in outputs.keys():
                if name.endswith(("_loss", "_accuracy")) and outputs[name] is not None:
                    value = outputs[name].detach().float().mean()
                    self._sub_loss_sums[name] = self._sub_loss_sums.get(name, 0.0) + value
            self._sub_loss_count += 1
        return (loss, outputs) if return_outputs else loss

    def log(self, logs, start_time=None):
        # a training log, or the end of training's (what the steps since the last log averaged)
        if self._sub_loss_count and ("loss" in logs or "train_loss" in logs):
            if self._sub_loss_sums:  # a model without named sub-losses (a plain MLM head) logs only `loss`
                names = sorted(self._sub_loss_sums)
                means = torch.stack([self._sub_loss_sums[name] for name in names]) / self._sub_loss_count
                means = self.accelerator.reduce(means, reduction="mean")
                averages = {name: round(value, 4) for name, value in zip(names, means.tolist())}
                logs.update(averages)
                self.sub_loss_history.append({"step": self.state.global_step, **averages})
            self._sub_loss_sums, self._sub_loss_count = {}, 0
        super().log(logs, start_time)


def tied_weight_names(model) -> set[str]:
    """The state-dict names of ``model``'s weights tied to another (a masked-LM decoder to the input embeddings),
    also inside a wrapper (a distillation model's student)."""
    names = set()
    for prefix, module in model.named_modules():
        for target in getattr(module, "all_tied_weights_keys", None) or {}:
            names.add(f"{prefix}.{target}" if prefix else target)
    return names
