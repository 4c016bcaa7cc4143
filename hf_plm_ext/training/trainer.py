"""A ``Trainer`` that logs a model's named sub-losses and accuracies (``mlm_loss``, ``sop_loss``,
``discriminator_accuracy``, ...) next to ``loss``."""

from transformers import Trainer


class SubLossTrainer(Trainer):
    """Logs the mean of every ``*_loss`` and ``*_accuracy`` field of the model's output over the logging interval."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._sums, self._count, self.sub_loss_history = {}, 0, []

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch)
        if model.training and hasattr(outputs, "keys"):
            for name in outputs.keys():
                if name.endswith(("_loss", "_accuracy")) and outputs[name] is not None:
                    self._sums[name] = self._sums.get(name, 0.0) + outputs[name].detach().item()
            self._count += 1
        return (loss, outputs) if return_outputs else loss

    def log(self, logs, start_time=None):
        if self._count and "loss" in logs:
            averages = {name: round(total / self._count, 4) for name, total in self._sums.items()}
            logs.update(averages)
            self.sub_loss_history.append({"step": self.state.global_step, **averages})
            self._sums, self._count = {}, 0
        super().log(logs, start_time)
