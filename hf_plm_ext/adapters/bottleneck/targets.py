"""Where each model type's bottleneck adapters go, by placement and kind of adapter.

``{model_type: {slot: regex of the module path inside one layer}}`` with the slots ``attention`` / ``output``
(Houlsby's sequential adapter), ``attention_ln`` / ``output_ln`` (Pfeiffer's: ``original_ln_before``) and
``attention_parallel`` / ``output_parallel``; ``layer``: the path of a layer, its index in the one group.
BERT-style output modules take every kind, so BERT's family names the same module in each slot.

The table here holds transformers' model types; this package's families declare theirs in their folder
(``BOTTLENECK_TARGETS``: such a table, or the model type here whose table their layers share, e.g. ``"bert"``), as
they declare ``PEFT_TARGETS``: a new family needs no edit here.
"""

import re

from hf_plm_ext.registry import family_folders

BERT_LIKE = dict(layer=r"(?:.*\.)?encoder\.layer\.(\d+)",
                 **{slot: "attention.output" for slot in ("attention", "attention_ln", "attention_parallel")},
                 **{slot: "output" for slot in ("output", "output_ln", "output_parallel")})

TRANSFORMERS_TARGETS = {
    **{model_type: BERT_LIKE for model_type in ("bert", "roberta", "xlm-roberta", "camembert", "electra")},
    "distilbert": dict(layer=r"(?:.*\.)?transformer\.layer\.(\d+)", attention="attention",
                       attention_ln="sa_layer_norm", attention_parallel="attention", output="ffn",
                       output_ln="output_layer_norm", output_parallel="ffn"),
    # one shared layer per group: its adapters are shared across the depth as its weights are
    "albert": dict(layer=r"(?:.*\.)?albert_layer_groups\.\d+\.albert_layers\.(\d+)", attention="attention.dense",
                   attention_ln="attention.LayerNorm", output="ffn_output", output_ln="full_layer_layer_norm"),
}


def targets() -> dict[str, dict]:
    """``{model_type: slots}``: transformers' model types and every family folder's ``BOTTLENECK_TARGETS``."""
    table = dict(TRANSFORMERS_TARGETS)
    for folder in family_folders():
        declared = getattr(folder, "BOTTLENECK_TARGETS", None)
        if declared is not None:
            table[folder.AUTO_CLASSES["AutoConfig"].model_type] = (TRANSFORMERS_TARGETS[declared]
                                                                   if isinstance(declared, str) else declared)
    return table


def slot_names(config) -> list[str]:
    """The slots ``config`` asks for: its placement and kind."""
    kind = "_parallel" if config.is_parallel else "_ln" if config.original_ln_before else ""
    return [place + kind for place, wanted in (("attention", config.mh_adapter), ("output", config.output_adapter))
            if wanted]


def target_regex(model_type: str, config) -> str:
    """The ``target_modules`` regex of ``config``'s adapters in a ``model_type`` model, or one clear error."""
    known = targets()
    if model_type not in known:
        raise ValueError(f"no bottleneck adapter targets are known for model type {model_type!r} (known: "
                         f"{', '.join(sorted(known))}): pass target_modules")
    table = known[model_type]
    missing = [slot for slot in slot_names(config) if slot not in table]
    if missing:
        raise ValueError(f"{model_type} has no module for a {' / '.join(missing)} adapter (e.g. pre-LayerNorm "
                         f"blocks have no LayerNorm after the sublayer for original_ln_before); choose another "
                         f"preset or pass target_modules")
    modules = sorted({table[slot] for slot in slot_names(config)})
    return rf"{table['layer']}\.(?:{'|'.join(re.escape(module) for module in modules)})"


def layer_index(key: str, model_type: str | None) -> int | None:
    """The layer index in a module path (the first ``.N.`` when the model type is not in the table)."""
    known = targets()
    pattern = known[model_type]["layer"] if model_type in known else r".*?\.(\d+)"
    match = re.match(pattern + r"\.", key)
    return int(match.group(1)) if match else None
