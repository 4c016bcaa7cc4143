from .configuration_k_adapter import KAdapterConfig, spread_layers
from .modeling_k_adapter import (
    KAdapterForEntityTyping,
    KAdapterForRelationClassification,
    KAdapterForSequenceClassification,
    KAdapterForTokenClassification,
    KAdapterModel,
    KAdapterModelOutput,
    KAdapterPreTrainedModel,
)

__all__ = ["KAdapterConfig", "spread_layers", "KAdapterModel", "KAdapterForSequenceClassification",
           "KAdapterForTokenClassification", "KAdapterForEntityTyping", "KAdapterForRelationClassification",
           "KAdapterPreTrainedModel", "KAdapterModelOutput"]
