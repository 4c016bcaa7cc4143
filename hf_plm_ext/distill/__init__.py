"""Layer-wise distillation (TinyBERT, DistilBERT, MiniLM losses) with the stock ``Trainer``."""

from hf_plm_ext.distill.layer_map import LayerMap, last_layer_map, layer_map_from, uniform_layer_map
from hf_plm_ext.distill.student import STUDENT_PRESETS, student_config, student_from_teacher_layers
from hf_plm_ext.distill.trainer import DistillationArguments, DistillationModel, DistillationTrainer

__all__ = ["STUDENT_PRESETS", "DistillationArguments", "DistillationModel", "DistillationTrainer", "LayerMap",
           "last_layer_map", "layer_map_from", "student_config", "student_from_teacher_layers", "uniform_layer_map"]
