"""Transformer-XL (Dai et al., 2019): segment-level memory and relative positional attention.

Mechanics of ``kimiyoung/transformer-xl`` (``pytorch/mem_transformer.py``), batch-first:

* every layer attends over ``[memory; segment]``; the memory of layer ``i`` is the last
  ``mem_len`` inputs of layer ``i`` (layer 0's input is the embedding output), detached;
* attention score = ``(q + r_w_bias) . k`` (content) + ``rel_shift((q + r_r_bias) . R)``
  (position), ``R`` = sinusoids of the distances ``klen-1 .. 0`` (clamped to ``clamp_len``)
  through the bias-free ``r_net``, scaled by ``1 / sqrt(d_head)``;
* causal mask over ``[memory; segment]``; with ``same_length`` every query sees the same
  number of keys;
* post-LayerNorm residual blocks (``pre_lnorm`` for pre-LN), ReLU feed-forward;
* adaptive input embeddings and adaptive softmax over ``cutoffs``, or a plain softmax.

The CPU fast paths (dropout lanes, the softmax loss, the memory's key/value rows, the cheaper order of the
position product, training attention without SDPA) are in ``fast_transfo_xl.py``, used unless the model runs
``attn_implementation="eager"``, which is this file's plain path throughout; :func:`chosen_paths` is the one place
that chooses.

Parameter names are those of transformers 4.x ``TransfoXLLMHeadModel``, so its checkpoints
load unchanged. Memories are an explicit input and output (``mems``), never saved.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.utils import ModelOutput, can_return_tuple
from transformers.utils.output_capturing import selected_hidden_states

from .cache_transfo_xl import TransfoXLCache, as_transfo_xl_cache
from .configuration_transfo_xl import TransfoXLConfig
from .fast_transfo_xl import (
    SoftmaxNLL,
    cpu_training_attention,
    lane_dropout,
    memory_keys_and_values,
    queries_first_is_cheaper,
    reassociated_position_scores,
    softmax_nll_without_grad,
)


@dataclass
class TransfoXLModelOutput(ModelOutput):
    """Output of :class:`TransfoXLModel`.

    Args:
        last_hidden_state: ``[batch, seq, d_model]``.
        mems: ``n_layer`` tensors ``[batch, min(mem_len, memory + seq), d_model]`` to pass as the
            next segment's ``mems`` (detached); ``None`` when ``mem_len`` is 0.
        mem_key_values: ``n_layer`` tensors ``[batch, min(mem_len, memory + seq), 2 * n_head * d_head]``,
            the keys and values of ``mems`` (the cache to pass as the next segment's ``mem_key_values``);
            only under ``torch.no_grad()`` and ``use_cache`` not False, else ``None``.
        cache: the :class:`TransfoXLCache` given as ``past_key_values`` (or ``cache``), or made for ``use_cache=True``
            without ``mems``, filled (``mems`` and ``mem_key_values`` are then its last ``mem_len`` positions).
        hidden_states: ``n_layer + 1`` tensors ``[batch, seq, d_model]`` with ``output_hidden_states``.
        attentions: ``n_layer`` tensors ``[batch, n_head, seq, memory + seq]`` with ``output_attentions``; with a
            cache (generation), ``[batch, n_head, new, cached + new]`` (see :func:`over_keys`).
    """

    last_hidden_state: torch.Tensor | None = None
    mems: list[torch.Tensor] | None = None
    mem_key_values: list[torch.Tensor] | None = None
    cache: TransfoXLCache | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


@dataclass
class TransfoXLLMHeadModelOutput(ModelOutput):
    """Output of :class:`TransfoXLLMHeadModel`.

    Args:
        loss: mean negative log-likelihood over the predicted tokens, a scalar.
        losses: ``[batch, targets]`` per-token negative log-likelihood (0 where the target is -100);
            ``targets`` is ``seq - 1`` with ``labels``, ``seq`` with ``shift_labels``.
        logits: ``[batch, seq, vocab_size]``: scores with a plain softmax; log-probabilities with the
            adaptive softmax, whose full vocabulary is only computed when no labels are given.
        mems, mem_key_values, cache, hidden_states, attentions: as in :class:`TransfoXLModelOutput`.
    """

    loss: torch.Tensor | None = None
    losses: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    mems: list[torch.Tensor] | None = None
    mem_key_values: list[torch.Tensor] | None = None
    cache: TransfoXLCache | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


@dataclass
class TransfoXLSequenceClassifierOutput(ModelOutput):
    """Output of :class:`TransfoXLForSequenceClassification`: ``logits`` ``[batch, num_labels]``."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    mems: list[torch.Tensor] | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


def sinusoid_embeddings(distances: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """``[len]`` distances -> ``[len, d]`` as ``cat([sin, cos])`` (the reference's ``PositionalEmbedding``)."""
    angles = torch.outer(distances.to(inv_freq.dtype), inv_freq)
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def rel_shift(padded_scores: torch.Tensor) -> torch.Tensor:
    """The reference's ``_rel_shift``: ``[..., q, k + 1]`` scores against distances ``k-1 .. 0`` behind one zero
    column -> ``[..., q, k]`` scores against each key, as a view.

    Afterwards ``out[..., i, j]`` holds the score at distance ``(k - q) + i - j`` (query ``i`` sits
    at key position ``k - q + i``). Entries above that diagonal are junk and must be masked.
    """
    qlen, klen = padded_scores.shape[-2], padded_scores.shape[-1] - 1
    # = padded.view(..., klen + 1, qlen)[..., 1:, :].view(..., qlen, klen)
    return padded_scores.flatten(-2)[..., qlen:qlen + qlen * klen].unflatten(-1, (qlen, klen))


def position_scores(query, position_keys, r_r_bias):
    """``(query + r_r_bias) . position_keys``: ``[batch, heads, q, k]`` against the distances of the keys in
    their order (before :func:`rel_shift`), for query ``[batch, heads, q, d_head]``, position_keys
    ``[k, heads, d_head]``.

    One product per head with the batch and the queries folded together; ``einsum`` ran the same product but
    its planning cost more host time than the product itself at generation sizes.
    """
    batch, heads, qlen, d_head = query.shape
    folded = (query.transpose(1, 2) + r_r_bias).permute(2, 0, 1, 3).reshape(heads, batch * qlen, d_head)
    return torch.bmm(folded, position_keys.permute(1, 2, 0)).view(heads, batch, qlen, -1).transpose(0, 1)


def shifted_position_scores(query, position_keys, r_r_bias):
    """The position term against each key, ``[batch, heads, q, k]``: :func:`rel_shift` of
    :func:`position_scores`. A zero position key in front makes the product write the zero column itself
    (no padded copy of the scores)."""
    return rel_shift(position_scores(query, F.pad(position_keys, (0, 0, 0, 0, 1, 0)), r_r_bias))


def relative_attention_scores(query, key, position_keys, r_w_bias, r_r_bias):
    """Unscaled Transformer-XL scores ``AC + BD``.

    Args:
        query: ``[batch, heads, q, d_head]``; key: ``[batch, heads, k, d_head]``.
        position_keys: ``[k, heads, d_head]``, ``r_net`` of the embeddings of distances ``k-1 .. 0``.
        r_w_bias, r_r_bias: ``[heads, d_head]`` global content and position biases.

    Returns: ``[batch, heads, q, k]``.
    """
    content = (query + r_w_bias[:, None]) @ key.transpose(-1, -2)
    return content + shifted_position_scores(query, position_keys, r_r_bias)


def causal_memory_bias(qlen: int, mlen: int, mem_len: int, same_length: bool, dtype, device) -> torch.Tensor:
    """``[q, mlen + q]`` additive attention bias: -inf where a query may *not* attend (the reference's
    ``dec_attn_mask``), 0 elsewhere. With ``same_length`` each query sees the last ``mem_len`` keys up to itself;
    with ``mem_len`` 0 that would be none (the reference's mask blocks every key there), so then the mask is only
    causal."""
    klen = mlen + qlen
    ones = torch.ones(qlen, klen, dtype=torch.bool, device=device)
    mask = torch.triu(ones, diagonal=1 + mlen)
    if same_length and mem_len > 0:
        overflow = klen - mem_len
        shift = qlen - overflow if overflow > 0 else qlen
        mask = mask | torch.tril(ones, diagonal=-shift)
    return torch.zeros(mask.shape, dtype=dtype, device=device).masked_fill_(mask, -math.inf)


def decoding_memory_bias(qlen: int, mlen: int, mem_len: int, same_length: bool, dtype, device) -> torch.Tensor:
    """``[q, mlen + q]`` additive bias for tokens decoded after ``mlen`` remembered positions: each query sees the
    ``mem_len`` positions before it and itself (``same_length``: ``mem_len`` keys, itself included), what it sees when
    the tokens come one at a time with a memory of ``mem_len``."""
    query_positions = torch.arange(mlen, mlen + qlen, device=device)[:, None]
    key_positions = torch.arange(mlen + qlen, device=device)[None, :]
    width = mem_len if same_length and mem_len > 0 else mem_len + 1
    blocked = (key_positions > query_positions) | (key_positions <= query_positions - width)
    return torch.zeros(blocked.shape, dtype=dtype, device=device).masked_fill_(blocked, -math.inf)


def plain_memory_key_value(qkv_net, memory, inner):
    return qkv_net(memory)[..., inner:]


def plain_softmax_nll(logits, targets):
    return F.cross_entropy(logits.float(), targets, reduction="none")


def fast_softmax_nll(logits, targets):
    return (SoftmaxNLL.apply if logits.requires_grad else softmax_nll_without_grad)(logits, targets)


@dataclass(frozen=True)
class Paths:
    """How each step that has a fast variant runs: the plain path is the paper's arithmetic, in this file; the fast
    one is ``fast_transfo_xl.py``'s."""

    cpu_dropout: Callable | None  # (input, p) -> dropped input on the CPU in training; None: nn.Dropout's
    memory_key_value: Callable  # (qkv_net, memory, inner) -> the memory's keys and values, [b, m, 2 * inner]
    softmax_nll: Callable  # (logits [n, vocab], targets [n]) -> per-token losses [n], for a plain softmax
    fused_attention: bool  # the position term as SDPA's float mask (or the CPU training kernel); False: explicit


PLAIN_PATHS = Paths(None, plain_memory_key_value, plain_softmax_nll, fused_attention=False)
FAST_PATHS = Paths(lane_dropout, memory_keys_and_values, fast_softmax_nll, fused_attention=True)


def chosen_paths(config: TransfoXLConfig) -> Paths:
    """The one place that chooses: the plain path under ``attn_implementation="eager"``, the fast one otherwise
    (read at every call, so that ``set_attn_implementation`` switches a built model)."""
    return PLAIN_PATHS if config._attn_implementation == "eager" else FAST_PATHS


class Dropout(nn.Dropout):
    """``nn.Dropout``; on the CPU the lane mask of :func:`~fast_transfo_xl.lane_dropout` unless the model runs the
    plain path (``attn_implementation="eager"``)."""

    def __init__(self, p: float, config: TransfoXLConfig):
        super().__init__(p)
        self.config = config

    def forward(self, input):
        cpu_dropout = chosen_paths(self.config).cpu_dropout
        if self.training and self.p > 0 and input.device.type == "cpu" and cpu_dropout is not None:
            return cpu_dropout(input, self.p)
        return super().forward(input)


class PositionalEmbedding(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.register_buffer("inv_freq", 1 / (10000 ** (torch.arange(0.0, dim, 2.0) / dim)), persistent=False)

    def forward(self, distances):
        return sinusoid_embeddings(distances, self.inv_freq)


class PositionwiseFF(nn.Module):
    def __init__(self, config: TransfoXLConfig):
        super().__init__()
        self.pre_lnorm = config.pre_lnorm
        self.CoreNet = nn.Sequential(
            nn.Linear(config.d_model, config.d_inner), nn.ReLU(inplace=True), Dropout(config.dropout, config),
            nn.Linear(config.d_inner, config.d_model), Dropout(config.dropout, config))
        self.layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_epsilon)

    def forward(self, hidden):
        if self.pre_lnorm:
            return hidden + self.CoreNet(self.layer_norm(hidden))
        return self.layer_norm(hidden + self.CoreNet(hidden))


class RelPartialLearnableMultiHeadAttn(nn.Module):
    def __init__(self, config: TransfoXLConfig):
        super().__init__()
        self.config = config
        self.n_head, self.d_head, self.pre_lnorm = config.n_head, config.d_head, config.pre_lnorm
        self.scale = 1 / math.sqrt(config.d_head)
        inner = config.n_head * config.d_head
        self.qkv_net = nn.Linear(config.d_model, 3 * inner, bias=False)
        self.r_net = nn.Linear(config.d_model, inner, bias=False)
        self.o_net = nn.Linear(inner, config.d_model, bias=False)
        self.drop = Dropout(config.dropout, config)
        self.dropatt = Dropout(config.dropatt, config)
        self.layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_epsilon)
        if config.untie_r:
            self.r_w_bias = nn.Parameter(torch.zeros(config.n_head, config.d_head))
            self.r_r_bias = nn.Parameter(torch.zeros(config.n_head, config.d_head))

    def _scaled_position_term(self, query, position_embeddings, r_r_bias):
        """``rel_shift((q + r_r_bias) . r_net(R)) * scale``, ``[b, h, q, k]``, with the products in the order that
        costs fewer multiplications (:func:`~fast_transfo_xl.queries_first_is_cheaper`)."""
        if queries_first_is_cheaper(query, position_embeddings, self.r_net):
            return rel_shift(reassociated_position_scores(query * self.scale, position_embeddings, self.r_net.weight,
                                                          r_r_bias * self.scale))
        position_keys = self.r_net(position_embeddings).view(-1, self.n_head, self.d_head)
        return shifted_position_scores(query, position_keys * self.scale, r_r_bias)

    def _heads(self, x):
        return x.view(x.shape[0], x.shape[1], self.n_head, self.d_head).transpose(1, 2)

    def forward(self, hidden, position_embeddings, attention_bias, memory=None, r_w_bias=None, r_r_bias=None,
                output_attentions=False, memory_key_value=None):
        """hidden ``[b, q, d]``, position_embeddings ``[k, d]``, attention_bias ``[q, k]`` (0, or -inf where blocked),
        memory ``[b, m, d]`` or None, memory_key_value ``[b, m, 2 * heads * d_head]`` (the memory's keys
        and values, if already known) -> ``([b, q, d], [b, heads, q, k] or None, [b, k, 2 * heads * d_head])``."""
        if r_w_bias is None:
            r_w_bias, r_r_bias = self.r_w_bias, self.r_r_bias
        segment_in = self.layer_norm(hidden) if self.pre_lnorm else hidden
        # qkv_net is called as a module (so that PEFT's LoRA, quantized layers and hooks apply); the memory's keys and
        # values apart: backward computes no input gradient for the (detached) memory
        inner = self.n_head * self.d_head
        query, key_value = self.qkv_net(segment_in).split([inner, 2 * inner], dim=-1)
        query = self._heads(query)
        paths = chosen_paths(self.config)
        if memory is not None and memory_key_value is None:
            memory_in = self.layer_norm(memory) if self.pre_lnorm else memory
            memory_key_value = paths.memory_key_value(self.qkv_net, memory_in, inner)
        if memory_key_value is not None:
            key_value = torch.cat([memory_key_value, key_value], dim=1)
        key, value = (self._heads(t) for t in key_value.chunk(2, dim=-1))
        # under autocast the projections are bfloat16 while the float32 biases would promote the queries back
        r_w_bias, r_r_bias = r_w_bias.to(query.dtype), r_r_bias.to(query.dtype)
        if output_attentions or not paths.fused_attention:
            position_keys = self.r_net(position_embeddings).view(-1, self.n_head, self.d_head)
            scores = relative_attention_scores(query, key, position_keys, r_w_bias, r_r_bias) * self.scale
            probs = self.dropatt((scores.float() + attention_bias).softmax(-1).type_as(scores))
            context = probs @ value
        else:  # SDPA adds the position term as a float mask: (q + r_w_bias) . k * scale + BD * scale
            position = self._scaled_position_term(query, position_embeddings, r_r_bias)
            bias = position + attention_bias.to(position.dtype)  # one pass over [b, h, q, k]
            if torch.is_grad_enabled() and hidden.device.type == "cpu":
                context = cpu_training_attention(bias, query + r_w_bias[:, None], key, value, self.scale, self.dropatt)
            else:
                context = F.scaled_dot_product_attention(query + r_w_bias[:, None], key, value, attn_mask=bias,
                                                         dropout_p=self.dropatt.p if self.training else 0.0,
                                                         scale=self.scale)
            probs = None
        attended = self.drop(self.o_net(context.transpose(1, 2).flatten(2)))
        output = hidden + attended if self.pre_lnorm else self.layer_norm(hidden + attended)
        return output, probs, key_value


class RelPartialLearnableDecoderLayer(GradientCheckpointingLayer):
    def __init__(self, config: TransfoXLConfig):
        super().__init__()
        self.dec_attn = RelPartialLearnableMultiHeadAttn(config)
        self.pos_ff = PositionwiseFF(config)

    def forward(self, hidden, position_embeddings, attention_bias, memory=None, r_w_bias=None, r_r_bias=None,
                output_attentions=False, memory_key_value=None):
        hidden, probs, key_value = self.dec_attn(hidden, position_embeddings, attention_bias, memory, r_w_bias,
                                                 r_r_bias, output_attentions, memory_key_value)
        return self.pos_ff(hidden), probs, key_value


def cluster_bounds(cutoffs: list[int], vocab_size: int) -> list[tuple[int, int]]:
    edges = [0] + list(cutoffs) + [vocab_size]
    return list(zip(edges[:-1], edges[1:]))


class AdaptiveEmbedding(nn.Module):
    """Token embeddings of ``d_embed // div_val**i`` dimensions per cluster, projected to ``d_model``,
    scaled by ``sqrt(d_model)`` (the reference's ``AdaptiveEmbedding``)."""

    def __init__(self, config: TransfoXLConfig):
        super().__init__()
        self.d_model, self.div_val = config.d_model, config.div_val
        self.num_embeddings = config.vocab_size
        self.scale = config.d_model ** 0.5
        self.bounds = cluster_bounds(config.cluster_cutoffs, config.vocab_size)
        self.emb_layers = nn.ModuleList()
        self.emb_projs = nn.ParameterList()
        if self.div_val == 1:
            self.emb_layers.append(nn.Embedding(config.vocab_size, config.d_embed))
            if config.d_model != config.d_embed:
                self.emb_projs.append(nn.Parameter(torch.zeros(config.d_model, config.d_embed)))
        else:
            for i, (start, end) in enumerate(self.bounds):
                d_cluster = config.d_embed // self.div_val ** i
                self.emb_layers.append(nn.Embedding(end - start, d_cluster))
                self.emb_projs.append(nn.Parameter(torch.zeros(config.d_model, d_cluster)))

    def __getattr__(self, name):
        """``weight`` and ``embedding_dim``, what clients read of ``get_input_embeddings()`` (transformers' example
        scripts, resizing): the one table's when there is one (``div_val`` 1, with or without cutoffs); an adaptive
        embedding of several tables says what it has instead."""
        if name in ("weight", "embedding_dim"):
            tables = super().__getattr__("emb_layers")
            if len(tables) == 1:
                return getattr(tables[0], name)
            raise AttributeError(
                f"transfo-xl's adaptive input embedding (div_val={self.div_val}) has no single {name}: it holds one "
                f"table per cluster, emb_layers[i].weight of d_embed // div_val**i columns, projected to d_model "
                f"{self.d_model}; its vocabulary size is num_embeddings ({self.num_embeddings}, config.vocab_size), "
                f"and model.resize_token_embeddings(n) resizes it (a model with div_val=1 has a single table)")
        return super().__getattr__(name)

    def forward(self, input_ids):
        if self.div_val == 1:
            embedded = self.emb_layers[0](input_ids)
            if len(self.emb_projs):
                embedded = F.linear(embedded, self.emb_projs[0])
            return embedded * self.scale
        flat_ids = input_ids.reshape(-1)
        embedded = self.emb_projs[0].new_zeros(flat_ids.shape[0], self.d_model)
        for (start, end), layer, projection in zip(self.bounds, self.emb_layers, self.emb_projs):
            rows = ((flat_ids >= start) & (flat_ids < end)).nonzero().squeeze(1)
            # no branch on whether a cluster occurs: an empty one copies nothing (and torch.export needs no guard)
            cluster_embedded = F.linear(layer(flat_ids[rows] - start), projection)  # bfloat16 under autocast
            embedded = embedded.index_copy(0, rows, cluster_embedded.to(embedded.dtype))
        return embedded.view(*input_ids.shape, self.d_model) * self.scale


class ProjectedAdaptiveLogSoftmax(nn.Module):
    """Softmax over the vocabulary, adaptive over ``cutoffs`` (Grave et al., 2017) when there are any.

    The head scores the first cluster's tokens plus one entry per tail cluster; a tail token's
    log-probability is its cluster's head log-probability plus its log-probability in the cluster.
    """

    def __init__(self, config: TransfoXLConfig):
        super().__init__()
        cutoffs = config.cluster_cutoffs
        self.vocab_size, self.div_val = config.vocab_size, config.div_val
        self.bounds = cluster_bounds(cutoffs, config.vocab_size)
        self.n_clusters = len(cutoffs)
        if self.n_clusters:
            self.cluster_weight = nn.Parameter(torch.zeros(self.n_clusters, config.d_embed))
            self.cluster_bias = nn.Parameter(torch.zeros(self.n_clusters))
        self.out_layers = nn.ModuleList()
        self.out_projs = nn.ParameterList()
        if self.div_val == 1:
            if config.d_model != config.d_embed:
                for _ in self.bounds:
                    self.out_projs.append(nn.Parameter(torch.zeros(config.d_model, config.d_embed)))
            self.out_layers.append(nn.Linear(config.d_embed, config.vocab_size))
        else:
            for i, (start, end) in enumerate(self.bounds):
                d_cluster = config.d_embed // self.div_val ** i
                self.out_projs.append(nn.Parameter(torch.zeros(config.d_model, d_cluster)))
                self.out_layers.append(nn.Linear(d_cluster, end - start))

    def __getattr__(self, name):
        """``weight``: the one matrix over the vocabulary where there is one, as ``AdaptiveEmbedding.weight``."""
        if name == "weight":
            layers = super().__getattr__("out_layers")
            if len(layers) == 1:
                return layers[0].weight
            raise AttributeError(f"transfo-xl's adaptive softmax has no single weight: one matrix per cluster, "
                                 f"out_layers[i].weight ({len(layers)} of them)")
        return super().__getattr__(name)

    def _cluster_logits(self, hidden, cluster: int):
        """Scores of cluster ``cluster``'s own tokens (plus the tail-cluster entries for the head)."""
        if self.div_val == 1:
            start, end = self.bounds[cluster]
            weight, bias = self.out_layers[0].weight[start:end], self.out_layers[0].bias[start:end]
        else:
            weight, bias = self.out_layers[cluster].weight, self.out_layers[cluster].bias
        if cluster == 0 and self.n_clusters:
            weight, bias = torch.cat([weight, self.cluster_weight]), torch.cat([bias, self.cluster_bias])
        if len(self.out_projs):
            hidden = F.linear(hidden, self.out_projs[cluster].t())
        return F.linear(hidden, weight, bias)

    def log_probs(self, hidden):
        """``[..., d_model]`` -> ``[..., vocab_size]`` log-probabilities (plain softmax: raw scores)."""
        if not self.n_clusters:
            return self._cluster_logits(hidden, 0)
        head = self._cluster_logits(hidden, 0).log_softmax(-1)
        head_size = self.bounds[0][1]
        parts = [head[..., :head_size]]
        for cluster in range(1, len(self.bounds)):
            tail = self._cluster_logits(hidden, cluster).log_softmax(-1)
            parts.append(head[..., head_size + cluster - 1, None] + tail)
        return torch.cat(parts, dim=-1)

    def nll(self, hidden, targets):
        """``[n, d_model]``, ``[n]`` targets (-100 = ignore) -> ``[n]`` negative log-likelihoods (0 where ignored)."""
        valid = targets != -100
        head = self._cluster_logits(hidden, 0).float().log_softmax(-1)
        head_size = self.bounds[0][1]
        nll = hidden.new_zeros(targets.shape, dtype=torch.float32)
        in_head = valid & (targets < head_size)
        nll[in_head] = -head[in_head].gather(1, targets[in_head, None]).squeeze(1)
        for cluster in range(1, len(self.bounds)):
            start, end = self.bounds[cluster]
            rows = (valid & (targets >= start) & (targets < end)).nonzero().squeeze(1)
            if not rows.numel():
                continue
            tail = self._cluster_logits(hidden[rows], cluster).float().log_softmax(-1)
            in_tail = tail.gather(1, (targets[rows] - start)[:, None]).squeeze(1)
            nll[rows] = -(head[rows, head_size + cluster - 1] + in_tail)
        return nll


def chosen_hidden_states(hidden_states: tuple, chosen) -> tuple:
    """``output_hidden_states=True`` keeps all; an index or indices (transformers' reading), those alone in place."""
    wanted = selected_hidden_states(chosen)
    return hidden_states if wanted is None else tuple(
        h if i in {w % len(hidden_states) for w in wanted} else None for i, h in enumerate(hidden_states))


def refuse_unknown_arguments(kwargs: dict, token_type_ids, model: str):
    """What a tokenizer returns is accepted; what the model cannot honour is refused, never ignored: token types
    (Transformer-XL has none) pass only as a row of zeros, ``position_ids`` only as None, and an unknown argument is
    an error."""
    if token_type_ids is not None and bool(token_type_ids.ne(0).any()):
        raise ValueError(f"{model}: Transformer-XL has no token type embeddings: token_type_ids must be all zeros (a "
                         f"single segment) or not given")
    if kwargs.pop("position_ids", None) is not None:  # None is what PEFT's prompt tuning passes (peft 0.22)
        raise ValueError(f"{model}: Transformer-XL's positions are relative, from the memory and the segment: "
                         f"position_ids cannot be given")
    if kwargs:
        raise TypeError(f"{model}.forward() got unexpected arguments {sorted(kwargs)}")


def one_cache(cache, past_key_values):
    """``past_key_values`` (transformers' name until 5.x, PEFT's) and ``cache`` (transformers 5.25's) are one
    argument."""
    if cache is not None and past_key_values is not None and cache is not past_key_values:
        raise ValueError("pass the cache once, as past_key_values or as cache, not both")
    return cache if cache is not None else past_key_values


class TransfoXLPreTrainedModel(PreTrainedModel):
    config: TransfoXLConfig
    base_model_prefix = "transformer"
    _supports_sdpa = True
    _no_split_modules = ["RelPartialLearnableDecoderLayer"]
    supports_gradient_checkpointing = True
    accepts_loss_kwargs = False  # the loss is a per-batch mean: the Trainer scales it for gradient accumulation
    # transformers 4.x saved the sinusoids' frequencies; they are recomputed here
    _keys_to_ignore_on_load_unexpected = [r"pos_emb\.inv_freq"]

    def resize_token_embeddings(self, new_num_tokens=None, pad_to_multiple_of=None, mean_resizing=True):
        """transformers' ``resize_token_embeddings`` for the adaptive embedding: tokens are added to (or removed from)
        the last cluster, the rarest words, as in transformers 4.x, and the softmax's last cluster follows (tied again
        where tied). Returns the input embedding."""
        embedding = self.base_model.word_emb
        if new_num_tokens is None and pad_to_multiple_of is None:
            return embedding
        new_num_tokens = self.config.vocab_size if new_num_tokens is None else new_num_tokens
        if pad_to_multiple_of is not None and not isinstance(pad_to_multiple_of, int):
            # transformers' refusal, word for word: callers match it
            raise ValueError(f"Asking to pad the embedding matrix to a multiple of `{pad_to_multiple_of}`, which is "
                             "not and integer. Please make sure to pass an integer")
        if pad_to_multiple_of is not None:
            new_num_tokens = math.ceil(new_num_tokens / pad_to_multiple_of) * pad_to_multiple_of
        last_start = embedding.bounds[-1][0]
        if new_num_tokens <= last_start:
            raise ValueError(f"resize_token_embeddings: the last cluster starts at token {last_start} (cutoffs "
                             f"{self.config.cluster_cutoffs}); keep more than {last_start} tokens")
        first_row = last_start if self.config.div_val > 1 else 0  # div_val 1: one table for every cluster
        embedding.emb_layers[-1] = self._get_resized_embeddings(embedding.emb_layers[-1], new_num_tokens - first_row,
                                                                mean_resizing=mean_resizing)
        softmax = getattr(self, "crit", None)
        if softmax is not None:
            softmax.out_layers[-1] = self._get_resized_lm_head(softmax.out_layers[-1], new_num_tokens - first_row,
                                                               mean_resizing=mean_resizing)
        for module in (embedding, softmax):
            if module is not None:
                module.bounds[-1] = (last_start, new_num_tokens)
        embedding.num_embeddings = self.config.vocab_size = new_num_tokens
        if softmax is not None:
            softmax.vocab_size = new_num_tokens
        self.vocab_size = new_num_tokens  # as transformers' resize_token_embeddings records it
        self.tie_weights()
        return embedding

    def _weight_init(self, tensor, std=None):
        if self.config.init == "uniform":
            init.uniform_(tensor, -self.config.init_range, self.config.init_range)
        else:
            init.normal_(tensor, 0.0, self.config.init_std if std is None else std)

    @torch.no_grad()
    def _init_weights(self, module):
        """The reference's ``weights_init``: N(0, init_std) (or U(+-init_range)), projections N(0, proj_init_std)."""
        if isinstance(module, (nn.Linear, nn.Embedding)):
            self._weight_init(module.weight)
            if getattr(module, "bias", None) is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, nn.ParameterList):  # the only ParameterLists are emb_projs and out_projs
            for projection in module:
                init.normal_(projection, 0.0, self.config.proj_init_std)
        elif isinstance(module, ProjectedAdaptiveLogSoftmax) and module.n_clusters:
            self._weight_init(module.cluster_weight)
            init.zeros_(module.cluster_bias)
        elif isinstance(module, PositionalEmbedding):
            dim = module.inv_freq.shape[0] * 2
            init.copy_(module.inv_freq, 1 / (10000 ** (torch.arange(0.0, dim, 2.0) / dim)))
        for name in ("r_w_bias", "r_r_bias"):
            if isinstance(getattr(module, name, None), nn.Parameter):
                self._weight_init(getattr(module, name))


class TransfoXLModel(TransfoXLPreTrainedModel):
    """Embeddings + ``n_layer`` relative-attention layers with segment memory. Batch-first."""

    def __init__(self, config: TransfoXLConfig):
        super().__init__(config)
        config.validate()  # fields set after the config was made (from_pretrained's vocab_size=...) are checked too
        self.word_emb = AdaptiveEmbedding(config)
        self.pos_emb = PositionalEmbedding(config.d_model)
        self.drop = Dropout(config.dropout, config)
        self.layers = nn.ModuleList(RelPartialLearnableDecoderLayer(config) for _ in range(config.n_layer))
        if not config.untie_r:
            self.r_w_bias = nn.Parameter(torch.zeros(config.n_head, config.d_head))
            self.r_r_bias = nn.Parameter(torch.zeros(config.n_head, config.d_head))
        self.post_init()

    def get_input_embeddings(self):
        return self.word_emb

    def set_input_embeddings(self, embeddings):
        self.word_emb = embeddings

    def legacy_zero_mems(self, batch_size: int) -> list[torch.Tensor]:
        """``mem_len`` zero vectors per layer: what transformers 4.x used when no ``mems`` were given.

        Pass them as ``mems`` to reproduce a 4.x model's first segment exactly; without ``mems``
        this model starts from an empty memory, as the reference code does.
        """
        weight = self.word_emb.emb_layers[0].weight
        return [weight.new_zeros(batch_size, self.config.mem_len, self.config.d_model)
                for _ in range(self.config.n_layer)]

    def _check_mems(self, mems, batch_size):
        if len(mems) != self.config.n_layer:
            raise ValueError(f"mems must hold one tensor per layer ({self.config.n_layer}), got {len(mems)}")
        expected = (batch_size, mems[0].shape[1] if mems[0].dim() == 3 else -1, self.config.d_model)
        for i, memory in enumerate(mems):
            if memory.dim() != 3 or tuple(memory.shape) != expected:
                raise ValueError(
                    f"mems[{i}] has shape {tuple(memory.shape)}; expected [batch={batch_size}, memory length "
                    f"(equal for every layer), d_model={self.config.d_model}]. Memories are batch-first and belong "
                    f"to the batch that produced them: reset them (mems=None) when the batch changes")

    def _check_mem_key_values(self, mem_key_values, mems):
        if torch.is_grad_enabled():
            raise ValueError("mem_key_values are an inference cache: pass them under torch.no_grad(). With gradients "
                             "the memory's keys and values are recomputed, so that their projection is trained")
        if mems is None:
            raise ValueError("mem_key_values belong to the mems that produced them: pass both")
        if len(mem_key_values) != len(mems):
            raise ValueError(f"mem_key_values must hold one tensor per layer ({len(mems)}), got {len(mem_key_values)}")
        width = 2 * self.config.n_head * self.config.d_head
        for i, (key_value, memory) in enumerate(zip(mem_key_values, mems)):
            if tuple(key_value.shape) != (*memory.shape[:2], width):
                raise ValueError(f"mem_key_values[{i}] has shape {tuple(key_value.shape)}; expected "
                                 f"{(*memory.shape[:2], width)}: the keys and values of mems[{i}] "
                                 f"[batch, memory length, 2 * n_head * d_head]")

    def _updated_mems(self, layer_inputs, mems, mem_len):
        """The last ``mem_len`` inputs of each layer over ``[memory; segment]``, without gradient."""
        if mem_len == 0:
            return None
        with torch.no_grad():
            if mems is None:
                return [h[:, -mem_len:].detach() for h in layer_inputs]
            return [(h if h.shape[1] >= mem_len else torch.cat([m, h], dim=1))[:, -mem_len:].detach()
                    for m, h in zip(mems, layer_inputs)]

    @can_return_tuple
    def forward(self, input_ids=None, mems=None, inputs_embeds=None, attention_mask=None, output_attentions=None,
                output_hidden_states=None, mem_key_values=None, use_cache=None, mem_len=None,
                clamp_len=None, same_length=None, past_key_values=None, token_type_ids=None, cache=None,
                **kwargs) -> TransfoXLModelOutput | tuple:
        """input_ids ``[batch, seq]`` (or inputs_embeds ``[batch, seq, d_model]``); mems from the previous
        segment's output. ``attention_mask`` ``[batch, seq]`` (with a cache: over the cached tokens and the new
        ones, or the new ones alone) marks padding, left or right: no token attends to it, and with relative
        positions a padded row's real tokens see exactly what they see unpadded (the padding's own states are not
        meaningful). A cache keeps the mask of its rows, so a left-padded batch generates for each row what the row
        generates alone, exactly while a decoded token's window (the ``mem_len`` positions before it) holds all of
        its row's earlier tokens or none of its padding: in between, padding takes places in the window that
        unpadded would be the row's oldest tokens. A segment's ``mems`` are taken as unpadded.

        ``mem_len``, ``clamp_len``, ``same_length`` override the config's for this call (e.g. evaluating with a
        longer memory than in training) without changing the model.

        ``mem_key_values`` (the previous output's, with its ``mems``) spares recomputing the memory's keys
        and values, as ``past_key_values`` do elsewhere in transformers: valid only while the weights are
        unchanged, so only under ``torch.no_grad()`` (evaluation, generation). ``use_cache=False`` returns none.

        ``past_key_values`` (or ``cache``, transformers 5.25's name): the memory as a :class:`TransfoXLCache` (or an
        empty ``DynamicCache``), which this call fills and returns as ``cache``: the decoding API of ``generate``.
        Tokens after a filled cache are decoded: each attends to the ``mem_len`` positions before it (and itself),
        as if fed one at a time, so that several at once (assisted decoding) give what one at a time gives.

        ``token_type_ids``: accepted as tokenizers return them, all zeros (no token types in Transformer-XL).
        """
        refuse_unknown_arguments(kwargs, token_type_ids, "TransfoXLModel")
        cache = as_transfo_xl_cache(one_cache(cache, past_key_values), self.config.n_layer, self.config.d_model,
                                    "TransfoXLModel")
        if cache is not None and (mems is not None or mem_key_values is not None):
            raise ValueError("pass the memory once: mems (and mem_key_values), the segment API, or past_key_values "
                             "(a Cache), not both")
        output_attentions = output_attentions if output_attentions is not None else self.config.output_attentions
        chosen = output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        output_hidden_states = chosen is not False and chosen is not None
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("give exactly one of input_ids and inputs_embeds")
        hidden = self.word_emb(input_ids) if inputs_embeds is None else inputs_embeds
        padding = None if attention_mask is None or bool(attention_mask.bool().all()) else attention_mask.bool()
        mem_len = self.config.mem_len if mem_len is None else mem_len
        clamp_len = self.config.clamp_len if clamp_len is None else clamp_len
        same_length = self.config.same_length if same_length is None else same_length
        if mem_len < 0:
            raise ValueError(f"mem_len must be >= 0 (0: no memory), got {mem_len}")
        settings = dict(mem_len=mem_len, clamp_len=clamp_len, same_length=same_length,
                        output_attentions=output_attentions)
        if cache is None and use_cache is True and mems is None and mem_key_values is None:
            cache = TransfoXLCache(self.config.n_layer)  # transformers' reading of use_cache: return a cache
        if cache is not None:
            return self._forward_with_cache(hidden, cache, chosen, settings, padding)
        batch_size = hidden.shape[0]
        if mems is not None and len(mems) == 0:
            mems = None
        if mems is not None:
            self._check_mems(mems, batch_size)
        if mem_key_values is not None:
            self._check_mem_key_values(mem_key_values, mems)
        key_mask = None
        if padding is not None:  # (a memory passed as mems: no padding)
            check_padding_mask(padding, hidden.shape[:2])
            key_mask = nn.functional.pad(padding, (0 if mems is None else mems[0].shape[1], 0), value=True)
        hidden, layer_inputs, attentions, key_values = self._layers(hidden, mems, mem_key_values, key_mask=key_mask,
                                                                    **settings)
        new_mems = self._updated_mems(layer_inputs, mems, mem_len)
        # key_values cover [memory; segment], the rows of the new mems: their last mem_len are its cache
        caching = new_mems is not None and use_cache is not False and not torch.is_grad_enabled()
        return TransfoXLModelOutput(
            last_hidden_state=hidden, mems=new_mems,
            mem_key_values=[key_value[:, -mem_len:] for key_value in key_values] if caching else None,
            hidden_states=chosen_hidden_states((*layer_inputs, hidden), chosen) if output_hidden_states else None,
            attentions=tuple(attentions) if output_attentions else None)

    def _layers(self, hidden, mems, mem_key_values, mem_len, clamp_len, same_length, output_attentions,
                decoding=False, key_mask=None):
        """The stack over one segment: ``(output, each layer's input, attentions, each layer's keys and values over
        [memory; segment])``. ``decoding``: each token sees the ``mem_len`` positions before it (and itself)
        instead of the whole memory and the segment before it. ``key_mask`` ``[batch, memory + segment]`` (False at
        padding): no query sees the padding but a padding query itself (a row of nothing would be NaN)."""
        qlen = hidden.shape[1]
        if mems is not None:
            mems = [m.to(hidden.dtype) for m in mems]
        if mem_key_values is not None:
            mem_key_values = [key_value.to(hidden.dtype) for key_value in mem_key_values]
        mlen = 0 if mems is None else mems[0].shape[1]
        klen = mlen + qlen
        if decoding:
            attention_bias = decoding_memory_bias(qlen, mlen, mem_len, same_length, hidden.dtype, hidden.device)
        else:  # once for all layers
            attention_bias = causal_memory_bias(qlen, mlen, mem_len, same_length, hidden.dtype, hidden.device)
        if key_mask is not None:
            attention_bias = attention_bias + padding_bias(key_mask, qlen, hidden.dtype)
        distances = torch.arange(klen - 1, -1, -1, device=hidden.device)
        if clamp_len > 0:
            distances = distances.clamp(max=clamp_len)
        position_embeddings = self.drop(self.pos_emb(distances).to(hidden.dtype))
        hidden = self.drop(hidden)
        shared_biases = () if self.config.untie_r else (self.r_w_bias, self.r_r_bias)
        layer_inputs, attentions, key_values = [], [], []
        for i, layer in enumerate(self.layers):
            layer_inputs.append(hidden)
            hidden, probs, key_value = layer(
                hidden, position_embeddings, attention_bias, None if mems is None else mems[i], *shared_biases,
                output_attentions=output_attentions,
                memory_key_value=None if mem_key_values is None else mem_key_values[i])
            attentions.append(probs)
            key_values.append(key_value)
        return self.drop(hidden), layer_inputs, attentions, key_values

    def _forward_with_cache(self, hidden, cache, chosen, settings, padding=None):
        """A call with the memory as a :class:`TransfoXLCache`: the prompt (an empty cache) as a segment, tokens
        after it decoded; the cache updated in place. ``generate``'s cache knows its prompt's length: a first call
        with more tokens (assisted decoding: the prompt and a draft) runs the prompt as a segment and decodes the
        rest, as plain greedy decoding does."""
        qlen = hidden.shape[1]
        if padding is not None:  # the new tokens' (a mask over the cached tokens and the new ones, or these alone)
            seen_before = cache.get_seq_length()
            if padding.shape[1] not in (qlen, seen_before + qlen):
                raise ValueError(f"with a cache of {seen_before} tokens, attention_mask covers them and the {qlen} "
                                 f"new ones ({seen_before + qlen} columns) or the new ones alone; got "
                                 f"{list(padding.shape)}")
            padding = padding[:, -qlen:]
        prompt_length = getattr(cache, "prompt_length", None)
        if not cache.get_seq_length() and prompt_length is not None and 0 < prompt_length < qlen:
            cache.prompt_length = None
            split = lambda mask, part: None if mask is None else (mask[:, :prompt_length] if part == 0  # noqa: E731
                                                                  else mask[:, prompt_length:])
            first = self._forward_with_cache(hidden[:, :prompt_length], cache, chosen, settings, split(padding, 0))
            rest = self._forward_with_cache(hidden[:, prompt_length:], cache, chosen, settings, split(padding, 1))
            joined = lambda a, b: None if a is None else tuple(  # noqa: E731
                None if x is None else torch.cat([x, y], dim=-2) for x, y in zip(a, b))
            attentions = None
            if settings["output_attentions"]:
                total = rest.attentions[0].shape[-1]  # the prompt's rows see none of the rest's keys
                attentions = joined(tuple(nn.functional.pad(probs, (0, total - probs.shape[-1]))
                                          for probs in first.attentions), rest.attentions)
            return TransfoXLModelOutput(
                last_hidden_state=torch.cat([first.last_hidden_state, rest.last_hidden_state], dim=1),
                cache=cache, hidden_states=joined(first.hidden_states, rest.hidden_states), attentions=attentions)
        seen = cache.get_seq_length()
        decoding = seen > 0
        memory_mask = None
        if cache.layers[0].held == 0:
            memory, stored = None, None
        else:  # decoding reads the last mem_len positions; a prompt, all the memory the cache started from
            window = settings["mem_len"] if decoding else cache.layers[0].held
            memory, stored = zip(*(layer.last(window) for layer in cache.layers))
            memory_mask = cache.layers[0].last_mask(window)
            self._check_mems(memory, hidden.shape[0])
            if torch.is_grad_enabled() or any(kv is None for kv in stored):
                stored = None
        key_mask = None
        if padding is not None or memory_mask is not None:  # over [memory; new tokens]
            no_padding = lambda rows: torch.ones(rows.shape[:2], dtype=torch.bool, device=rows.device)  # noqa: E731
            parts = [] if memory is None else [memory_mask if memory_mask is not None else no_padding(memory[0])]
            key_mask = torch.cat([*parts, padding if padding is not None else no_padding(hidden)], dim=1)
        output, layer_inputs, attentions, key_values = self._layers(hidden, memory, stored, decoding=decoding,
                                                                    key_mask=key_mask, **settings)
        keep_keys = not torch.is_grad_enabled()
        with torch.no_grad():
            for layer, layer_input, key_value in zip(cache.layers, layer_inputs, key_values):
                layer.append(layer_input.detach(), key_value[:, -qlen:].detach() if keep_keys else None,
                             key_mask=padding)
        mem_len = settings["mem_len"]
        last = [layer.last(mem_len) for layer in cache.layers] if mem_len else None
        return TransfoXLModelOutput(
            last_hidden_state=output, cache=cache, mems=None if last is None else [rows for rows, _ in last],
            mem_key_values=None if last is None or not keep_keys else [kv for _, kv in last],
            hidden_states=chosen_hidden_states((*layer_inputs, output), chosen) if chosen not in (None, False)
            else None,
            attentions=tuple(over_keys(probs, seen + qlen) for probs in attentions) if settings["output_attentions"]
            else None)


def check_padding_mask(padding, shape):
    if padding.shape != shape:
        raise ValueError(f"attention_mask must be [batch, seq] = {list(shape)}, got {list(padding.shape)}")


def padding_bias(key_mask, qlen: int, dtype) -> torch.Tensor:
    """``[batch, 1, q, k]`` additive bias, -inf at the padding's keys (``key_mask`` ``[batch, k]``, False there) but a
    query's own (the last ``q`` keys are the queries'): a padding query sees itself alone, so its row is not NaN."""
    klen = key_mask.shape[1]
    own = torch.arange(klen, device=key_mask.device)[None, :] == torch.arange(klen - qlen, klen,
                                                                               device=key_mask.device)[:, None]
    blocked = ~key_mask[:, None, None, :] & ~own
    return torch.zeros(blocked.shape, dtype=dtype, device=key_mask.device).masked_fill_(blocked, -math.inf)


def over_keys(probs, keys: int) -> torch.Tensor:
    """Attention probabilities over ``[memory; segment]`` ``[..., q, memory + q]`` laid over the last ``keys`` positions
    (what a cache's caller gets: every token the cache has seen and the new ones, as transformers' causal LMs return
    them for ``generate`` to split by token): zeros before a memory window shorter than that; the columns of a memory
    the cache started from (``mems``, before its first token) are left out."""
    width = probs.shape[-1]
    return probs[..., width - keys:] if width >= keys else nn.functional.pad(probs, (keys - width, 0))


class TransfoXLLMHeadModel(TransfoXLPreTrainedModel, GenerationMixin):
    """Transformer-XL language model: adaptive (or plain) softmax over the vocabulary."""

    def __init__(self, config: TransfoXLConfig):
        super().__init__(config)
        self.transformer = TransfoXLModel(config)
        self.crit = ProjectedAdaptiveLogSoftmax(config)
        self._tied_weights_keys = self._tied_keys(config)
        self.post_init()

    @staticmethod
    def _tied_keys(config) -> dict:
        """{softmax parameter: embedding parameter}, as transformers 4.x tied them."""
        tied = {}
        embeddings = "transformer.word_emb"
        if config.tie_word_embeddings:
            for i in range(1 if config.div_val == 1 else len(config.cluster_cutoffs) + 1):
                tied[f"crit.out_layers.{i}.weight"] = f"{embeddings}.emb_layers.{i}.weight"
        has_projections = config.div_val != 1 or config.d_model != config.d_embed
        if has_projections:
            for i, tie in enumerate(config.tie_projs[:len(config.cluster_cutoffs) + 1]):
                if tie:
                    tied[f"crit.out_projs.{i}"] = f"{embeddings}.emb_projs.{0 if config.div_val == 1 else i}"
        return tied

    def get_output_embeddings(self):
        """The softmax where it has one matrix over the vocabulary (``crit.weight``, tied to the input's one table:
        accelerate's FSDP2 then keeps the tied pair, projections included, in one unit); None for an adaptive softmax
        of several, tied cluster by cluster (see ``_tied_keys``)."""
        return self.crit if len(self.crit.out_layers) == 1 else None

    def set_output_embeddings(self, new_embeddings):
        self.crit = new_embeddings

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # the cache is the memory (a TransfoXLCache)

    def _prepare_cache_for_generation(self, generation_config, model_kwargs, generation_mode, batch_size,
                                      max_cache_length):
        """``generate``'s cache: a :class:`TransfoXLCache` (a user's empty ``DynamicCache`` becomes one; ``mems``
        passed to ``generate`` are its starting memory), told the prompt's length (see
        :meth:`TransfoXLModel._forward_with_cache`). ``cache_implementation`` other than ``"dynamic"`` is refused:
        static, offloaded and quantized caches hold keys and values, not a memory of layer inputs."""
        implementation = generation_config.cache_implementation
        if implementation not in (None, "dynamic"):
            raise ValueError(f"cache_implementation={implementation!r}: Transformer-XL decodes from its segment "
                             f"memory (TransfoXLCache); it supports cache_implementation=None or 'dynamic' (the same)")
        cache, mems = model_kwargs.get("cache"), model_kwargs.pop("mems", None)
        if cache is not None and mems is not None:
            raise ValueError("pass the memory once: mems or past_key_values, not both")
        if mems is not None:
            cache = model_kwargs["cache"] = TransfoXLCache.from_mems(mems, model_kwargs.pop("mem_key_values", None))
        if cache is None and (generation_config.use_cache is False or not self.config.mem_len):
            return  # no memory (mem_len 0): each step recomputes the whole prefix
        if cache is None:
            cache = model_kwargs["cache"] = TransfoXLCache(self.config.n_layer)
        else:
            cache._is_user_defined = True
        as_transfo_xl_cache(cache, self.config.n_layer, self.config.d_model, type(self).__name__)
        if not cache.get_seq_length():
            mask = model_kwargs.get("attention_mask")
            cache.prompt_length = mask.shape[1] if mask is not None else getattr(generation_config, "_mask_length",
                                                                                 None)

    def _prepare_attention_mask_for_generation(self, inputs_tensor, generation_config, model_kwargs):
        """All ones: Transformer-XL has no padding mask, so a pad token in a prompt is one more token (transformers
        would mask it, and the model refuses a mask)."""
        return torch.ones(inputs_tensor.shape[:2], dtype=torch.long, device=inputs_tensor.device)

    def prepare_inputs_for_generation(self, input_ids, next_sequence_length=None, cache=None, inputs_embeds=None,
                                      is_first_iteration=False, **kwargs):
        """With the memory, each step feeds only the tokens it has not seen; without (``mem_len`` 0 or
        ``use_cache=False``) the whole prefix. ``inputs_embeds`` (PEFT's prompt tuning) stand for the prompt in the
        first step."""
        seen = cache.get_seq_length() if cache is not None else 0
        inputs = {"input_ids": input_ids if not seen else input_ids[:, -next_sequence_length:]
                  if next_sequence_length else input_ids[:, seen:]}  # (from inputs_embeds: the generated tokens)
        if inputs_embeds is not None and not seen:
            inputs = {"input_ids": None, "inputs_embeds": inputs_embeds}
        # generate hands its own tokenizers (stop strings, assisted decoding) to every step's kwargs, not meant for
        # forward; token types go on to forward's check (zeros only)
        kwargs = {name: value for name, value in kwargs.items() if value is not None and name not in
                  ("position_ids", "cache_position", "tokenizer", "assistant_tokenizer")}
        return {**kwargs, **inputs, "cache": cache}

    @can_return_tuple
    def forward(self, input_ids=None, mems=None, labels=None, shift_labels=None, inputs_embeds=None,
                attention_mask=None, output_attentions=None, output_hidden_states=None,
                use_cache=None, mem_key_values=None, mem_len=None, clamp_len=None, same_length=None,
                past_key_values=None, token_type_ids=None, cache=None, **kwargs) -> TransfoXLLMHeadModelOutput | tuple:
        """Args:
            input_ids: ``[batch, seq]``; mems: the previous segment's ``mems`` (or None).
            mem_key_values, use_cache: the memory's key/value cache, see :meth:`TransfoXLModel.forward`.
            past_key_values (or ``cache``), token_type_ids: see :meth:`TransfoXLModel.forward`.
            labels: ``[batch, seq]``, usually ``input_ids``; position ``t`` predicts ``labels[t + 1]``.
            shift_labels: ``[batch, seq]`` targets already shifted (position ``t`` predicts
                ``shift_labels[t]``), e.g. the next segment's first token at the last position; given with
                ``labels`` (context-parallel trainers pass both), ``shift_labels`` wins, as in transformers'
                causal-LM loss. -100 is ignored in both.
            mem_len, clamp_len, same_length: this call's memory settings (default: the config's).
        """
        refuse_unknown_arguments(kwargs, token_type_ids, "TransfoXLLMHeadModel")
        outputs = self.transformer(input_ids, mems=mems, inputs_embeds=inputs_embeds, attention_mask=attention_mask,
                                   output_attentions=output_attentions, output_hidden_states=output_hidden_states,
                                   mem_key_values=mem_key_values, use_cache=use_cache, mem_len=mem_len,
                                   clamp_len=clamp_len, same_length=same_length,
                                   cache=one_cache(cache, past_key_values), return_dict=True)
        hidden = outputs.last_hidden_state
        if shift_labels is not None:
            labels = None
        targets = shift_labels
        if labels is not None:  # position t predicts labels[t + 1]; the last position predicts nothing
            targets = F.pad(labels[:, 1:], (0, 1), value=-100)
        if targets is not None and targets.shape != hidden.shape[:2]:
            raise ValueError(f"labels and shift_labels must have the shape of input_ids {tuple(hidden.shape[:2])}, "
                             f"got {tuple(targets.shape)}")
        loss = losses = logits = None
        if targets is None or not self.crit.n_clusters:
            logits = self.crit.log_probs(hidden)
        if targets is not None:
            flat_targets = targets.reshape(-1)
            if logits is not None:  # plain softmax: the loss from the logits already computed
                flat_logits = logits.reshape(-1, logits.shape[-1])
                losses = chosen_paths(self.config).softmax_nll(flat_logits, flat_targets)
            else:
                losses = self.crit.nll(hidden.reshape(-1, hidden.shape[-1]), flat_targets)
            losses = losses.view(targets.shape)
            loss = losses.sum() / (targets != -100).sum().clamp(min=1)
            if labels is not None:
                losses = losses[:, :-1]
        return TransfoXLLMHeadModelOutput(loss=loss, losses=losses, logits=logits, mems=outputs.mems,
                                          mem_key_values=outputs.mem_key_values, cache=outputs.cache,
                                          hidden_states=outputs.hidden_states, attentions=outputs.attentions)


class TransfoXLForSequenceClassification(TransfoXLPreTrainedModel):
    """A linear classifier on the last non-padding token's hidden state (pad on the right)."""

    def __init__(self, config: TransfoXLConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.transformer = TransfoXLModel(config)
        self.score = nn.Linear(config.d_model, config.num_labels, bias=False)
        self.post_init()

    @can_return_tuple
    def forward(self, input_ids=None, mems=None, labels=None, inputs_embeds=None, attention_mask=None,
                output_attentions=None, output_hidden_states=None, mem_len=None, clamp_len=None,
                same_length=None, token_type_ids=None, **kwargs) -> TransfoXLSequenceClassifierOutput | tuple:
        """input_ids ``[batch, seq]`` right-padded with ``pad_token_id`` (or ``attention_mask`` 1 = token).

        The mask only locates each row's last token: with right padding, causal attention never
        reaches the padding, so the encoder needs no mask. The loss follows ``config.problem_type`` as
        transformers' classifiers do (unset: regression for one label, single-label for integer labels,
        multi-label for float labels)."""
        refuse_unknown_arguments(kwargs, token_type_ids, "TransfoXLForSequenceClassification")
        if attention_mask is not None:
            lengths = attention_mask.sum(-1)
        elif input_ids is not None and self.config.pad_token_id is not None:
            lengths = (input_ids != self.config.pad_token_id).sum(-1)
        else:
            lengths = None
        outputs = self.transformer(input_ids, mems=mems, inputs_embeds=inputs_embeds,
                                   output_attentions=output_attentions, output_hidden_states=output_hidden_states,
                                   mem_len=mem_len, clamp_len=clamp_len, same_length=same_length, return_dict=True)
        hidden = outputs.last_hidden_state
        last = hidden.shape[1] - 1 if lengths is None else (lengths - 1).clamp(min=0)
        pooled = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
        logits = self.score(pooled)
        loss = None if labels is None else self.loss_function(labels=labels, pooled_logits=logits, config=self.config)
        return TransfoXLSequenceClassifierOutput(loss=loss, logits=logits, mems=outputs.mems,
                                                 hidden_states=outputs.hidden_states, attentions=outputs.attentions)



__all__ = ["TransfoXLModel", "TransfoXLLMHeadModel", "TransfoXLForSequenceClassification", "TransfoXLPreTrainedModel",
           "TransfoXLModelOutput", "TransfoXLLMHeadModelOutput", "TransfoXLSequenceClassifierOutput",
           "TransfoXLCache"]
