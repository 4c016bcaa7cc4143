"""Fine-tuning a classifier: the arguments, the adapter (PEFT's or this package's bottleneck), the steps, and
``finetune`` (one GLUE/CLUE task). Scoring (the task table, readers, metrics) is ``hf_plm_ext.eval``'s."""

from hf_plm_ext.finetuning.arguments import FinetuneArguments
from hf_plm_ext.finetuning.recipe import finetune

__all__ = ["FinetuneArguments", "finetune"]
