from .attention_rev_lsh import FullSelfAttention, LocalSelfAttention, LSHSelfAttention, rotate_by_position
from .configuration_rev_lsh import RevLSHConfig
from .reversible_rev_lsh import ReversibleFunction, ReversibleLayer
from .cache_rev_lsh import RevLSHCache, RevLSHLayerCache
from .modeling_rev_lsh import (
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
           "RevLSHLayerCache",
           "LSHSelfAttention", "LocalSelfAttention", "FullSelfAttention", "ReversibleFunction",
           "rotate_by_position"]

# The family's classes as hf_plm_ext's registry, the README's table and the family tester read them:
# the Auto class each one serves
AUTO_CLASSES = {
    "AutoConfig": RevLSHConfig,
    "AutoModel": RevLSHModel,
    "AutoModelForMaskedLM": RevLSHForMaskedLM,
    "AutoModelForCausalLM": RevLSHForCausalLM,  # needs is_decoder=True
    "AutoModelForSequenceClassification": RevLSHForSequenceClassification,
}
# PEFT's default targets (hf_plm_ext/adapters/peft_targets.py registers them), by kind of method: LoRA-like (the
# attention's projections; LSH layers share one query_key projection, local and full ones have query and key), IA3
# (and the feed-forward modules it scales at the input), LayerNorm tuning
PEFT_TARGETS = dict(lora=["query", "query_key", "value"], ia3=["query_key", "key", "value", "feed_forward.output"],
                    ia3_feedforward=["feed_forward.output"], ln_tuning=["layer_norm"])
# bottleneck adapters' places (hf_plm_ext/adapters/bottleneck/targets.py reads them), by slot: pre-LayerNorm
# blocks have no LayerNorm after a sublayer, so no Pfeiffer slots
BOTTLENECK_TARGETS = dict(layer=r"(?:.*\.)?layers\.(\d+)", attention="attention", attention_parallel="attention",
                          output="feed_forward", output_parallel="feed_forward")
