"""Each family's default PEFT targets, registered with PEFT when ``hf_plm_ext`` is imported, so that
``get_peft_model(model, LoraConfig(task_type=...))`` without ``target_modules`` works on this package's models as on
BERT (PEFT's own table knows only transformers' model types).

A family folder's ``PEFT_TARGETS`` is either a model type PEFT knows (``"bert"``: the family's layers are BERT's
modules, and every method takes that entry) or the modules of each kind of method: ``lora`` (LoRA-like methods: the
attention's projections), ``ia3`` and ``ia3_feedforward``, ``ln_tuning``. A family without one has no defaults (pass
``target_modules``).
"""

from peft.utils import constants

from hf_plm_ext.registry import family_folders

KIND_OF_TABLE = {"TRANSFORMERS_MODELS_TO_IA3_TARGET_MODULES_MAPPING": "ia3",
                 "TRANSFORMERS_MODELS_TO_IA3_FEEDFORWARD_MODULES_MAPPING": "ia3_feedforward",
                 "TRANSFORMERS_MODELS_TO_LNTUNING_TARGET_MODULES_MAPPING": "ln_tuning"}


def peft_tables() -> dict[str, dict]:
    """PEFT's ``{model_type: targets}`` tables by name (each method's tuner reads its own)."""
    return {name: table for name, table in vars(constants).items()
            if name.startswith("TRANSFORMERS_MODELS_TO_") and name.endswith(("_TARGET_MODULES_MAPPING",
                                                                             "_FEEDFORWARD_MODULES_MAPPING"))}


def family_targets() -> dict[str, str | dict]:
    """``{model_type: PEFT_TARGETS}`` of every family folder that has them."""
    return {folder.AUTO_CLASSES["AutoConfig"].model_type: folder.PEFT_TARGETS
            for folder in family_folders() if hasattr(folder, "PEFT_TARGETS")}


def register_peft_targets() -> None:
    lora_bert = constants.TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING["bert"]
    for name, table in peft_tables().items():
        # a method whose BERT entry is LoRA's takes the family's LoRA targets; one PEFT gives other targets (BEFT,
        # OSF, ...) is left to the user's target_modules
        kind = KIND_OF_TABLE.get(name, "lora" if table.get("bert") == lora_bert else None)
        for model_type, targets in family_targets().items():
            if isinstance(targets, str):
                if targets in table:
                    table.setdefault(model_type, table[targets])
            elif kind is not None:
                table.setdefault(model_type, targets[kind])
