"""transformers' Cache API for Transformer-XL: the segment memory as a ``Cache`` of one
:class:`TransfoXLMemoryLayer` per layer.

A layer's memory is its inputs (``mems``, what the paper caches) and their keys and values (``mem_key_values``, so
that decoding does not project them again), in buffers that grow by doubling. A decoded token attends to the last
``mem_len`` of them (and itself), so its cost is flat in the length of the text; the older rows stay so that ``crop``
can take back any number of tokens (assisted decoding's rejected drafts), as a key/value cache keeps every token.
A row, once written, is never written again in place (an append after a crop starts new buffers), so the ``mems`` a
cached call returns are views of the memory, not copies.
"""

import torch
from transformers.cache_utils import Cache, CacheLayerMixin, DynamicLayer


class TransfoXLMemoryLayer(CacheLayerMixin):
    """One layer's memory: ``rows`` ``[batch, held, d_model]`` (its inputs), ``key_values`` ``[batch, held, 2 * n_head *
    d_head]`` (None: recomputed from the rows), ``seen``: the tokens that went through it (``get_seq_length``; the
    rows also hold the memory a :meth:`TransfoXLCache.from_mems` cache started from)."""

    is_croppable = True
    is_sliding = False

    def __init__(self, memory=None, key_value=None):
        super().__init__()
        self.buffers, self.held, self.seen, self.written = {}, 0, 0, 0
        if memory is not None:
            self.append(memory, key_value, tokens=0)

    @property
    def rows(self):
        return self.buffers["rows"][:, :self.held] if self.held else None

    @property
    def key_values(self):
        return self.buffers["key_values"][:, :self.held] if self.held and "key_values" in self.buffers else None

    @property
    def key_mask(self):
        """``[batch, held]`` bool, False at padding; None: no padding held."""
        return self.buffers["mask"][:, :self.held, 0] if self.held and "mask" in self.buffers else None

    def last(self, count: int):
        """``(rows, key_values)`` of the last ``count`` positions (key_values None where not kept)."""
        start = max(0, self.held - count)
        key_values = self.key_values
        return self.rows[:, start:], None if key_values is None else key_values[:, start:]

    def last_mask(self, count: int):
        """The padding mask of the last ``count`` positions, ``[batch, count]`` (None: no padding held)."""
        mask = self.key_mask
        return None if mask is None else mask[:, max(0, self.held - count):]

    def append(self, rows, key_values=None, tokens=None, key_mask=None):
        """Add ``rows`` ``[batch, new, d_model]`` (and their ``key_values``; None: the layer stops keeping them), the
        inputs of ``tokens`` tokens (default: one per row); ``key_mask`` ``[batch, new]`` (bool, False at padding;
        None: no padding)."""
        end = self.held + rows.shape[1]
        if key_values is None:
            self.buffers.pop("key_values", None)
        elif self.held and "key_values" not in self.buffers:
            key_values = None  # the earlier rows' are unknown
        if key_mask is None and "mask" in self.buffers:
            key_mask = torch.ones(rows.shape[:2], dtype=torch.bool, device=rows.device)
        if key_mask is not None and "mask" not in self.buffers and self.held:  # the earlier rows: no padding
            self.buffers["mask"] = torch.ones(rows.shape[0], self.buffers["rows"].shape[1], 1, dtype=torch.bool,
                                              device=rows.device)
        mask = None if key_mask is None else key_mask.to(torch.bool).unsqueeze(-1)
        rewriting = self.held < self.written  # after a crop: rows a returned view may still read
        for name, new in (("rows", rows), ("key_values", key_values), ("mask", mask)):
            if new is None:
                continue
            buffer = self.buffers.get(name)
            if buffer is None or buffer.shape[1] < end or rewriting:
                grown = new.new_empty(new.shape[0], max(end, 2 * self.held, 16), new.shape[2])
                if buffer is not None:
                    grown[:, :self.held] = buffer[:, :self.held]
                self.buffers[name] = buffer = grown
            buffer[:, self.held:end] = new
        self.held, self.seen = end, self.seen + (rows.shape[1] if tokens is None else tokens)
        self.written = end
        self.keys = self.values = self.rows
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
        return self.held + query_length, 0

    def crop(self, tokens_to_remove: int):
        """Forget the last ``-tokens_to_remove`` tokens (transformers' convention: a negative count)."""
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes minus the number of tokens to remove (transformers' convention), got "
                             f"{tokens_to_remove}")
        removed = -tokens_to_remove
        if removed > self.seen:
            raise ValueError(f"cannot crop {removed} tokens: the cache has seen {self.seen}")
        self.held, self.seen = self.held - removed, self.seen - removed
        self.keys = self.values = self.rows

    def _map_batch(self, function):
        for name, buffer in self.buffers.items():
            self.buffers[name] = function(buffer)
        self.keys = self.values = self.rows

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
        cache.layers[:] = [TransfoXLMemoryLayer(m, kv) for m, kv in zip(mems, mem_key_values or [None] * len(mems))]
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
        memory = layers[0].rows
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
