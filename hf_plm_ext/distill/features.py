"""What a model computes inside its attention, read with forward hooks: the query, key and value projections of
every layer, from which the attention scores (``q·k / √d``, before the mask and softmax) and the values follow.

This reads BERT-like attention (BERT, RoBERTa, ELECTRA, MacBERT, ALBERT: ``query``/``key``/``value``; DistilBERT:
``q_lin``/``k_lin``/``v_lin``) whatever its implementation (eager, SDPA), which ``output_attentions`` cannot:
it returns probabilities, and only from eager attention.
"""

from contextlib import contextmanager
from functools import partial

import torch
from torch import nn

PROJECTION_NAMES = (("query", "key", "value"), ("q_lin", "k_lin", "v_lin"))


class AttentionProjections:
    """Forward hooks on ``model``'s query / key / value projections, recording their outputs (``[b, T, width]``)
    in call order during :meth:`capture`: entry ``m - 1`` is layer ``m`` (ALBERT's shared layer records once per
    use)."""

    def __init__(self, model: nn.Module):
        config = model.config
        self.num_heads = config.num_attention_heads
        self.depth = config.num_hidden_layers
        modules = dict(model.named_modules())
        for names in PROJECTION_NAMES:
            found = {kind: [m for n, m in modules.items() if n.rsplit(".", 1)[-1] == name and isinstance(m, nn.Linear)]
                     for kind, name in zip(("query", "key", "value"), names)}
            counts = {len(kind_modules) for kind_modules in found.values()}
            # one query, key and value per layer (ALBERT: one shared); chunked or hashed attention (rev-lsh's
            # local / LSH layers, or a shared query-key) has no T x T scores to read
            dense = (len(counts) == 1 and counts <= {1, self.depth}
                     and set(getattr(config, "attn_layers", None) or ["full"]) == {"full"})
            if all(found.values()) and dense:
                break
        else:
            raise ValueError(f"the attention losses read BERT-like attention's query/key/value projections; a "
                             f"{config.model_type!r} model has none this knows ({', '.join('/'.join(n) for n in PROJECTION_NAMES)}): "
                             f"distil it with the hidden-state losses only")
        self.records = {kind: [] for kind in found}
        self.recording = False
        self.handles = [module.register_forward_hook(partial(self._record, kind))
                        for kind, kind_modules in found.items() for module in kind_modules]

    def _record(self, kind, module, args, output):
        if self.recording:
            self.records[kind].append(output)

    @contextmanager
    def capture(self):
        """Record the projections of one forward pass (what an earlier pass recorded is dropped)."""
        for recorded in self.records.values():
            recorded.clear()
        self.recording = True
        try:
            yield self
        finally:
            self.recording = False

    def _layer(self, kind, layer):
        recorded = self.records[kind]
        if len(recorded) < layer:
            raise RuntimeError(f"{kind} projections of {len(recorded)} layers were recorded; layer {layer} was asked "
                               f"for (call inside capture(), with the model's forward)")
        return recorded[layer - 1]

    def _heads(self, projected: torch.Tensor) -> torch.Tensor:
        batch, length, width = projected.shape
        return projected.view(batch, length, self.num_heads, width // self.num_heads).transpose(1, 2)

    def scores(self, layer: int) -> torch.Tensor:
        """``[b, h, T, T]`` attention scores of ``layer`` (1-based): ``q·kᵀ / √d_head``, no mask added."""
        query, key = self._heads(self._layer("query", layer)), self._heads(self._layer("key", layer))
        return query @ key.transpose(-1, -2) / query.shape[-1] ** 0.5

    def values(self, layer: int) -> torch.Tensor:
        """``[b, T, width]`` value projections of ``layer`` (1-based)."""
        return self._layer("value", layer)

    def remove(self):
        for handle in self.handles:
            handle.remove()
