"""transformers' Reformer checkpoints as ``rev-lsh`` folders: the same weights, the same outputs in evaluation.

A folder written by ``ReformerModel`` / ``ReformerModelWithLMHead`` / ``ReformerForMaskedLM`` /
``ReformerForSequenceClassification`` (``config.json`` + safetensors, read without pickle) becomes the matching
``rev-lsh`` class; the config keeps every field whose meaning is the same (axial positions included), and the
tokenizer files are copied as they are.
"""

import json
import re
import shutil
from pathlib import Path

from safetensors.torch import load_file

from hf_plm_ext.errors import UserInputError
from hf_plm_ext.files import check_file, check_new_output, staged_output

ARCHITECTURES = {
    "ReformerModel": "RevLSHModel",
    "ReformerModelWithLMHead": "RevLSHForCausalLM",
    "ReformerForMaskedLM": "RevLSHForMaskedLM",
    "ReformerForSequenceClassification": "RevLSHForSequenceClassification",
}
# transformers' names -> this family's, applied in order
KEY_RENAMES = [
    (r"^reformer\.", "rev_lsh."),
    (r"encoder\.layers\.", "layers."),
    (r"encoder\.layer_norm\.", "layer_norm."),
    (r"attention\.output\.dense\.", "attention.output."),
    (r"feed_forward\.dense\.dense\.", "feed_forward.dense."),
    (r"feed_forward\.output\.dense\.", "feed_forward.output."),
    (r"position_embeddings\.embedding\.", "position_embeddings."),
    (r"^lm_head\.decoder\.", "lm_head."),
]
DROPPED_FIELDS = ("model_type", "architectures", "auto_map", "transformers_version", "axial_pos_embds",
                  "chunk_size_lm_head", "num_hidden_layers")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "spiece.model",
                   "added_tokens.json")


def rev_lsh_config_fields(reformer_config: dict) -> dict:
    """A ``ReformerConfig`` dict as ``RevLSHConfig`` fields (``axial_pos_embds`` -> ``position_embedding_type``)."""
    fields = {key: value for key, value in reformer_config.items() if key not in DROPPED_FIELDS}
    fields["position_embedding_type"] = "axial" if reformer_config.get("axial_pos_embds", True) else "absolute"
    return fields


def rev_lsh_key(key: str) -> str:
    for pattern, replacement in KEY_RENAMES:
        key = re.sub(pattern, replacement, key)
    return key


def convert_reformer(source, output) -> Path:
    """Write the Reformer checkpoint in ``source`` as a ``rev-lsh`` folder ``output`` (a new directory)."""
    import hf_plm_ext.modeling.rev_lsh as family

    source, output = Path(source), check_new_output(output)
    if source.name == "config.json" and source.is_file():  # the folder's config named instead of the folder
        source = source.parent
    config = json.loads(check_file(source / "config.json", "Reformer config").read_text())
    if config.get("model_type") != "reformer":
        raise UserInputError(f"{source / 'config.json'}: model_type is {config.get('model_type')!r}, not 'reformer'")
    architecture = (config.get("architectures") or ["ReformerModel"])[0]
    if architecture not in ARCHITECTURES:
        raise UserInputError(f"{source / 'config.json'}: {architecture} has no rev-lsh counterpart; converted: "
                             f"{', '.join(ARCHITECTURES)}")
    weight_files = sorted(source.glob("*.safetensors"))
    if not weight_files:
        raise UserInputError(f"no safetensors weights in {source} (pickled weights are not read)")
    try:
        model_class = getattr(family, ARCHITECTURES[architecture])
        model = model_class(family.RevLSHConfig(**rev_lsh_config_fields(config)))
    except ValueError as err:
        raise UserInputError(f"{source / 'config.json'}: {err}") from None
    weights = {}
    for weight_file in weight_files:
        weights.update({rev_lsh_key(key): tensor for key, tensor in load_file(weight_file).items()})
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise UserInputError(f"the weights in {source} do not fit a {architecture}: missing {missing[:5]}, "
                             f"unexpected {unexpected[:5]}")
    with staged_output(output) as staging:
        model.save_pretrained(str(staging))
        for name in TOKENIZER_FILES:
            if (source / name).is_file():
                shutil.copy2(source / name, staging / name)
    return output
