"""Reversible LSH models (Kitaev et al., 2020): LSH / local / full attention layers in a reversible stack.

Each layer keeps two halves, ``x1`` and ``x2`` (both start as the embeddings): ``y1 = x1 + attention(x2)``,
``y2 = x2 + feed_forward(y1)``. Training runs the stack through :class:`ReversibleFunction`
(``reversible_rev_lsh.py``), which keeps only the last layer's output and recomputes every layer's input from its
output in backward, so activation memory does not grow with depth; the recomputation reuses the forward's LSH
buckets and replays its dropout. The final hidden states join the two halves (``combine_halves``): side by side
(``2 * hidden_size``), as in transformers' Reformer, whose weights convert key for key
(``hf_plm_ext.convert.reformer``), or their mean (``hidden_size``), as in reformer-pytorch; then a LayerNorm.

Any input length works: the model pads to the least common multiple of the chunk lengths inside, masks the
padding and cuts it from every output.
"""

import math
from dataclasses import dataclass

import torch
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.modeling_outputs import MaskedLMOutput, SequenceClassifierOutput
from transformers.utils import ModelOutput, can_return_tuple, logging
from transformers.utils.output_capturing import selected_hidden_states

from .attention_rev_lsh import (FullSelfAttention, LocalSelfAttention, LSHSelfAttention, check_attention_mask,
                               padded_to_multiple)
from .cache_rev_lsh import RevLSHCache, as_rev_lsh_cache
from .configuration_rev_lsh import RevLSHConfig
from .reversible_rev_lsh import (ReplayableDropout, ReversibleFunction, ReversibleLayer, TracedReversibleFunction,
                                 is_fsdp_unit, layer_seeds)

logger = logging.get_logger(__name__)


@dataclass
class RevLSHModelOutput(ModelOutput):
    """
    last_hidden_state: ``[batch, seq, width]``, the two reversible halves joined, layer-normed: side by side
        (``combine_halves="concat"``, width ``2 * hidden_size``) or their mean (``"mean"``, width ``hidden_size``).
    hidden_states: with ``output_hidden_states``: the embeddings and every layer's output, each
        ``[batch, seq, 2 * hidden_size]`` (the halves side by side; the embeddings twice).
    attentions: with ``output_attentions``: per layer the attention probabilities as the layer computed them
        (full: ``[batch, heads, seq, seq]``; local: ``[batch, heads, chunks, chunk, chunk * (1 + before + after)]``;
        LSH: the same over the rounds' sorted chunks, ``num_hashes * chunks`` of them). A call with a cache
        (generation) returns every layer's over every position so far instead, ``[batch, heads, new tokens, cached +
        new tokens]``, zero where a token does not look, the LSH rounds weighted: the shape ``generate`` splits by
        token, as transformers' causal LMs return it.
    """

    last_hidden_state: torch.Tensor | None = None
    cache: "RevLSHCache | None" = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


@dataclass
class RevLSHCausalLMOutput(ModelOutput):
    """
    loss: the mean next-token cross-entropy (with ``labels``). logits: ``[batch, seq, vocab]``.
    cache: with ``use_cache``: the :class:`RevLSHCache` to pass back with the next tokens.
    hidden_states, attentions: as :class:`RevLSHModelOutput`'s.
    """

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    cache: "RevLSHCache | None" = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


class AxialPositionEmbeddings(nn.Module):
    """transformers' axial positions (for converted checkpoints): position ``p`` of an ``(H, W)`` shape is
    ``[w0[p // W], w1[p % W]]``. Unlike transformers', any length up to ``H * W`` trains."""

    def __init__(self, config):
        super().__init__()
        self.shape = list(config.axial_pos_shape)
        self.weights = nn.ParameterList()
        for axis, dim in enumerate(config.axial_pos_embds_dim):
            shape = [1] * len(self.shape)
            shape[axis] = self.shape[axis]
            self.weights.append(nn.Parameter(torch.ones(*shape, dim)))

    def forward(self, position_ids):
        parts, remainder = [], position_ids
        strides = [math.prod(self.shape[axis + 1:]) for axis in range(len(self.shape))]
        for weight, stride, size in zip(self.weights, strides, self.shape):
            parts.append(weight.reshape(size, -1)[(remainder // stride) % size])
        return torch.cat(parts, dim=-1)


class RevLSHEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = None  # rotary: in the attention layers
        if config.position_embedding_type == "axial":
            self.position_embeddings = AxialPositionEmbeddings(config)
        elif config.position_embedding_type == "absolute":
            self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.max_position_embeddings = config.max_position_embeddings
        # positions the table holds (axial: its shape's product); rotary ones have no table
        self.table_size = {"axial": math.prod(config.axial_pos_shape),
                           "absolute": config.max_position_embeddings}.get(config.position_embedding_type)

    def check_positions(self, position_ids):
        """A position past the table is refused, as ``nn.Embedding`` refuses an id past its rows (an axial table
        would wrap it to an earlier position's embedding)."""
        if self.table_size is None or torch.compiler.is_compiling():
            return
        if bool((position_ids >= self.table_size).any()) or bool((position_ids < 0).any()):
            raise ValueError(f"position_ids must be in [0, {self.table_size}) (the position table's size), got "
                             f"{int(position_ids.min())}..{int(position_ids.max())}")

    def forward(self, input_ids=None, position_ids=None, inputs_embeds=None):
        embeddings = self.word_embeddings(input_ids) if inputs_embeds is None else inputs_embeds
        if self.position_embeddings is None:
            return self.dropout(embeddings)
        if position_ids is None:
            position_ids = torch.arange(embeddings.shape[1], device=embeddings.device).unsqueeze(0)
        if position_ids.shape[-1] > self.max_position_embeddings:
            raise ValueError(f"the input has {position_ids.shape[-1]} positions, more than "
                             f"max_position_embeddings ({self.max_position_embeddings})")
        return self.dropout(embeddings) + self.position_embeddings(position_ids)


def attention_layer(config, kind):
    rotary_base = config.rotary_emb_base if config.position_embedding_type == "rotary" else None
    shared = dict(hidden_size=config.hidden_size, num_heads=config.num_attention_heads,
                  head_size=config.attention_head_size, causal=config.is_decoder, rotary_base=rotary_base)
    if kind == "lsh":
        return LSHSelfAttention(**shared, chunk_length=config.lsh_attn_chunk_length, num_hashes=config.num_hashes,
                                num_buckets=config.num_buckets, chunks_before=config.lsh_num_chunks_before,
                                chunks_after=config.lsh_num_chunks_after,
                                dropout=config.lsh_attention_probs_dropout_prob, hash_seed=config.hash_seed,
                                max_position_embeddings=config.max_position_embeddings)
    if kind == "local":
        return LocalSelfAttention(**shared, chunk_length=config.local_attn_chunk_length,
                                  chunks_before=config.local_num_chunks_before,
                                  chunks_after=config.local_num_chunks_after,
                                  dropout=config.local_attention_probs_dropout_prob)
    return FullSelfAttention(**shared, dropout=config.full_attention_probs_dropout_prob)


class RevLSHAttentionBlock(nn.Module):
    """``f`` of a reversible layer: LayerNorm -> attention -> output projection -> dropout."""

    def __init__(self, config, kind):
        super().__init__()
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.self_attention = attention_layer(config, kind)
        self.output = nn.Linear(config.num_attention_heads * config.attention_head_size, config.hidden_size,
                                bias=False)
        self.dropout = ReplayableDropout(config.hidden_dropout_prob)
        self.config = config

    def forward(self, hidden_states, attention_mask=None, buckets=None, num_hashes=None, output_attentions=False,
                cache=None, padded_length=None, dropout_masks=None):
        """``(out [batch, seq, hidden], buckets, attention probabilities or None)``; ``cache``, ``padded_length``:
        see :meth:`LSHSelfAttention.forward`; ``dropout_masks``: the ``SeededMasks`` to draw the masks from (else
        torch's RNG)."""
        sdpa = getattr(self.config, "_attn_implementation", "sdpa") == "sdpa"
        out, buckets, probs = self.self_attention(self.layer_norm(hidden_states), attention_mask, buckets=buckets,
                                                  num_hashes=num_hashes, output_attentions=output_attentions,
                                                  sdpa=sdpa, cache=cache, padded_length=padded_length,
                                                  dropout_masks=dropout_masks)
        return self.dropout(self.output(out), dropout_masks), buckets, probs

    def decode_new_tokens(self, hidden_states, masks, cache, padded_lengths, output_attentions=False):
        """New tokens ``[batch, new, hidden]`` after the cached ones, each attending as it would alone, in order
        (``masks`` and ``padded_lengths``: each token's, as :meth:`forward` takes them): ``(out [batch, new, hidden],
        [each token's probabilities or None])``. The layer norm and the projections, which read no other token, run
        on all of them together, and so does the attention (``attend_new_tokens``: each token over what it sees decoded
        alone, an LSH layer's placed in its bucket as decoding places it); with ``output_attentions`` the attention
        goes token by token, each token's probabilities laid over the positions so far."""
        projected = self.self_attention.project_new_tokens(self.layer_norm(hidden_states), cache)
        if not output_attentions:
            out = self.self_attention.attend_new_tokens(projected, masks[-1], cache, padded_lengths)
            return self.dropout(self.output(out)), [None] * len(masks)
        outs, probs = [], []
        for step, (mask, padded) in enumerate(zip(masks, padded_lengths)):
            out, token_probs = self.self_attention.decode_projected(
                tuple(x[:, :, step:step + 1] for x in projected), mask, cache, padded, output_attentions)
            outs.append(out)
            probs.append(token_probs)
        return self.dropout(self.output(torch.cat(outs, dim=1))), probs


class RevLSHFeedForward(nn.Module):
    """``g`` of a reversible layer: LayerNorm -> dense -> activation -> dense, ``chunk_size_feed_forward``
    positions at a time (0: all)."""

    def __init__(self, config):
        super().__init__()
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dense = nn.Linear(config.hidden_size, config.feed_forward_size)
        self.activation = ACT2FN[config.hidden_act]
        self.output = nn.Linear(config.feed_forward_size, config.hidden_size)
        self.dropout = ReplayableDropout(config.hidden_dropout_prob)
        self.chunk_size = config.chunk_size_feed_forward

    def forward(self, hidden_states, dropout_masks=None):
        """``dropout_masks``: the ``SeededMasks`` to draw the masks from (else torch's RNG)."""
        if self.chunk_size and hidden_states.shape[1] > self.chunk_size:
            return torch.cat([self._forward_chunk(chunk, dropout_masks)
                              for chunk in hidden_states.split(self.chunk_size, dim=1)], dim=1)
        return self._forward_chunk(hidden_states, dropout_masks)

    def _forward_chunk(self, hidden_states, dropout_masks):
        activation = (ReLUFromItsOutput.apply if torch.compiler.is_compiling() and isinstance(self.activation, nn.ReLU)
                      else self.activation)
        hidden_states = activation(self.dropout(self.dense(self.layer_norm(hidden_states)), dropout_masks))
        return self.dropout(self.output(hidden_states), dropout_masks)


class ReLUFromItsOutput(torch.autograd.Function):
    """ReLU whose backward reads its output (saved anyway, the next dense's input) where autograd's saves a mask:
    compiled for a CPU, that mask is a bool tensor, whose stores inductor writes as AVX-512 masked stores (25x the
    time of the ReLU itself on AMD Zen 4)."""

    @staticmethod
    def forward(ctx, x):
        out = x.clamp_min(0)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        out, = ctx.saved_tensors
        return grad * out.sign()


class RevLSHLayer(ReversibleLayer):
    """One reversible layer of the stack: its attention (LSH, local or full) and feed-forward blocks."""

    def __init__(self, config, kind):
        super().__init__(RevLSHAttentionBlock(config, kind), RevLSHFeedForward(config))


def chosen_hidden_states(hidden_states: tuple, chosen) -> tuple:
    """``output_hidden_states=True`` keeps all; an index or indices (transformers' reading), those alone in place."""
    wanted = selected_hidden_states(chosen)
    return hidden_states if wanted is None else tuple(
        h if i in {w % len(hidden_states) for w in wanted} else None for i, h in enumerate(hidden_states))


def chunk_multiple(config) -> tuple[int, int]:
    """``(least common multiple, shortest)`` of the chunk lengths of the layers' kinds (full layers: none)."""
    lengths = {"lsh": config.lsh_attn_chunk_length, "local": config.local_attn_chunk_length}
    present = [lengths[kind] for kind in set(config.attn_layers) if kind in lengths]
    return (math.lcm(*present), min(present)) if present else (1, 0)


def refuse_unknown_inputs(kwargs: dict, token_type_ids, model: str):
    """What a tokenizer returns is accepted; what the model cannot honour is refused, never ignored: token types
    (the family has no segment embeddings) pass only as a row of zeros, and an unknown argument is an error."""
    if token_type_ids is not None and bool(token_type_ids.ne(0).any()):
        raise ValueError(f"{model} has no token type embeddings: token_type_ids must be all zeros (a single "
                         f"segment) or not given")
    if kwargs:
        raise TypeError(f"{model}.forward() got unexpected arguments {sorted(kwargs)}")


def one_cache(cache, past_key_values, model: str):
    """``past_key_values`` (transformers' name until 5.x, PEFT's) and ``cache`` (transformers 5.25's) are one
    argument."""
    if cache is not None and past_key_values is not None and cache is not past_key_values:
        raise ValueError(f"{model}: pass the cache once, as past_key_values or as cache, not both")
    return cache if cache is not None else past_key_values


def seen_mask(cache):
    """The attention mask of the tokens a cache holds (None: no padding), kept on its layers."""
    return cache.layers[0].attention_mask


def remember_mask(cache, attention_mask):
    for layer in cache.layers:
        layer.attention_mask = attention_mask


class RevLSHPreTrainedModel(PreTrainedModel):
    config: RevLSHConfig
    config_class = RevLSHConfig
    base_model_prefix = "rev_lsh"
    # the blocks the reversible backward recomputes one at a time (FSDP units, as hf_plm_ext.training.sharding makes)
    _no_split_modules = ["RevLSHAttentionBlock", "RevLSHFeedForward"]
    supports_gradient_checkpointing = True
    # "sdpa" (the default): full layers through scaled_dot_product_attention, chunked ones through the fused kernel
    # (attention_rev_lsh.attend_fused); "eager": the scores materialised (and output_attentions always so)
    _supports_sdpa = True
    accepts_loss_kwargs = False  # the heads return batch means: the Trainer scales for gradient accumulation

    @classmethod
    def _can_set_attn_implementation(cls) -> bool:
        """``set_attn_implementation`` works: the blocks read ``config._attn_implementation`` on every call
        (transformers' guess from the source, which looks for its attention interface, says no)."""
        return True

    def _init_weights(self, module):
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            init.normal_(module.weight, mean=0.0, std=std)
            if getattr(module, "bias", None) is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, AxialPositionEmbeddings):
            for weight in module.weights:
                init.normal_(weight, mean=0.0, std=self.config.axial_norm_std)
        elif isinstance(module, LSHSelfAttention) and module.seeded_rotations is not None:
            init.copy_(module.seeded_rotations, module.draw_seeded_rotations())  # (not saved: built on meta on load)

    def gradient_checkpointing_enable(self, *args, **kwargs):
        if self.config.reversible:
            raise ValueError("gradient checkpointing is for reversible=False: reversible layers already recompute "
                             "their activations in backward, from the outputs, without checkpoints")
        return super().gradient_checkpointing_enable(*args, **kwargs)


def output_width(config: RevLSHConfig) -> int:
    """The width of ``last_hidden_state``: the two halves side by side, or their mean (``combine_halves``)."""
    return 2 * config.hidden_size if config.combine_halves == "concat" else config.hidden_size


class RevLSHModel(RevLSHPreTrainedModel):
    """Embeddings + the reversible stack + a LayerNorm over the two halves joined (``combine_halves``):
    ``last_hidden_state`` ``[batch, seq, output_width(config)]``."""

    def __init__(self, config: RevLSHConfig):
        super().__init__(config)
        self.embeddings = RevLSHEmbeddings(config)
        self.layers = nn.ModuleList([RevLSHLayer(config, kind) for kind in config.attn_layers])
        self.layer_norm = nn.LayerNorm(output_width(config), eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.gradient_checkpointing = False
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, embeddings):
        self.embeddings.word_embeddings = embeddings

    def _join_halves(self, halves):
        """``[..., 2 * hidden_size]`` (the halves side by side) -> the output's width, normalised."""
        if self.config.combine_halves == "mean":
            first, second = halves.chunk(2, dim=-1)
            halves = (first + second) / 2
        return self.dropout(self.layer_norm(halves))

    @can_return_tuple
    def forward(self, input_ids=None, attention_mask=None, position_ids=None, inputs_embeds=None, num_hashes=None,
                past_key_values=None, use_cache=None, output_hidden_states=None, output_attentions=None,
                token_type_ids=None, cache=None, **kwargs) -> RevLSHModelOutput:
        r"""
        Args:
            input_ids: ``[batch, seq]``, any ``seq`` up to ``max_position_embeddings`` (rotary positions: any).
            position_ids: ``[batch, seq]`` for learned positions (default: the index); rotary positions take the
                index and refuse others.
            attention_mask: ``[batch, seq]``, 1 for tokens and 0 for padding (padding is never attended to); with a
                cache, over the cached tokens and the new ones (or the new ones alone).
            num_hashes: LSH rounds for this call (default: the config's).
            past_key_values (or ``cache``, transformers 5.25's name): a :class:`RevLSHCache` from an earlier call
                (``input_ids`` are the tokens that follow), or an empty one (``RevLSHCache`` or ``DynamicCache()``)
                to fill.
            use_cache: return a cache (causal stacks only; default ``config.use_cache`` outside autograd, where
                the reversible stack keeps no activations).
            token_type_ids: accepted as tokenizers return them, all zeros (the family has no token types).
        """
        refuse_unknown_inputs(kwargs, token_type_ids, type(self).__name__)
        cache = as_rev_lsh_cache(one_cache(cache, past_key_values, type(self).__name__), len(self.layers),
                                 self.config.num_attention_heads, self.config.attention_head_size,
                                 type(self).__name__)
        chosen = output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        output_hidden_states = chosen is not False and chosen is not None
        output_attentions = output_attentions if output_attentions is not None else self.config.output_attentions
        reference = input_ids if input_ids is not None else inputs_embeds
        if use_cache is None:
            use_cache = cache is not None or (self.config.use_cache and self.config.is_decoder
                                              and not torch.is_grad_enabled())
        if (use_cache or cache is not None) and not self.config.is_decoder:
            raise ValueError("a generation cache is for causal stacks (config.is_decoder=True); this one is "
                             "bidirectional: every position depends on every other")
        if position_ids is not None and self.config.position_embedding_type == "rotary":
            raise ValueError("position_ids: with position_embedding_type='rotary' a token's position is its index in "
                             "the input (the cache's length counted in); pass no position_ids")
        if cache is not None and cache.get_seq_length():
            return self._decode(input_ids, inputs_embeds, attention_mask, position_ids, cache, chosen,
                                output_attentions)
        prompt_length = getattr(cache, "prompt_length", None)
        if use_cache and prompt_length is not None and 0 < prompt_length < reference.shape[1]:
            return self._prefill_then_decode(input_ids, inputs_embeds, attention_mask, position_ids, cache, chosen,
                                             output_attentions, num_hashes, prompt_length)
        check_attention_mask(attention_mask, reference)  # here, before the padding to the chunks
        length = reference.shape[1]
        if position_ids is not None:
            self.embeddings.check_positions(position_ids)
        if position_ids is None:
            position_ids = torch.arange(length, device=reference.device).unsqueeze(0).expand(reference.shape[0], -1)
        input_ids, inputs_embeds, padded_mask, position_ids = self._pad_to_chunks(
            input_ids, inputs_embeds, attention_mask, position_ids)
        hidden = self.embeddings(input_ids, position_ids, inputs_embeds)
        if use_cache:
            cache = cache if cache is not None else RevLSHCache(len(self.layers))
        hidden_states, attentions = self._run_layers(hidden, padded_mask, num_hashes, output_hidden_states,
                                                     output_attentions, cache if use_cache else None)
        if use_cache:
            for layer in cache.layers:  # (the padding to the chunks)
                layer.crop(length - layer.get_seq_length())
            remember_mask(cache, attention_mask)
        last = self._join_halves(hidden_states[-1])[:, :length]
        return RevLSHModelOutput(
            last_hidden_state=last, cache=cache if use_cache else None,
            # (cut only where padded: a slice is a new tensor, off autograd's path, so it could not retain grad)
            hidden_states=chosen_hidden_states(tuple(h if h.shape[1] == length else h[:, :length]
                                                     for h in hidden_states), chosen)
            if output_hidden_states else None,
            attentions=None if not output_attentions else tuple(  # with a cache: dense, cut to the input's length
                probs[..., :length, :length] if use_cache else probs for probs in attentions))

    def _prefill_then_decode(self, input_ids, inputs_embeds, attention_mask, position_ids, cache, chosen,
                             output_attentions, num_hashes, prompt_length):
        """An empty cache that ``generate`` made for a prompt of ``prompt_length`` tokens, called with more (assisted
        decoding verifies the prompt and its draft in one call): the prompt as a prefill, the rest decoded one by one,
        so that every token is computed as plain greedy decoding computes it (an LSH layer's whole-sequence call
        would sort the draft into the prompt's chunks)."""
        split = lambda x, part: None if x is None else (x[:, :prompt_length] if part == 0  # noqa: E731
                                                        else x[:, prompt_length:])
        cache.prompt_length = None
        first = self(split(input_ids, 0), attention_mask=split(attention_mask, 0),
                     position_ids=split(position_ids, 0), inputs_embeds=split(inputs_embeds, 0), num_hashes=num_hashes,
                     cache=cache, use_cache=True, output_hidden_states=chosen, output_attentions=output_attentions,
                     return_dict=True)
        rest = self._decode(split(input_ids, 1), split(inputs_embeds, 1), attention_mask,
                            split(position_ids, 1), cache, chosen, output_attentions)
        joined = lambda a, b: None if a is None else tuple(  # noqa: E731
            None if x is None else torch.cat([x, y], dim=-2) for x, y in zip(a, b))
        attentions = None
        if output_attentions:
            total = rest.attentions[0].shape[-1]
            attentions = joined(tuple(pad_keys(probs, total) for probs in first.attentions), rest.attentions)
        return RevLSHModelOutput(last_hidden_state=torch.cat([first.last_hidden_state, rest.last_hidden_state], 1),
                                 cache=cache, hidden_states=joined(first.hidden_states, rest.hidden_states),
                                 attentions=attentions)

    def _decode(self, input_ids, inputs_embeds, attention_mask, position_ids, cache, output_hidden_states,
                output_attentions=False):
        """The new tokens after the cached ones, each attending as the last position of the whole sequence would
        (see :class:`RevLSHCache`): layer by layer, all of them together through each block
        (:meth:`RevLSHAttentionBlock.decode_new_tokens`, then the feed-forward). ``output_attentions``: each layer's
        ``[batch, heads, new, seen + new]``, every new token's row over every position so far (zero where it does not
        look)."""
        reference = input_ids if input_ids is not None else inputs_embeds
        seen, new = cache.get_seq_length(), reference.shape[1]
        if attention_mask is not None and attention_mask.shape[1] == new:  # the new tokens' alone
            seen_attention = seen_mask(cache) if seen_mask(cache) is not None else attention_mask.new_ones(
                attention_mask.shape[0], seen)
            attention_mask = torch.cat([seen_attention, attention_mask], dim=1)
        elif attention_mask is None and seen_mask(cache) is not None:
            attention_mask = torch.cat([seen_mask(cache), seen_mask(cache).new_ones(reference.shape[0], new)], dim=1)
        if attention_mask is not None and attention_mask.shape != (reference.shape[0], seen + new):
            raise ValueError(f"with a cache of {seen} tokens, attention_mask covers them and the {new} new ones "
                             f"({seen + new} columns) or the new ones alone; got {list(attention_mask.shape)}")
        if cache.layers[0].keys.shape[0] != reference.shape[0]:
            raise ValueError(f"the cache holds {cache.layers[0].keys.shape[0]} rows, the input {reference.shape[0]}")
        if position_ids is None:
            position_ids = torch.arange(seen, seen + new, device=reference.device).unsqueeze(0).expand(
                reference.shape[0], -1)
        self.embeddings.check_positions(position_ids)
        hidden = self.embeddings(input_ids, position_ids, inputs_embeds)
        multiple, shortest = chunk_multiple(self.config)
        lengths = [seen + step + 1 for step in range(new)]
        padded = [seq if seq <= shortest else padded_to_multiple(seq, multiple) for seq in lengths]
        masks = [None if attention_mask is None else attention_mask[:, :seq] for seq in lengths]
        # layer by layer: a token's attention reads the layer's cache of the tokens before it (in order, each new
        # token's keys appended as it is attended), its feed-forward nothing but its own row, so the new tokens go
        # through each feed-forward together, one matrix product for a draft instead of one per token
        x1 = x2 = hidden
        all_hidden, all_attentions = [torch.cat([x1, x2], dim=-1)], []
        for layer, layer_cache in zip(self.layers, cache.layers):
            attended, layer_attentions = layer.attention.decode_new_tokens(x2, masks, layer_cache, padded,
                                                                           output_attentions)
            x1 = x1 + attended
            x2 = x2 + layer.feed_forward(x1)
            all_hidden.append(torch.cat([x1, x2], dim=-1))
            all_attentions.append(layer_attentions)
        remember_mask(cache, attention_mask)
        last = self._join_halves(all_hidden[-1])
        hidden_states = None
        if output_hidden_states is not None and output_hidden_states is not False:
            hidden_states = chosen_hidden_states(tuple(all_hidden), output_hidden_states)
        attentions = None
        if output_attentions:  # each token's row over every position so far, the later keys zero for the earlier
            attentions = tuple(torch.cat([pad_keys(probs, seen + new) for probs in per_layer], dim=2)
                               for per_layer in all_attentions)
        return RevLSHModelOutput(last_hidden_state=last, cache=cache, hidden_states=hidden_states,
                                 attentions=attentions)

    def _pad_to_chunks(self, input_ids, inputs_embeds, attention_mask, position_ids):
        """Pad to the least common multiple of the chunk lengths, as transformers' Reformer does in evaluation
        (here also in training), the padding masked; its positions continue the sequence."""
        reference = input_ids if input_ids is not None else inputs_embeds
        batch, length = reference.shape[:2]
        multiple, shortest = chunk_multiple(self.config)
        missing = padded_to_multiple(length, multiple) - length
        # (a traced graph pads always: else it would hold only for lengths that need no padding)
        if length <= shortest or (not torch.compiler.is_compiling() and missing == 0):
            return input_ids, inputs_embeds, attention_mask, position_ids
        if attention_mask is None:
            attention_mask = torch.ones(batch, length, dtype=torch.long, device=reference.device)
        attention_mask = nn.functional.pad(attention_mask, (0, missing))
        padding_ids = torch.full((batch, missing), self.config.pad_token_id or 0, dtype=torch.long,
                                 device=reference.device)
        if input_ids is not None:
            input_ids = torch.cat([input_ids, padding_ids], dim=1)
        else:
            inputs_embeds = torch.cat([inputs_embeds, self.get_input_embeddings()(padding_ids)], dim=1)
        more_positions = position_ids[:, -1:] + torch.arange(1, missing + 1, device=position_ids.device)
        position_ids = torch.cat([position_ids, more_positions], dim=1)
        return input_ids, inputs_embeds, attention_mask, position_ids

    def _run_layers(self, hidden, attention_mask, num_hashes, output_hidden_states, output_attentions, cache=None):
        """``(hidden states: the embeddings twice, then every layer's output, attentions)``; ``cache``: filled
        (then the stack runs without the reversible function)."""
        stacked = torch.cat([hidden, hidden], dim=-1)
        collected = {"hidden_states": [stacked], "attentions": []}
        # each block's dropout draws its masks from a seed of its own, which the reversible backward replays
        seeds = torch.randint(2**31, (len(self.layers), 2)) if self.training else None
        parameters = [p for p in self.layers.parameters() if p.requires_grad]
        if (self.config.reversible and cache is None and torch.is_grad_enabled()
                and (stacked.requires_grad or parameters)):
            if torch.compiler.is_compiling() and not any(map(is_fsdp_unit, self.layers.modules())):
                layer_parameters = [p for layer in self.layers for p in layer.trainable_parameters()]
                last, *more = TracedReversibleFunction.apply(stacked, list(self.layers), attention_mask, num_hashes,
                                                             seeds, output_hidden_states, output_attentions,
                                                             *layer_parameters)
                count = len(self.layers) if output_hidden_states else 0
                collected["hidden_states"] += more[:count]
                collected["attentions"] += more[count:]
            else:
                last = ReversibleFunction.apply(stacked, list(self.layers), attention_mask, num_hashes, seeds,
                                                output_hidden_states, output_attentions, collected, *parameters)
        else:
            # the halves as views of the states returned, so that those are on autograd's path (retain_grad)
            x1, x2 = stacked.chunk(2, dim=-1)
            for index, layer in enumerate(self.layers):
                x1, x2, probs = layer(x1, x2, attention_mask, num_hashes, output_attentions,
                                      cache=None if cache is None else cache.layers[index],
                                      dropout_seeds=layer_seeds(seeds, index))
                if output_hidden_states:  # (all of them kept, inference memory grew with depth)
                    collected["hidden_states"].append(torch.cat([x1, x2], dim=-1))
                    x1, x2 = collected["hidden_states"][-1].chunk(2, dim=-1)
                collected["attentions"].append(probs)
            last = collected["hidden_states"][-1] if output_hidden_states else torch.cat([x1, x2], dim=-1)
        hidden_states = collected["hidden_states"] if output_hidden_states else [last]
        if output_hidden_states and hidden_states[-1] is not last:
            hidden_states[-1] = last  # the one autograd sees
        return hidden_states, collected["attentions"]


def unseen_tokens(input_ids, cache, next_sequence_length):
    """The tokens of ``input_ids`` ``[batch, seq]`` that ``cache`` has not seen: the last ``next_sequence_length``
    (``generate``'s count; from ``inputs_embeds`` the ids hold the generated tokens alone), else those after the
    cached count."""
    seen = cache.get_seq_length() if cache is not None else 0
    if not seen:
        return input_ids
    return input_ids[:, -next_sequence_length:] if next_sequence_length else input_ids[:, seen:]


def pad_keys(probs, keys):
    """Attention probabilities ``[..., q, k]`` widened with zeros to ``keys`` columns (keys not yet seen)."""
    return nn.functional.pad(probs, (0, keys - probs.shape[-1]))


class _RevLSHWithLMHead(RevLSHPreTrainedModel):
    """The encoder + a linear head over the joined halves (``output_width`` -> vocabulary), as transformers'
    Reformer heads."""

    def __init__(self, config: RevLSHConfig):
        super().__init__(config)
        self.rev_lsh = RevLSHModel(config)
        self.lm_head = nn.Linear(output_width(config), config.vocab_size)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, head):
        self.lm_head = head

    def _logits(self, input_ids, attention_mask, position_ids, inputs_embeds, num_hashes, output_hidden_states,
                output_attentions, **cache_arguments):
        outputs = self.rev_lsh(input_ids, attention_mask=attention_mask, position_ids=position_ids,
                               inputs_embeds=inputs_embeds, num_hashes=num_hashes,
                               output_hidden_states=output_hidden_states, output_attentions=output_attentions,
                               return_dict=True, **cache_arguments)
        return self.lm_head(outputs.last_hidden_state), outputs


class RevLSHForMaskedLM(_RevLSHWithLMHead):
    """Bidirectional LM head (``ReformerForMaskedLM``). ``labels``: ``[batch, seq]``, -100 where there is no
    target; ``logits``: ``[batch, seq, vocab]``."""

    @can_return_tuple
    def forward(self, input_ids=None, attention_mask=None, position_ids=None, inputs_embeds=None, labels=None,
                num_hashes=None, output_hidden_states=None, output_attentions=None, token_type_ids=None,
                **kwargs) -> MaskedLMOutput:
        refuse_unknown_inputs(kwargs, token_type_ids, type(self).__name__)
        logits, outputs = self._logits(input_ids, attention_mask, position_ids, inputs_embeds, num_hashes,
                                       output_hidden_states, output_attentions)
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
        return MaskedLMOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                              attentions=outputs.attentions)


class RevLSHForCausalLM(_RevLSHWithLMHead, GenerationMixin):
    """A causal stack (it sets ``config.is_decoder``) + the LM head (``ReformerModelWithLMHead``). ``labels``: the
    inputs (shifted inside) or ``shift_labels``. ``generate`` decodes from a :class:`RevLSHCache` (``use_cache``;
    exact for full and local layers, see the cache for LSH ones) or recomputes the prefix (``use_cache=False``)."""

    def __init__(self, config: RevLSHConfig):
        if not config.is_decoder:
            logger.warning("RevLSHForCausalLM is causal: setting config.is_decoder=True")
            config.is_decoder = True
        super().__init__(config)

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # the cache is a RevLSHCache (LSH layers keep buckets and rotations, not only keys)

    def _prepare_cache_for_generation(self, generation_config, model_kwargs, generation_mode, batch_size,
                                      max_cache_length):
        """``generate``'s cache: a :class:`RevLSHCache` (a user's empty ``DynamicCache`` becomes one), told the
        prompt's length (see :meth:`RevLSHModel._prefill_then_decode`). ``cache_implementation`` other than
        ``"dynamic"`` is refused: static, offloaded and quantized caches hold only keys and values."""
        implementation = generation_config.cache_implementation
        if implementation not in (None, "dynamic"):
            raise ValueError(f"cache_implementation={implementation!r}: {type(self).__name__} decodes from its own "
                             f"RevLSHCache; it supports cache_implementation=None or 'dynamic' (the same)")
        cache = model_kwargs.get("cache")
        if cache is None and generation_config.use_cache is False:
            return
        if cache is None:
            cache = model_kwargs["cache"] = RevLSHCache(self.config.num_hidden_layers)
        else:
            cache._is_user_defined = True
        as_rev_lsh_cache(cache, self.config.num_hidden_layers, self.config.num_attention_heads,
                         self.config.attention_head_size, type(self).__name__)
        if not cache.get_seq_length():
            mask = model_kwargs.get("attention_mask")
            cache.prompt_length = mask.shape[1] if mask is not None else getattr(generation_config, "_mask_length",
                                                                                 None)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, cache=None, use_cache=None,
                                      inputs_embeds=None, is_first_iteration=False, next_sequence_length=None,
                                      **kwargs):
        """With a cache, each step feeds only the tokens it has not seen; what else the caller passed through
        ``generate(**kwargs)`` (``output_attentions``, ``num_hashes``, ...) goes on to ``forward``. ``inputs_embeds``
        (PEFT's prompt tuning) stand for the prompt in the first step."""
        inputs = {"input_ids": unseen_tokens(input_ids, cache, next_sequence_length)}
        if inputs_embeds is not None and not (cache is not None and cache.get_seq_length()):
            inputs = {"input_ids": None, "inputs_embeds": inputs_embeds}
        # positions are the cache's own count (generate's bookkeeping is not passed on); generate hands its own
        # tokenizers (stop strings, assisted decoding) to every step's kwargs, not meant for forward
        kwargs = {name: value for name, value in kwargs.items() if value is not None and name not in
                  ("position_ids", "cache_position", "tokenizer", "assistant_tokenizer")}
        return {**kwargs, **inputs, "attention_mask": attention_mask, "cache": cache, "use_cache": use_cache}

    @can_return_tuple
    def forward(self, input_ids=None, attention_mask=None, position_ids=None, inputs_embeds=None, labels=None,
                num_hashes=None, past_key_values=None, use_cache=None, output_hidden_states=None,
                output_attentions=None, token_type_ids=None, cache=None, **kwargs) -> RevLSHCausalLMOutput:
        r"""``shift_labels`` (already shifted targets) may come in ``kwargs``, as transformers' causal LMs take it: not
        a named argument, so that the ``Trainer`` counts ``labels`` alone as the label and evaluates the loss.
        ``past_key_values`` (or ``cache``), ``use_cache``, ``token_type_ids``: as :meth:`RevLSHModel.forward`'s;
        logits are then of the new tokens."""
        shift_labels = kwargs.pop("shift_labels", None)
        refuse_unknown_inputs(kwargs, token_type_ids, type(self).__name__)
        cache = one_cache(cache, past_key_values, type(self).__name__)
        logits, outputs = self._logits(input_ids, attention_mask, position_ids, inputs_embeds, num_hashes,
                                       output_hidden_states, output_attentions, cache=cache, use_cache=use_cache)
        loss = None
        if labels is not None or shift_labels is not None:
            if shift_labels is None:
                shift_labels = nn.functional.pad(labels[:, 1:], (0, 1), value=-100)
            loss = nn.functional.cross_entropy(logits.flatten(0, 1).float(), shift_labels.flatten())
        return RevLSHCausalLMOutput(loss=loss, logits=logits, cache=outputs.cache, hidden_states=outputs.hidden_states,
                                    attentions=outputs.attentions)


class RevLSHForSequenceClassification(RevLSHPreTrainedModel):
    """The encoder + transformers' Reformer classification head (dense -> tanh -> projection, over the joined halves)
    on the first position, or for a causal stack (``is_decoder``), where the first position sees only itself, on
    each row's last token (right padding; by ``attention_mask``, else ``pad_token_id``), as GPT-2's classifier.
    The loss follows ``config.problem_type`` (transformers' rule)."""

    def __init__(self, config: RevLSHConfig):
        super().__init__(config)
        self.rev_lsh = RevLSHModel(config)
        self.classifier = RevLSHClassificationHead(config)
        self.post_init()

    @can_return_tuple
    def forward(self, input_ids=None, attention_mask=None, position_ids=None, inputs_embeds=None, labels=None,
                num_hashes=None, output_hidden_states=None, output_attentions=None, token_type_ids=None,
                **kwargs) -> SequenceClassifierOutput:
        refuse_unknown_inputs(kwargs, token_type_ids, type(self).__name__)
        outputs = self.rev_lsh(input_ids, attention_mask=attention_mask, position_ids=position_ids,
                               inputs_embeds=inputs_embeds, num_hashes=num_hashes,
                               output_hidden_states=output_hidden_states, output_attentions=output_attentions,
                               return_dict=True)
        hidden = outputs.last_hidden_state
        if self.config.is_decoder:
            hidden = hidden[torch.arange(hidden.shape[0], device=hidden.device), last_token(input_ids, attention_mask,
                                                                                          hidden, self.config)]
        else:
            hidden = hidden[:, 0]
        logits = self.classifier(hidden)
        loss = None if labels is None else self.loss_function(labels=labels, pooled_logits=logits, config=self.config)
        return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                                        attentions=outputs.attentions)


class RevLSHClassificationHead(nn.Module):
    def __init__(self, config):
        super().__init__()
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dense = nn.Linear(output_width(config), config.hidden_size)
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, pooled):
        """``pooled``: ``[batch, output_width]``, one position per row."""
        return self.out_proj(self.dropout(torch.tanh(self.dense(self.dropout(pooled)))))


def last_token(input_ids, attention_mask, hidden, config) -> torch.Tensor:
    """``[batch]`` index of each row's last token (right padding)."""
    if attention_mask is not None:
        lengths = attention_mask.sum(-1)
    elif input_ids is not None and config.pad_token_id is not None:
        lengths = (input_ids != config.pad_token_id).sum(-1)
    else:
        return torch.full((hidden.shape[0],), hidden.shape[1] - 1, device=hidden.device)
    return (lengths - 1).clamp(min=0)


__all__ = ["RevLSHModel", "RevLSHForMaskedLM", "RevLSHForCausalLM", "RevLSHForSequenceClassification",
           "RevLSHPreTrainedModel", "RevLSHModelOutput", "RevLSHCausalLMOutput"]
