"""The reversible stack (RevNet, Gomez et al., 2017; as in the Reformer): a layer keeps two halves, ``x1`` and
``x2``, and computes ``y1 = x1 + attention(x2)``, ``y2 = x2 + feed_forward(y1)``, so that its input follows from its
output (``x2 = y2 - feed_forward(y1)``, ``x1 = y1 - attention(x2)``). :class:`ReversibleFunction` runs the layers
as one autograd node that keeps only the last output and recomputes each layer's input in backward, so activation
memory does not grow with depth; the recomputation reuses the forward's LSH buckets and replays its dropout.
"""

from contextlib import contextmanager

import torch
from torch import nn
from transformers.modeling_layers import GradientCheckpointingLayer


class RNGStates:
    """Torch's RNG states at points of the forward, to draw the same dropout masks again in backward. They are kept
    in one block allocated before the forward: saved one by one (5 KB each on the CPU) between the layers'
    temporaries, the long-lived states pinned glibc's heap, and resident memory grew by about 2 MiB per layer though
    the live tensors did not."""

    def __init__(self, count, device):
        self.device = device
        self.cpu = torch.empty(count, torch.get_rng_state().numel(), dtype=torch.uint8)
        self.cuda = (torch.empty(count, torch.cuda.get_rng_state(device).numel(), dtype=torch.uint8)
                     if device.type == "cuda" else None)
        self.saved = 0

    def save(self) -> int:
        """Keep the RNG state of this point; returns its slot for :meth:`restored`."""
        slot, self.saved = self.saved, self.saved + 1
        self.cpu[slot].copy_(torch.get_rng_state())
        if self.cuda is not None:
            self.cuda[slot].copy_(torch.cuda.get_rng_state(self.device))
        return slot

    @contextmanager
    def restored(self, slot):
        """A context in which torch's RNG continues from the state saved in ``slot`` (and is as before afterwards)."""
        with torch.random.fork_rng(devices=[self.device] if self.cuda is not None else []):
            # (copies: torch 2.13's set_rng_state crashes on a row of a block, a view at an offset)
            torch.set_rng_state(self.cpu[slot].clone())
            if self.cuda is not None:
                torch.cuda.set_rng_state(self.cuda[slot].clone(), self.device)
            yield


class ReversibleLayer(GradientCheckpointingLayer):
    """One reversible layer: ``y1 = x1 + attention(x2)``, ``y2 = x2 + feed_forward(y1)``. ``attention`` returns
    ``(output, buckets, probabilities or None)`` and takes the buckets back to recompute the same output."""

    def __init__(self, attention: nn.Module, feed_forward: nn.Module):
        super().__init__()
        self.attention = attention
        self.feed_forward = feed_forward

    def forward(self, x1, x2, attention_mask=None, num_hashes=None, output_attentions=False, record=None,
                cache=None, padded_length=None):
        """``(y1, y2, attention probabilities or None)``, each half ``[batch, seq, hidden]``. ``record``: a dict
        that receives what :meth:`backward_pass` needs to recompute the step (the buckets and RNG states).
        ``cache``, ``padded_length``: see :meth:`LSHSelfAttention.forward`."""
        if record is not None:
            record["attention_rng"] = record["rng_states"].save()
        attention, buckets, probs = self.attention(x2, attention_mask, num_hashes=num_hashes,
                                                   output_attentions=output_attentions, cache=cache,
                                                   padded_length=padded_length)
        y1 = x1 + attention
        if record is not None:
            record["buckets"], record["feed_forward_rng"] = buckets, record["rng_states"].save()
        return y1, x2 + self.feed_forward(y1), probs

    def backward_pass(self, y1, y2, grad_y1, grad_y2, attention_mask, num_hashes, record, parameter_grads):
        """From this layer's outputs and their gradients, ``(x1, x2, grad_x1, grad_x2)`` (RevNet's backward, Gomez
        et al., 2017), computed in place: the four tensors are the backward's own buffers and become the input's
        (a new tensor each per layer, live into the next layer's temporaries, fragmented glibc's heap). The gradients
        of the layer's parameters are added to ``parameter_grads`` (:class:`GradientBuffers`), not to ``.grad``, so
        that autograd hands them on once, as for any input (DDP counts on it)."""
        with torch.enable_grad():
            y1_leaf = y1.detach().requires_grad_()
            with record["rng_states"].restored(record["feed_forward_rng"]):
                feed_forward = self.feed_forward(y1_leaf)
            (grad_through_y1,) = _grads(feed_forward, y1_leaf, grad_y2, self.feed_forward, parameter_grads)
        with torch.no_grad():
            x2 = y2.sub_(feed_forward)
            grad_y1.add_(grad_through_y1)
        del feed_forward, grad_through_y1
        with torch.enable_grad():
            x2_leaf = x2.detach().requires_grad_()
            with record["rng_states"].restored(record["attention_rng"]):
                attention, _, _ = self.attention(x2_leaf, attention_mask, buckets=record["buckets"],
                                                 num_hashes=num_hashes)
            (grad_through_x2,) = _grads(attention, x2_leaf, grad_y1, self.attention, parameter_grads)
        with torch.no_grad():
            return y1.sub_(attention), x2, grad_y1, grad_y2.add_(grad_through_x2)


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
    def forward(ctx, hidden_states, layers, attention_mask, num_hashes, output_hidden_states, output_attentions,
                collected, *parameters):
        """``parameters``: the layers' trainable parameters, inputs of the node so that their gradients are its
        outputs in backward (one autograd pass: DDP's hooks fire once, no reentrant backward)."""
        x1, x2 = hidden_states.chunk(2, dim=-1)
        records, rng_states, bucket_block = [], RNGStates(2 * len(layers), hidden_states.device), None
        for index, layer in enumerate(layers):
            records.append({"rng_states": rng_states})
            x1, x2, probs = layer(x1, x2, attention_mask, num_hashes, output_attentions, record=records[-1])
            buckets = records[-1]["buckets"]
            if buckets is not None:  # kept in one block, as the RNG states (each layer's own pinned the heap)
                if bucket_block is None:
                    bucket_block = buckets.new_empty(len(layers), *buckets.shape)
                if buckets.dtype == bucket_block.dtype:  # (a layer of another bucket count keeps its own)
                    records[-1]["buckets"] = bucket_block[index].copy_(buckets)
            if output_hidden_states:
                collected["hidden_states"].append(torch.cat([x1, x2], dim=-1))
            if output_attentions:
                collected["attentions"].append(probs)
        ctx.layers, ctx.records, ctx.attention_mask, ctx.num_hashes = layers, records, attention_mask, num_hashes
        ctx.parameters = parameters
        device = hidden_states.device.type  # the backward recomputes under the forward's autocast, as checkpoint does
        ctx.autocast = dict(device_type=device, enabled=torch.is_autocast_enabled(device),
                            dtype=torch.get_autocast_dtype(device))
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
        return (torch.cat([grad_y1, grad_y2], dim=-1), None, None, None, None, None, None,
                *(parameter_grads.of(parameter) for parameter in ctx.parameters))


__all__ = ["GradientBuffers", "ReversibleFunction", "ReversibleLayer", "RNGStates"]
