"""Transformer-XL's fast paths: the numbers of the plain path in ``modeling_transfo_xl.py`` for less work.

``modeling_transfo_xl.py`` reads like the paper; these are used by default where they apply (any
``attn_implementation`` but ``"eager"``, which runs the plain path throughout). Each was kept because it measured
faster on the CPU (``benchmarks/README.md``):

* :func:`lane_dropout`: a CPU dropout mask from 16-bit lanes of 64-bit draws (torch's CPU ``bernoulli_`` draws 32+
  bits per element from one serial generator);
* :class:`SoftmaxNLL` (training) and :func:`softmax_nll_without_grad` (evaluation): the plain-softmax loss, in one
  autograd node / in row blocks, instead of ``F.cross_entropy``;
* :func:`memory_keys_and_values`: only ``qkv_net``'s key and value rows multiply the memory, whose queries are unused;
* :func:`queries_first_is_cheaper` + :func:`reassociated_position_scores`: ``((q + r_r_bias) . W_r) . R`` when that
  costs fewer products than ``r_net`` on every distance (few queries against a long memory, as in generation);
* :func:`cpu_training_attention`: ``baddbmm`` + softmax + ``bmm`` heads first, in place of SDPA, whose CPU backward
  takes its slower math path.

Only torch here: the file travels with the model's code (``trust_remote_code``).
"""

import torch
import torch.nn.functional as F
from torch import nn


def lane_dropout(input: torch.Tensor, p: float) -> torch.Tensor:
    """Dropout on a CPU tensor with 16 random bits per element: one 64-bit draw gives four lanes, so the drop
    probability is ``p`` rounded to a multiple of 2**-16 (the kept values are scaled by the rounded rate, so the
    expectation is exact)."""
    dropped_codes = round(p * 65536)
    if dropped_codes == 65536:
        return input * 0
    n = input.numel()
    lanes = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-2 ** 63, None).view(torch.int16)
    keep = lanes[:n].view(input.shape) >= dropped_codes - 32768
    # one float mask, pre-scaled: backward is then a single multiplication
    return input * keep.to(input.dtype).mul_(65536 / (65536 - dropped_codes))


class SoftmaxNLL(torch.autograd.Function):
    """``[n, vocab]`` scores, ``[n]`` targets (-100 = ignore) -> ``[n]`` float32 negative log-likelihoods.

    ``F.cross_entropy(reduction="none")`` in one autograd node: forward keeps the softmax itself, so that
    backward only turns it into ``softmax - one_hot`` in place (no zero-filled ``[n, vocab]`` gradient for the
    gather, no second buffer for the log-softmax backward, no second exponential pass; hence one backward
    only, ``retain_graph`` or not). The loss is ``logsumexp - target score``, with ``logsumexp = max score -
    log(max probability)``: exact where a target's probability underflows to 0.
    """

    @staticmethod
    def forward(ctx, scores, targets):
        ctx.scores_dtype = scores.dtype
        scores = scores.float()
        probs = scores.softmax(-1)
        valid = targets != -100
        safe_targets = targets.clamp(min=0)[:, None]
        ctx.save_for_backward(probs, safe_targets, valid)
        # (max - target) first: with a large common offset in the scores, logsumexp alone would be rounded at its size
        nll = (scores.amax(-1) - scores.gather(1, safe_targets).squeeze(1)) - probs.amax(-1).log()
        return torch.where(valid, nll, 0.0)  # not a product: an ignored row's score may be -inf

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_nll):
        grad, safe_targets, valid = ctx.saved_tensors  # the softmax; no one else holds it
        grad.scatter_add_(1, safe_targets, grad.new_full(safe_targets.shape, -1.0))
        return grad.mul_(torch.where(valid, grad_nll, 0.0)[:, None]).to(ctx.scores_dtype), None


def softmax_nll_without_grad(scores: torch.Tensor, targets: torch.Tensor, rows: int | None = None) -> torch.Tensor:
    """What :class:`SoftmaxNLL` computes, for evaluation. On the CPU the log-softmax runs in blocks of ``rows`` (64)
    rows, so that no second ``[n, vocab]`` buffer is written (a fresh one costs page faults at every step; as fast
    as one pass); elsewhere in one pass (each block would cost its own kernel launches)."""
    if rows is None:
        rows = 64 if scores.device.type == "cpu" else max(1, scores.shape[0])
    safe_targets = targets.clamp(min=0)[:, None]
    picked = [block.float().log_softmax(-1).gather(1, block_targets)
              for block, block_targets in zip(scores.split(rows), safe_targets.split(rows))]
    return torch.where(targets != -100, -torch.cat(picked).squeeze(1), 0.0)


def is_plain_linear(module: nn.Module) -> bool:
    """An ``nn.Linear`` itself, without bias, not wrapped (PEFT's LoRA), subclassed (quantized) or hooked
    (accelerate's offloading): its weight is all it computes, so its weight may be multiplied directly."""
    return type(module) is nn.Linear and module.bias is None and not (
        module._forward_hooks or module._forward_pre_hooks or "forward" in vars(module))


def memory_keys_and_values(qkv_net: nn.Module, memory_in: torch.Tensor, inner: int) -> torch.Tensor:
    """``qkv_net(memory_in)[..., inner:]`` (the memory's keys and values; its queries are never used): for a plain
    ``nn.Linear`` only the key and value weight rows multiply (a third less product, forward and weight gradient);
    a wrapped or hooked one (PEFT's LoRA, quantized layers, accelerate's offloading) is called whole."""
    if is_plain_linear(qkv_net):
        return F.linear(memory_in, qkv_net.weight[inner:])
    return qkv_net(memory_in)[..., inner:]


def queries_first_is_cheaper(query: torch.Tensor, position_embeddings: torch.Tensor, r_net: nn.Module) -> bool:
    """Whether :func:`reassociated_position_scores` multiplies less than ``r_net`` on every distance, for query
    ``[batch, heads, q, d_head]`` and position_embeddings ``[k, d_model]`` (and r_net's weight may be used directly)."""
    batch, heads, qlen, d_head = query.shape
    klen, d_model = position_embeddings.shape
    rows = batch * heads * qlen
    distances_first = klen * d_model * heads * d_head + rows * d_head * klen
    queries_first = rows * d_head * d_model + rows * d_model * klen
    return queries_first < distances_first and is_plain_linear(r_net)


def reassociated_position_scores(query, position_embeddings, r_net_weight, r_r_bias):
    """The position scores ``(q + r_r_bias) . r_net(R)`` with the products in the other order,
    ``((q + r_r_bias) . W_r) . R``, against a zero distance in front and the distances ``k-1 .. 0`` (what
    ``rel_shift`` takes).

    Args: query ``[batch, heads, q, d_head]``; position_embeddings ``[k, d_model]``; r_net_weight
    ``[heads * d_head, d_model]`` (r_net has no bias); r_r_bias ``[heads, d_head]``. Returns ``[batch, heads, q, k + 1]``.
    """
    heads, d_head = r_r_bias.shape
    projected = (query + r_r_bias[:, None]) @ r_net_weight.reshape(heads, d_head, -1)  # [b, h, q, d_model]
    return projected @ F.pad(position_embeddings, (0, 0, 1, 0)).t()


def heads_first(tensor: torch.Tensor) -> torch.Tensor:
    """``[batch, heads, ...]`` -> ``[heads * batch, ...]`` (a view where the memory is laid out heads first)."""
    return tensor.transpose(0, 1).reshape(-1, *tensor.shape[2:])


def cpu_training_attention(bias, query, key, value, scale: float, dropatt: nn.Module) -> torch.Tensor:
    """``softmax(query . key * scale + bias) . value`` for training on the CPU, where SDPA's backward takes its math
    path (extra scaling, a "safe" softmax): three ops, heads first, the layout of the position scores in ``bias``.

    Args: bias ``[b, h, q, k]``; query (with its content bias added) ``[b, h, q, d]``; key, value ``[b, h, k, d]``.
    Returns ``[b, h, q, d]``."""
    batch, heads, qlen, klen = bias.shape
    scores = torch.baddbmm(heads_first(bias), heads_first(query), heads_first(key).transpose(1, 2), alpha=scale)
    # dropout sees [b, h, q, k], as in the plain path; its product keeps the layout
    probs = dropatt(scores.softmax(-1).view(heads, batch, qlen, klen).transpose(0, 1))
    return torch.bmm(heads_first(probs), heads_first(value)).view(heads, batch, qlen, -1).transpose(0, 1)
