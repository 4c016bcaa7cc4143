"""The attention layers of the ``rev-lsh`` family, usable on their own: LSH, local (chunked) and full attention.

Each takes ``hidden_states`` ``[batch, seq, hidden]`` and an optional ``attention_mask`` ``[batch, seq]`` (1 = a
token, 0 = padding) and returns ``[batch, seq, heads * head_size]``. Any ``seq`` works: a layer pads to its chunk
length inside, masks the padding and cuts it from its output.

The arithmetic is transformers' ``ReformerModel``'s (itself trax's), so converted Reformer checkpoints give the
same outputs: LSH attention shares one projection for queries and keys, normalises the keys, hashes them with a
fresh random rotation per round (``argmax([xR; -xR])``), sorts by (round, bucket, position), attends within
chunks and ``chunks_before`` / ``chunks_after`` neighbours (circularly, as the reference does), forbids a token
to attend to itself unless nothing else is left, and combines the rounds by their log-sum-exp. Local attention
is the same chunking by position with separate query / key / value projections. Given a ``rotary_base``, each
layer rotates its queries and keys by their positions (:func:`rotate_by_position`); LSH hashes the rotated ones.

Causal layers also decode one token at a time from a cache (a ``RevLSHLayerCache`` per layer that the first
call fills; see ``cache_rev_lsh.py``): the new token attends exactly as it would as the last position of a call
over the whole sequence, for LSH too, given the cached rotations.
"""

import functools
import math

import torch
from torch import nn

from .cache_rev_lsh import positions_at_ranks
from .reversible_rev_lsh import dropout

SELF_MASK_VALUE = {torch.float16: -1e3}  # a token attends to itself only when nothing else is left
MASK_VALUE = {torch.float16: -1e4}  # padding and the future; far below any score, within fp16's range


def self_mask_value(dtype) -> float:
    return SELF_MASK_VALUE.get(dtype, -1e5)


def mask_value(dtype) -> float:
    return MASK_VALUE.get(dtype, -1e9)


def split_heads(x, heads):
    """``[batch, seq, heads * d]`` -> ``[batch, heads, seq, d]``."""
    batch, seq, _ = x.shape
    return x.view(batch, seq, heads, -1).transpose(1, 2)


def merge_heads(x):
    """``[batch, heads, seq, d]`` -> ``[batch, seq, heads * d]``."""
    batch, heads, seq, d = x.shape
    return x.transpose(1, 2).reshape(batch, seq, heads * d)


def into_chunks(x, chunk_length):
    """``[batch, heads, seq, ...]`` -> ``[batch, heads, seq // chunk_length, chunk_length, ...]``."""
    return x.reshape(*x.shape[:2], -1, chunk_length, *x.shape[3:])


def look_adjacent(chunks, before, after):
    """Each chunk followed by its neighbours: ``[batch, heads, n_chunks, chunk, ...]`` ->
    ``[batch, heads, n_chunks, chunk * (1 + before + after), ...]``; the first chunk's "before" is the last
    (circular, as trax and transformers do; a causal mask removes it where it is the future)."""
    if before == 0 and after == 0:
        return chunks
    neighbours = [chunks if shift == 0 else chunks.roll(-shift, dims=2) for shift in range(-before, after + 1)]
    return torch.cat(neighbours, dim=3)


def pad_to_multiple(hidden_states, attention_mask, multiple):
    """``(hidden_states, attention_mask, original length)``, padded at the end to a multiple of ``multiple``
    (the padding masked: a mask is made where there was none)."""
    length = hidden_states.shape[1]
    missing = padded_to_multiple(length, multiple) - length
    # (a traced graph pads always: else it would hold only for lengths that need no padding)
    if not torch.compiler.is_compiling() and missing == 0:
        return hidden_states, attention_mask, length
    if attention_mask is None:
        attention_mask = hidden_states.new_ones(hidden_states.shape[:2], dtype=torch.long)
    hidden_states = nn.functional.pad(hidden_states, (0, 0, 0, missing))
    attention_mask = nn.functional.pad(attention_mask, (0, missing))
    return hidden_states, attention_mask, length


def padded_to_multiple(length, multiple):
    """``length`` rounded up to a multiple of ``multiple``, written so that a symbolic length (torch.export, a
    dynamic compile) stays provably divisible by ``multiple`` (``length + (-length % multiple)`` does not)."""
    return (length + multiple - 1) // multiple * multiple


def chunk_padded_length(seq, chunk_length):
    """The length a layer with this chunk length pads ``seq`` to (none when one chunk holds it)."""
    return seq if seq <= chunk_length else padded_to_multiple(seq, chunk_length)


def neighbour_slots(query_slots, chunk_length, num_chunks, before, after):
    """The slots of the keys a query in slot ``query_slots`` (long, any shape) sees in a chunked order: its
    chunk and ``before`` / ``after`` neighbours, circularly (as :func:`look_adjacent`). Shape: ``[*query_slots.shape,
    chunk_length * (1 + before + after)]``."""
    shifts = torch.arange(-before, after + 1, device=query_slots.device)
    chunks = (query_slots.unsqueeze(-1) // chunk_length + shifts) % num_chunks
    return (chunks.unsqueeze(-1) * chunk_length + torch.arange(chunk_length, device=query_slots.device)).flatten(-2)


def is_filled(cache) -> bool:
    """A layer cache (:class:`~.cache_rev_lsh.RevLSHLayerCache`) that holds tokens: the input follows them."""
    return cache is not None and cache.get_seq_length() > 0


def rotate_by_position(x, positions, base):
    """Rotary position embedding (Su et al., 2021; GPT-NeoX's half-split layout): ``x`` ``[batch, heads, seq, d]``
    rotated by ``positions`` ``[seq]`` (long), so that a rotated query and key score by their content and their
    distance alone. ``base`` None: ``x`` unchanged (the model adds positions to the embeddings instead)."""
    if base is None:
        return x
    frequencies = base ** (-torch.arange(0, x.shape[-1], 2, device=x.device, dtype=torch.float32) / x.shape[-1])
    angles = positions.to(torch.float32)[:, None] * frequencies
    angles = torch.cat([angles, angles], dim=-1)
    first, second = x.chunk(2, dim=-1)
    return x * angles.cos().to(x.dtype) + torch.cat([-second, first], dim=-1) * angles.sin().to(x.dtype)


def check_attention_mask(attention_mask, hidden_states):
    if attention_mask is not None and attention_mask.shape != hidden_states.shape[:2]:
        raise ValueError(f"attention_mask must be [batch, seq] = {list(hidden_states.shape[:2])}, got "
                         f"{list(attention_mask.shape)}")


def dense_probabilities(probs, query_rows, key_positions, rows, columns, weights=None):
    """``[batch, heads, rows, columns]``: a chunked or gathered attention ``probs`` ``[batch, heads, ..., q, k]`` laid
    over the positions it reads, zero where a query does not look (what a cache's caller gets: see
    :meth:`LSHSelfAttention.forward`). Each probability is added at its query's row (``query_rows`` ``[..., q]``) and
    its key's position (``key_positions`` ``[..., k]``), scaled by ``weights`` ``[..., q]`` (an LSH round's share of
    its query's output); a key seen in two rounds or windows sums. Rows and columns past ``rows`` / ``columns`` (the
    padding to the chunks) are dropped."""
    if weights is not None:
        probs = probs * weights.unsqueeze(-1).to(probs.dtype)
    row_index = query_rows.unsqueeze(-1).expand(probs.shape)
    column_index = key_positions.unsqueeze(-2).expand(probs.shape)
    inside = (row_index >= 0) & (row_index < rows) & (column_index >= 0) & (column_index < columns)
    flat_index = torch.where(inside, row_index * columns + column_index, 0).reshape(*probs.shape[:2], -1)
    values = torch.where(inside, probs, 0).reshape(*probs.shape[:2], -1)
    dense = probs.new_zeros(*probs.shape[:2], rows * columns)
    return dense.scatter_add_(2, flat_index, values).view(*probs.shape[:2], rows, columns)


def auto_num_buckets(seq_length, chunk_length, max_position_embeddings):
    """transformers' choice when ``num_buckets`` is not given: the power of two nearest below 2 * seq / chunk,
    factorised in two when it exceeds ``2 * max(sqrt(max_positions / chunk), chunk)``."""
    exponent = (2 * (seq_length // chunk_length)).bit_length() - 1
    num_buckets = 2 ** exponent
    if num_buckets > 2 * max(int((max_position_embeddings // chunk_length) ** 0.5), chunk_length):
        return [2 ** (exponent // 2), 2 ** (exponent - exponent // 2)]
    return num_buckets


def allowed_keys(query_positions, key_positions, key_mask, causal):
    """Which keys each query may see, ``[..., q, k]`` (bool, broadcastable), or None for all: not padding
    (``key_mask``) and, when ``causal``, not later."""
    allowed = None if key_mask is None else key_mask.unsqueeze(-2)
    if causal:
        not_future = query_positions.unsqueeze(-1) >= key_positions.unsqueeze(-2)
        allowed = not_future if allowed is None else allowed & not_future
    return allowed


def fused_kernel_applies(queries, dropout, training) -> bool:
    """Whether a fused attention kernel that also returns the log-sum-exp runs: on the CPU torch's flash-attention
    kernel (any floating dtype), on CUDA its memory-efficient one (float32, float16, bfloat16, a head size that is
    a multiple of 8: its alignment); neither with attention dropout in training (they would draw their own masks).
    Elsewhere (float64 on CUDA, other devices) the plain path runs: the same numbers, the scores materialised."""
    if (training and dropout > 0) or torch.onnx.is_in_onnx_export():  # (ONNX's lowering gives no log-sum-exp)
        return False
    if queries.device.type == "cpu":
        return True
    return (queries.device.type == "cuda" and queries.dtype in (torch.float32, torch.float16, torch.bfloat16)
            and queries.shape[-1] % 8 == 0)


def kernel_forward(queries, keys, values, additive_mask):
    """``(out [n, h, q, d], logsumexp as the kernel's backward reads it [n, h, q or more])`` of one fused call (no
    scale: the keys come scaled); CUDA's log-sum-exp is padded to a multiple of 32 queries."""
    if queries.device.type == "cpu":
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(queries, keys, values, 0.0, False,
                                                                          attn_mask=additive_mask, scale=1.0)
    out, logsumexp, _, _ = torch.ops.aten._scaled_dot_product_efficient_attention(
        queries, keys, values, cuda_kernel_mask(additive_mask, queries, keys), True, 0.0, False, scale=1.0)
    return out, logsumexp


def kernel_gradients(grad_out, queries, keys, values, out, logsumexp, additive_mask):
    """``(d queries, d keys, d values)`` of one fused call, the kernel's own backward (with D = rowsum(grad_out *
    out) from the ``out`` given)."""
    if queries.device.type == "cpu":
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad_out, queries, keys, values, out, logsumexp, 0.0, False, attn_mask=additive_mask, scale=1.0)
    unused_seed = torch.zeros((), dtype=torch.long, device=queries.device)  # (read only with dropout)
    # the kernel reads out in the layout its forward writes it, [n, q, h, d] in memory
    out = out.transpose(1, 2).contiguous().transpose(1, 2)
    return torch.ops.aten._scaled_dot_product_efficient_attention_backward(
        grad_out, queries, keys, values, cuda_kernel_mask(additive_mask, queries, keys), out, logsumexp,
        unused_seed, unused_seed, 0.0, [True, True, True, False], False, scale=1.0)[:3]


def cuda_kernel_mask(additive_mask, queries, keys):
    """The mask as CUDA's memory-efficient kernel takes it: ``[n, h, q, k]`` in full (broadcast dims as stride-0
    views), rows that start 16-aligned (SDPA pads its masks the same way: a view of a wider buffer where ``k`` is
    not a multiple of 16), and zeros for none, which its backward cannot take."""
    length = keys.shape[-2]
    if additive_mask is None:
        additive_mask = queries.new_zeros(1, 1, 1, length)
    if length % 16:
        additive_mask = nn.functional.pad(additive_mask, (0, -length % 16))[..., :length]
    return additive_mask.expand(*queries.shape[:-1], length)


# The kernel runs over the chunks a piece at a time, each piece's largest block (its keys' gradient) at most this
# size: glibc maps a block above 32 MiB (its largest mmap threshold) fresh on each allocation, and faulting its
# pages in took a quarter of an 8k-token LSH step here (0.75 GB/s); smaller blocks are reused from the heap. At
# 2 MiB rather than 8 a local layer's step kept 0.6-0.75x the memory at 8k-16k and ran 0.84x the time at 32k
# (likely: the kernel's zeroed gradient buffers stay in cache; not profiled); an LSH layer's did not change.
PIECE_BYTES = 2 * 2**20


def pad_chunks_circularly(chunks, before, after):
    """``[batch, heads, n_chunks, chunk, ...]`` -> ``[batch, heads, before + n_chunks + after, chunk, ...]``: the
    neighbours :func:`look_adjacent` puts after chunk c (c - before .. c + after, circularly) are the padded chunks
    c .. c + before + after, adjacent in memory, so each chunk's keys are a window of the padded ones (no copy)."""
    if before == 0 and after == 0:
        return chunks
    count = chunks.shape[2]
    if torch.compiler.is_compiling() and not torch.onnx.is_in_onnx_export():
        # by slices: index_select's backward would scatter-add (see PermutedRows)
        return torch.cat([chunks[:, :, count - before:], chunks, chunks[:, :, :after]], dim=2)
    order = torch.arange(-before, count + after, device=chunks.device)
    # (wrapped by hand, not a remainder by the count: ONNX cannot take a tensor modulo a traced size)
    order = torch.where(order < 0, order + count, torch.where(order >= count, order - count, order))
    if torch.onnx.is_in_onnx_export():  # (ONNX cannot take index_select's numel of a traced index)
        return chunks[:, :, order]
    return chunks.index_select(2, order)  # (its backward, index_add, runs 2x an indexing's on the CPU)


def windows_fit(num_chunks, before, after) -> bool:
    """:func:`pad_chunks_circularly`'s windows are :func:`look_adjacent`'s neighbours (which stop being circular
    for a shift past the chunk count)."""
    return max(before, after) <= num_chunks


def key_windows(padded, start, stop, width):
    """Chunks ``start .. stop`` of ``padded`` ``[n, chunks, chunk, d]`` (contiguous), each with the ``width - 1``
    chunks after it: ``[n, stop - start, width * chunk, d]``, a view (the windows overlap). (as_strided, not
    unfold: inductor then writes the padded tensor once and passes the kernel views of it, where an unfold's
    windows were each computed in full, the keys twice.)"""
    n, chunks, chunk, d = padded.shape
    return padded[:, start:].as_strided((n, stop - start, width * chunk, d), (chunks * chunk * d, chunk * d, d, 1))


def summed_windows(grad_windows, width):
    """The gradient of a padded tensor ``[n, chunks + width - 1, chunk, d]`` from its windows' (:func:`key_windows`)
    ``[n, chunks, width * chunk, d]``: each padded chunk's share from every window that holds it."""
    slots = grad_windows.unflatten(2, (width, -1))
    return sum(nn.functional.pad(slots[:, :, offset], (0, 0, 0, 0, offset, width - 1 - offset))
               for offset in range(width))


def window_masks(query_positions, key_positions, key_mask, causal, mask_self, start, stop, batch_heads, dtype,
                 sees_others=None, self_slots=None):
    """For chunks ``start .. stop``: the additive mask ``[batch * heads, stop - start, q, k]`` (or None), whether
    each query sees a key other than itself and how many copies of itself it sees, ``[..., q, 1]`` (None without
    ``mask_self``; the copies also None where every query sees others). Positions ``[..., chunks, q]`` /
    ``[..., chunks, k]``, key_mask ``[..., chunks, k]`` or None, each broadcastable to ``[batch, heads, chunks,
    ...]``; ``sees_others``: this piece's, from a call before (the backward's). ``self_slots``: ``[q, k]``, where
    each query's own key is in every window of the piece, which holds no other copy of it (one round's chunks of
    distinct tokens), given where nothing else is masked: the mask is that pattern broadcast, built once (no pass
    over the piece)."""
    batch, heads = batch_heads
    if self_slots is not None:
        shape = (batch * heads, stop - start, *self_slots.shape)
        self_mask = torch.where(self_slots, self_mask_value(dtype), 0.0).to(dtype)
        # [1, 1, q, k], which the kernels broadcast: a stride-0 view of it would be written in full by inductor
        return self_mask[None, None], self_slots.new_ones(()).expand(*shape[:-1], 1), None
    query_positions, key_positions = query_positions[..., start:stop, :], key_positions[..., start:stop, :]
    key_mask = None if key_mask is None else key_mask[..., start:stop, :]
    allowed = allowed_keys(query_positions, key_positions, key_mask, causal)
    additive_mask = None if allowed is None else torch.where(allowed, 0.0, mask_value(dtype)).to(dtype)
    flat = lambda x: x if x is None else x.expand(batch, heads, stop - start, *x.shape[-2:]).reshape(  # noqa: E731
        batch * heads, stop - start, *x.shape[-2:])
    copies = None
    if mask_self:
        itself = query_positions.unsqueeze(-1) == key_positions.unsqueeze(-2)
        if sees_others is None:
            sees_others = flat(~itself.all(-1, keepdim=True) if allowed is None  # (no negated copy of itself)
                               else (allowed > itself).any(-1, keepdim=True))  # (>: and not)
            if torch.compiler.is_compiling() or not bool(sees_others.all()):
                copies = flat(itself.sum(-1, keepdim=True))
        # a token that sees only itself (or its copy from another round in the look-back chunk) keeps its
        # scores: at -1e5 float32 would round its log-sum-exp, and the backward's softmax with it
        self_value = torch.where(sees_others, self_mask_value(dtype), 0.0).to(dtype)
        additive_mask = torch.where(flat(itself), self_value, 0.0 if additive_mask is None else flat(additive_mask))
        return additive_mask, sees_others, copies
    return flat(additive_mask), None, None


def chunk_pieces(num_chunks, bytes_per_chunk, device, round_chunks=None, width=1):
    """``(start, stop, within_a_round)`` of the pieces the kernel runs over (see :data:`PIECE_BYTES`;
    ``bytes_per_chunk()`` gives a chunk's share; on a GPU, whose caching allocator reuses blocks of any size, one
    piece, not within a round). ``round_chunks``: the chunks of one hash round (LSH); the pieces are then also split
    where a chunk's window (``width`` chunks) may reach into another round, and a piece of chunks whose windows stay
    inside theirs is ``within_a_round``. Traced (torch.compile, torch.export): no split by size, so that the count
    of pieces does not depend on the length (a graph for any length holds them): one piece, or with ``round_chunks``
    each round's edges and its inner chunks."""
    traced = torch.compiler.is_compiling()
    if device.type != "cpu" or (traced and not round_chunks):
        return [(0, num_chunks, False)]
    step = num_chunks if traced else max(1, PIECE_BYTES // max(1, bytes_per_chunk()))
    if not round_chunks or round_chunks < 2 * width:
        return [(start, min(start + step, num_chunks), False) for start in range(0, num_chunks, step)]
    pieces = []
    for round_index in range(num_chunks // round_chunks):  # the edges: width - 1 chunks at each end of a round
        round_start = round_index * round_chunks
        edge, inner_stop = round_start + width - 1, round_start + round_chunks - (width - 1)
        pieces += [(round_start + i, round_start + i + 1, False) for i in range(width - 1)]
        pieces += ([(edge, inner_stop, True)] if traced else
                   [(start, min(start + step, inner_stop), True) for start in range(edge, inner_stop, step)])
        pieces += [(inner_stop + i, inner_stop + i + 1, False) for i in range(width - 1)]
    return pieces


class FusedWindowAttention(torch.autograd.Function):
    """Each chunk of queries against its window of keys, ``(softmax(q k^T + mask) v, logsumexp)``, in calls of a
    fused kernel (:func:`kernel_forward`: torch's CPU flash-attention kernel, CUDA's memory-efficient one) batched
    over batch x heads x chunks (no scale: the keys come scaled): the scores are never materialised, nor the
    windows (views of the padded keys and values); on the CPU nor a mask for all chunks at once (one per piece,
    :data:`PIECE_BYTES`; rebuilt in backward). The backward is the kernel's, with the log-sum-exp's gradient
    folded in; it sums the windows' overlapping gradients into the padded keys'."""

    @staticmethod
    def forward(ctx, queries, padded_keys, padded_values, query_positions, key_positions, key_mask, causal,
                mask_self, round_chunks=None):
        """queries ``[batch, heads, chunks, q, d]``; padded keys / values ``[batch, heads, chunks + width - 1,
        k / width, d]`` (:func:`pad_chunks_circularly`); positions and key_mask as :func:`window_masks`'s.
        Returns ``(out [batch, heads, chunks, q, d], logsumexp [batch, heads, chunks, q], sees_others,
        copies)``, the last two ``[batch, heads, chunks, q, 1]`` (see :func:`window_masks`; None without
        ``mask_self``, the copies None too where every query sees others). ``round_chunks``: see
        :func:`chunk_pieces`."""
        batch, heads, num_chunks, q_length, _ = queries.shape
        flat = lambda x: x.reshape(batch * heads, *x.shape[2:])  # noqa: E731
        queries, padded_keys, padded_values = flat(queries), flat(padded_keys).contiguous(), flat(
            padded_values).contiguous()
        width = padded_keys.shape[1] - num_chunks + 1
        ctx.shape, ctx.width, ctx.causal, ctx.mask_self = (batch, heads), width, causal, mask_self
        ctx.pieces = chunk_pieces(num_chunks, lambda: batch * heads * padded_keys[0, :width].numel()
                                  * padded_keys.element_size(), queries.device, round_chunks, width)
        ctx.self_slots = (self_slots(query_positions, key_positions, ctx.pieces)
                          if mask_self and key_mask is None and not causal else None)
        outs, logsumexps, pieces_sees_others, pieces_copies = [], [], [], []
        for start, stop, within_a_round in ctx.pieces:
            additive_mask, piece_sees_others, piece_copies = window_masks(
                query_positions, key_positions, key_mask, causal, mask_self, start, stop, ctx.shape, queries.dtype,
                self_slots=ctx.self_slots if within_a_round else None)
            out, logsumexp = kernel_forward(queries[:, start:stop], key_windows(padded_keys, start, stop, width),
                                            key_windows(padded_values, start, stop, width), additive_mask)
            outs.append(out), logsumexps.append(logsumexp)
            pieces_sees_others.append(piece_sees_others), pieces_copies.append(piece_copies)
        join = lambda pieces: pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=1)  # noqa: E731
        out, kernel_logsumexp = join(outs), join(logsumexps)
        logsumexp = kernel_logsumexp[..., :q_length]
        sees_others = copies = None
        if mask_self:
            sees_others = join(pieces_sees_others)
            if any(piece_copies is not None for piece_copies in pieces_copies):  # (else every query sees others)
                copies = torch.cat([torch.ones_like(piece_sees_others, dtype=torch.long) if piece_copies is None
                                    else piece_copies
                                    for piece_sees_others, piece_copies in zip(pieces_sees_others, pieces_copies)],
                                   dim=1)
        ctx.save_for_backward(queries, padded_keys, padded_values, out, kernel_logsumexp, query_positions,
                              key_positions, key_mask, sees_others)
        unflat = lambda x: None if x is None else x.unflatten(0, (batch, heads))  # noqa: E731
        outputs = unflat(out), unflat(logsumexp), unflat(sees_others), unflat(copies)
        ctx.mark_non_differentiable(*(output for output in outputs[2:] if output is not None))
        ctx.set_materialize_grads(False)  # a log-sum-exp nothing reads (local attention's, one round's) costs nothing
        return outputs

    @staticmethod
    def backward(ctx, grad_out, grad_logsumexp, *unused):
        queries, padded_keys, padded_values, out, logsumexp, query_positions, key_positions, key_mask, sees_others \
            = ctx.saved_tensors
        batch, heads = ctx.shape
        if grad_out is None and grad_logsumexp is None:
            return (None,) * 9
        grad_out = None if grad_out is None else grad_out.reshape(out.shape)
        grad_logsumexp = None if grad_logsumexp is None else grad_logsumexp.reshape(out.shape[:-1])

        def piece_gradients(start, stop, within_a_round):
            piece = slice(start, stop)
            additive_mask = window_masks(query_positions, key_positions, key_mask, ctx.causal, ctx.mask_self, start,
                                         stop, ctx.shape, queries.dtype,
                                         None if sees_others is None else sees_others[:, piece],
                                         ctx.self_slots if within_a_round else None)[0]
            in_piece = lambda x: None if x is None else x[:, piece]  # noqa: E731
            return kernel_backward(in_piece(grad_out), in_piece(grad_logsumexp), queries[:, piece],
                                   key_windows(padded_keys, start, stop, ctx.width),
                                   key_windows(padded_values, start, stop, ctx.width), out[:, piece],
                                   logsumexp[:, piece], additive_mask)

        if torch.compiler.is_compiling():  # (functional: in-place updates of slices cost a graph a pass each)
            grads = [piece_gradients(*piece) for piece in ctx.pieces]
            join = lambda k: grads[0][k] if len(grads) == 1 else torch.cat([g[k] for g in grads], dim=1)  # noqa: E731
            grad_queries = join(0)
            grad_keys, grad_values = (summed_windows(join(k), ctx.width) for k in (1, 2))
        else:
            grad_queries = torch.empty_like(queries)
            grad_keys, grad_values = torch.empty_like(padded_keys), torch.empty_like(padded_values)
            num_chunks, chunk = queries.shape[1], padded_keys.shape[2]
            for grad in (grad_keys, grad_values):  # the padding after the last chunk's: only ever added to
                grad[:, num_chunks:].zero_()
            # last piece first: window slot `offset` of chunk c is padded chunk c + offset, so a piece's slot 0 is
            # written (copied) before anything is added to it, by the pieces before it
            for start, stop, within_a_round in reversed(ctx.pieces):
                piece_grads = piece_gradients(start, stop, within_a_round)
                grad_queries[:, start:stop] = piece_grads[0]
                for grad, piece_grad in zip((grad_keys, grad_values), piece_grads[1:]):
                    grad[:, start:stop].copy_(piece_grad[:, :, :chunk])
                    for offset in range(1, ctx.width):
                        grad[:, start + offset:stop + offset] += piece_grad[:, :, offset * chunk:(offset + 1) * chunk]
        unflat = lambda x: x.view(batch, heads, *x.shape[1:])  # noqa: E731
        return unflat(grad_queries), unflat(grad_keys), unflat(grad_values), None, None, None, None, None, None


def self_slots(query_positions, key_positions, pieces):
    """``[q, k]``: where each query's own key is in the windows of the pieces within a round, read off the first
    such chunk (the same slots in every one: its own chunk's place in the window); None if there is none, or if
    that chunk breaks the rule (a query without its key, or with two copies of it)."""
    start = next((start for start, _, within_a_round in pieces if within_a_round), None)
    if start is None:
        return None
    first = lambda x: x.reshape(-1, *x.shape[-2:])[0, start]  # noqa: E731
    itself = first(query_positions).unsqueeze(-1) == first(key_positions).unsqueeze(-2)
    # a compiled graph cannot branch on the data: it takes the rule as given (a round sorts each token once, so a
    # window within it holds each once, its own among them)
    return itself if torch.compiler.is_compiling() or bool((itself.sum(-1) == 1).all()) else None


def kernel_backward(grad_out, grad_logsumexp, queries, keys, values, out, logsumexp, additive_mask):
    """``(d queries, d keys, d values)`` of one kernel call given the gradients of its output and log-sum-exp
    (None: not read)."""
    if grad_logsumexp is None:
        return kernel_gradients(grad_out, queries, keys, values, out, logsumexp, additive_mask)
    if grad_out is None:
        return kernel_backward_with_a_free_column(torch.zeros_like(out), grad_logsumexp, queries, keys, values, out,
                                                  logsumexp, additive_mask)
    # d logsumexp / d scores is the softmax P; the kernel's backward forms P * (grad_out . v - D) with
    # D = rowsum(grad_out * out). An out moved along grad_out by grad_logsumexp / |grad_out|^2 turns D into
    # D - grad_logsumexp: the log-sum-exp's gradient joins the scores' without P being built.
    squared_norm = torch.linalg.vector_norm(grad_out, dim=-1, keepdim=True, dtype=logsumexp.dtype).square()
    # A row whose grad_out is 0 and log-sum-exp's gradient is not needs the free column. A compiled graph cannot
    # look for one (a branch on the data) and moves out always: the layers give such a row only where both
    # gradients underflow together (an LSH round's two carry its weight, which is what underflows), the
    # log-sum-exp's then at most 64 x |v| x the smallest subnormal.
    if not torch.compiler.is_compiling() and bool(((squared_norm == 0)
                                                   & (grad_logsumexp.unsqueeze(-1) != 0)).any()):
        return kernel_backward_with_a_free_column(grad_out, grad_logsumexp, queries, keys, values, out, logsumexp,
                                                  additive_mask)
    shift = torch.where(squared_norm > 0, grad_logsumexp.unsqueeze(-1) / squared_norm.clamp_min(1e-30), 0.0)
    moved_out = torch.addcmul(out, shift.to(out.dtype), grad_out, value=-1)
    return kernel_gradients(grad_out, queries, keys, values, moved_out, logsumexp, additive_mask)


FREE_COLUMNS = 8  # (8, not 1: CUDA's kernel wants the head size 8-aligned)


def kernel_backward_with_a_free_column(grad_out, grad_logsumexp, queries, keys, values, out, logsumexp,
                                       additive_mask):
    """The same gradients where a row's ``grad_out`` is 0 and its log-sum-exp's gradient is not (which moving
    ``out`` cannot express): more head dimensions, 0 in queries, keys and values, the first 1 in ``grad_out`` and
    ``-grad_logsumexp`` in ``out`` (the rest 0), give D - grad_logsumexp exactly (slower: not the usual path)."""
    def free(x, first):
        columns = x.new_zeros((*x.shape[:-1], FREE_COLUMNS))
        columns[..., 0] = first
        return torch.cat([x, columns], dim=-1)

    grads = kernel_gradients(free(grad_out, 1.0), free(queries, 0.0), free(keys, 0.0), free(values, 0.0),
                             free(out, -grad_logsumexp.to(out.dtype)), logsumexp, additive_mask)
    return [grad[..., :-FREE_COLUMNS] for grad in grads]


def kernel_dtype(*tensors):
    """The one dtype the kernel runs in: autocast's where it is on (whose float32 ops, the keys' normalisation
    among them, leave the keys wider than the queries), else the widest of the inputs'. (CUDA's kernel reads every
    input as the queries' dtype: given mixed ones it returns garbage, not an error.)"""
    device = tensors[0].device.type
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return functools.reduce(torch.promote_types, (tensor.dtype for tensor in tensors))


def attend_in_windows(queries, padded_keys, padded_values, query_positions, key_positions, key_mask, causal,
                      mask_self=True, round_chunks=None):
    """:func:`attend` of each chunk of ``queries`` ``[batch, heads, chunks, q, d]`` against its window of keys
    through :class:`FusedWindowAttention` (the keys and values padded by :func:`pad_chunks_circularly`; positions
    and key_mask as :func:`attend`'s with the windows' keys): the same ``(out, logsumexp)``, no probabilities
    (None). A query with every key masked (padding only, in local attention) averages by its scores, not
    uniformly: its output is not used."""
    dtype = kernel_dtype(queries, padded_keys, padded_values)
    out, logsumexp, sees_others, copies = FusedWindowAttention.apply(
        queries.to(dtype), padded_keys.to(dtype), padded_values.to(dtype), query_positions, key_positions, key_mask,
        causal, mask_self, round_chunks)
    if copies is None:  # every query sees others
        return out, logsumexp, None
    # ... and then the plain path's numbers for it (transformers' too): the log-sum-exp of k copies at -1e5,
    # fl(-1e5 + log k), a constant, and k * exp(-1e5 - fl(-1e5 + log k)) as its weight (0.2% short for two)
    copies = copies.to(logsumexp.dtype)
    only_itself = self_mask_value(torch.float32) + copies.log()
    weight = torch.where(sees_others, 1.0, copies * torch.exp(self_mask_value(torch.float32) - only_itself))
    logsumexp = torch.where(sees_others, logsumexp.unsqueeze(-1), only_itself).squeeze(-1)
    return out * weight.to(out.dtype), logsumexp, None


def average_where_nothing_is_seen(out, logsumexp, allowed, window_values):
    """The plain path's rule, given to the fused kernel's ``(out, logsumexp)``, for a query that may see no key at
    all (a padding query whose window is all padding or future, without a self-mask): every score is the mask
    value, so every key weighs ``exp(mask - fl(mask + log k))``, which in float32 rounds to 1 (the window's values
    summed, as transformers' Reformer computes it) and in float64 is 1 / k; the kernel would weigh them by their
    scores. ``allowed`` ``[..., q, k]`` (bool, broadcastable; None: all), ``window_values()`` the values of each
    query's window ``[..., k, d]`` (made only where such a query is)."""
    if allowed is None:
        return out, logsumexp
    sees_nothing = ~allowed.any(-1)
    if not torch.compiler.is_compiling() and not bool(sees_nothing.any()):
        return out, logsumexp
    values = window_values()
    masked = torch.tensor(mask_value(values.dtype), dtype=torch.promote_types(values.dtype, torch.float32))
    uniform = masked + math.log(values.shape[-2])  # rounded as the plain path's log-sum-exp
    weighted = values.sum(-2, keepdim=True) * torch.exp(masked - uniform).to(values.dtype)
    out = torch.where(sees_nothing.unsqueeze(-1), weighted.to(out.dtype), out)
    return out, torch.where(sees_nothing, uniform.to(logsumexp.dtype), logsumexp)


def attend_fused(queries, keys, values, query_positions, key_positions, key_mask, causal, mask_self=True):
    """:func:`attend` through the fused kernel, all queries against all keys (one window)."""
    one_chunk = lambda x: None if x is None else x.unsqueeze(-3)  # noqa: E731
    out, logsumexp, probs = attend_in_windows(
        one_chunk(queries), one_chunk(keys), one_chunk(values), query_positions.unsqueeze(-2),
        key_positions.unsqueeze(-2), None if key_mask is None else key_mask.unsqueeze(-2), causal, mask_self)
    return out.squeeze(-3), logsumexp.squeeze(-2), probs


def attend(queries, keys, values, query_positions, key_positions, key_mask, causal, dropout_rate, training,
           mask_self=True, fused=False, dropout_masks=None):
    """Scores, masks, softmax and the weighted values, over the last two dims.

    queries ``[..., q, d]``, keys / values ``[..., k, d]``; positions ``[..., q]`` / ``[..., k]`` (long);
    key_mask ``[..., k]`` (bool, True = a token) or None. Returns ``(out [..., q, d], logsumexp [..., q],
    probabilities [..., q, k])``; ``fused``: through :func:`attend_fused` where the kernel applies
    (:func:`fused_kernel_applies`), probabilities then None; ``dropout_masks``: :class:`SeededMasks` to draw the
    probabilities' dropout from (else torch's RNG).
    """
    if fused and fused_kernel_applies(queries, dropout_rate, training):
        out, logsumexp, probs = attend_fused(queries, keys, values, query_positions, key_positions, key_mask, causal,
                                             mask_self)
        if not mask_self and key_mask is not None:  # (with the self-mask every query sees itself)
            out, logsumexp = average_where_nothing_is_seen(
                out, logsumexp, allowed_keys(query_positions, key_positions, key_mask, causal), lambda: values)
        return out, logsumexp, probs
    scores = queries @ keys.transpose(-1, -2)
    allowed = allowed_keys(query_positions, key_positions, key_mask, causal)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, mask_value(scores.dtype))
    if mask_self:
        itself = query_positions.unsqueeze(-1) == key_positions.unsqueeze(-2)
        scores = scores.masked_fill(itself, self_mask_value(scores.dtype))
    # the normalisation in float32, as SDPA's: in bfloat16 a row near the self-mask value (-1e5) rounds by 512
    scores = scores.to(torch.promote_types(scores.dtype, torch.float32))  # (float64 stays float64)
    logsumexp = scores.logsumexp(dim=-1, keepdim=True)
    probs = dropout(torch.exp(scores - logsumexp).to(values.dtype), dropout_rate, training, dropout_masks)
    return probs @ values, logsumexp.squeeze(-1), probs


def define_seeded_normal():
    """``op(seed, shape, dtype)``: standard normal numbers from a generator of ``seed`` of their own, as one
    operator (``hf_plm_ext::seeded_normal``) that torch.compile and torch.export keep in the graph and run per
    call, where a generator made in the forward would be traced once, its state shared by every later call. (The
    operator is defined once per process, whichever copy of this file (the library's, a checkpoint's code) comes
    first.)"""
    try:
        return torch.ops.hf_plm_ext.seeded_normal
    except AttributeError:
        pass

    @torch.library.custom_op("hf_plm_ext::seeded_normal", mutates_args=())
    def draw(seed: int, shape: list[int], dtype: torch.dtype) -> torch.Tensor:
        return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)

    @draw.register_fake
    def _(seed, shape, dtype):
        return torch.empty(shape, dtype=dtype)

    return torch.ops.hf_plm_ext.seeded_normal


seeded_normal = define_seeded_normal()


class DecodesFromTheCache:
    """A causal layer's decoding: :meth:`decode` of one new token is :meth:`decode_projected` of its
    :meth:`project_new_tokens`; a draft of several is projected at once and attended in one pass
    (``attend_new_tokens``)."""

    def decode(self, hidden_states, attention_mask, cache, padded_length=None, output_attentions=False):
        """One new token ``[batch, 1, hidden]`` after the cached ones: ``([batch, 1, heads * head_size],
        probabilities [batch, heads, 1, seq] with output_attentions, else None)``, exactly the last position of a
        call over the whole (causal) sequence."""
        return self.decode_projected(self.project_new_tokens(hidden_states, cache), attention_mask, cache,
                                     padded_length, output_attentions)

    def project_new_tokens(self, hidden_states, cache):
        """``(queries, keys, values)`` of new tokens ``[batch, new, hidden]`` after the cached ones, each ``[batch,
        heads, new, head_size]``, for :meth:`decode_projected` token by token (a projection needs only the token's
        position)."""
        return self._project(hidden_states, torch.arange(hidden_states.shape[1], device=hidden_states.device)
                             + cache.get_seq_length())


class LSHSelfAttention(DecodesFromTheCache, nn.Module):
    """Locality-sensitive-hashing attention (Kitaev et al., 2020) with shared queries and keys.

    Args:
        hidden_size: input width. num_heads, head_size: the attention's heads.
        chunk_length: tokens per chunk of the sorted sequence; a sequence no longer than this attends fully.
        num_hashes: hash rounds (more: closer to full attention, slower).
        num_buckets: an even number, or a list of even factors (factorised hashing: their product); None: chosen
            from each input's length (see :func:`auto_num_buckets`).
        chunks_before, chunks_after: neighbouring chunks each chunk also attends to.
        causal: a query never sees a later position.
        dropout: on the attention probabilities.
        hash_seed: rotations drawn from this seed (the same buckets each time; for evaluation, export and
            converted checkpoints), once into a buffer where ``num_buckets`` is given; None: fresh rotations each
            call from torch's RNG.
        max_position_embeddings: bounds the automatic bucket count, as in transformers.
        rotary_base: rotary positions on the shared queries / keys (:func:`rotate_by_position`; hashed after the
            rotation, so that the buckets group what the scores compare); None: none (positions come from the
            embeddings).
    """

    def __init__(self, hidden_size, num_heads, head_size, chunk_length=64, num_hashes=1, num_buckets=None,
                 chunks_before=1, chunks_after=0, causal=False, dropout=0.0, hash_seed=None,
                 max_position_embeddings=4096, rotary_base=None):
        super().__init__()
        for factor in [num_buckets] if isinstance(num_buckets, int) else (num_buckets or []):
            if factor < 2 or factor % 2:
                raise ValueError(f"num_buckets must be even (a list: of even factors), got {num_buckets!r}")
        if chunk_length < 1:
            raise ValueError(f"lsh chunk_length must be at least 1, got {chunk_length}")
        self.num_heads, self.head_size, self.chunk_length = num_heads, head_size, chunk_length
        self.num_hashes, self.num_buckets, self.hash_seed = num_hashes, num_buckets, hash_seed
        self.chunks_before, self.chunks_after, self.causal, self.dropout = chunks_before, chunks_after, causal, dropout
        self.max_position_embeddings, self.rotary_base = max_position_embeddings, rotary_base
        self.query_key = nn.Linear(hidden_size, num_heads * head_size, bias=False)
        self.value = nn.Linear(hidden_size, num_heads * head_size, bias=False)
        # drawn once, not per call: a traced graph (torch.export, ONNX) cannot hold a generator and its seed
        fixed_rotations = hash_seed is not None and num_buckets is not None
        self.register_buffer("seeded_rotations", self.draw_seeded_rotations() if fixed_rotations else None,
                             persistent=False)

    def forward(self, hidden_states, attention_mask=None, buckets=None, num_hashes=None, output_attentions=False,
                cache=None, padded_length=None, sdpa=True, dropout_masks=None, **unused):
        """``(out [batch, seq, heads * head_size], buckets, probabilities or None)``; ``sdpa``: each chunk's
        attention through the fused kernel where it applies (:func:`attend`; not with ``output_attentions``),
        else the plain path. ``buckets``
        ``[batch, heads, num_hashes, padded seq]`` (None when the sequence is attended fully) can be passed back to
        recompute the same attention (the reversible backward does). ``dropout_masks``: the
        :class:`~.reversible_rev_lsh.SeededMasks` the probabilities' dropout draws from (else torch's RNG).

        ``cache``: an empty layer cache to fill with this call's keys, values, buckets and rotations; a filled one to
        decode ``hidden_states`` (one new token) after them, ``attention_mask`` then covering the cached tokens
        and the new one, ``padded_length`` the length a whole-sequence call would pad to (default: this layer's
        chunk multiple).

        Probabilities (``output_attentions``): per sorted chunk, ``[batch, heads, rounds * chunks, chunk, window]`` as
        transformers' Reformer returns them; with a ``cache`` (generation) over every position so far, ``[batch,
        heads, new tokens, cached + new tokens]``, zero where a query does not look and the rounds weighted (the
        shape of transformers' causal LMs, which ``generate`` splits by token)."""
        if is_filled(cache):
            out, probs = self.decode(hidden_states, attention_mask, cache, padded_length, output_attentions)
            return out, None, probs
        check_attention_mask(attention_mask, hidden_states)
        num_hashes = num_hashes or self.num_hashes
        length = hidden_states.shape[1]
        if length > self.chunk_length:
            hidden_states, attention_mask, length = pad_to_multiple(hidden_states, attention_mask, self.chunk_length)
        seq = hidden_states.shape[1]
        query_keys = rotate_by_position(split_heads(self.query_key(hidden_states), self.num_heads),
                                        torch.arange(seq, device=hidden_states.device), self.rotary_base)
        values = split_heads(self.value(hidden_states), self.num_heads)
        key_mask = None if masks_nothing(attention_mask) else attention_mask.bool()[:, None, :]
        if seq <= self.chunk_length:
            if cache is not None:  # rotations for the longer sequence decoding makes: a two-chunk one's
                rotations = self.rotations(2 * self.chunk_length, num_hashes, query_keys)
                factors = self.bucket_factors(2 * self.chunk_length)
                self._fill_cache(cache, query_keys, values, length, rotations, factors,
                                 self.raw_buckets(query_keys, rotations, factors)[0], attention_mask)
            positions = torch.arange(seq, device=hidden_states.device)
            out, _, probs = attend(query_keys, normalized_keys(query_keys), values, positions, positions, key_mask,
                                   self.causal, self.dropout, self.training, fused=sdpa and not output_attentions,
                                   dropout_masks=dropout_masks)
            return merge_heads(out)[:, :length], None, probs if output_attentions else None
        if buckets is None:
            rotations = self.rotations(seq, num_hashes, query_keys)
            factors = self.bucket_factors(seq)
            raw_buckets, total = self.raw_buckets(query_keys, rotations, factors)
            buckets = offset_buckets(raw_buckets, total, attention_mask)
            if cache is not None:
                self._fill_cache(cache, query_keys, values, length, rotations, factors, raw_buckets, attention_mask)
        out, probs = self._attend_in_buckets(query_keys, values, buckets, key_mask, num_hashes,
                                             fused=sdpa and not output_attentions, dropout_masks=dropout_masks,
                                             dense_length=length if cache is not None and output_attentions else None)
        return merge_heads(out)[:, :length], buckets, probs if output_attentions else None

    @staticmethod
    def _fill_cache(cache, query_keys, values, length, rotations, factors, raw_buckets, attention_mask):
        """The cache of the first ``length`` positions: the keys (normalised: all that decoding reads of them),
        values, buckets (padding in a bucket of its own, after the others) and what hashes the tokens that follow."""
        total = math.prod(factors)
        buckets = raw_buckets[..., :length]
        if attention_mask is not None:
            buckets = buckets.masked_fill(~attention_mask.bool()[:, None, None, :length], total)
        cache.append(keys=normalized_keys(query_keys[:, :, :length]), values=values[:, :, :length],
                     buckets=buckets.transpose(2, 3))
        cache.rotations, cache.factors = rotations, factors
        cache.group_by_bucket(buckets, total + 1)

    def project_new_tokens(self, hidden_states, cache):
        """``(query_keys, values, buckets)`` of new tokens ``[batch, new, hidden]`` after the cached ones, each
        ``[batch, heads, new, ...]`` (head_size twice; the raw buckets under the cached rotations, per round), for
        :meth:`decode_projected` token by token. A token's projection needs only its position of the cache, so a
        draft's tokens are projected together."""
        positions = torch.arange(hidden_states.shape[1], device=hidden_states.device) + cache.get_seq_length()
        query_keys = rotate_by_position(split_heads(self.query_key(hidden_states), self.num_heads), positions,
                                        self.rotary_base)
        buckets, _ = self.raw_buckets(query_keys, cache.rotations, cache.factors)
        return query_keys, split_heads(self.value(hidden_states), self.num_heads), buckets.transpose(2, 3)

    def decode_projected(self, projected, attention_mask, cache, padded_length=None, output_attentions=False):
        """One new token from its projection (:meth:`project_new_tokens`' tensors, ``[batch, heads, 1, ...]``),
        ``attention_mask`` covering the cached tokens and this one: ``([batch, 1, heads * head_size], probabilities
        or None)``, what the last position of a call over the whole (causal) sequence gives with the cached rotations
        (with ``output_attentions``, probabilities over every position so far, ``[batch, heads, 1, seq]``, the rounds
        weighted). The bucket count stays the one of the first call (a whole-sequence call may choose another for the
        longer length). The sorted order is not rebuilt: the cache counts the tokens of each bucket, which places the
        new token and its chunk's neighbours (cost flat in the sequence length)."""
        query_key, value, new_buckets = projected
        new_buckets, total = new_buckets.transpose(2, 3), math.prod(cache.factors)  # [b, h, rounds, 1]
        position = cache.get_seq_length()
        if attention_mask is not None:
            new_buckets = new_buckets.masked_fill(~attention_mask.bool()[:, None, None, -1:], total)
        keys, values = cache.append(keys=normalized_keys(query_key), values=value,
                                    buckets=new_buckets.transpose(2, 3))[:2]
        cache.join_buckets(new_buckets[..., 0], position)
        batch, heads, seq, d = keys.shape
        padded = padded_length or chunk_padded_length(seq, self.chunk_length)
        if padded <= self.chunk_length:
            positions = torch.arange(seq, device=keys.device)
            mask = (torch.ones(batch, seq, dtype=torch.bool, device=keys.device) if attention_mask is None
                    else attention_mask.bool())
            out, _, probs = attend(query_key, keys, values, positions[-1:], positions, mask[:, None, :], self.causal,
                                   0.0, False)
            return merge_heads(out), probs if output_attentions else None
        rounds = new_buckets.shape[2]
        query_ranks = cache.counts.cumsum(-1).gather(-1, new_buckets).squeeze(-1) - 1  # the last of its bucket
        query_slots = query_ranks + padded * torch.arange(rounds, device=keys.device)
        slots = neighbour_slots(query_slots, self.chunk_length, rounds * padded // self.chunk_length,
                                self.chunks_before, self.chunks_after)  # [batch, heads, rounds, keys]
        key_positions, groups = cache.positions_at_ranks(slots % padded, slots // padded)
        key_mask = (groups >= 0) & (groups < total)  # not padding
        rows = key_positions.clamp(max=seq - 1).flatten(2).unsqueeze(-1).expand(-1, -1, -1, d)
        gather = lambda x: x.gather(2, rows).view(*slots.shape, d)  # noqa: E731
        query_positions = torch.full((*slots.shape[:3], 1), seq - 1, device=keys.device)
        out, logsumexp, probs = attend(query_key.unsqueeze(2).expand(-1, -1, rounds, -1, -1), gather(keys),
                                       gather(values), query_positions, key_positions, key_mask, self.causal, 0.0,
                                       False)
        dense = lambda weights=None: dense_probabilities(  # noqa: E731
            probs, torch.zeros_like(query_positions), key_positions, 1, seq, weights) if output_attentions else None
        if rounds == 1:
            return merge_heads(out[:, :, 0]), dense()
        round_weights = torch.exp(logsumexp - logsumexp.logsumexp(dim=2, keepdim=True)).unsqueeze(-1)  # float32
        return merge_heads((out * round_weights.to(out.dtype)).sum(dim=2)), dense(round_weights.squeeze(-1))

    def attend_new_tokens(self, projected, attention_mask, cache, padded_lengths):
        """A draft's tokens in one pass (as :meth:`LocalSelfAttention.attend_new_tokens`): they join their buckets in
        order, and each attends over the sorted order as it stood when it joined, as decoding it alone does. That
        order is the groups' first members up to the token's counts (a later token only lengthens its group), so
        every token's neighbours are read from the same groups with counts of its own."""
        query_keys, new_values, new_buckets = projected  # [b, h, new, d] twice, [b, h, new, rounds]
        new, seen, total = query_keys.shape[2], cache.get_seq_length(), math.prod(cache.factors)
        padded = [length or chunk_padded_length(seen + step + 1, self.chunk_length)
                  for step, length in enumerate(padded_lengths)]
        if min(padded) <= self.chunk_length:  # (a one-chunk sequence attends every token: one at a time)
            masks = [None if attention_mask is None else attention_mask[:, :seen + step + 1] for step in range(new)]
            return torch.cat([self.decode_projected(tuple(x[:, :, step:step + 1] for x in projected), masks[step],
                                                    cache, padded_lengths[step])[0] for step in range(new)], dim=1)
        if attention_mask is not None:
            new_buckets = new_buckets.masked_fill(~attention_mask.bool()[:, None, seen:, None], total)
        keys, values = cache.append(keys=normalized_keys(query_keys), values=new_values, buckets=new_buckets)[:2]
        new_buckets = new_buckets.transpose(2, 3)  # [b, h, rounds, new]
        counts = []
        for step in range(new):
            cache.join_buckets(new_buckets[..., step], seen + step)
            counts.append(cache.counts.clone())
        counts = torch.stack(counts, dim=2)  # [b, h, new, rounds, groups]: each token's order
        batch, heads, seq, d = keys.shape
        rounds = new_buckets.shape[2]
        query_ranks = counts.cumsum(-1).gather(-1, new_buckets.transpose(2, 3).unsqueeze(-1)).squeeze(-1) - 1
        padded = torch.tensor(padded, device=keys.device).view(new, 1)  # [new, 1], against [b, h, new, rounds]
        query_slots = query_ranks + padded * torch.arange(rounds, device=keys.device)
        slots = neighbour_slots(query_slots, self.chunk_length, (rounds * padded // self.chunk_length).unsqueeze(-1),
                                self.chunks_before, self.chunks_after)  # [b, h, new, rounds, keys]
        by_token = lambda x: x.flatten(1, 2)  # noqa: E731  (the tokens as more heads, each with its own counts)
        members = cache.members.unsqueeze(2).expand(-1, -1, new, -1, -1, -1)
        key_positions, groups = positions_at_ranks(by_token(counts), by_token(members),
                                                   by_token(slots % padded.unsqueeze(-1)),
                                                   by_token(slots // padded.unsqueeze(-1)))
        key_positions, groups = key_positions.view(slots.shape), groups.view(slots.shape)
        key_mask = (groups >= 0) & (groups < total)  # not padding
        rows = key_positions.clamp(max=seq - 1).flatten(2).unsqueeze(-1).expand(-1, -1, -1, d)
        gather = lambda x: x.gather(2, rows).view(*slots.shape, d)  # noqa: E731
        query_positions = (seen + torch.arange(new, device=keys.device)).view(1, 1, new, 1, 1).expand(
            batch, heads, new, rounds, 1)
        out, logsumexp, _ = attend(query_keys[:, :, :, None, None].expand(-1, -1, -1, rounds, -1, -1), gather(keys),
                                   gather(values), query_positions, key_positions, key_mask, self.causal, 0.0, False)
        if rounds == 1:
            return merge_heads(out[:, :, :, 0, 0])
        round_weights = torch.exp(logsumexp - logsumexp.logsumexp(dim=3, keepdim=True)).unsqueeze(-1)  # float32
        return merge_heads((out * round_weights.to(out.dtype)).sum(dim=3)[:, :, :, 0])

    def bucket_factors(self, seq):
        if self.num_buckets is None and isinstance(seq, torch.SymInt):
            raise ValueError("rev-lsh: num_buckets=None chooses the bucket count from each input's length, which a "
                             "dynamic-shape trace (torch.export, torch.compile(dynamic=True), ONNX) cannot follow: "
                             "set config.num_buckets (e.g. the count the longest input gets)")
        num_buckets = self.num_buckets or auto_num_buckets(seq, self.chunk_length, self.max_position_embeddings)
        return [num_buckets] if isinstance(num_buckets, int) else list(num_buckets)

    def rotation_shape(self, seq, num_hashes):
        return self.num_heads, self.head_size, num_hashes, sum(self.bucket_factors(seq)) // 2

    def draw_seeded_rotations(self, seq=None, num_hashes=None, dtype=torch.float32):
        """The rotations of ``hash_seed`` from a generator of its own (torch's global RNG left alone; the same
        numbers as transformers' Reformer's ``torch.manual_seed(hash_seed)``); ``seq`` only matters where
        ``num_buckets`` is None."""
        return seeded_normal(self.hash_seed, self.rotation_shape(seq, num_hashes or self.num_hashes), dtype)

    def rotations(self, seq, num_hashes, like):
        """Random rotations ``[heads, head_size, num_hashes, sum(factors) // 2]``, fresh per round. With
        ``hash_seed`` the same every call: the buffer drawn at initialisation, or where the bucket count follows
        the length (``num_buckets`` None) or ``num_hashes`` is not the layer's, drawn from the seed per call."""
        if self.hash_seed is None:
            return torch.randn(self.rotation_shape(seq, num_hashes), device=like.device, dtype=like.dtype)
        if self.seeded_rotations is not None and num_hashes == self.num_hashes:
            return self.seeded_rotations.to(like.dtype)
        return self.draw_seeded_rotations(seq, num_hashes, like.dtype).to(like.device)

    @staticmethod
    def raw_buckets(query_keys, rotations, factors):
        """``(buckets [batch, heads, num_hashes, seq] in [0, total), total)``: ``argmax([xR; -xR])`` per factor (the
        factors' buckets combined as digits). :func:`offset_buckets` then separates padding and rounds."""
        rotated = torch.einsum("bhsd,hdrk->bhrsk", query_keys.detach(), rotations)
        buckets, start, total = 0, 0, 1
        for factor in factors:
            part = rotated[..., start:start + factor // 2]
            buckets = buckets + total * argmax_of_both_signs(part)
            start, total = start + factor // 2, total * factor
        return buckets, total

    def _attend_in_buckets(self, query_keys, values, buckets, key_mask, num_hashes, fused, dense_length=None,
                           dropout_masks=None):
        """``(out [batch, heads, seq, d], probabilities)``: per sorted chunk ``[batch, heads, rounds * chunks, chunk,
        window]``, or with ``dense_length`` over the first ``dense_length`` positions (:func:`dense_probabilities`,
        the rounds weighted)."""
        batch, heads, seq, d = query_keys.shape
        order = sort_by_bucket(buckets.reshape(batch, heads, num_hashes * seq))  # by (round, bucket, position)
        positions = torch.arange(seq, device=order.device).repeat(num_hashes)[order]  # (order % seq, as ONNX takes)
        query_positions = into_chunks(positions, self.chunk_length)
        key_positions = look_adjacent(query_positions, self.chunks_before, self.chunks_after)
        sorted_key_mask = None
        if key_mask is not None:
            sorted_key_mask = key_mask.expand(batch, heads, seq).gather(2, key_positions.flatten(2)).view(
                key_positions.shape)
        num_chunks = query_positions.shape[2]
        undo = order.argsort(dim=-1)
        fused = (fused and fused_kernel_applies(query_keys, self.dropout, self.training)
                 and windows_fit(num_chunks, self.chunks_before, self.chunks_after))
        traced_gathers = fused and torch.compiler.is_compiling()  # (see PermutedRows; padded by slices)
        if traced_gathers:
            sorted_rows = lambda x: into_chunks(PermutedRows.apply(x, positions, undo), self.chunk_length)  # noqa: E731
            padded = lambda x: pad_chunks_circularly(x, self.chunks_before, self.chunks_after)  # noqa: E731
            sorted_queries = sorted_rows(query_keys)
            out, logsumexp, probs = attend_in_windows(
                sorted_queries, padded(sorted_queries * sorted_rows(key_scale(query_keys))),
                padded(sorted_rows(values)), query_positions, key_positions, sorted_key_mask, self.causal,
                round_chunks=num_chunks // num_hashes)
        elif fused:
            # sorted straight into the padded order: the keys' windows are views of it, and the rows' gather's backward
            # sums the padding's gradients into the tokens'
            padded_positions = pad_chunks_circularly(query_positions, self.chunks_before, self.chunks_after)
            padded_positions = padded_positions.flatten(2)
            padded_queries = into_chunks(gather_rows(query_keys, padded_positions), self.chunk_length)
            sorted_queries = padded_queries[:, :, self.chunks_before:self.chunks_before + num_chunks]
            # the keys' factor from the unsorted rows, then sorted: over seq rows, not rounds x seq plus padding
            padded_scale = key_scale(query_keys).squeeze(-1).gather(2, padded_positions)
            padded_keys = padded_queries * into_chunks(padded_scale, self.chunk_length).unsqueeze(-1)
            out, logsumexp, probs = attend_in_windows(
                sorted_queries, padded_keys, into_chunks(gather_rows(values, padded_positions), self.chunk_length),
                query_positions, key_positions, sorted_key_mask, self.causal, round_chunks=num_chunks // num_hashes)
        else:
            sorted_queries = into_chunks(gather_rows(query_keys, positions), self.chunk_length)
            sorted_keys = normalized_keys(sorted_queries)  # normalising commutes with sorting: one gather fewer
            sorted_values = into_chunks(gather_rows(values, positions), self.chunk_length)
            out, logsumexp, probs = attend(sorted_queries, look_adjacent(sorted_keys, self.chunks_before,
                                                                         self.chunks_after),
                                           look_adjacent(sorted_values, self.chunks_before, self.chunks_after),
                                           query_positions, key_positions, sorted_key_mask, self.causal,
                                           self.dropout, self.training, dropout_masks=dropout_masks)
        if traced_gathers:
            out = PermutedRows.apply(out.flatten(2, 3), undo, order)
            logsumexp = PermutedRows.apply(logsumexp.flatten(2).unsqueeze(-1), undo, order).squeeze(-1)
        else:
            out = gather_rows(out.flatten(2, 3), undo)
            logsumexp = logsumexp.flatten(2).gather(2, undo)
        out = out.view(batch, heads, num_hashes, seq, d)
        if num_hashes == 1:
            if dense_length is not None:
                probs = dense_probabilities(probs, query_positions, key_positions, dense_length, dense_length)
            return out[:, :, 0], probs
        # the reference's formula, not softmax: for a token that sees only itself (-1e5 in float32) the two differ
        # by rounding, and converted checkpoints should give trax's and transformers' numbers
        # in float32: a bfloat16 logsumexp near the self-mask value (-1e5) is exact only to 512, so the rounds'
        # weights would not sum to one (a token that sees only itself in two rounds came out twice its value)
        logsumexp = logsumexp.view(batch, heads, num_hashes, seq, 1).float()
        round_weights = torch.exp(logsumexp - logsumexp.logsumexp(dim=2, keepdim=True))
        if dense_length is not None:
            sorted_weights = into_chunks(round_weights.flatten(2).gather(2, order), self.chunk_length)
            probs = dense_probabilities(probs, query_positions, key_positions, dense_length, dense_length,
                                        sorted_weights)
        return (out * round_weights.to(out.dtype)).sum(dim=2), probs


def argmax_of_both_signs(x):
    """``argmax([x; -x], dim=-1)`` (the first of equal maxima), without building ``[x; -x]`` (whose layout a
    dynamic-shape trace would specialise to the batch)."""
    largest, largest_index = x.max(dim=-1)
    smallest, smallest_index = x.min(dim=-1)
    return torch.where(largest >= -smallest, largest_index, smallest_index + x.shape[-1])


def gather_rows(rows, positions):
    """``rows[b, h, positions[b, h, i]]``, ``[batch, heads, m, d]``, from ``rows`` ``[batch, heads, n, d]`` and
    ``positions`` ``[batch, heads, m]``: through ``index_select`` over the flattened rows, whose forward is 4x and
    backward 2x faster on the CPU than ``gather`` with the positions expanded over ``d`` (n = 8,192, d = 64)."""
    batch, heads, n, d = rows.shape
    offsets = torch.arange(batch * heads, device=rows.device).view(batch, heads, 1) * n
    return rows.reshape(-1, d).index_select(0, (positions + offsets).flatten()).view(batch, heads, -1, d)


class PermutedRows(torch.autograd.Function):
    """:func:`gather_rows` by ``positions`` that list each of the ``n`` rows once per round (``[batch, heads,
    rounds * n]``), ``inverse`` the slot each (round, row) went to: the backward gathers by ``inverse`` and sums the
    rounds, where a gather's would scatter-add (in a compiled CPU graph, an atomic add per element)."""

    @staticmethod
    def forward(ctx, rows, positions, inverse):
        ctx.save_for_backward(inverse)
        ctx.rows = rows.shape[2]
        return gather_rows(rows, positions)

    @staticmethod
    def backward(ctx, grad):
        inverse, = ctx.saved_tensors
        return gather_rows(grad, inverse).unflatten(2, (-1, ctx.rows)).sum(2), None, None


def masks_nothing(attention_mask) -> bool:
    """No mask, or one of ones only (a collator's for unpadded rows): the kernel then takes the cheaper masks."""
    # (a compiled graph keeps the mask: it cannot branch on the data)
    return attention_mask is None or (not torch.compiler.is_compiling() and bool(attention_mask.bool().all()))


def offset_buckets(buckets, total, attention_mask=None):
    """Padding (``attention_mask`` 0) into a bucket of its own (after every other: where nothing is padding the
    order is the same as without it), then round r's buckets offset by r times the bucket count; in the smallest
    integer type that holds them (:func:`bucket_dtype`), as the reversible backward keeps them for every layer."""
    if attention_mask is not None:
        buckets = buckets.masked_fill(~attention_mask.bool()[:, None, None, :], total)
        total += 1
    rounds = buckets.shape[2]
    offsets = torch.arange(rounds, device=buckets.device).view(1, 1, -1, 1) * total
    return (buckets + offsets).to(bucket_dtype(rounds * total - 1))


def sort_by_bucket(flat_buckets):
    """The order of ``flat_buckets`` ``[..., rounds * seq]`` by (bucket, index): the argsort of a unique key, bucket
    x length + index, as transformers' Reformer sorts, not a stable sort (which ONNX has no operator for)."""
    length = flat_buckets.shape[-1]
    index = torch.arange(length, device=flat_buckets.device)
    return (flat_buckets.long() * length + index).argsort(dim=-1)


def bucket_dtype(largest: int) -> torch.dtype:
    """uint8, int16, int32 or int64: the smallest that holds ``largest`` (the sort takes any of them)."""
    return next(dtype for dtype in (torch.uint8, torch.int16, torch.int32, torch.int64)
                if largest <= torch.iinfo(dtype).max)


def key_scale(query_keys, eps=1e-6):
    """``[..., 1]``: the per-row factor of :func:`normalized_keys`."""
    # (the 1 / sqrt(d) in the per-row factor: one pass over the keys fewer, each way; exact for a power-of-4 d)
    return torch.rsqrt(query_keys.pow(2).mean(-1, keepdim=True) + eps) / math.sqrt(query_keys.shape[-1])


def normalized_keys(query_keys, eps=1e-6):
    """transformers' key scaling for shared QK: ``x / rms(x) / sqrt(d)``, i.e. unit length (up to ``eps``)."""
    return query_keys * key_scale(query_keys, eps)


class LocalSelfAttention(DecodesFromTheCache, nn.Module):
    """Attention within chunks of consecutive positions and their ``chunks_before`` / ``chunks_after``
    neighbours (separate query, key and value projections). A sequence no longer than a chunk attends fully.

    Args as :class:`LSHSelfAttention`'s (``rotary_base``: on the queries and keys).
    """

    def __init__(self, hidden_size, num_heads, head_size, chunk_length=64, chunks_before=1, chunks_after=0,
                 causal=False, dropout=0.0, rotary_base=None):
        super().__init__()
        if chunk_length < 1:
            raise ValueError(f"local chunk_length must be at least 1, got {chunk_length}")
        self.num_heads, self.head_size, self.chunk_length = num_heads, head_size, chunk_length
        self.chunks_before, self.chunks_after, self.causal, self.dropout = chunks_before, chunks_after, causal, dropout
        self.rotary_base = rotary_base
        self.query = nn.Linear(hidden_size, num_heads * head_size, bias=False)
        self.key = nn.Linear(hidden_size, num_heads * head_size, bias=False)
        self.value = nn.Linear(hidden_size, num_heads * head_size, bias=False)

    def forward(self, hidden_states, attention_mask=None, output_attentions=False, cache=None, padded_length=None,
                sdpa=True, dropout_masks=None, **unused):
        """``(out [batch, seq, heads * head_size], None, probabilities or None)``; ``cache``, ``padded_length``,
        ``sdpa`` and the probabilities' shapes as :meth:`LSHSelfAttention.forward`'s (per chunk ``[batch, heads,
        chunks, chunk, window]``)."""
        fused = sdpa and not output_attentions
        if is_filled(cache):
            out, probs = self.decode(hidden_states, attention_mask, cache, padded_length, output_attentions)
            return out, None, probs
        check_attention_mask(attention_mask, hidden_states)
        length = hidden_states.shape[1]
        if length > self.chunk_length:
            hidden_states, attention_mask, length = pad_to_multiple(hidden_states, attention_mask, self.chunk_length)
        seq = hidden_states.shape[1]
        positions = torch.arange(seq, device=hidden_states.device)
        queries, keys, values = self._project(hidden_states, positions)
        if cache is not None:
            cache.append(keys=keys[:, :, :length], values=values[:, :, :length])
        key_mask = None if attention_mask is None else attention_mask.bool()[:, None, :]
        if seq > self.chunk_length:
            chunks = lambda x: into_chunks(x, self.chunk_length)  # noqa: E731
            adjacent = lambda x: look_adjacent(chunks(x), self.chunks_before, self.chunks_after)  # noqa: E731
            query_positions = positions.view(-1, self.chunk_length)
            key_positions = look_adjacent(query_positions[None, None], self.chunks_before, self.chunks_after)[0, 0]
            if key_mask is not None:
                key_mask = adjacent(key_mask)
            if (fused and fused_kernel_applies(queries, self.dropout, self.training)
                    and windows_fit(query_positions.shape[0], self.chunks_before, self.chunks_after)):
                padded = lambda x: pad_chunks_circularly(chunks(x), self.chunks_before, self.chunks_after)  # noqa: E731
                out, logsumexp, probs = attend_in_windows(chunks(queries), padded(keys), padded(values),
                                                          query_positions, key_positions, key_mask, self.causal,
                                                          mask_self=False)
                if key_mask is not None:
                    out, _ = average_where_nothing_is_seen(
                        out, logsumexp, allowed_keys(query_positions, key_positions, key_mask, self.causal),
                        lambda: adjacent(values))
            else:
                out, _, probs = attend(chunks(queries), adjacent(keys), adjacent(values), query_positions,
                                       key_positions, key_mask, self.causal, self.dropout, self.training,
                                       mask_self=False, dropout_masks=dropout_masks)
                if cache is not None and output_attentions:
                    probs = dense_probabilities(probs, query_positions, key_positions, length, length)
            out = out.flatten(2, 3)
        else:
            out, _, probs = attend(queries, keys, values, positions, positions, key_mask, self.causal, self.dropout,
                                   self.training, mask_self=False, fused=fused, dropout_masks=dropout_masks)
        return merge_heads(out)[:, :length], None, probs if output_attentions else None

    def _project(self, hidden_states, positions):
        """``(queries, keys / sqrt(head_size), values)``, each ``[batch, heads, seq, head_size]``, the queries and
        keys rotated by ``positions`` ``[seq]`` when the layer has rotary positions."""
        rotate = lambda x: rotate_by_position(split_heads(x, self.num_heads), positions, self.rotary_base)  # noqa: E731
        return (rotate(self.query(hidden_states)), rotate(self.key(hidden_states)) / math.sqrt(self.head_size),
                split_heads(self.value(hidden_states), self.num_heads))

    def decode_projected(self, projected, attention_mask, cache, padded_length=None, output_attentions=False):
        """:meth:`decode` of one token from its projection (``[batch, heads, 1, head_size]`` each)."""
        query, key, value = projected
        keys, values = cache.append(keys=key, values=value)
        seq = keys.shape[2]
        padded = padded_length or chunk_padded_length(seq, self.chunk_length)
        positions = torch.arange(seq, device=keys.device)
        if padded > self.chunk_length:  # its chunk and neighbours; the padding and the future are masked anyway
            slots = neighbour_slots(positions[-1:], self.chunk_length, padded // self.chunk_length,
                                    self.chunks_before, self.chunks_after)
            positions = slots[slots < seq]
            keys, values = keys[:, :, positions], values[:, :, positions]
        key_mask = None if attention_mask is None else attention_mask.bool()[:, None, positions]
        out, _, probs = attend(query, keys, values, torch.tensor([seq - 1], device=keys.device), positions, key_mask,
                               self.causal, 0.0, False, mask_self=False)
        if not output_attentions:
            return merge_heads(out), None
        return merge_heads(out), dense_probabilities(probs, torch.zeros(1, dtype=torch.long, device=keys.device),
                                                     positions, 1, cache.get_seq_length())


    def attend_new_tokens(self, projected, attention_mask, cache, padded_lengths):
        """A draft's tokens in one pass (:meth:`project_new_tokens`' tensors of ``new`` tokens, ``attention_mask``
        covering the cached tokens and these, ``padded_lengths`` each token's as :meth:`decode_projected` takes
        it): ``[batch, new, heads * head_size]``, each token over the keys it sees decoded alone (its chunk and
        neighbours up to itself), the draft's keys cached at once."""
        query, key, value = projected
        keys, values = cache.append(keys=key, values=value)
        seen = keys.shape[2] - query.shape[2]
        seen_by = []  # each token's key positions, as decode_projected picks them
        for step, padded in enumerate(padded_lengths):
            seq = seen + step + 1
            positions = torch.arange(seq, device=keys.device)
            padded = padded or chunk_padded_length(seq, self.chunk_length)
            if padded > self.chunk_length:
                slots = neighbour_slots(positions[-1:], self.chunk_length, padded // self.chunk_length,
                                        self.chunks_before, self.chunks_after)
                positions = slots[slots < seq]
            seen_by.append(positions)
        key_positions = nn.utils.rnn.pad_sequence(seen_by, batch_first=True)  # [new, window], padded with 0
        valid = nn.utils.rnn.pad_sequence([torch.ones_like(p, dtype=torch.bool) for p in seen_by], batch_first=True)
        key_mask = valid if attention_mask is None else (valid & attention_mask.bool()[:, key_positions]).unsqueeze(1)
        query_positions = torch.arange(seen, keys.shape[2], device=keys.device).unsqueeze(-1)  # [new, 1]
        out, _, _ = attend(query.unsqueeze(3), keys[:, :, key_positions], values[:, :, key_positions],
                           query_positions, key_positions, key_mask, self.causal, 0.0, False, mask_self=False)
        return merge_heads(out.squeeze(3))


class FullSelfAttention(DecodesFromTheCache, nn.Module):
    """Plain multi-head attention through ``scaled_dot_product_attention`` (the flash / memory-efficient kernels
    where they apply). Args as :class:`LocalSelfAttention`'s, without chunks."""

    def __init__(self, hidden_size, num_heads, head_size, causal=False, dropout=0.0, rotary_base=None):
        super().__init__()
        self.num_heads, self.head_size, self.causal, self.dropout = num_heads, head_size, causal, dropout
        self.rotary_base = rotary_base
        self.query = nn.Linear(hidden_size, num_heads * head_size, bias=False)
        self.key = nn.Linear(hidden_size, num_heads * head_size, bias=False)
        self.value = nn.Linear(hidden_size, num_heads * head_size, bias=False)

    def forward(self, hidden_states, attention_mask=None, output_attentions=False, sdpa=True, cache=None,
                dropout_masks=None, **unused):
        """``(out [batch, seq, heads * head_size], None, probabilities [batch, heads, seq, seq] or None)``; with
        ``output_attentions`` or ``sdpa=False`` the scores are computed explicitly. ``cache`` as
        :meth:`LSHSelfAttention.forward`'s (decoding is exact)."""
        if is_filled(cache):
            out, probs = self.decode(hidden_states, attention_mask, cache, output_attentions=output_attentions)
            return out, None, probs
        check_attention_mask(attention_mask, hidden_states)
        queries, keys, values = self._project(hidden_states,
                                              torch.arange(hidden_states.shape[1], device=hidden_states.device))
        if cache is not None:
            cache.append(keys=keys, values=values)
        mask = None
        if attention_mask is not None:
            length = hidden_states.shape[1]
            mask = attention_mask.bool()[:, None, None, :]
            if self.causal:
                mask = mask & torch.ones(length, length, dtype=torch.bool, device=mask.device).tril()
            # a padding query sees itself, so that no row is all masked (NaN); real tokens never see padding
            mask = mask | torch.eye(length, dtype=torch.bool, device=mask.device)
        # (SDPA would draw dropout masks of its own, which the reversible backward cannot replay)
        if output_attentions or not sdpa or (dropout_masks is not None and self.training and self.dropout):
            positions = torch.arange(hidden_states.shape[1], device=hidden_states.device)
            key_mask = None if attention_mask is None else attention_mask.bool()[:, None, :]
            out, _, probs = attend(queries, keys / math.sqrt(self.head_size), values, positions, positions, key_mask,
                                   self.causal, self.dropout, self.training, mask_self=False,
                                   dropout_masks=dropout_masks)
            return merge_heads(out), None, probs if output_attentions else None
        out = nn.functional.scaled_dot_product_attention(
            queries, keys, values, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0,
            is_causal=self.causal and mask is None)
        return merge_heads(out), None, None

    def _project(self, hidden_states, positions):
        """``(queries, keys, values)``, each ``[batch, heads, seq, head_size]``, the queries and keys rotated by
        ``positions`` ``[seq]`` when the layer has rotary positions."""
        rotate = lambda x: rotate_by_position(split_heads(x, self.num_heads), positions, self.rotary_base)  # noqa: E731
        return (rotate(self.query(hidden_states)), rotate(self.key(hidden_states)),
                split_heads(self.value(hidden_states), self.num_heads))

    def decode_projected(self, projected, attention_mask, cache, padded_length=None, output_attentions=False):
        """:meth:`decode` of one token from its projection (``[batch, heads, 1, head_size]`` each)."""
        query, key, value = projected
        keys, values = cache.append(keys=key, values=value)
        mask = None if attention_mask is None else attention_mask.bool()[:, None, None, :]
        if not output_attentions:
            return merge_heads(nn.functional.scaled_dot_product_attention(query, keys, values, attn_mask=mask)), None
        scores = (query @ keys.transpose(-1, -2)) / math.sqrt(self.head_size)
        if mask is not None:
            scores = scores.masked_fill(~mask, mask_value(scores.dtype))
        probs = scores.softmax(-1)
        return merge_heads(probs @ values), probs

    def attend_new_tokens(self, projected, attention_mask, cache, padded_lengths):
        """A draft's tokens in one pass, as :meth:`LocalSelfAttention.attend_new_tokens`: each over every position
        up to itself."""
        query, key, value = projected
        keys, values = cache.append(keys=key, values=value)
        seen = keys.shape[2] - query.shape[2]
        positions = torch.arange(keys.shape[2], device=keys.device)
        mask = positions <= positions[seen:, None]  # [new, seq]: up to itself
        if attention_mask is not None:
            mask = mask & attention_mask.bool()[:, None, None, :]
        return merge_heads(nn.functional.scaled_dot_product_attention(query, keys, values, attn_mask=mask))
