"""The reversible stack (RevNet, Gomez et al., 2017; as in the Reformer): a layer keeps two halves, ``x1`` and
``x2``, and computes ``y1 = x1 + attention(x2)``, ``y2 = x2 + feed_forward(y1)``, so that its input follows from its
output (``x2 = y2 - feed_forward(y1)``, ``x1 = y1 - attention(x2)``). :class:`ReversibleFunction` runs the layers
as one autograd node that keeps only the last output and recomputes each layer's input in backward, so activation
memory does not grow with depth; the recomputation reuses the forward's LSH buckets and replays its dropout masks,
which each block draws from a seed of its own (:class:`SeededMasks`). Under ``torch.compile``
:class:`TracedReversibleFunction` does the same in a form dynamo follows, so that a training step is one graph.
"""

import math

import torch
from torch import nn
from transformers.modeling_layers import GradientCheckpointingLayer

UINT32 = 0xFFFFFFFF


class SeededMasks:
    """Dropout masks from a seed (a 0-d int64 tensor) and the number of masks drawn from it before, so that the
    same code run again under the same seed draws the same masks. Eager: torch's generator seeded with both (as
    fast as torch's dropout); traced by ``torch.compile``: a counter-based hash of the element's index
    (:func:`hashed_bits`), which dynamo follows and inductor fuses into the multiply (a generator's state cannot
    be traced). The two give different masks for one seed: a compiled step and an eager one agree in law, not in
    their draws."""

    def __init__(self, seed):
        self.seed, self.drawn = seed, 0

    def keep(self, like, p):
        """A mask of ``like``'s shape, dtype and device: 1 / (1 - p) where kept (probability 1 - p), else 0."""
        self.drawn += 1
        if torch.compiler.is_compiling():
            threshold = min(int(p * 2**32), UINT32)
            kept = hashed_bits(self.seed.to(like.device), self.drawn, like.shape) >= threshold
            return kept.to(like.dtype) / (1 - p)
        generator = torch.Generator(like.device).manual_seed(int(self.seed) << 20 | self.drawn)
        return torch.empty_like(like).bernoulli_(1 - p, generator=generator).div_(1 - p)


def mix32(x):
    """A bijection of 32-bit values that spreads each input bit over all output bits (Wellons' two-multiply
    hash; its second constant one below 2^31, so that the products of values held in int64 stay below 2^63)."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & UINT32
    x = x ^ (x >> 15)
    x = (x * 0x5BD1E995) & UINT32
    return x ^ (x >> 16)


def hashed_bits(seed, drawn: int, shape):
    """Uniform 32-bit values of ``shape`` (int64), a function of ``seed``, ``drawn`` and each element's index."""
    key = mix32((seed * 0x9E3779B1 + drawn) & UINT32)
    index = torch.arange(math.prod(shape), device=seed.device).view(shape)
    return mix32(mix32(index) ^ key)


def block_masks(dropout_seeds):
    """``(the attention block's, the feed-forward block's)`` :class:`SeededMasks` from a layer's ``[2]`` seeds, or
    ``(None, None)`` (torch's RNG) for None."""
    return (None, None) if dropout_seeds is None else tuple(SeededMasks(seed) for seed in dropout_seeds)


def layer_seeds(dropout_seeds, index):
    """Layer ``index``'s row of the stack's ``[layers, 2]`` seeds, or None."""
    return None if dropout_seeds is None else dropout_seeds[index]


def forward_autocast(device) -> dict:
    """The autocast state the forward runs under, for the backward to recompute under it (as checkpoint does)."""
    return dict(device_type=device.type, enabled=torch.is_autocast_enabled(device.type),
                dtype=torch.get_autocast_dtype(device.type))


def dropout(x, p, training, masks: SeededMasks | None = None):
    """``nn.functional.dropout``, its mask drawn from ``masks`` where given, else from torch's RNG."""
    if masks is None or not training or p == 0:
        return nn.functional.dropout(x, p, training)
    return x * masks.keep(x, p)


class ReplayableDropout(nn.Dropout):
    """``nn.Dropout`` that takes :class:`SeededMasks` to draw from (no weights: checkpoints are unchanged)."""

    def forward(self, x, masks: SeededMasks | None = None):
        return dropout(x, self.p, self.training, masks)


class ReversibleLayer(GradientCheckpointingLayer):
    """One reversible layer: ``y1 = x1 + attention(x2)``, ``y2 = x2 + feed_forward(y1)``. ``attention`` returns
    ``(output, buckets, probabilities or None)`` and takes the buckets back to recompute the same output."""

    def __init__(self, attention: nn.Module, feed_forward: nn.Module):
        super().__init__()
        self.attention = attention
        self.feed_forward = feed_forward

    def forward(self, x1, x2, attention_mask=None, num_hashes=None, output_attentions=False, record=None,
                cache=None, padded_length=None, dropout_seeds=None):
        """``(y1, y2, attention probabilities or None)``, each half ``[batch, seq, hidden]``. ``record``: a dict
        that receives the buckets and seeds, which :meth:`backward_pass` needs to recompute the step. ``dropout_seeds``:
        ``[2]`` (int64), the seeds of the attention's and the feed-forward's masks (:class:`SeededMasks`), or None:
        torch's RNG. ``cache``, ``padded_length``: see :meth:`LSHSelfAttention.forward`."""
        attention_masks, feed_forward_masks = block_masks(dropout_seeds)
        attention, buckets, probs = self.attention(x2, attention_mask, num_hashes=num_hashes,
                                                   output_attentions=output_attentions, cache=cache,
                                                   padded_length=padded_length, dropout_masks=attention_masks)
        y1 = x1 + attention
        if record is not None:
            record["buckets"], record["dropout_seeds"] = buckets, dropout_seeds
        return y1, x2 + self.feed_forward(y1, feed_forward_masks), probs

    def backward_pass(self, y1, y2, grad_y1, grad_y2, attention_mask, num_hashes, record, parameter_grads):
        """From this layer's outputs and their gradients, ``(x1, x2, grad_x1, grad_x2)`` (RevNet's backward, Gomez
        et al., 2017), computed in place: the four tensors are the backward's own buffers and become the input's
        (a new tensor each per layer, live into the next layer's temporaries, fragmented glibc's heap). The gradients
        of the layer's parameters are added to ``parameter_grads`` (:class:`GradientBuffers`), not to ``.grad``, so
        that autograd hands them on once, as for any input (DDP counts on it)."""
        attention_masks, feed_forward_masks = block_masks(record["dropout_seeds"])
        with torch.enable_grad():
            y1_leaf = y1.detach().requires_grad_()
            feed_forward = self.feed_forward(y1_leaf, feed_forward_masks)
            (grad_through_y1,) = _grads(feed_forward, y1_leaf, grad_y2, self.feed_forward, parameter_grads)
        with torch.no_grad():
            x2 = y2.sub_(feed_forward)
            grad_y1.add_(grad_through_y1)
        del feed_forward, grad_through_y1
        with torch.enable_grad():
            x2_leaf = x2.detach().requires_grad_()
            attention, _, _ = self.attention(x2_leaf, attention_mask, buckets=record["buckets"],
                                             num_hashes=num_hashes, dropout_masks=attention_masks)
            (grad_through_x2,) = _grads(attention, x2_leaf, grad_y1, self.attention, parameter_grads)
        with torch.no_grad():
            return y1.sub_(attention), x2, grad_y1, grad_y2.add_(grad_through_x2)

    def traced_backward_pass(self, y1, y2, grad_y1, grad_y2, attention_mask, num_hashes, buckets, dropout_seeds):
        """:meth:`backward_pass` as dynamo follows it: each block's input and parameter gradients by
        ``torch.func.vjp`` of the block as a function of both, out of place. Returns ``(x1, x2, grad_x1, grad_x2,
        [the gradients of trainable_parameters(), in its order])``."""

        def feed_forward(y1, parameters):  # (masks made inside: dynamo refuses mutating an object from outside)
            return torch.func.functional_call(self.feed_forward, parameters, (y1, block_masks(dropout_seeds)[1]))

        def attention(x2, parameters):
            return torch.func.functional_call(self.attention, parameters, (x2, attention_mask), dict(
                buckets=buckets, num_hashes=num_hashes, dropout_masks=block_masks(dropout_seeds)[0]))[0]

        feed_forward_out, pullback = torch.func.vjp(feed_forward, y1, trainable(self.feed_forward))
        grad_through_y1, feed_forward_grads = pullback(grad_y2)
        x2, grad_y1 = y2 - feed_forward_out, grad_y1 + grad_through_y1
        attention_out, pullback = torch.func.vjp(attention, x2, trainable(self.attention))
        grad_through_x2, attention_grads = pullback(grad_y1)
        return (y1 - attention_out, x2, grad_y1, grad_y2 + grad_through_x2,
                [*attention_grads.values(), *feed_forward_grads.values()])

    def trainable_parameters(self) -> list:
        """The parameters :meth:`traced_backward_pass` returns gradients of, in its order."""
        return [*trainable(self.attention).values(), *trainable(self.feed_forward).values()]


def trainable(module) -> dict:
    return {name: parameter for name, parameter in module.named_parameters() if parameter.requires_grad}


def is_fsdp_unit(module) -> bool:
    """``module`` is sharded by FSDP2 (``fully_shard``): its weights are gathered for each call."""
    if not torch.distributed.is_available():
        return False
    from torch.distributed.fsdp import FSDPModule

    return isinstance(module, FSDPModule)


class GradientBuffers:
    """The layers' parameter gradients, summed over the backward in buffers that are allocated at once before it:
    allocated layer by layer, between the layers' temporaries, the long-lived gradients pinned glibc's heap and
    resident memory grew with depth (24 layers 1.50x of 6) though the live tensors did not. A parameter that gets
    no gradient keeps None."""

    def __init__(self, parameters):
        self.free = {id(parameter): torch.empty_like(parameter) for parameter in parameters}  # (written by copy_)
        self.summed = {}

    def add(self, parameter, grad):
        key = id(parameter)
        if key in self.summed:
            self.summed[key].add_(grad)
        else:
            self.summed[key] = self.free.pop(key).copy_(grad) if key in self.free else grad

    def of(self, parameter):
        return self.summed.get(id(parameter))


def _grads(output, input, grad_output, module, parameter_grads: GradientBuffers):
    """``(d input,)`` of ``output`` given ``grad_output``; the module's parameters' gradients go to
    ``parameter_grads``, or, for a unit sharded by FSDP2, to their ``.grad``, where FSDP reduce-scatters them into
    its shards once autograd has passed the call's input."""
    parameters = [p for p in module.parameters() if p.requires_grad]
    if is_fsdp_unit(module):
        torch.autograd.backward(output, grad_output, inputs=[input, *parameters])
        return (input.grad,)
    grads = torch.autograd.grad(output, [input, *parameters], grad_output, allow_unused=True)
    for parameter, grad in zip(parameters, grads[1:]):
        if grad is not None:
            parameter_grads.add(parameter, grad)
    return grads[:1]


class ReversibleFunction(torch.autograd.Function):
    """The reversible stack as one autograd node: forward keeps no activations but the last output; backward
    recomputes each layer's input from its output (:meth:`ReversibleLayer.backward_pass`)."""

    @staticmethod
    def forward(ctx, hidden_states, layers, attention_mask, num_hashes, dropout_seeds, output_hidden_states,
                output_attentions, collected, *parameters):
        """``dropout_seeds``: ``[layers, 2]`` (int64) or None (no dropout); ``parameters``: the layers' trainable
        parameters, inputs of the node so that their gradients are its outputs in backward (one autograd pass:
        DDP's hooks fire once, no reentrant backward)."""
        x1, x2 = hidden_states.chunk(2, dim=-1)
        records, bucket_block = [], None
        for index, layer in enumerate(layers):
            records.append({})
            x1, x2, probs = layer(x1, x2, attention_mask, num_hashes, output_attentions, record=records[-1],
                                  dropout_seeds=layer_seeds(dropout_seeds, index))
            buckets = records[-1]["buckets"]
            if buckets is not None:  # kept in one block (each layer's own pinned glibc's heap)
                if bucket_block is None:
                    bucket_block = buckets.new_empty(len(layers), *buckets.shape)
                if buckets.dtype == bucket_block.dtype:  # (a layer of another bucket count keeps its own)
                    records[-1]["buckets"] = bucket_block[index].copy_(buckets)
            if output_hidden_states:
                collected["hidden_states"].append(torch.cat([x1, x2], dim=-1))
            if output_attentions:
                collected["attentions"].append(probs)
        ctx.layers, ctx.records, ctx.attention_mask, ctx.num_hashes = layers, records, attention_mask, num_hashes
        ctx.parameters, ctx.autocast = parameters, forward_autocast(hidden_states.device)
        ctx.save_for_backward(x1, x2)
        return torch.cat([x1, x2], dim=-1)

    @staticmethod
    def backward(ctx, grad_hidden_states):
        # copies, overwritten layer by layer (backward_pass); the saved outputs stay as they are for a second backward
        y1, y2, grad_y1, grad_y2 = (half.clone(memory_format=torch.contiguous_format) for half in
                                    (*ctx.saved_tensors, *grad_hidden_states.chunk(2, dim=-1)))
        parameter_grads = GradientBuffers([parameter for layer in ctx.layers for block in layer.children()
                                           if not is_fsdp_unit(block)
                                           for parameter in block.parameters() if parameter.requires_grad])
        with torch.autocast(**ctx.autocast):
            for layer, record in zip(reversed(ctx.layers), reversed(ctx.records)):
                y1, y2, grad_y1, grad_y2 = layer.backward_pass(y1, y2, grad_y1, grad_y2, ctx.attention_mask,
                                                               ctx.num_hashes, record, parameter_grads)
        return (torch.cat([grad_y1, grad_y2], dim=-1), None, None, None, None, None, None, None,
                *(parameter_grads.of(parameter) for parameter in ctx.parameters))


class TracedReversibleFunction(torch.autograd.Function):
    """:class:`ReversibleFunction` as ``torch.compile`` takes it, one graph with the rest of the step: the same
    forward and recomputation, each block's gradients by ``torch.func.vjp``
    (:meth:`ReversibleLayer.traced_backward_pass`; dynamo does not follow ``torch.autograd.grad``), out of place,
    and nothing but tensors kept for backward. The states and probabilities of every layer, where asked for, are
    outputs without gradients, as the eager function's are."""

    @staticmethod
    def forward(ctx, hidden_states, layers, attention_mask, num_hashes, dropout_seeds, output_hidden_states,
                output_attentions, *parameters):
        """``parameters``: each layer's :meth:`~ReversibleLayer.trainable_parameters`, in the layers' order.
        Returns ``(last hidden states [batch, seq, 2 * hidden], every layer's hidden states (where asked for), every
        layer's probabilities (where asked for))``."""
        x1, x2 = hidden_states.chunk(2, dim=-1)
        buckets, hidden, attentions = [], [], []
        for index, layer in enumerate(layers):
            record = {}
            x1, x2, probs = layer(x1, x2, attention_mask, num_hashes, output_attentions, record=record,
                                  dropout_seeds=layer_seeds(dropout_seeds, index))
            buckets.append(record["buckets"])
            if output_hidden_states:
                hidden.append(torch.cat([x1, x2], dim=-1))
            if output_attentions:
                attentions.append(probs)
        ctx.layers, ctx.num_hashes, ctx.autocast = layers, num_hashes, forward_autocast(hidden_states.device)
        ctx.save_for_backward(x1, x2, attention_mask, dropout_seeds, *buckets)
        ctx.mark_non_differentiable(*hidden, *(probs for probs in attentions if probs is not None))
        return torch.cat([x1, x2], dim=-1), *hidden, *attentions

    @staticmethod
    def backward(ctx, grad_hidden_states, *unused):
        y1, y2, attention_mask, dropout_seeds, *buckets = ctx.saved_tensors
        grad_y1, grad_y2 = grad_hidden_states.chunk(2, dim=-1)
        parameter_grads = []
        with torch.autocast(**ctx.autocast):
            for index in reversed(range(len(ctx.layers))):
                y1, y2, grad_y1, grad_y2, grads = ctx.layers[index].traced_backward_pass(
                    y1, y2, grad_y1, grad_y2, attention_mask, ctx.num_hashes, buckets[index],
                    layer_seeds(dropout_seeds, index))
                parameter_grads = grads + parameter_grads
        return (torch.cat([grad_y1, grad_y2], dim=-1), None, None, None, None, None, None, *parameter_grads)


__all__ = ["GradientBuffers", "ReversibleFunction", "ReversibleLayer", "ReplayableDropout",
           "SeededMasks", "TracedReversibleFunction", "dropout"]
