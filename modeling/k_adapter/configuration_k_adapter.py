"""K-Adapter configuration (Wang et al., 2021): knowledge adapters beside a frozen backbone.

The backbone is a sub-config (any transformers encoder that returns hidden states: BERT, RoBERTa, MiniLM, ...);
its weights either come from ``backbone_name_or_path`` when the model loads (checkpoints then hold only the
adapters and heads) or are saved with the model (``embed_backbone``, and always when no path is given).
"""

from huggingface_hub.dataclasses import strict
from transformers import AutoConfig, AutoModel, PreTrainedConfig
from transformers.utils.type_validators import interval, probability
from transformers.configuration_utils import SubConfigSpec
from transformers.dynamic_module_utils import get_class_from_dynamic_module
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

FUSIONS = ("concat", "add")
HUB_KWARGS = ("cache_dir", "force_download", "proxies", "token", "revision", "local_files_only")


def register_backbone_code(path, backbone: dict, **hub_kwargs) -> None:
    """A backbone of a family transformers does not know (e.g. hf-plm-ext's ``macbert``, where that package is not
    installed) is registered with ``AutoConfig`` / ``AutoModel`` from the code the checkpoint at ``path`` carries
    beside its own (``save_pretrained`` copies it; the backbone's ``auto_map`` names it)."""
    model_type, auto_map = backbone.get("model_type"), backbone.get("auto_map") or {}
    if model_type is None or model_type in CONFIG_MAPPING or "AutoConfig" not in auto_map:
        return
    try:
        config_class = get_class_from_dynamic_module(auto_map["AutoConfig"], path, **hub_kwargs)
        model_class = get_class_from_dynamic_module(auto_map["AutoModel"], path, **hub_kwargs)
    except (OSError, KeyError) as err:
        raise ValueError(f"the K-Adapter at {path} has a {model_type!r} backbone, which transformers does not know, "
                         f"and does not carry its code ({err}); install the backbone's package, or save the "
                         f"K-Adapter again where it is installed (save_pretrained copies the backbone's code)") from None
    AutoConfig.register(model_type, config_class, exist_ok=True)
    AutoModel.register(config_class, model_class, exist_ok=True)


def spread_layers(num_hidden_layers: int, count: int = 3) -> list[int]:
    """``count`` hidden-state indices spread over the depth as the paper's {0, 11, 22} of 24: from the embeddings
    (0) to two below the top (``num_hidden_layers - 2``)."""
    top = max(num_hidden_layers - 2, 0)
    return sorted({round(i * top / (count - 1)) for i in range(count)}) if count > 1 else [0]


def adapter_shape_for(backbone_width: int, adapter_size: int | None = None) -> dict:
    """The paper's adapter shape for a backbone ``backbone_width`` wide: K-Adapter puts 768-wide adapters (12 heads of
    64, a 3072 feed-forward) on RoBERTa-large's 1024, so 3/4 of the width, heads of 64 (at least one) and a
    feed-forward 4x the adapters' width; ``adapter_size``, when given, sets the width and the rest follows it."""
    size = adapter_size or max(1, round(0.75 * backbone_width))
    heads = max(1, size // 64)
    while size % heads:
        heads -= 1
    if adapter_size is None:
        size = size // heads * heads
    return {"adapter_size": size, "adapter_num_attention_heads": heads, "adapter_intermediate_size": 4 * size}


@strict
class KAdapterConfig(PreTrainedConfig):
    r"""Knowledge adapters read a frozen backbone's hidden states at ``adapter_layers``.

    Each named adapter is a chain over those layers: at layer ``i`` it takes ``hidden_states[i]`` plus its own
    previous output, projects it down to ``adapter_size``, runs ``adapter_num_layers`` small transformer layers,
    projects back up and adds its input (the paper's ``fac-adapter``). The adapters' last outputs are fused with
    the backbone's last hidden state: ``concat`` (per adapter a dense over ``[backbone; adapter]``, then one over
    their concatenation when several) or ``add`` (backbone + adapters, then a dense).

    Args:
        backbone_config: the backbone's config (a dict with its ``model_type``, or a config).
        backbone_name_or_path: a folder or Hub repo id that holds the backbone's weights; None: saved within.
        embed_backbone: save the backbone's weights with the model even when a path is given.
        adapter_names: the adapters, by name (e.g. ``["factual", "linguistic"]``).
        adapter_layers: the backbone's hidden-state indices each adapter reads (0: the embeddings); default three
            spread over the depth (:func:`spread_layers`).
        adapter_size: the adapters' inner width. adapter_num_layers, adapter_num_attention_heads,
            adapter_intermediate_size, adapter_hidden_act, adapter_dropout: their transformer layers. Left out,
            the paper's proportions on RoBERTa-large (width 1024) are kept for any backbone
            (:func:`adapter_shape_for`): 3/4 of the backbone's width, heads of 64, a feed-forward 4x as wide.
        adapter_skip_layers: every this many adapter layers, the output of an earlier one is added again (the
            paper's ``adapter_skip_layers``; 0: none).
        adapter_initializer_range: the adapters' init std (the paper's 0.0002: they start close to the identity).
        fusion: ``concat`` or ``add``.
        frozen_adapters: adapters kept frozen in training (the paper's ``--freeze_adapter`` when pre-trained
            adapters are combined for a downstream task).
        classifier_dropout: before the heads (default: the backbone's ``hidden_dropout_prob``, else 0.1).
    """

    model_type = "k-adapter"
    sub_configs_defaults = {"backbone_config": SubConfigSpec(config_class=AutoConfig, model_type="bert")}

    backbone_config: dict | PreTrainedConfig | None = None
    backbone_name_or_path: str | None = None
    embed_backbone: bool = False
    adapter_names: list[str] | tuple[str, ...] = ("adapter",)
    adapter_layers: list[int] | tuple[int, ...] | None = None
    adapter_size: int | None = None
    adapter_num_layers: int = interval(min=1)(default=2)
    adapter_num_attention_heads: int | None = None
    adapter_intermediate_size: int | None = None
    adapter_hidden_act: str = "gelu"
    adapter_dropout: float | int = interval(min=0.0, max=1.0, exclude_max=True)(default=0.1)
    adapter_skip_layers: int = interval(min=0)(default=0)
    adapter_initializer_range: float | int = 0.0002
    fusion: str = "concat"
    frozen_adapters: list[str] | tuple[str, ...] = ()
    classifier_dropout: float | int | None = None

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, **kwargs):
        """As transformers', after registering a backbone family from the checkpoint's own code where transformers
        does not know it (:func:`register_backbone_code`)."""
        hub_kwargs = {name: kwargs[name] for name in HUB_KWARGS if name in kwargs}
        config_dict, _ = cls.get_config_dict(pretrained_model_name_or_path, **hub_kwargs)
        if isinstance(config_dict.get("backbone_config"), dict):
            register_backbone_code(pretrained_model_name_or_path, config_dict["backbone_config"], **hub_kwargs)
        return super().from_pretrained(pretrained_model_name_or_path, **kwargs)

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        self.adapter_names, self.frozen_adapters = list(self.adapter_names), list(self.frozen_adapters)
        if self.adapter_layers is None:
            self.adapter_layers = spread_layers(self.backbone_config.num_hidden_layers)
        paper_shape = adapter_shape_for(self.backbone_config.hidden_size, self.adapter_size)
        for name, value in paper_shape.items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        self.adapter_layers = list(self.adapter_layers)
        family_auto_map = getattr(type(self), "_family_auto_map", None)  # see MacBertConfig
        if family_auto_map and getattr(self, "auto_map", None) is None:
            self.auto_map = dict(family_auto_map)

    # What transformers' generic code reads of a model's text config (resizing, the output checks): the backbone's;
    # an override (from_pretrained(path, hidden_size=...), as transformers' configs take them) sets the backbone's
    @property
    def hidden_size(self) -> int:
        return self.backbone_config.hidden_size

    @hidden_size.setter
    def hidden_size(self, hidden_size: int):
        self.backbone_config.hidden_size = hidden_size

    @property
    def vocab_size(self) -> int:
        return self.backbone_config.vocab_size

    @vocab_size.setter
    def vocab_size(self, vocab_size: int):
        self.backbone_config.vocab_size = vocab_size

    @property
    def num_hidden_layers(self) -> int:
        """The backbone's (the hidden states the model returns are the backbone's)."""
        return self.backbone_config.num_hidden_layers

    @num_hidden_layers.setter
    def num_hidden_layers(self, num_hidden_layers: int):
        previous = self.backbone_config.num_hidden_layers
        self.backbone_config.num_hidden_layers = num_hidden_layers
        if self.adapter_layers is not None:  # (during __init__, the adapters' layers are spread afterwards)
            try:
                self.validate_k_adapter_fields()
            except ValueError:
                self.backbone_config.num_hidden_layers = previous
                raise

    @property
    def num_attention_heads(self) -> int:
        return self.backbone_config.num_attention_heads

    @num_attention_heads.setter
    def num_attention_heads(self, num_attention_heads: int):
        self.backbone_config.num_attention_heads = num_attention_heads

    def freeze_adapters(self) -> None:
        """Keep every adapter frozen in training, the fusion and the head trained (the paper's ``--freeze_adapter``;
        what ``finetune --freeze-adapters`` asks of a checkpoint)."""
        self.frozen_adapters = list(self.adapter_names)

    def saves_backbone(self) -> bool:
        return self.embed_backbone or not self.backbone_name_or_path

    def validate_k_adapter_fields(self):
        """Run by ``@strict`` after ``__init__`` and by ``config.validate()``."""
        depth = self.backbone_config.num_hidden_layers
        outside = [index for index in self.adapter_layers if not 0 <= index <= depth]
        if outside or not self.adapter_layers:
            raise ValueError(f"KAdapterConfig.adapter_layers must be hidden-state indices of the backbone, in [0, "
                             f"{depth}] (0: the embeddings; its {depth} layers), got {self.adapter_layers}")
        if not self.adapter_names or len(set(self.adapter_names)) != len(self.adapter_names):
            raise ValueError(f"KAdapterConfig.adapter_names must be distinct names, got {self.adapter_names}")
        unknown = sorted(set(self.frozen_adapters) - set(self.adapter_names))
        if unknown:
            raise ValueError(f"KAdapterConfig.frozen_adapters names no adapter: {unknown} (adapters: "
                             f"{self.adapter_names})")
        if self.fusion not in FUSIONS:
            raise ValueError(f"KAdapterConfig.fusion must be one of {FUSIONS}, got {self.fusion!r}")
        for name in ("adapter_size", "adapter_num_attention_heads", "adapter_intermediate_size"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"KAdapterConfig.{name} must be a whole number of at least 1, got "
                                 f"{getattr(self, name)!r}")
        if self.adapter_size % self.adapter_num_attention_heads:
            raise ValueError(f"KAdapterConfig.adapter_size ({self.adapter_size}) must split into "
                             f"adapter_num_attention_heads ({self.adapter_num_attention_heads})")


__all__ = ["KAdapterConfig", "adapter_shape_for", "spread_layers"]
