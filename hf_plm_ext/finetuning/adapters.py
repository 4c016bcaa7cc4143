"""The adapter a fine-tuning run trains instead of the whole model: ``--adapter`` (a ready-made PEFT config) or
``--peft-config`` (a PEFT config file), put on the classifier with PEFT's ``get_peft_model``."""

import json
from pathlib import Path

from hf_plm_ext.errors import UserInputError


def read_peft_config(config_file: str):
    """The ``PeftConfig`` in ``config_file`` (a PEFT config as JSON), task type ``SEQ_CLS`` so that PEFT
    also trains and saves the classifier."""
    from peft import get_peft_config
    from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING  # PEFT's methods and any registered since

    path = Path(config_file)
    if not path.is_file():
        raise UserInputError(f"--peft-config {path} not found")
    try:
        fields = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise UserInputError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from None
    methods = sorted(str(t.value) for t in PEFT_TYPE_TO_CONFIG_MAPPING)
    if not isinstance(fields, dict) or fields.get("peft_type") not in methods:
        raise UserInputError(f"{path}: \"peft_type\" must be one of PEFT's methods ({', '.join(methods)})")
    if fields.setdefault("task_type", "SEQ_CLS") != "SEQ_CLS":
        raise UserInputError(f"{path}: task_type must be SEQ_CLS for GLUE/CLUE (got {fields['task_type']!r})")
    try:
        return get_peft_config(fields)
    except (TypeError, ValueError) as err:
        raise UserInputError(f"{path}: {err}") from None


def adapter_config(name: str, model_type: str):
    """The PEFT config of ``--adapter name`` for a sequence classifier of ``model_type``."""
    if name == "lora":
        from peft import LoraConfig
        from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as LORA_TARGETS

        targets = None if model_type in LORA_TARGETS else ["query", "value"]  # e.g. macbert: BERT's names
        return LoraConfig(task_type="SEQ_CLS", r=8, lora_alpha=16, lora_dropout=0.1, target_modules=targets)
    from hf_plm_ext.adapters import BottleneckConfig

    return BottleneckConfig.from_preset(name, task_type="SEQ_CLS")


def with_adapter(model, peft_config, source: str):
    from peft import get_peft_model

    try:
        return get_peft_model(model, peft_config)
    except ValueError as err:  # e.g. target modules the model does not have
        raise UserInputError(f"{source}: {err}") from None


def add_adapter(model, args, peft_config=None):
    """``model`` with the adapter ``args`` asks for (``--adapter``, ``--peft-config``) or ``peft_config``, or
    ``model`` itself.
    What the checkpoint lacked (a pooler, beside the head) trains and is saved with the adapter: frozen at its
    random start it would differ at every load."""
    if args.adapter is not None:
        peft_config = adapter_config(args.adapter, model.config.model_type)
    elif args.peft_config is not None:
        peft_config = read_peft_config(args.peft_config)
    if peft_config is None:
        return model
    new_modules = getattr(model, "newly_initialised_modules", [])
    peft_config.modules_to_save = sorted(set(peft_config.modules_to_save or []) | set(new_modules)) or None
    return with_adapter(model, peft_config, args.peft_config or f"--adapter {args.adapter}")
