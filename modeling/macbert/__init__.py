from .configuration_macbert import MacBertConfig
from .modeling_macbert import (
    MacBertForMaskedLM,
    MacBertForPreTraining,
    MacBertForQuestionAnswering,
    MacBertForSequenceClassification,
    MacBertForSpellingCorrection,
    MacBertForTokenClassification,
    MacBertModel,
    MacBertPreTrainedModel,
    MacBertSpellingCorrectionOutput,
)

__all__ = [
    "MacBertConfig",
    "MacBertForMaskedLM",
    "MacBertForPreTraining",
    "MacBertForQuestionAnswering",
    "MacBertForSequenceClassification",
    "MacBertForSpellingCorrection",
    "MacBertForTokenClassification",
    "MacBertModel",
    "MacBertPreTrainedModel",
    "MacBertSpellingCorrectionOutput",
]
