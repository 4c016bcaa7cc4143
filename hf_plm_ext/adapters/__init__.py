from .bottleneck import BottleneckConfig, BottleneckLayer, BottleneckModel

__all__ = ["BottleneckConfig", "BottleneckLayer", "BottleneckModel"]
