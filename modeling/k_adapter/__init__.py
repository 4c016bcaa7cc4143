from .configuration_k_adapter import KAdapterConfig, adapter_shape_for, spread_layers
from .modeling_k_adapter import (
    KAdapterForEntityTyping,
    KAdapterForRelationClassification,
    KAdapterForSequenceClassification,
    KAdapterForTokenClassification,
    KAdapterModel,
    KAdapterModelOutput,
    KAdapterPreTrainedModel,
)

__all__ = ["KAdapterConfig", "adapter_shape_for", "spread_layers", "KAdapterModel", "KAdapterForSequenceClassification",
           "KAdapterForTokenClassification", "KAdapterForEntityTyping", "KAdapterForRelationClassification",
           "KAdapterPreTrainedModel", "KAdapterModelOutput"]

# The family's classes as hf_plm_ext's registry, the README's table and the family tester read them:
# the Auto class each one serves
AUTO_CLASSES = {
    "AutoConfig": KAdapterConfig,
    "AutoModel": KAdapterModel,
    "AutoModelForSequenceClassification": KAdapterForSequenceClassification,
    "AutoModelForTokenClassification": KAdapterForTokenClassification,
}
# heads that no Auto class serves (KAdapterForEntityTyping.from_pretrained, ...), public beside them
OTHER_HEADS = (KAdapterForEntityTyping, KAdapterForRelationClassification)
# PEFT's default targets (hf_plm_ext/adapters/peft_targets.py registers them): its layers are BERT's modules, so
# every method takes PEFT's entry for BERT (the backbone's and the adapters' layers)
PEFT_TARGETS = "bert"
# bottleneck adapters' places (hf_plm_ext/adapters/bottleneck/targets.py reads them): BERT's modules, as above
BOTTLENECK_TARGETS = "bert"
