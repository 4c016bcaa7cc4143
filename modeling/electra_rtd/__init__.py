from .configuration_electra_rtd import ElectraRTDConfig
from .modeling_electra_rtd import ElectraForRTDPreTraining, ElectraRTDOutput, ElectraRTDPreTrainedModel

__all__ = ["ElectraRTDConfig", "ElectraForRTDPreTraining", "ElectraRTDOutput", "ElectraRTDPreTrainedModel"]
