"""Layer-wise learning-rate decay for fine-tuning BERT-like encoders (ELECTRA uses 0.8, large 0.9).

As google-research/electra ``model/optimization.py``: a parameter at depth ``d`` trains with
``learning_rate * decay ** (num_layers + 2 - d)``, where the embeddings are depth 0, encoder
layer ``i`` is depth ``i + 1`` and the task head is depth ``num_layers + 2`` (the full rate). A
BERT pooler, which ELECTRA does not have, sits between them at ``num_layers + 1``.
"""

import re

from transformers import Trainer

from hf_plm_ext.errors import UserInputError

ENCODER_LAYER = re.compile(r"\.layer\.(\d+)\.")


def parameter_depths(model) -> dict[str, int]:
    """Depth of every trainable parameter of a BERT-like model (``embeddings``, ``encoder.layer.N``, ``pooler``)."""
    num_layers = model.config.num_hidden_layers
    depths = {}
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        layer = ENCODER_LAYER.search(name)
        if layer:
            depths[name] = int(layer.group(1)) + 1
        elif ".embeddings" in f".{name}":
            depths[name] = 0
        elif ".pooler." in f".{name}":
            depths[name] = num_layers + 1
        else:
            depths[name] = num_layers + 2
    if not any(0 < depth <= num_layers for depth in depths.values()):
        raise UserInputError(f"--layerwise_lr_decay: no `encoder.layer.N` parameters in {type(model).__name__}; "
                             f"it applies to BERT-like encoders only")
    return depths


class LayerwiseLRDecayTrainer(Trainer):
    """A ``Trainer`` whose optimizer gives each encoder layer its own decayed learning rate.

    Everything else is the stock optimizer: ``--optim`` and its arguments, ``--weight_decay``
    (not on biases and LayerNorm weights), and the scheduler, which scales every group alike.
    """

    def __init__(self, *args, layerwise_lr_decay: float, **kwargs):
        if not 0.0 < layerwise_lr_decay <= 1.0:
            raise UserInputError(f"--layerwise_lr_decay must be in (0, 1], got {layerwise_lr_decay}")
        self.layerwise_lr_decay = layerwise_lr_decay
        super().__init__(*args, **kwargs)

    def create_optimizer(self, model=None):
        if self.optimizer is not None:
            return self.optimizer
        model = model if model is not None else self.model
        depths = parameter_depths(model)
        top = model.config.num_hidden_layers + 2
        decayed = set(self.get_decay_parameter_names(model))
        groups = {}
        for name, parameter in model.named_parameters():
            if name in depths:
                groups.setdefault((depths[name], name in decayed), []).append(parameter)
        param_groups = [{"params": params, "lr": self.args.learning_rate * self.layerwise_lr_decay ** (top - depth),
                         "weight_decay": self.args.weight_decay if with_decay else 0.0}
                        for (depth, with_decay), params in sorted(groups.items(), key=lambda item: item[0])]
        optimizer_cls, optimizer_kwargs = self.get_optimizer_cls_and_kwargs(self.args, model)
        self.optimizer = optimizer_cls(param_groups, **optimizer_kwargs)
        return self.optimizer
