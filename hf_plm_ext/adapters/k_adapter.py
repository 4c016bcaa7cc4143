"""K-Adapter checkpoints: a new one on a backbone, and adapters trained separately combined into one.

The recipe of the paper: train each knowledge adapter on its own task (the backbone frozen, e.g.
``finetune glue --task cola --model NEW``), then combine them (``combine_k_adapters``) and fine-tune the
combination on the downstream task, the adapters frozen or not (``finetune --freeze-adapters``).
"""

from pathlib import Path

from huggingface_hub.errors import StrictDataclassError

from hf_plm_ext.errors import UserInputError
from hf_plm_ext.files import staged_output

# the fields that make two adapters the same shape (and so combinable)
ADAPTER_SHAPE = ("adapter_layers", "adapter_size", "adapter_num_layers", "adapter_num_attention_heads",
                 "adapter_intermediate_size", "adapter_hidden_act", "adapter_skip_layers")


def new_k_adapter(backbone, output, adapter_names=("adapter",), embed_backbone=False, **fields) -> Path:
    """A K-Adapter on ``backbone`` (a folder or Hub id of any transformers encoder) with fresh adapters, saved in
    ``output`` (referring to the backbone by its path unless ``embed_backbone``)."""
    from transformers import AutoConfig

    from hf_plm_ext.modeling.k_adapter import KAdapterConfig, KAdapterModel
    from hf_plm_ext.checkpoints.loading import load_pretrained

    backbone_config = load_pretrained(AutoConfig, backbone, "backbone config")
    if backbone_config.model_type == KAdapterConfig.model_type:
        raise UserInputError(f"--backbone {backbone} is a K-Adapter itself: give its backbone "
                             f"({backbone_config.backbone_name_or_path}) for new adapters, and join them to these "
                             f"with `hf-plm-ext k-adapter combine`")
    source = str(Path(backbone).resolve()) if Path(backbone).is_dir() else str(backbone)
    try:
        config = KAdapterConfig(backbone_config=backbone_config.to_dict(), backbone_name_or_path=source,
                                embed_backbone=embed_backbone, adapter_names=list(adapter_names), **fields)
    except (TypeError, ValueError, StrictDataclassError) as err:
        raise UserInputError(" ".join(str(err.__cause__ or err).split())) from None
    model = KAdapterModel(config).load_backbone()
    with staged_output(output) as staging:
        model.save_pretrained(str(staging))
        _copy_tokenizer(source, staging)
    return Path(output)


def combine_k_adapters(sources, output, freeze_adapters=False, fusion=None) -> Path:
    """One ``KAdapterModel`` with the adapters of every K-Adapter checkpoint in ``sources`` (the same backbone and
    adapter shape; distinct names), a new fusion, saved in ``output``. ``freeze_adapters``: they stay frozen in
    the downstream fine-tuning (``config.frozen_adapters``)."""
    from transformers import AutoModel

    from hf_plm_ext.modeling.k_adapter import KAdapterConfig, KAdapterModel
    from hf_plm_ext.checkpoints.loading import load_pretrained

    if len(sources) < 1:
        raise UserInputError("give the K-Adapter checkpoints to combine")
    models = [load_pretrained(AutoModel, source, "K-Adapter") for source in sources]
    for source, model in zip(sources, models):
        if not isinstance(model, KAdapterModel):
            raise UserInputError(f"{source} is a {model.config.model_type!r} checkpoint, not a K-Adapter")
    first = models[0].config
    names = [name for model in models for name in model.config.adapter_names]
    if len(set(names)) != len(names):
        raise UserInputError(f"adapter names repeat across {list(map(str, sources))}: {names} (name them apart when "
                             f"creating them: k-adapter new --adapters NAME)")
    for source, model in zip(sources[1:], models[1:]):
        if model.config.backbone_config.to_dict() != first.backbone_config.to_dict():
            raise UserInputError(f"{source} has another backbone than {sources[0]}: adapters combine only over the "
                                 f"backbone they were trained on")
        differing = [f for f in ADAPTER_SHAPE if getattr(model.config, f) != getattr(first, f)]
        if differing:
            raise UserInputError(f"{source}'s adapters differ from {sources[0]}'s in {differing}")
    fields = {name: getattr(first, name) for name in ADAPTER_SHAPE + ("adapter_dropout", "adapter_initializer_range",
                                                                      "backbone_name_or_path", "embed_backbone")}
    config = KAdapterConfig(backbone_config=first.backbone_config.to_dict(), adapter_names=names,
                            frozen_adapters=names if freeze_adapters else [], fusion=fusion or first.fusion, **fields)
    combined = KAdapterModel(config)
    combined.backbone.load_state_dict(models[0].backbone.state_dict())
    for model in models:
        for name in model.config.adapter_names:
            combined.adapters[name].load_state_dict(model.adapters[name].state_dict())
    with staged_output(output) as staging:
        combined.save_pretrained(str(staging))
        _copy_tokenizer(sources[0], staging)
    return Path(output)


def _copy_tokenizer(source, destination):
    import shutil

    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        if Path(source, name).is_file():
            shutil.copy2(Path(source, name), Path(destination, name))
