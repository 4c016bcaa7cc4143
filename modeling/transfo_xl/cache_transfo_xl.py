"""transformers' Cache API for Transformer-XL: the segment memory as a ``Cache`` of one
:class:`TransfoXLMemoryLayer` per layer.

A layer's memory is its last inputs (``mems``, what the paper caches) and their keys and values (``mem_key_values``,
so that decoding does not project them again). It keeps the last ``mem_len`` of them and, beyond those, the tokens of
the last call, so that ``crop`` can take back what assisted decoding rejects; so each new token costs ``mem_len``
positions, flat in the length of the text.
"""

import torch
from transformers.cache_utils import Cache, CacheLayerMixin, DynamicLayer


class TransfoXLMemoryLayer(CacheLayerMixin):
    """One layer's memory: ``memory`` ``[batch, kept, d_model]``, ``key_value`` ``[batch, kept, 2 * n_head * d_head]``
    (None: recomputed from ``memory``), ``seen``: the tokens that went through it (``get_seq_length``); the kept
    positions are the last ``kept`` of those (and of memory given at the start, ``mems``)."""

    is_croppable = True
    is_sliding = False

    def __init__(self, memory=None, key_value=None):
        super().__init__()
        self.memory, self.key_value, self.seen, self.window = memory, key_value, 0, None
        self.keys = self.values = memory
        self.is_initialized = memory is not None

    def remember(self, memory, key_value, new_tokens: int, window: int):
        """After a call over ``new_tokens`` tokens: ``memory`` / ``key_value`` over [memory; the call's tokens], of
        which the last ``window`` (``mem_len``) and the call's own are kept."""
        keep = window + new_tokens
        self.memory = memory[:, -keep:]
        self.key_value = None if key_value is None else key_value[:, -keep:]
        self.seen += new_tokens
        self.window = window
        self.keys = self.values = self.memory
        self.is_initialized = True

    def lazy_initialization(self, key_states, value_states=None):
        raise NotImplementedError("a Transformer-XL memory is filled by the model's forward, not by update()")

    def update(self, key_states, value_states, *args, **kwargs):
        raise NotImplementedError("a Transformer-XL memory is filled by the model's forward, not by update()")

    def get_seq_length(self) -> int:
        return self.seen

    def get_max_length(self) -> int:
        return -1

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        kept = 0 if self.memory is None else self.memory.shape[1]
        return kept + query_length, 0

    def crop(self, tokens_to_remove: int):
        """Forget the last ``-tokens_to_remove`` tokens (transformers' convention: a negative count): possible for the
        tokens of the last call (and further while the memory still holds ``mem_len`` positions before them)."""
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes minus the number of tokens to remove (transformers' convention), got "
                             f"{tokens_to_remove}")
        removed = -tokens_to_remove
        if removed == 0 or self.memory is None:
            return
        kept_after = self.memory.shape[1] - removed
        if removed > self.seen or kept_after < min(self.window, self.seen - removed):
            raise ValueError(f"cannot crop {removed} tokens: the memory keeps {self.memory.shape[1]} positions, and "
                             f"the {self.window} (mem_len) before the kept tokens are gone; crop at most the tokens of "
                             f"the last call")
        self.memory = self.memory[:, :kept_after]
        self.key_value = None if self.key_value is None else self.key_value[:, :kept_after]
        self.seen -= removed
        self.keys = self.values = self.memory

    def _map_batch(self, function):
        if self.memory is not None:
            self.memory = function(self.memory)
            self.key_value = None if self.key_value is None else function(self.key_value)
            self.keys = self.values = self.memory

    def reorder_cache(self, beam_idx):
        self._map_batch(lambda x: x.index_select(0, beam_idx.to(x.device)))

    def batch_repeat_interleave(self, repeats: int):
        self._map_batch(lambda x: x.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices):
        self._map_batch(lambda x: x[indices])

    def reset(self):
        self.__init__()

    def offload(self):
        raise NotImplementedError("a Transformer-XL memory stays on its device (no offloading)")

    def prefetch(self):
        pass


class TransfoXLCache(Cache):
    """The segment memory as a :class:`~transformers.Cache`: what ``generate`` makes for Transformer-XL, what an empty
    ``DynamicCache()`` passed as ``past_key_values`` becomes, and what :meth:`from_mems` makes of a segment's
    ``mems`` (its memory, no tokens seen yet)."""

    def __init__(self, num_layers: int):
        super().__init__(layers=[TransfoXLMemoryLayer() for _ in range(num_layers)])

    @classmethod
    def from_mems(cls, mems, mem_key_values=None):
        cache = cls(len(mems))
        cache.layers[:] = [TransfoXLMemoryLayer(m, None if mem_key_values is None else kv)
                           for m, kv in zip(mems, mem_key_values or [None] * len(mems))]
        return cache


def as_transfo_xl_cache(cache, num_layers: int, d_model: int, model: str):
    """``cache`` checked for a model of ``num_layers`` layers of width ``d_model``: ours, or an empty
    ``DynamicCache`` given our layers; anything else is refused (one line: what it is, what works)."""
    if cache is None:
        return None
    if not isinstance(cache, Cache):
        raise ValueError(f"{model}: past_key_values must be a transformers Cache (a TransfoXLCache, or an empty "
                         f"DynamicCache), got {type(cache).__name__}; a segment's memory goes in as mems")
    layers = cache.layers
    if layers and all(isinstance(layer, TransfoXLMemoryLayer) for layer in layers):
        if len(layers) != num_layers:
            raise ValueError(f"{model}: the cache has {len(layers)} layers, this model {num_layers}: it belongs to "
                             f"another model")
        memory = layers[0].memory
        if memory is not None and memory.shape[-1] != d_model:
            raise ValueError(f"{model}: the cache's memory is {memory.shape[-1]} wide, this model's d_model "
                             f"{d_model}: it belongs to another model")
        return cache
    if all(type(layer) is DynamicLayer and layer.get_seq_length() == 0 for layer in layers):
        cache.layers[:] = [TransfoXLMemoryLayer() for _ in range(num_layers)]
        cache.layer_class_to_replicate = None
        return cache
    kinds = sorted({type(layer).__name__ for layer in layers})
    raise ValueError(f"{model} decodes from its own segment memory (TransfoXLCache: each layer's inputs, attended "
                     f"with relative positions): got a {type(cache).__name__} of {'/'.join(kinds)} holding "
                     f"{cache.get_seq_length()} tokens; pass none, a TransfoXLCache or an empty DynamicCache (PEFT "
                     f"prefix tuning's virtual keys and values have no memory rows: use prompt tuning or LoRA)")


__all__ = ["TransfoXLCache", "TransfoXLMemoryLayer", "as_transfo_xl_cache"]
