"""Reversible LSH configuration: transformers' ``ReformerConfig`` field names wherever the meaning is the same.

What differs: any input length trains and infers (padding to the chunk lengths happens inside); positions are
learned absolute embeddings up to ``max_position_embeddings`` (``position_embedding_type="absolute"``) or rotary
ones on the queries and keys (``"rotary"``, as RoFormer's and ESM's configs name them), with transformers' axial
embeddings (``"axial"``) kept for converted checkpoints; ``attn_layers`` may also name
``"full"`` (SDPA) layers; ``reversible=False`` runs the same layers as plain residual blocks (to compare).
"""

import math

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig
from transformers.utils.type_validators import interval, probability

LAYER_KINDS = ("lsh", "local", "full")
HALVES = ("concat", "mean")
POSITION_EMBEDDING_TYPES = ("absolute", "rotary", "axial")
positive = interval(min=1)
non_negative = interval(min=0)
dropout_rate = interval(min=0.0, max=1.0, exclude_max=True)
# What a fresh model of `from_size` has unless overridden (the class defaults are ReformerConfig's)
# rotary positions: with learned absolute ones every attention stayed on the bigram plateau at 4,096 characters
# (no attention-probability dropout: the fused chunk-attention kernel has none, and would fall back to the plain path)
FRESH_DEFAULTS = dict(bos_token_id=None, eos_token_id=None, combine_halves="mean", position_embedding_type="rotary",
                      local_attention_probs_dropout_prob=0.0, full_attention_probs_dropout_prob=0.0)
# written into every saved config, even at the class default, so that a saved config keeps meaning what it says
ALWAYS_SAVED = ("position_embedding_type", "combine_halves")

SIZES = {
    "tiny": dict(hidden_size=32, num_attention_heads=2, attention_head_size=16, feed_forward_size=64,
                 attn_layers=["local", "lsh"], lsh_attn_chunk_length=16, local_attn_chunk_length=16),
    "small": dict(hidden_size=256, num_attention_heads=4, attention_head_size=64, feed_forward_size=1024,
                  attn_layers=["local", "lsh", "local", "lsh", "local", "lsh"]),
    "base": dict(hidden_size=512, num_attention_heads=8, attention_head_size=64, feed_forward_size=2048,
                 attn_layers=["local", "local", "lsh", "local"] * 3),
}


@strict
class RevLSHConfig(PreTrainedConfig):
    r"""A stack of reversible layers whose attention is LSH, local (chunked) or full.

    Args:
        vocab_size: number of tokens.
        hidden_size: width of each reversible half.
        combine_halves: how the output joins the two halves: ``"concat"``, side by side, ``2 * hidden_size`` wide
            (transformers' Reformer; the class default, so converted and earlier checkpoints load), or ``"mean"``,
            their mean, ``hidden_size`` wide (reformer-pytorch; ``from_size``'s default: clients that read the
            output's width from ``hidden_size``, as sentence-transformers does, then read it right). The final
            LayerNorm and the heads take the joined width.
        num_attention_heads, attention_head_size: the attention's heads and their size.
        attn_layers: one kind per layer, ``"lsh"``, ``"local"`` or ``"full"``; ``num_hidden_layers`` is its length.
        feed_forward_size, hidden_act: the feed-forward block. chunk_size_feed_forward: positions per chunk of
            the feed-forward (0: all at once; less memory for long inputs).
        num_hashes: LSH hash rounds. num_buckets: an even number or a list of even factors; None: chosen from
            each input's length. hash_seed: fixed rotations (the same buckets every call); None: fresh ones.
        lsh_attn_chunk_length, lsh_num_chunks_before, lsh_num_chunks_after: LSH chunks and their look-around.
        local_attn_chunk_length, local_num_chunks_before, local_num_chunks_after: the same for local layers.
        lsh_attention_probs_dropout_prob, local_attention_probs_dropout_prob, full_attention_probs_dropout_prob,
            hidden_dropout_prob: dropout.
        is_decoder: causal attention (a language model).
        max_position_embeddings: longest input of learned positions (rotary ones have no such bound); the
            automatic bucket count is bounded by it.
        position_embedding_type: ``"absolute"`` (learned), ``"rotary"`` (each attention layer rotates its queries
            and keys by their positions, base ``rotary_emb_base``; ``attention_head_size`` even; no position
            weights, and a token's position is its index in the input) or ``"axial"`` (transformers' factorised
            positions, for converted checkpoints: ``axial_pos_shape`` multiplies to at least
            ``max_position_embeddings``, ``axial_pos_embds_dim`` sums to ``hidden_size``).
        reversible: run the layers as reversible blocks (activation memory flat in depth); False: plain residual
            blocks of the same weights.
        layer_norm_eps, initializer_range, axial_norm_std: as transformers'.
        classifier_dropout: dropout before the sequence-classification head (default ``hidden_dropout_prob``).
        use_cache: causal stacks return a generation cache outside autograd (``RevLSHCache``).
    """

    model_type = "rev-lsh"
    keys_to_ignore_at_inference = ["cache"]  # generation's, not a prediction

    vocab_size: int = 320
    hidden_size: int = positive(default=256)
    num_attention_heads: int = positive(default=4)
    attention_head_size: int = positive(default=64)
    attn_layers: list[str] | tuple[str, ...] = ("local", "lsh", "local", "lsh", "local", "lsh")
    feed_forward_size: int = positive(default=512)
    hidden_act: str = "relu"
    chunk_size_feed_forward: int = non_negative(default=0)
    num_hashes: int = positive(default=1)
    num_buckets: int | list[int] | None = None
    hash_seed: int | None = None
    lsh_attn_chunk_length: int = 64
    lsh_num_chunks_before: int = non_negative(default=1)
    lsh_num_chunks_after: int = non_negative(default=0)
    local_attn_chunk_length: int = 64
    local_num_chunks_before: int = non_negative(default=1)
    local_num_chunks_after: int = non_negative(default=0)
    lsh_attention_probs_dropout_prob: float | int = dropout_rate(default=0.0)
    local_attention_probs_dropout_prob: float | int = dropout_rate(default=0.05)
    full_attention_probs_dropout_prob: float | int = dropout_rate(default=0.05)
    hidden_dropout_prob: float | int = dropout_rate(default=0.05)
    is_decoder: bool = False
    max_position_embeddings: int = positive(default=4096)
    position_embedding_type: str = "absolute"
    rotary_emb_base: float | int = 10000.0
    axial_pos_shape: list[int] | tuple[int, ...] = (64, 64)
    axial_pos_embds_dim: list[int] | tuple[int, ...] = (64, 192)
    axial_norm_std: float | int = 1.0
    reversible: bool = True
    combine_halves: str = "concat"
    layer_norm_eps: float | int = 1e-12
    initializer_range: float | int = 0.02
    classifier_dropout: float | int | None = None
    tie_word_embeddings: bool = False
    use_cache: bool = True
    pad_token_id: int | None = 0
    eos_token_id: int | list[int] | None = 2
    bos_token_id: int | None = None

    def __post_init__(self, **kwargs):
        self.attn_layers = list(self.attn_layers)
        self.axial_pos_shape, self.axial_pos_embds_dim = list(self.axial_pos_shape), list(self.axial_pos_embds_dim)
        if isinstance(self.num_buckets, tuple):
            self.num_buckets = list(self.num_buckets)
        super().__post_init__(**kwargs)
        self.num_hidden_layers = len(self.attn_layers)  # as ReformerConfig: the pattern decides
        family_auto_map = getattr(type(self), "_family_auto_map", None)  # see MacBertConfig
        if family_auto_map and getattr(self, "auto_map", None) is None:
            self.auto_map = dict(family_auto_map)

    @classmethod
    def from_size(cls, size: str, **overrides) -> "RevLSHConfig":
        """``tiny`` (2 layers x 32, for tests), ``small`` (6 x 256) or ``base`` (12 x 512, trax's enwik8
        pattern of local and LSH layers), with ``overrides`` of any field. Its output is the halves' mean,
        ``hidden_size`` wide (``combine_halves="mean"``), its positions are rotary
        (``position_embedding_type="rotary"``; the class default stays ``"absolute"``, as saved configs say) and
        its local and full layers drop no attention probabilities (the fused kernel has no dropout; the class
        default, 0.05, stays). A fresh model has no bos / eos token unless given (``ReformerConfig``'s eos 2
        names a token of its own vocabulary): pass the tokenizer's, ``bos_token_id=tokenizer.bos_token_id,
        eos_token_id=...``, as ``pretrain rev-lsh`` does."""
        if size not in SIZES:
            raise ValueError(f"RevLSHConfig size must be one of {list(SIZES)}, got {size!r}")
        return cls(**{**SIZES[size], **FRESH_DEFAULTS, **overrides})

    def to_diff_dict(self) -> dict:
        return {**super().to_diff_dict(), **{name: getattr(self, name) for name in ALWAYS_SAVED}}

    def validate_rev_lsh_fields(self):
        """Run by ``@strict`` after ``__init__`` and by ``config.validate()``."""
        unknown = [kind for kind in self.attn_layers if kind not in LAYER_KINDS]
        if unknown or not self.attn_layers:
            raise ValueError(f"RevLSHConfig.attn_layers: each layer is one of {LAYER_KINDS}, got "
                             f"{self.attn_layers!r}")
        for name in ("lsh_attn_chunk_length", "local_attn_chunk_length"):
            value = getattr(self, name)
            if not 1 <= value <= self.max_position_embeddings:
                raise ValueError(f"RevLSHConfig.{name} must be in [1, max_position_embeddings="
                                 f"{self.max_position_embeddings}], got {value}")
        factors = [self.num_buckets] if isinstance(self.num_buckets, int) else (self.num_buckets or [])
        if any(factor < 2 or factor % 2 for factor in factors):
            raise ValueError(f"RevLSHConfig.num_buckets must be even (a list: of even factors), got "
                             f"{self.num_buckets!r}")
        if self.combine_halves not in HALVES:
            raise ValueError(f"RevLSHConfig.combine_halves must be one of {HALVES}, got {self.combine_halves!r}")
        if self.position_embedding_type not in POSITION_EMBEDDING_TYPES:
            raise ValueError(f"RevLSHConfig.position_embedding_type must be one of {POSITION_EMBEDDING_TYPES}, got "
                             f"{self.position_embedding_type!r}")
        if self.position_embedding_type == "rotary" and (self.attention_head_size % 2 or self.rotary_emb_base <= 1):
            raise ValueError(f"RevLSHConfig: rotary positions need an even attention_head_size (got "
                             f"{self.attention_head_size}) and rotary_emb_base > 1 (got {self.rotary_emb_base})")
        if self.position_embedding_type == "axial":
            if sum(self.axial_pos_embds_dim) != self.hidden_size:
                raise ValueError(f"RevLSHConfig.axial_pos_embds_dim {self.axial_pos_embds_dim} must sum to "
                                 f"hidden_size ({self.hidden_size})")
            if len(self.axial_pos_shape) != len(self.axial_pos_embds_dim):
                raise ValueError("RevLSHConfig.axial_pos_shape and axial_pos_embds_dim must have the same length")
            if math.prod(self.axial_pos_shape) < self.max_position_embeddings:
                raise ValueError(f"RevLSHConfig.axial_pos_shape {self.axial_pos_shape} must give at least "
                                 f"max_position_embeddings ({self.max_position_embeddings}) positions")


__all__ = ["RevLSHConfig"]
