from .configuration_macbert import MacBertConfig
from .modeling_macbert import (
    MacBertForMaskedLM,
    MacBertForPreTraining,
    MacBertForQuestionAnswering,
    MacBertForSequenceClassification,
    MacBertForTokenClassification,
    MacBertModel,
    MacBertPreTrainedModel,
)

__all__ = [
    "MacBertConfig",
    "MacBertForMaskedLM",
    "MacBertForPreTraining",
    "MacBertForQuestionAnswering",
    "MacBertForSequenceClassification",
    "MacBertForTokenClassification",
    "MacBertModel",
    "MacBertPreTrainedModel",
]
