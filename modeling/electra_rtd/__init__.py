from .configuration_electra_rtd import ElectraRTDConfig
from .modeling_electra_rtd import (
    ElectraForRTDPreTraining,
    ElectraRTDForSequenceClassification,
    ElectraRTDModel,
    ElectraRTDOutput,
    ElectraRTDPreTrainedModel,
)

__all__ = ["ElectraRTDConfig", "ElectraForRTDPreTraining", "ElectraRTDForSequenceClassification", "ElectraRTDModel",
           "ElectraRTDOutput", "ElectraRTDPreTrainedModel"]

# The family's classes as hf_plm_ext's registry, the README's table and the family tester read them:
# the Auto class each one serves
AUTO_CLASSES = {
    "AutoConfig": ElectraRTDConfig,
    "AutoModel": ElectraRTDModel,  # the discriminator's encoder
    "AutoModelForPreTraining": ElectraForRTDPreTraining,
    "AutoModelForSequenceClassification": ElectraRTDForSequenceClassification,  # the discriminator + a head
}
# PEFT's default targets (hf_plm_ext/adapters/peft_targets.py registers them): its layers are BERT's modules, so
# every method takes PEFT's entry for BERT
PEFT_TARGETS = "bert"
# bottleneck adapters' places (hf_plm_ext/adapters/bottleneck/targets.py reads them): BERT's modules
BOTTLENECK_TARGETS = "bert"
