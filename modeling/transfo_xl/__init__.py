from .configuration_transfo_xl import TransfoXLConfig
from .modeling_transfo_xl import (
    TransfoXLForSequenceClassification,
    TransfoXLLMHeadModel,
    TransfoXLLMHeadModelOutput,
    TransfoXLModel,
    TransfoXLModelOutput,
    TransfoXLPreTrainedModel,
    TransfoXLSequenceClassifierOutput,
)

__all__ = ["TransfoXLConfig", "TransfoXLModel", "TransfoXLLMHeadModel", "TransfoXLForSequenceClassification",
           "TransfoXLPreTrainedModel", "TransfoXLModelOutput", "TransfoXLLMHeadModelOutput",
           "TransfoXLSequenceClassifierOutput"]
