from .bottleneck import BottleneckConfig, BottleneckLayer, BottleneckModel
from .peft_targets import register_peft_targets

register_peft_targets()

__all__ = ["BottleneckConfig", "BottleneckLayer", "BottleneckModel"]
