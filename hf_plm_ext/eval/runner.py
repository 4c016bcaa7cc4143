"""Deprecated: fine-tuning moved to ``hf_plm_ext.finetuning`` (the task data to ``hf_plm_ext.eval.readers``, the
scoring to ``hf_plm_ext.eval.scoring``). The old names still resolve, with a ``DeprecationWarning``, until the
next release."""

import importlib
import warnings

MOVED_TO = {
    "hf_plm_ext.finetuning.arguments": ["FinetuneArguments"],
    "hf_plm_ext.finetuning.adapters": ["read_peft_config", "adapter_config", "with_adapter"],
    "hf_plm_ext.finetuning.steps": ["build_classifier", "tokenize", "encode_splits", "classification_trainer",
                                    "evaluate_models", "parameter_counts", "save_run"],
    "hf_plm_ext.finetuning.recipe": ["finetune"],
    "hf_plm_ext.eval.readers": ["TaskData", "load_task_data", "task_files", "check_labels_file"],
    "hf_plm_ext.eval.scoring": ["make_compute_metrics", "evaluate_splits"],
}
_MODULE_OF = {name: module for module, names in MOVED_TO.items() for name in names}


def __getattr__(name):
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"hf_plm_ext.eval.runner.{name} moved to {_MODULE_OF[name]}.{name}; the old path goes in the next "
                  f"release", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(_MODULE_OF[name]), name)
