"""Transformer-XL configuration: the field names and defaults of transformers 4.x ``TransfoXLConfig``.

transformers 5 deleted Transformer-XL; a ``config.json`` written by transformers 4.x
(``model_type: transfo-xl``) loads into this class unchanged. The defaults are the 4.x ones
(the WikiText-103 large model of Dai et al., 2019).
"""

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig
from transformers.utils.type_validators import interval, probability
from transformers.utils import logging

logger = logging.get_logger(__name__)

# Sizes of `hf-plm-ext pretrain transfo-xl --size`: tiny and small for quick runs, base = the paper's WikiText-103 base.
SIZES = {
    "tiny": dict(n_layer=2, d_model=128, d_embed=128, n_head=2, d_head=64, d_inner=512),
    "small": dict(n_layer=4, d_model=256, d_embed=256, n_head=4, d_head=64, d_inner=1024),
    "base": dict(n_layer=16, d_model=410, d_embed=410, n_head=10, d_head=41, d_inner=2100),
}
# What a fresh model of `from_size` has unless overridden (the 4.x defaults are the paper's large model's).
FRESH_DEFAULTS = dict(cutoffs=[], adaptive=False, div_val=1, mem_len=128, clamp_len=-1, same_length=False,
                      dropout=0.1, dropatt=0.0)

positive = interval(min=1)


@strict
class TransfoXLConfig(PreTrainedConfig):
    r"""Transformer-XL: a decoder with segment-level memory and relative positional attention.

    Args:
        vocab_size: number of tokens.
        cutoffs: adaptive input / softmax cluster boundaries (increasing, each < ``vocab_size``);
            used when ``adaptive`` is true. ``[]`` gives one cluster (a plain softmax).
        d_model: hidden size. d_embed: token embedding size (projected to ``d_model`` when different).
        n_head, d_head: attention heads and their size (``n_head * d_head`` need not be ``d_model``).
        d_inner: feed-forward inner size. n_layer: number of layers.
        div_val: cluster ``i`` embeds in ``d_embed // div_val**i`` dimensions (adaptive input).
        pre_lnorm: LayerNorm before each sub-layer instead of after (the paper: after).
        mem_len: hidden states kept per layer as the next segment's memory (0: no memory).
        clamp_len: relative distances beyond this use the embedding of ``clamp_len`` (<= 0: no clamp).
        same_length: every query attends to the same number of keys, ``mem_len`` (the paper's evaluation);
            with ``mem_len`` 0 the attention is only causal.
        proj_share_all_but_first: the softmax's projections of clusters 1.. are the embedding's (``tie_projs``).
        attn_type: 0 only, the paper's relative attention (1-3, the reference code's ablations,
            are not implemented).
        sample_softmax: -1 only (sampled softmax is not implemented).
        adaptive: adaptive input embeddings and adaptive softmax over ``cutoffs``; false: a plain
            embedding and softmax over the whole vocabulary. transformers 4.x ignored this field (its models
            were always adaptive over ``cutoffs``), so a config it wrote is read as adaptive when it has cutoffs.
        dropout, dropatt: dropout on hidden states and on attention probabilities.
        untie_r: one ``r_w_bias`` / ``r_r_bias`` per layer (true) or shared by all layers.
        init, init_range, init_std, proj_init_std: weight initialisation ("normal" or "uniform").
        tie_word_embeddings: the softmax's cluster weights are the input embeddings.
        eos_token_id, bos_token_id, pad_token_id: special tokens (eos ends every line of the training stream).
        use_cache: ``generate`` carries the memory (and its keys and values) from step to step.
        max_position_embeddings: a length limit for the clients that read one (sentence-transformers,
            lm-evaluation-harness, ``generate``), set only when given: positions are relative, so by default there
            is none and the config has no such attribute (clients then take the tokenizer's limit or their own
            default; transformers 4.x reported -1, which lm-evaluation-harness takes for a length, and this
            package's earlier configs None, which sentence-transformers cannot compare: both read as none).

    Example:
        >>> from hf_plm_ext.modeling.transfo_xl import TransfoXLConfig, TransfoXLLMHeadModel
        >>> config = TransfoXLConfig(vocab_size=1000, adaptive=False, d_model=64, d_embed=64, n_head=2,
        ...                          d_head=32, d_inner=128, n_layer=2, mem_len=32, clamp_len=-1)
        >>> model = TransfoXLLMHeadModel(config)
    """

    model_type = "transfo-xl"
    keys_to_ignore_at_inference = ["mems", "mem_key_values"]
    attribute_map = {"n_token": "vocab_size", "hidden_size": "d_model", "num_attention_heads": "n_head",
                     "num_hidden_layers": "n_layer"}

    vocab_size: int = positive(default=267735)
    cutoffs: list[int] | tuple[int, ...] = (20000, 40000, 200000)
    d_model: int = positive(default=1024)
    d_embed: int = positive(default=1024)
    n_head: int = positive(default=16)
    d_head: int = positive(default=64)
    d_inner: int = positive(default=4096)
    div_val: int = positive(default=4)
    pre_lnorm: bool = False
    n_layer: int = positive(default=18)
    mem_len: int = interval(min=0)(default=1600)  # 0: no memory
    clamp_len: int = 1000
    same_length: bool = True
    proj_share_all_but_first: bool = True
    attn_type: int = 0
    sample_softmax: int = -1
    adaptive: bool = True
    dropout: float | int = 0.1
    dropatt: float | int = 0.0
    untie_r: bool = True
    init: str = "normal"
    init_range: float | int = 0.01
    proj_init_std: float | int = 0.01
    init_std: float | int = 0.02
    layer_norm_epsilon: float | int = 1e-5
    eos_token_id: int | None = 0
    bos_token_id: int | None = None
    pad_token_id: int | None = None
    use_cache: bool = True
    tie_word_embeddings: bool = True
    tie_projs: list[bool] | None = None

    def __post_init__(self, **kwargs):
        self.cutoffs = list(self.cutoffs)
        length_limit = kwargs.pop("max_position_embeddings", None)
        if self.cutoffs and not self.adaptive and str(self.transformers_version).startswith("4."):
            # 4.x stored `adaptive` but never read it: its models always had the adaptive input and softmax
            logger.warning(f"This config was written by transformers {self.transformers_version}, whose Transfo-XL "
                           f"ignored adaptive=False and used the adaptive input and softmax over cutoffs "
                           f"{self.cutoffs}; loading it as adaptive=True, the model its weights belong to")
            self.adaptive = True
        # transformers 4.x derived tie_projs from proj_share_all_but_first and saved both.
        self.tie_projs = [False] + [self.proj_share_all_but_first] * len(self.cutoffs)
        super().__post_init__(**kwargs)
        if length_limit not in (None, -1):  # (-1: 4.x's "none")
            self.max_position_embeddings = length_limit
        family_auto_map = getattr(type(self), "_family_auto_map", None)  # see MacBertConfig
        if family_auto_map and getattr(self, "auto_map", None) is None:
            self.auto_map = dict(family_auto_map)

    @classmethod
    def from_size(cls, size: str, vocab_size: int, **overrides) -> "TransfoXLConfig":
        """A fresh ``tiny`` (2 x 128), ``small`` (4 x 256, 4 heads x 64, FFN 1024) or ``base`` (16 x 410, 10 heads x
        41, FFN 2100: the paper's WikiText-103 base) model with a plain softmax and memory 128; ``overrides`` set
        any other field (``cutoffs=[20000, 40000], adaptive=True``, ``mem_len``, ...)."""
        if size not in SIZES:
            raise ValueError(f"TransfoXLConfig size must be one of {list(SIZES)}, got {size!r}")
        return cls(vocab_size=vocab_size, **{**SIZES[size], **FRESH_DEFAULTS, **overrides})

    @property
    def cluster_cutoffs(self) -> list[int]:
        """The cutoffs the model uses: ``cutoffs`` with ``adaptive``, none (one plain softmax) without."""
        return list(self.cutoffs) if self.adaptive else []

    def validate_transfo_xl_fields(self):
        """Run by ``@strict`` after ``__init__`` and by ``config.validate()``."""
        length_limit = getattr(self, "max_position_embeddings", None)
        if length_limit is not None and (not isinstance(length_limit, int) or length_limit < 1):
            raise ValueError(f"TransfoXLConfig.max_position_embeddings must be a positive int, or not given (no "
                             f"limit), got {length_limit!r}")
        if self.attn_type != 0:
            raise ValueError(f"TransfoXLConfig.attn_type must be 0 (the paper's relative attention, the only one "
                             f"implemented; the reference code's 1-3 are ablations), got {self.attn_type!r}")
        if self.sample_softmax > 0:
            raise ValueError(f"TransfoXLConfig.sample_softmax must be -1: sampled softmax is not implemented, got "
                             f"{self.sample_softmax!r}")
        if self.init not in ("normal", "uniform"):
            raise ValueError(f"TransfoXLConfig.init must be 'normal' or 'uniform', got {self.init!r}")
        for name in ("dropout", "dropatt"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"TransfoXLConfig.{name} must be in [0, 1), got {getattr(self, name)!r}")
        if self.adaptive:
            cutoffs = list(self.cutoffs)
            if any(b <= a for a, b in zip([0] + cutoffs, cutoffs)):
                raise ValueError(f"TransfoXLConfig.cutoffs must be positive and strictly increasing, got {cutoffs}")
            if cutoffs and cutoffs[-1] >= self.vocab_size:
                raise ValueError(f"TransfoXLConfig.cutoffs must be < vocab_size ({self.vocab_size}), got {cutoffs} "
                                 f"(set adaptive=False for a plain softmax)")
            too_small = [i for i in range(len(cutoffs) + 1) if self.d_embed // self.div_val ** i == 0]
            if too_small:
                raise ValueError(f"TransfoXLConfig: d_embed // div_val**i is 0 for cluster {too_small[0]} "
                                 f"(d_embed={self.d_embed}, div_val={self.div_val})")
        if self.eos_token_id is not None and not 0 <= self.eos_token_id < self.vocab_size:
            raise ValueError(f"TransfoXLConfig.eos_token_id ({self.eos_token_id}) must be in [0, {self.vocab_size})")


__all__ = ["TransfoXLConfig"]
