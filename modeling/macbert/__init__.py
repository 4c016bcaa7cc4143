from .configuration_macbert import MacBertConfig
from .modeling_macbert import (
    MacBertForMaskedLM,
    MacBertForSequenceClassification,
    MacBertModel,
    MacBertPreTrainedModel,
)

__all__ = [
    "MacBertConfig",
    "MacBertForMaskedLM",
    "MacBertForSequenceClassification",
    "MacBertModel",
    "MacBertPreTrainedModel",
]
