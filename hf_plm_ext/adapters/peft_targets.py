"""Each family's default PEFT targets, registered with PEFT when ``hf_plm_ext`` is imported, so that
``get_peft_model(model, LoraConfig(task_type=...))`` without ``target_modules`` works on this package's models as on
BERT (PEFT's own table knows only transformers' model types).

BERT-named families (their layers are BERT's modules) take PEFT's BERT entry of every method; the others name the
modules of each kind of method: LoRA-like (the attention's projections), IA3 (and the feed-forward modules it
scales at the input) and LayerNorm tuning.
"""

from peft.utils import constants

BERT_NAMED = ("macbert", "electra-rtd", "k-adapter")  # k-adapter: its backbone's and its adapters' BERT layers
TARGETS = {
    "transfo-xl": dict(lora=["qkv_net"], ia3=["qkv_net", "CoreNet.3"], ia3_feedforward=["CoreNet.3"],
                       ln_tuning=["layer_norm"]),
    # LSH layers share one query_key projection; local and full ones have query and key
    "rev-lsh": dict(lora=["query", "query_key", "value"], ia3=["query_key", "key", "value", "feed_forward.output"],
                    ia3_feedforward=["feed_forward.output"], ln_tuning=["layer_norm"]),
}
KIND_OF_TABLE = {"TRANSFORMERS_MODELS_TO_IA3_TARGET_MODULES_MAPPING": "ia3",
                 "TRANSFORMERS_MODELS_TO_IA3_FEEDFORWARD_MODULES_MAPPING": "ia3_feedforward",
                 "TRANSFORMERS_MODELS_TO_LNTUNING_TARGET_MODULES_MAPPING": "ln_tuning"}


def peft_tables() -> dict[str, dict]:
    """PEFT's ``{model_type: targets}`` tables by name (each method's tuner reads its own)."""
    return {name: table for name, table in vars(constants).items()
            if name.startswith("TRANSFORMERS_MODELS_TO_") and name.endswith(("_TARGET_MODULES_MAPPING",
                                                                             "_FEEDFORWARD_MODULES_MAPPING"))}


def register_peft_targets() -> None:
    lora_bert = constants.TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING["bert"]
    for name, table in peft_tables().items():
        for model_type in BERT_NAMED:
            if "bert" in table:
                table.setdefault(model_type, table["bert"])
        # a method whose BERT entry is LoRA's takes the family's LoRA targets; one PEFT gives other targets (BEFT,
        # OSF, ...) is left to the user's target_modules
        kind = KIND_OF_TABLE.get(name, "lora" if table.get("bert") == lora_bert else None)
        for model_type, targets in TARGETS.items():
            if kind is not None:
                table.setdefault(model_type, targets[kind])
