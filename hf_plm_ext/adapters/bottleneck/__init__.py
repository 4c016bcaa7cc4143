"""Bottleneck adapters (Houlsby et al. 2019, Pfeiffer et al. 2020, He et al. 2021) as a PEFT method, registered
with PEFT when ``hf_plm_ext`` is imported: ``get_peft_model(model, BottleneckConfig.from_preset("pfeiffer"))``."""

from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING
from peft.utils import register_peft_method

from .config import PRESETS, BottleneckConfig
from .layer import BottleneckLayer
from .model import BottleneckModel
from .peft_type import BOTTLENECK

if BOTTLENECK not in PEFT_TYPE_TO_CONFIG_MAPPING:  # (a reload of this module would register it twice)
    register_peft_method(name="bottleneck", config_cls=BottleneckConfig, model_cls=BottleneckModel, prefix="bn_")

__all__ = ["BottleneckConfig", "BottleneckLayer", "BottleneckModel", "PRESETS"]
