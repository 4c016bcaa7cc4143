"""transformers' Cache API for a causal rev-lsh stack: one :class:`RevLSHLayerCache` per attention layer.

A layer keeps its keys and values ``[batch, heads, seen, head_size]`` in buffers that grow by doubling (a new token
costs one position, not a copy of the whole cache). An LSH layer also keeps its hash rotations and the positions
grouped by bucket, so that a new token finds the neighbours of its sorted chunk by counting, without sorting the
whole sequence again: its cost stays flat in the context length.
"""

import torch
from transformers.cache_utils import Cache, CacheLayerMixin, DynamicLayer


class RevLSHLayerCache(CacheLayerMixin):
    """One attention layer's cache (transformers' ``CacheLayerMixin``): croppable, reorderable for beams.

    ``self[name]``: the cached ``[batch, heads, seen, ...]`` tensor of ``name`` (``keys``, ``values``; LSH: ``buckets``
    ``[batch, heads, seen, rounds]``, padding in the bucket after the others). ``attention_mask``: ``[batch, seen]`` of
    the tokens seen (None: no padding). LSH only: ``rotations`` / ``factors`` (what hashes the tokens that follow),
    ``counts`` ``[batch, heads, rounds, buckets + 1]`` and ``members`` ``[batch, heads, rounds, buckets + 1, capacity]``
    (each bucket's positions in order).
    """

    is_croppable = True
    is_sliding = False

    def __init__(self):
        super().__init__()
        self.length = 0
        self.buffers = {}
        self.attention_mask = None
        self.rotations = self.factors = self.counts = self.members = None

    def __getitem__(self, name):
        return self.buffers[name][:, :, :self.length]

    def lazy_initialization(self, key_states, value_states=None):
        self.device, self.is_initialized = key_states.device, True

    def append(self, **new) -> list[torch.Tensor]:
        """Add each ``[batch, heads, new, ...]`` tensor after the cached ones; returns the whole cached tensors."""
        if not self.is_initialized:
            self.lazy_initialization(next(iter(new.values())))
        added = next(iter(new.values())).shape[2]
        end = self.length + added
        for name, tensor in new.items():
            buffer = self.buffers.get(name)
            if tensor.requires_grad:  # written in place, a buffer would break autograd: an exact-size copy
                self.buffers[name] = tensor if buffer is None else torch.cat([self[name], tensor], dim=2)
                continue
            if buffer is None or buffer.shape[2] < end or buffer.requires_grad:
                grown = tensor.new_empty(*tensor.shape[:2], max(end, 2 * self.length, 16), *tensor.shape[3:])
                if buffer is not None:
                    grown[:, :, :self.length] = buffer[:, :, :self.length]
                self.buffers[name] = buffer = grown
            buffer[:, :, self.length:end] = tensor
        self.length = end
        self.keys, self.values = self.buffers["keys"][:, :, :end], self.buffers["values"][:, :, :end]
        return [self[name] for name in new]

    def update(self, key_states, value_states, *args, **kwargs):
        return tuple(self.append(keys=key_states, values=value_states))

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return -1

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    # --- LSH: the positions grouped by bucket

    def group_by_bucket(self, buckets, num_groups):
        """Start the groups from a prefill's ``buckets`` ``[batch, heads, rounds, seen]`` (padding already in the last
        group, ``num_groups - 1``)."""
        order = buckets.argsort(dim=-1, stable=True)
        self.counts = torch.zeros(*buckets.shape[:3], num_groups, dtype=torch.long, device=buckets.device)
        self.counts.scatter_add_(-1, buckets, torch.ones_like(buckets))
        starts = self.counts.cumsum(-1) - self.counts
        sorted_buckets = buckets.gather(-1, order)
        within = torch.arange(buckets.shape[-1], device=buckets.device) - starts.gather(-1, sorted_buckets)
        capacity = max(16, 2 * int(self.counts.max()))
        self.members = torch.zeros(*self.counts.shape, capacity, dtype=torch.long, device=buckets.device)
        self.members.view(*buckets.shape[:3], -1).scatter_(-1, sorted_buckets * capacity + within, order)

    def join_buckets(self, bucket, position: int):
        """The new token at ``position`` joins ``bucket`` ``[batch, heads, rounds]`` (the last of its group)."""
        within = self.counts.gather(-1, bucket.unsqueeze(-1))
        if int(within.max()) >= self.members.shape[-1]:
            grown = self.members.new_zeros(*self.members.shape[:-1], 2 * self.members.shape[-1])
            grown[..., :self.members.shape[-1]] = self.members
            self.members = grown
        capacity = self.members.shape[-1]
        self.members.view(*bucket.shape, -1).scatter_(-1, bucket.unsqueeze(-1) * capacity + within,
                                                      torch.full_like(within, position))
        self.counts.scatter_add_(-1, bucket.unsqueeze(-1), torch.ones_like(within))

    def positions_at_ranks(self, ranks, rounds):
        """``(positions, groups)`` of the tokens at ``ranks`` ``[batch, heads, r, k]`` of the sorted order of round
        ``rounds`` (same shape). A rank at or past the tokens seen is the padding to the chunk length: position =
        rank, group -1."""
        return positions_at_ranks(self.counts, self.members, ranks, rounds)

    # --- what generate and beam search do to a cache

    def _batch_tensors(self):
        return [name for name in ("counts", "members", "attention_mask") if getattr(self, name) is not None]

    def _map_batch(self, function):
        for name, buffer in self.buffers.items():
            self.buffers[name] = function(buffer)
        for name in self._batch_tensors():
            setattr(self, name, function(getattr(self, name)))
        if self.length:
            self.keys, self.values = self["keys"], self["values"]

    def reorder_cache(self, beam_idx):
        self._map_batch(lambda x: x.index_select(0, beam_idx.to(x.device)))

    def batch_repeat_interleave(self, repeats: int):
        self._map_batch(lambda x: x.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices):
        self._map_batch(lambda x: x[indices])

    def crop(self, tokens_to_remove: int):
        """Forget the last ``-tokens_to_remove`` tokens (transformers' convention: a negative count)."""
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes minus the number of tokens to remove (transformers' convention), got "
                             f"{tokens_to_remove}")
        removed = min(-tokens_to_remove, self.length)
        if removed == 0:
            return
        if self.counts is not None:
            dropped = self["buckets"][:, :, -removed:].transpose(2, 3)  # [b, h, rounds, removed]
            self.counts.scatter_add_(-1, dropped, -torch.ones_like(dropped))
        self.length -= removed
        if self.attention_mask is not None:
            self.attention_mask = self.attention_mask[:, :self.length]
        self.keys, self.values = self["keys"], self["values"]

    def reset(self):
        self.__init__()

    def offload(self):
        raise NotImplementedError("a rev-lsh cache stays on its device (no offloading)")

    def prefetch(self):
        pass


def positions_at_ranks(counts, members, ranks, rounds):
    """:meth:`RevLSHLayerCache.positions_at_ranks` of the groups ``counts`` ``[batch, heads, rounds, groups]`` and
    ``members`` ``[batch, heads, rounds, groups, capacity]`` (a group's positions in order: the first ``counts`` of
    them are the group, so earlier counts give the order as it stood before the later tokens joined)."""
    batch, heads, num_rounds, num_groups = counts.shape
    flat_rounds = rounds.flatten(2)
    group_index = (flat_rounds[..., None] * num_groups + torch.arange(num_groups, device=ranks.device)).flatten(2)
    ends = counts.cumsum(-1).view(batch, heads, -1).gather(2, group_index).view(*ranks.shape, num_groups)
    group = (ends <= ranks.unsqueeze(-1)).sum(-1)
    beyond = group == num_groups
    group = group.clamp(max=num_groups - 1)
    group_counts = counts.reshape(batch, heads, -1).gather(2, (flat_rounds * num_groups + group.flatten(2)))
    start = ends.gather(-1, group.unsqueeze(-1)).squeeze(-1) - group_counts.view(ranks.shape)
    capacity = members.shape[-1]
    slot = ((rounds * num_groups + group) * capacity + (ranks - start).clamp(0, capacity - 1)).flatten(2)
    member = members.reshape(batch, heads, -1).gather(2, slot).view(ranks.shape)
    return torch.where(beyond, ranks, member), torch.where(beyond, -1, group)


class RevLSHCache(Cache):
    """A :class:`~transformers.Cache` of one :class:`RevLSHLayerCache` per layer: what ``generate`` makes for a causal
    rev-lsh model, and what an empty ``DynamicCache()`` passed as ``past_key_values`` becomes."""

    def __init__(self, num_layers: int):
        super().__init__(layers=[RevLSHLayerCache() for _ in range(num_layers)])


def as_rev_lsh_cache(cache, num_layers: int, num_heads: int, head_size: int, model: str):
    """``cache`` checked for a model of ``num_layers`` layers of ``num_heads`` x ``head_size``: ours, or an empty
    ``DynamicCache`` given our layers; anything else is refused (one line: what it is, what works)."""
    if cache is None:
        return None
    if not isinstance(cache, Cache):
        raise ValueError(f"{model}: past_key_values must be a transformers Cache (a RevLSHCache, or an empty "
                         f"DynamicCache), got {type(cache).__name__}")
    layers = cache.layers
    if all(isinstance(layer, RevLSHLayerCache) for layer in layers) and layers:
        if len(layers) != num_layers:
            raise ValueError(f"{model}: the cache has {len(layers)} layers, this model {num_layers}: it belongs to "
                             f"another model")
        keys = layers[0].keys
        if layers[0].length and (keys.shape[1], keys.shape[3]) != (num_heads, head_size):
            raise ValueError(f"{model}: the cache holds {keys.shape[1]} heads x {keys.shape[3]}, this model "
                             f"{num_heads} x {head_size}: it belongs to another model")
        return cache
    if all(type(layer) is DynamicLayer and layer.get_seq_length() == 0 for layer in layers):
        cache.layers[:] = [RevLSHLayerCache() for _ in range(num_layers)]
        cache.layer_class_to_replicate = None
        return cache
    kinds = sorted({type(layer).__name__ for layer in layers})
    raise ValueError(f"{model} decodes from its own RevLSHCache (LSH layers keep buckets and rotations, not only "
                     f"keys and values): got a {type(cache).__name__} of {'/'.join(kinds)} holding "
                     f"{cache.get_seq_length()} tokens; pass none, a RevLSHCache or an empty DynamicCache (PEFT "
                     f"prefix tuning's virtual keys and values cannot enter LSH buckets: use prompt tuning or LoRA)")


__all__ = ["RevLSHCache", "RevLSHLayerCache", "as_rev_lsh_cache"]
