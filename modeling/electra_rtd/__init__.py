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
