from .configuration_macbert import MacBertConfig
from .modeling_macbert import (
    MacBertForMaskedLM,
    MacBertForPreTraining,
    MacBertForSequenceClassification,
    MacBertModel,
    MacBertPreTrainedModel,
)

__all__ = [
    "MacBertConfig",
    "MacBertForMaskedLM",
    "MacBertForPreTraining",
    "MacBertForSequenceClassification",
    "MacBertModel",
    "MacBertPreTrainedModel",
]
