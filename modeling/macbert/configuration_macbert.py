"""MacBERT configuration.

MacBERT (Cui et al., 2020, "Revisiting Pre-Trained Models for Chinese Natural Language Processing")
keeps BERT's architecture and changes only the pre-training objective, so its configuration is
BERT's plus a distinct ``model_type`` and validated fields.
"""

from huggingface_hub.dataclasses import strict
from transformers import BertConfig
from transformers.utils.type_validators import interval, probability


@strict
class MacBertConfig(BertConfig):
    r"""Configuration of a MacBERT encoder; every field means what it means in [`BertConfig`], plus the
    spelling-correction head's loss (MacBERT4CSC, read only by [`MacBertForSpellingCorrection`]):

    correction_loss_weight (`float`, 0.3): ``w`` in ``loss = w * correction_loss + (1 - w) * detection_loss``.
    detection_focal_gamma (`float`, 2.0): the focal loss's focusing exponent (0 = plain binary cross-entropy).
    detection_focal_alpha (`float`, 0.25): the focal loss's weight of the "wrong character" class.
    stock_model_type (`str`, "bert"): the stock transformers type whose layout the weights follow, and which
        ``hf-plm-ext export bert`` writes: "bert", or a RoBERTa type ("roberta", "xlm-roberta", "camembert"), whose
        position ids count from ``pad_token_id + 1`` over the non-pad tokens, as ``RobertaEmbeddings`` counts them.

    Example:
        >>> from hf_plm_ext.modeling.macbert import MacBertConfig, MacBertModel
        >>> model = MacBertModel(MacBertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2))
    """

    model_type = "macbert"
    correction_loss_weight: float | int = probability(default=0.3)
    detection_focal_gamma: float | int = interval(min=0)(default=2.0)
    detection_focal_alpha: float | int = probability(default=0.25)
    stock_model_type: str = "bert"

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        # Set by hf_plm_ext's registry: the family's complete ``auto_map``, written on save so that a
        # checkpoint loads through every Auto class the family supports, not only the saved one.
        family_auto_map = getattr(type(self), "_family_auto_map", None)
        if family_auto_map and getattr(self, "auto_map", None) is None:
            self.auto_map = dict(family_auto_map)

    def validate_macbert_fields(self):
        """Run by ``@strict`` after ``__init__`` and by ``config.validate()``."""
        _check_fields(self)


STOCK_MODEL_TYPES = ("bert", "roberta", "xlm-roberta", "camembert")
ROBERTA_POSITIONS = ("roberta", "xlm-roberta", "camembert")


def _check_fields(config):
    if config.stock_model_type not in STOCK_MODEL_TYPES:
        raise ValueError(f"MacBertConfig.stock_model_type must be one of {STOCK_MODEL_TYPES}, got "
                         f"{config.stock_model_type!r}")
    if config.stock_model_type in ROBERTA_POSITIONS and config.pad_token_id is None:
        raise ValueError(f"MacBertConfig.stock_model_type {config.stock_model_type!r} counts positions from "
                         f"pad_token_id, which is None")
    positive = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "intermediate_size", "max_position_embeddings", "type_vocab_size")
    for name in positive:
        value = getattr(config, name)
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"MacBertConfig.{name} must be a positive integer, got {value!r}")
    if config.hidden_size % config.num_attention_heads:
        raise ValueError(
            f"MacBertConfig.hidden_size ({config.hidden_size}) must be divisible by "
            f"num_attention_heads ({config.num_attention_heads})"
        )
    for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
        value = getattr(config, name)
        if not 0.0 <= value < 1.0:
            raise ValueError(f"MacBertConfig.{name} must be in [0, 1), got {value!r}")
    if config.pad_token_id is not None and not 0 <= config.pad_token_id < config.vocab_size:
        raise ValueError(
            f"MacBertConfig.pad_token_id ({config.pad_token_id}) must be in [0, vocab_size={config.vocab_size})"
        )


__all__ = ["MacBertConfig", "ROBERTA_POSITIONS", "STOCK_MODEL_TYPES"]
