"""``BottleneckConfig``: Houlsby / Pfeiffer / parallel bottleneck adapters as a PEFT method.

Field names and presets are AdapterHub's (``adapters.BnConfig``, ``SeqBnConfig``, ``DoubleSeqBnConfig``,
``ParBnConfig``), so its adapters convert key for key (``hf_plm_ext.convert.adapterhub``).
"""

from dataclasses import dataclass, field

from peft import PeftConfig
from transformers.activations import ACT2FN

from .peft_type import BOTTLENECK

INITS = ("bert", "mam_adapter", "houlsby")
RESIDUALS = (True, False, "post_add")

# AdapterHub's defaults for each preset (its aliases: seq_bn, double_seq_bn, par_bn)
PRESETS = {
    "pfeiffer": dict(mh_adapter=False, output_adapter=True, non_linearity="relu", reduction_factor=16,
                     original_ln_before=True, original_ln_after=True, residual_before_ln=True),
    "houlsby": dict(mh_adapter=True, output_adapter=True, non_linearity="swish", reduction_factor=16,
                    original_ln_before=False, original_ln_after=True, residual_before_ln=True),
    "parallel": dict(mh_adapter=False, output_adapter=True, non_linearity="relu", reduction_factor=2,
                     original_ln_before=False, original_ln_after=True, init_weights="mam_adapter",
                     is_parallel=True, scaling=4.0),
}
PRESET_ALIASES = {"seq_bn": "pfeiffer", "double_seq_bn": "houlsby", "par_bn": "parallel"}


@dataclass
class BottleneckConfig(PeftConfig):
    """A bottleneck adapter ``x -> up(act(down(x))) * scaling`` (``down``: ``width -> width / reduction_factor``)
    placed after a layer's attention output (``mh_adapter``) and / or after its feed-forward output
    (``output_adapter``).

    Args:
        reduction_factor: hidden width / adapter width; or a mapping from layer index (as a string) to factor,
            with a ``"default"``.
        non_linearity: any activation of ``transformers.activations`` (``relu``, ``swish``, ``gelu``, ...).
        mh_adapter, output_adapter: the placement, read when ``target_modules`` is not given.
        original_ln_before: the adapter reads ``LayerNorm(sublayer output + residual)`` (Pfeiffer) instead of the
            sublayer output (Houlsby).
        original_ln_after: the sublayer's LayerNorm and residual come after the adapter.
        residual_before_ln: the adapter's own residual is the sublayer output before the LayerNorm (True), after it
            (False), or the sum with the residual before the LayerNorm (``"post_add"``).
        scaling: a float, or ``"learned"`` (one trained scalar).
        dropout: on the adapter's output. init_weights: ``bert`` (normal, std 0.02), ``mam_adapter``
            (Kaiming-uniform down, zero up: the adapter starts as the identity), ``houlsby`` (truncated normal, std
            0.01).
        leave_out: layer indices without adapters.
        is_parallel: the adapter reads the sublayer's input and its output is added to the sublayer's (He et al.).
        target_modules: PEFT's; None: the placement's modules for the model type (see ``targets.py``).

    Targets of three kinds take adapters: BERT-style output modules (``dense``, ``dropout``, ``LayerNorm``, called
    with the residual: every option, as AdapterHub), ``LayerNorm`` modules (Pfeiffer's options: the adapter inside
    ``LayerNorm(s + adapter(LayerNorm(s)))``) and any other module (a linear output projection or a whole
    feed-forward block: ``y + adapter(y)``, parallel ``y + adapter(x)``; no LayerNorm of its own to move).
    """

    reduction_factor: float | dict[str, float] = 16
    non_linearity: str = "relu"
    mh_adapter: bool = False
    output_adapter: bool = True
    original_ln_before: bool = True
    original_ln_after: bool = True
    residual_before_ln: bool | str = True
    scaling: float | str = 1.0
    dropout: float = 0.0
    init_weights: str = "bert"
    leave_out: list[int] = field(default_factory=list)
    is_parallel: bool = False
    target_modules: list[str] | str | None = None
    exclude_modules: list[str] | str | None = None
    modules_to_save: list[str] | None = None

    def __post_init__(self):
        super().__post_init__()
        self.peft_type = BOTTLENECK
        if isinstance(self.target_modules, (list, tuple, set)):
            self.target_modules = sorted(set(self.target_modules))
        self.leave_out = sorted(set(int(index) for index in self.leave_out))
        self.validate()

    def validate(self):
        factors = self.reduction_factor if isinstance(self.reduction_factor, dict) else {"default": self.reduction_factor}
        for key, factor in factors.items():
            if not isinstance(factor, (int, float)) or factor <= 0:
                raise ValueError(f"BottleneckConfig.reduction_factor[{key!r}] must be a positive number, got {factor!r}")
        if isinstance(self.reduction_factor, dict) and "default" not in self.reduction_factor:
            raise ValueError("BottleneckConfig.reduction_factor, a mapping, needs a 'default' entry for the other layers")
        if self.init_weights not in INITS:
            raise ValueError(f"BottleneckConfig.init_weights must be one of {INITS}, got {self.init_weights!r}")
        if self.residual_before_ln not in RESIDUALS:
            raise ValueError(f"BottleneckConfig.residual_before_ln must be one of {RESIDUALS}, got "
                             f"{self.residual_before_ln!r}")
        if not (isinstance(self.scaling, (int, float)) or self.scaling == "learned"):
            raise ValueError(f"BottleneckConfig.scaling must be a number or 'learned', got {self.scaling!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"BottleneckConfig.dropout must be in [0, 1), got {self.dropout}")
        if self.target_modules is None and not (self.mh_adapter or self.output_adapter):
            raise ValueError("BottleneckConfig: mh_adapter and output_adapter are both False: no place for an adapter")
        if self.non_linearity.lower() not in ACT2FN:
            raise ValueError(f"BottleneckConfig.non_linearity must be one of transformers' activations "
                             f"({', '.join(sorted(ACT2FN))}), got {self.non_linearity!r}")

    @classmethod
    def from_preset(cls, name: str, **overrides) -> "BottleneckConfig":
        """``pfeiffer`` (= ``seq_bn``), ``houlsby`` (= ``double_seq_bn``) or ``parallel`` (= ``par_bn``) with
        AdapterHub's defaults, and ``overrides`` of any field (``task_type``, ``reduction_factor``, ...)."""
        preset = PRESET_ALIASES.get(name, name)
        if preset not in PRESETS:
            raise ValueError(f"BottleneckConfig preset must be one of {sorted(PRESETS) + sorted(PRESET_ALIASES)}, "
                             f"got {name!r}")
        return cls(**{**PRESETS[preset], **overrides})

    def factor_for(self, layer_index: int | None) -> float:
        if not isinstance(self.reduction_factor, dict):
            return self.reduction_factor
        return self.reduction_factor.get(str(layer_index), self.reduction_factor["default"])
