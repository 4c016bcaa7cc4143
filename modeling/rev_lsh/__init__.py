from .attention_rev_lsh import FullSelfAttention, LocalSelfAttention, LSHSelfAttention, rotate_by_position
from .configuration_rev_lsh import RevLSHConfig
from .modeling_rev_lsh import (
    ReversibleFunction,
    RevLSHCache,
    RevLSHCausalLMOutput,
    RevLSHForCausalLM,
    RevLSHForMaskedLM,
    RevLSHForSequenceClassification,
    RevLSHModel,
    RevLSHModelOutput,
    RevLSHPreTrainedModel,
)

__all__ = ["RevLSHConfig", "RevLSHModel", "RevLSHForMaskedLM", "RevLSHForCausalLM", "RevLSHForSequenceClassification",
           "RevLSHPreTrainedModel", "RevLSHModelOutput", "RevLSHCausalLMOutput", "RevLSHCache",
           "LSHSelfAttention", "LocalSelfAttention", "FullSelfAttention", "ReversibleFunction",
           "rotate_by_position"]
