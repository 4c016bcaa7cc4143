"""AdapterHub bottleneck adapters as this package's PEFT adapters: the same weights, the same outputs.

The input is the folder AdapterHub's ``save_adapter(dir, name, with_head=...)`` writes: ``adapter_config.json``
and ``adapter.safetensors`` (read without pickle), and with a classification head ``head_config.json`` and
``model_head.safetensors``. The output is a PEFT adapter folder (``adapter_config.json`` with
``peft_type: BOTTLENECK``, ``adapter_model.safetensors``) that loads with
``PeftModel.from_pretrained(base, OUT)`` on the backbone (e.g. ``AutoModelForSequenceClassification`` with the
head's label count, after ``import hf_plm_ext``).

AdapterHub's classification head (dense -> tanh -> projection on the first token) is the sequence classifier's
pooler and classifier of transformers' BERT-style models, so it goes into those (``modules_to_save``).
"""

import json
import re
from pathlib import Path

from safetensors.torch import load_file, save_file

from hf_plm_ext.errors import UserInputError
from hf_plm_ext.files import check_file, staged_output

# AdapterHub options that this package's adapters do not have: the value they must keep
UNSUPPORTED = {"ln_before": False, "ln_after": False, "adapter_residual_before_ln": False, "use_gating": False,
               "phm_layer": False, "inv_adapter": None, "cross_adapter": False, "stochastic_depth": 0.0}
COPIED = ("mh_adapter", "output_adapter", "reduction_factor", "non_linearity", "original_ln_before",
          "original_ln_after", "residual_before_ln", "scaling", "dropout", "init_weights", "leave_out", "is_parallel")
ADAPTER_KEY = re.compile(r"^(?P<module>.+)\.adapters\.(?P<name>[^.]+)\.(?P<part>adapter_down\.0|adapter_up|scaling)"
                         r"(?P<suffix>\.weight|\.bias)?$")
PARTS = {"adapter_down.0": "bn_down", "adapter_up": "bn_up", "scaling": "bn_scaling"}
HEAD_LAYERS = {"1": "bert.pooler.dense", "4": "classifier"}  # AdapterHub's Sequential: dropout, dense, tanh, ...
HEAD_MODEL_TYPES = ("bert",)  # whose sequence classifier is pooler (dense, tanh) + classifier


def bottleneck_config_fields(adapter_config: dict, source: Path) -> dict:
    """``BottleneckConfig`` fields of an AdapterHub ``adapter_config.json``, or one error naming what cannot come."""
    config = adapter_config.get("config")
    if not isinstance(config, dict) or config.get("architecture", "bottleneck") not in (None, "bottleneck"):
        raise UserInputError(f"{source}: not an AdapterHub bottleneck adapter config (no 'config' of a bottleneck "
                             f"adapter: LoRA, prefix tuning and the others are not converted)")
    for name, value in UNSUPPORTED.items():
        if config.get(name, value) != value:
            raise UserInputError(f"{source}: the adapter uses {name}={config[name]!r}, which this package's "
                                 f"bottleneck adapters do not have (only {name}={value!r} converts)")
    if config.get("scaling", 1.0) == "channel":
        raise UserInputError(f"{source}: scaling='channel' is not converted (a float or 'learned' is)")
    return {name: config[name] for name in COPIED if name in config}


def converted_key(key: str, source: Path) -> str:
    match = ADAPTER_KEY.match(key)
    if match is None:
        raise UserInputError(f"{source}: unexpected weight {key!r} in an AdapterHub bottleneck adapter")
    return f"base_model.model.{match['module']}.{PARTS[match['part']]}{match['suffix'] or ''}"


def convert_adapterhub(source, output) -> Path:
    """Write the AdapterHub adapter folder ``source`` as a PEFT bottleneck adapter folder ``output`` (new)."""
    from hf_plm_ext.adapters import BottleneckConfig
    from hf_plm_ext.adapters.bottleneck.targets import target_regex

    source = Path(source)
    config_file = check_file(source / "adapter_config.json", "AdapterHub adapter config")
    try:
        adapter_config = json.loads(config_file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise UserInputError(f"{config_file}:{err.lineno}: not valid JSON ({err.msg})") from None
    fields = bottleneck_config_fields(adapter_config, config_file)
    weights_file = source / "adapter.safetensors"
    if not weights_file.is_file():
        raise UserInputError(f"no adapter.safetensors in {source} (pickled pytorch_adapter.bin is not read: save "
                             f"the adapter with use_safetensors=True)")
    weights = {converted_key(key, weights_file): tensor for key, tensor in load_file(weights_file).items()}
    widths = {tensor.shape[-1] for key, tensor in weights.items() if key.endswith("bn_down.weight")}
    hidden_size = adapter_config.get("hidden_size")
    if hidden_size is not None and widths - {hidden_size}:
        raise UserInputError(f"{weights_file}: adapter weights of width {sorted(widths)}, but the config says the "
                             f"backbone's hidden_size is {hidden_size}")
    modules_to_save, task_type = None, None
    model_type = adapter_config.get("model_type")
    if (source / "head_config.json").is_file():
        if model_type not in HEAD_MODEL_TYPES:
            raise UserInputError(f"{source / 'head_config.json'}: a {model_type!r} model's head is not converted (only "
                                 f"BERT's, whose pooler and classifier it becomes); move head_config.json away to "
                                 f"convert the adapter alone")
        head_weights = read_classification_head(source)
        weights.update(head_weights)
        modules_to_save, task_type = ["classifier", "pooler"], "SEQ_CLS"
    try:
        config = BottleneckConfig(**fields, task_type=task_type, modules_to_save=modules_to_save)
        config.target_modules = target_regex(model_type, config)
    except ValueError as err:
        raise UserInputError(f"{config_file}: {err}") from None
    with staged_output(output) as staging:
        config.save_pretrained(str(staging))
        save_file({key: tensor.contiguous() for key, tensor in weights.items()}, staging / "adapter_model.safetensors",
                  metadata={"format": "pt"})
    return Path(output)


def read_classification_head(source: Path) -> dict:
    head_file = source / "head_config.json"
    head = json.loads(head_file.read_text(encoding="utf-8")).get("config", {})
    expected = dict(head_type="classification", layers=2, activation_function="tanh", use_pooler=False)
    wrong = {name: head.get(name) for name, value in expected.items() if head.get(name) != value}
    if wrong:
        raise UserInputError(f"{head_file}: only AdapterHub's default classification head converts "
                             f"({expected}); this one has {wrong}")
    weights_file = source / "model_head.safetensors"
    if not weights_file.is_file():
        raise UserInputError(f"no model_head.safetensors in {source} (a pickled head is not read)")
    converted = {}
    for key, tensor in load_file(weights_file).items():
        match = re.match(r"^heads\.[^.]+\.(\d+)\.(weight|bias)$", key)
        if match is None or match[1] not in HEAD_LAYERS:
            raise UserInputError(f"{weights_file}: unexpected head weight {key!r}")
        converted[f"base_model.model.{HEAD_LAYERS[match[1]]}.{match[2]}"] = tensor
    return converted
