"""ELECTRA replaced-token-detection configuration: a generator and a discriminator trained together.

ELECTRA (Clark et al., 2020) trains a small masked-LM *generator* and a *discriminator* that
tells, for every token, whether the generator replaced it. Both are transformers' ELECTRA
models; this configuration holds their two ``ElectraConfig``s and the joint objective's
hyper-parameters (defaults from google-research/electra ``configure_pretraining.py``).
"""

import json
import warnings

from huggingface_hub.dataclasses import strict
from transformers import ElectraConfig, PreTrainedConfig
from transformers.utils.type_validators import interval, probability

# Discriminator sizes of the paper (util/training_utils.py): layers, hidden, embedding size.
SIZES = {
    "tiny": dict(num_hidden_layers=2, hidden_size=128, embedding_size=128),
    "small": dict(num_hidden_layers=12, hidden_size=256, embedding_size=128),
    "base": dict(num_hidden_layers=12, hidden_size=768, embedding_size=768),
}
GENERATOR_FRACTIONS = {"tiny": 0.25, "small": 0.25, "base": 1 / 3}


def encoder_config(hidden_size, num_hidden_layers, embedding_size, **fields) -> ElectraConfig:
    """An ``ElectraConfig`` with ELECTRA's proportions: heads = hidden / 64 (at least 1), FFN = 4 x hidden."""
    return ElectraConfig(hidden_size=hidden_size, num_hidden_layers=num_hidden_layers, embedding_size=embedding_size,
                         num_attention_heads=max(1, hidden_size // 64), intermediate_size=4 * hidden_size, **fields)


def generator_config_for(discriminator: ElectraConfig, hidden_fraction, layers_fraction) -> ElectraConfig:
    """The generator of ``run_pretraining.py:get_generator_config``: a fraction of the discriminator's width/depth."""
    shared = {k: getattr(discriminator, k) for k in (
        "vocab_size", "max_position_embeddings", "type_vocab_size", "pad_token_id", "hidden_act",
        "hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range", "layer_norm_eps")}
    return encoder_config(max(1, round(discriminator.hidden_size * hidden_fraction)),
                          max(1, round(discriminator.num_hidden_layers * layers_fraction)),
                          discriminator.embedding_size, **shared)


@strict
class ElectraRTDConfig(PreTrainedConfig):
    r"""Joint generator + discriminator pre-training (replaced-token detection).

    Args:
        discriminator_config: the discriminator's ``ElectraConfig`` (default: ELECTRA-Small).
        generator_config: the generator's ``ElectraConfig``; by default derived from the
            discriminator with ``generator_hidden_fraction`` of its width (0.25 small, 1/3 base)
            and ``generator_layers_fraction`` of its depth, heads = hidden / 64.
        gen_weight, disc_weight: loss = ``gen_weight`` x generator MLM loss + ``disc_weight`` x
            discriminator loss (1 and 50 in the paper).
        temperature: Gumbel sampling temperature of the generator's replacements.
        mask_prob: share of a sequence's non-special tokens masked for the generator.
        mask_replace_prob: of the masked tokens, the share shown as ``[MASK]`` (0.85); the rest
            keep their token. ELECTRA uses no random replacements.
        mask_token_id: id of ``[MASK]`` (needed when the model masks its inputs itself).
        tie_embeddings: share the embedding module (token, position and type embeddings and
            their LayerNorm) between generator and discriminator; needs equal ``embedding_size``.
        disallow_correct: never sample the original token (an ablation of the paper).

    Example:
        >>> from hf_plm_ext.modeling.electra_rtd import ElectraRTDConfig, ElectraForRTDPreTraining
        >>> config = ElectraRTDConfig.from_size("tiny", vocab_size=1000, mask_token_id=4)
        >>> model = ElectraForRTDPreTraining(config)
    """

    model_type = "electra-rtd"
    # The Trainer's eval predictions: only what the RTD metrics need (per-batch scalars, logits, labels).
    keys_to_ignore_at_inference = ["sampled_input_ids"]
    sub_configs_defaults = {"discriminator_config": ElectraConfig, "generator_config": ElectraConfig}

    discriminator_config: dict | ElectraConfig | None = None
    generator_config: dict | ElectraConfig | None = None
    generator_hidden_fraction: float | int = interval(min=0, exclude_min=True)(default=0.25)
    generator_layers_fraction: float | int = interval(min=0, exclude_min=True)(default=1.0)
    gen_weight: float | int = interval(min=0)(default=1.0)
    disc_weight: float | int = interval(min=0)(default=50.0)
    temperature: float | int = interval(min=0, exclude_min=True)(default=1.0)
    mask_prob: float | int = interval(min=0, max=1, exclude_min=True, exclude_max=True)(default=0.15)
    mask_replace_prob: float | int = probability(default=0.85)
    mask_token_id: int | None = None
    tie_embeddings: bool = True
    disallow_correct: bool = False
    tie_word_embeddings: bool = True  # the generator's output layer is its input embedding matrix

    def __post_init__(self, **kwargs):
        if not isinstance(self.discriminator_config, ElectraConfig):
            self.discriminator_config = ElectraConfig(**(self.discriminator_config or {}))
        if self.generator_config is None:
            self.generator_config = generator_config_for(self.discriminator_config, self.generator_hidden_fraction,
                                                         self.generator_layers_fraction)
        super().__post_init__(**kwargs)
        family_auto_map = getattr(type(self), "_family_auto_map", None)  # see MacBertConfig
        if family_auto_map and getattr(self, "auto_map", None) is None:
            self.auto_map = dict(family_auto_map)

    # What transformers' generic code reads of a model's text config (resizing, the output checks): the
    # discriminator's, the half that fine-tunes; the vocabulary is both halves'.
    @property
    def vocab_size(self) -> int:
        return self.discriminator_config.vocab_size

    @vocab_size.setter
    def vocab_size(self, vocab_size: int):
        for part in (self.discriminator_config, self.generator_config):
            part.vocab_size = vocab_size

    # The discriminator's shape, derived: an override (``from_pretrained(path, hidden_size=...)``, ``from_dict``,
    # ``AutoConfig.from_pretrained(..., **kwargs)``, as transformers' configs take them) sets the field it derives
    # from, the discriminator's; the generator keeps its own (``generator_config`` to change it). Checked at once.
    @property
    def hidden_size(self) -> int:
        return self.discriminator_config.hidden_size

    @hidden_size.setter
    def hidden_size(self, hidden_size: int):
        self._set_discriminator_field("hidden_size", hidden_size)

    @property
    def num_hidden_layers(self) -> int:
        return self.discriminator_config.num_hidden_layers

    @num_hidden_layers.setter
    def num_hidden_layers(self, num_hidden_layers: int):
        self._set_discriminator_field("num_hidden_layers", num_hidden_layers)

    @property
    def num_attention_heads(self) -> int:
        return self.discriminator_config.num_attention_heads

    @num_attention_heads.setter
    def num_attention_heads(self, num_attention_heads: int):
        self._set_discriminator_field("num_attention_heads", num_attention_heads)

    def _set_discriminator_field(self, name: str, value: int):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"ElectraRTDConfig.{name} is discriminator_config.{name}: a positive int, got {value!r}")
        previous = getattr(self.discriminator_config, name)
        setattr(self.discriminator_config, name, value)
        try:
            self.validate_electra_rtd_fields()
        except ValueError:
            setattr(self.discriminator_config, name, previous)
            raise

    def to_json_string(self, use_diff: bool = True) -> str:
        """As transformers' (keys sorted), but with ``discriminator_config`` last: a stock
        ``ElectraConfig.from_pretrained(folder)`` takes the last sub-config of its model type in the file, and the
        discriminator is the half one fine-tunes (sorted, it was the generator)."""
        config = json.loads(super().to_json_string(use_diff))
        if "discriminator_config" in config:
            config["discriminator_config"] = config.pop("discriminator_config")
        return json.dumps(config, indent=2) + "\n"

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        """As transformers', and a stock ELECTRA config (``model_type`` "electra", e.g. a
        ``google/electra-*-discriminator`` checkpoint's) is taken as the discriminator, the generator derived from it:
        ``ElectraForRTDPreTraining.from_pretrained`` of such a checkpoint continues its pre-training."""
        if config_dict.get("model_type") == ElectraConfig.model_type:
            discriminator = {k: v for k, v in config_dict.items() if k not in ("architectures", "auto_map")}
            config_dict = {"discriminator_config": discriminator, "pad_token_id": config_dict.get("pad_token_id", 0)}
        return super().from_dict(config_dict, **kwargs)

    @classmethod
    def from_size(cls, size: str, vocab_size: int, generator_hidden_fraction=None, **kwargs):
        """ELECTRA's ``tiny`` (2 x 128, for tests), ``small`` (12 x 256) or ``base`` (12 x 768) pair."""
        if size not in SIZES:
            raise ValueError(f"ElectraRTDConfig size must be one of {list(SIZES)}, got {size!r}")
        fraction = GENERATOR_FRACTIONS[size] if generator_hidden_fraction is None else generator_hidden_fraction
        pad_token_id = kwargs.pop("pad_token_id", 0)
        discriminator = encoder_config(**SIZES[size], vocab_size=vocab_size, pad_token_id=pad_token_id)
        return cls(discriminator_config=discriminator, generator_hidden_fraction=fraction, pad_token_id=pad_token_id,
                   **kwargs)

    def validate_electra_rtd_fields(self):
        """Run by ``@strict`` after ``__init__`` and by ``config.validate()``."""
        generator, discriminator = self.generator_config, self.discriminator_config
        for config_name, config in (("generator_config", generator), ("discriminator_config", discriminator)):
            if config.hidden_size % config.num_attention_heads:
                raise ValueError(f"ElectraRTDConfig.{config_name}.hidden_size ({config.hidden_size}) must be "
                                 f"divisible by num_attention_heads ({config.num_attention_heads})")
        if generator.vocab_size != discriminator.vocab_size:
            raise ValueError(f"ElectraRTDConfig: generator_config.vocab_size ({generator.vocab_size}) must equal "
                             f"discriminator_config.vocab_size ({discriminator.vocab_size})")
        if self.tie_embeddings:
            for name in ("embedding_size", "max_position_embeddings", "type_vocab_size"):
                if getattr(generator, name) != getattr(discriminator, name):
                    raise ValueError(
                        f"ElectraRTDConfig.tie_embeddings needs equal {name} in generator_config "
                        f"({getattr(generator, name)}) and discriminator_config ({getattr(discriminator, name)}); "
                        f"ELECTRA's factorised embeddings let the widths differ, the embedding size may not")
        if self.mask_token_id is not None and not 0 <= self.mask_token_id < discriminator.vocab_size:
            raise ValueError(f"ElectraRTDConfig.mask_token_id ({self.mask_token_id}) must be in "
                             f"[0, vocab_size={discriminator.vocab_size})")
        if generator.hidden_size > discriminator.hidden_size or \
                generator.num_hidden_layers > discriminator.num_hidden_layers:
            warnings.warn(f"ElectraRTDConfig: the generator ({generator.num_hidden_layers} x {generator.hidden_size}) "
                          f"is larger than the discriminator ({discriminator.num_hidden_layers} x "
                          f"{discriminator.hidden_size}); the paper finds the discriminator then fails to learn "
                          f"(best: 1/4 to 1/2 of its width)", stacklevel=2)


__all__ = ["ElectraRTDConfig"]
