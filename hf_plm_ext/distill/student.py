"""Students: a fresh model of the teacher's family from a smaller config (TinyBERT's), or one made of some of the
teacher's layers (DistilBERT's initialisation). Either keeps the teacher's vocabulary."""

import json
import re
from pathlib import Path

STUDENT_PRESETS = {
    # TinyBERT's general students (huawei-noah/Pretrained-Language-Model TinyBERT): 12 heads even at 312 wide
    "tinybert4": {"num_hidden_layers": 4, "hidden_size": 312, "intermediate_size": 1200, "num_attention_heads": 12},
    "tinybert6": {"num_hidden_layers": 6, "hidden_size": 768, "intermediate_size": 3072, "num_attention_heads": 12},
}


def student_config(teacher_config, spec: str):
    """The teacher's config with a student's sizes: ``spec`` is a preset name (``tinybert4``, ``tinybert6``) or a
    JSON file of config fields to change. The vocabulary stays the teacher's."""
    if spec in STUDENT_PRESETS:
        overrides = dict(STUDENT_PRESETS[spec])
    elif Path(spec).is_file():
        try:
            overrides = json.loads(Path(spec).read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ValueError(f"{spec}:{err.lineno}: not JSON: {err.msg}") from None
        if not isinstance(overrides, dict):
            raise ValueError(f"{spec}: a student config is a JSON object of config fields")
    else:
        raise ValueError(f"a student config is one of {sorted(STUDENT_PRESETS)} or a JSON file; got {spec!r}")
    family = overrides.pop("model_type", teacher_config.model_type)
    if family != teacher_config.model_type:
        raise ValueError(f"{spec}: a student takes the teacher's family ({teacher_config.model_type!r}); it names "
                         f"{family!r}")
    if overrides.get("vocab_size", teacher_config.vocab_size) != teacher_config.vocab_size:
        raise ValueError(f"{spec}: a student takes the teacher's vocabulary ({teacher_config.vocab_size} tokens); "
                         f"it sets vocab_size {overrides['vocab_size']}")
    fields = teacher_config.to_dict()
    # DistilBERT's `dim` is `hidden_size` to everyone else
    overrides = {teacher_config.attribute_map.get(name, name): value for name, value in overrides.items()}
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise ValueError(f"{spec}: {unknown} are not fields of a {teacher_config.model_type!r} config")
    config = type(teacher_config).from_dict({**fields, **overrides})
    if config.hidden_size % config.num_attention_heads:
        raise ValueError(f"{spec}: hidden_size {config.hidden_size} does not split into {config.num_attention_heads} "
                         f"attention heads")
    return config


_LAYER_KEY = re.compile(r"(^|\.)layer\.(\d+)\.")


def student_from_teacher_layers(teacher, teacher_layers):
    """A model of ``teacher``'s class with only ``teacher_layers`` (1-based) of its transformer layers, in that
    order, and every other weight (embeddings, pooler, head) copied: DistilBERT's initialisation."""
    depth = teacher.config.num_hidden_layers
    if not teacher_layers or any(not 1 <= layer <= depth for layer in teacher_layers):
        raise ValueError(f"a student made of teacher layers takes layers in 1..{depth}; got {list(teacher_layers)}")
    config = type(teacher.config).from_dict({**teacher.config.to_dict(), "num_hidden_layers": len(teacher_layers)})
    student = type(teacher)(config)
    new_index = {layer - 1: index for index, layer in enumerate(teacher_layers)}
    state = {}
    for key, tensor in teacher.state_dict().items():
        match = _LAYER_KEY.search(key)
        if match is None:
            state[key] = tensor
        elif int(match.group(2)) in new_index:
            renamed = f"{match.group(1)}layer.{new_index[int(match.group(2))]}."
            state[key[:match.start()] + renamed + key[match.end():]] = tensor
    missing, unexpected = student.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"the layers of a {teacher.config.model_type!r} model are not named `layer.N.`; cannot "
                         f"take some of them (missing {missing[:4]}, unexpected {unexpected[:4]})")
    return student
