"""``BottleneckLayer``: a target module with named bottleneck adapters (PEFT's ``BaseTunerLayer``).

Where the adapter goes depends on what the target is (see :func:`target_kind`):

- ``"bert_output"``, a BERT-style sublayer output (``dense``, ``dropout``, ``LayerNorm``, called as
  ``(hidden_states, input_tensor)``: BERT's, RoBERTa's, ELECTRA's ``*SelfOutput`` / ``*Output``): AdapterHub's
  ``bottleneck_layer_forward``, every option.
- ``"layer_norm"``, the ``LayerNorm`` that ends a sublayer (DistilBERT, ALBERT, Transformer-XL): it receives
  ``s = sublayer output + residual`` and returns ``LayerNorm(s + adapter(LayerNorm(s)))``, which is Pfeiffer's
  adapter (``original_ln_before``, ``residual_before_ln``, ``original_ln_after``) and only that.
- ``"module"``, anything else (a linear output projection, a whole feed-forward or attention block) whose output
  ``y`` the model adds to its residual: ``y + adapter(y)``, or parallel ``y + adapter(x)`` with ``x`` its input.
"""

import math

import torch
from peft.tuners.tuners_utils import BaseTunerLayer
from torch import nn
from transformers.activations import ACT2FN

KINDS = ("bert_output", "layer_norm", "module")


def target_kind(module: nn.Module) -> str:
    if isinstance(module, nn.LayerNorm):
        return "layer_norm"
    if all(isinstance(getattr(module, name, None), kind)
           for name, kind in (("dense", nn.Linear), ("dropout", nn.Dropout), ("LayerNorm", nn.LayerNorm))):
        return "bert_output"
    return "module"


def target_widths(module: nn.Module) -> tuple[int, int]:
    """``(input width, output width)`` of a target (the sublayer's hidden width for the first two kinds)."""
    kind = target_kind(module)
    if kind == "layer_norm":
        return module.normalized_shape[0], module.normalized_shape[0]
    if kind == "bert_output":
        return module.dense.out_features, module.dense.out_features
    linears = [m for m in module.modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise ValueError(f"a bottleneck adapter needs to know the width of {type(module).__name__}: it has no "
                         "nn.Linear; target a linear layer, a LayerNorm or a BERT-style output module")
    return linears[0].in_features, linears[-1].out_features


def reset_bottleneck(down: nn.Linear, up: nn.Linear, init_weights: str):
    """AdapterHub's three initialisations."""
    with torch.no_grad():
        if init_weights == "bert":
            for linear in (down, up):
                linear.weight.normal_(0.0, 0.02)
                linear.bias.zero_()
        elif init_weights == "mam_adapter":  # the adapter starts as zero: the model starts as the backbone
            nn.init.kaiming_uniform_(down.weight, a=math.sqrt(5))
            nn.init.zeros_(down.bias)
            nn.init.zeros_(up.weight)
            nn.init.zeros_(up.bias)
        else:  # houlsby
            for linear in (down, up):
                nn.init.trunc_normal_(linear.weight, mean=0.0, std=1e-2, a=-2e-2, b=2e-2)
                nn.init.zeros_(linear.bias)


class BottleneckLayer(nn.Module, BaseTunerLayer):
    """``base_layer`` with named adapters ``x -> dropout(up(act(down(x))) * scaling)``; one active at a time.
    Parameters as PEFT lays them out: ``bn_down.<name>``, ``bn_up.<name>``, ``bn_scaling.<name>`` (if learned).
    ``in_features`` / ``out_features``: the target's widths, as PEFT's layers expose them. The adapter runs in its
    own dtype and gives the input's back (PEFT keeps adapters in float32 on a float16 / bfloat16 model)."""

    adapter_layer_names = ("bn_down", "bn_up", "bn_scaling")
    other_param_names = ("bn_options",)

    def __init__(self, base_layer: nn.Module, adapter_name: str, config, layer_index=None, **kwargs):
        super().__init__()
        self.base_layer = base_layer
        self.kind = target_kind(base_layer)
        self.bn_down, self.bn_up = nn.ModuleDict(), nn.ModuleDict()
        self.bn_scaling = nn.ParameterDict()
        self.bn_options = {}
        self._disable_adapters = False
        self.merged_adapters = []
        self.layer_index = layer_index
        self.in_features, self.out_features = target_widths(base_layer)
        self.update_layer(adapter_name, config)

    def update_layer(self, adapter_name: str, config):
        check_options(self.kind, config, type(self.base_layer).__name__)
        in_width, out_width = target_widths(self.base_layer)
        if config.is_parallel and self.kind == "module" and in_width != out_width:
            raise ValueError(f"a parallel adapter adds adapter(input) to the output of {type(self.base_layer).__name__}, "
                             f"whose widths differ ({in_width} -> {out_width}); target a sublayer that keeps its width")
        factor = config.factor_for(self.layer_index)
        units = int(out_width // factor)
        if units < 1:
            raise ValueError(f"BottleneckConfig.reduction_factor {factor} leaves {out_width} / {factor} < 1 unit in "
                             f"the adapter of {type(self.base_layer).__name__} (width {out_width})")
        self.bn_down[adapter_name] = nn.Linear(in_width if config.is_parallel else out_width, units)
        self.bn_up[adapter_name] = nn.Linear(units, out_width)
        reset_bottleneck(self.bn_down[adapter_name], self.bn_up[adapter_name], config.init_weights)
        if config.scaling == "learned":
            self.bn_scaling[adapter_name] = nn.Parameter(torch.ones(1))
        self.bn_options[adapter_name] = dict(
            original_ln_before=config.original_ln_before, original_ln_after=config.original_ln_after,
            residual_before_ln=config.residual_before_ln, is_parallel=config.is_parallel,
            activation=ACT2FN[config.non_linearity.lower()], dropout=config.dropout,
            scaling=None if config.scaling == "learned" else float(config.scaling))
        self._move_adapter_to_device_of_base_layer(adapter_name)
        self.set_adapter(self.active_adapters)

    def bottleneck(self, name: str, x: torch.Tensor) -> torch.Tensor:
        """Adapter ``name`` on ``x`` ``[..., width]`` (no residual)."""
        options, down = self.bn_options[name], self.bn_down[name]
        up = self.bn_up[name](options["activation"](down(self._cast_input_dtype(x, down.weight.dtype))))
        up = up * (self.bn_scaling[name] if options["scaling"] is None else options["scaling"])
        return nn.functional.dropout(up, options["dropout"], self.training).to(x.dtype)

    def merge(self, safe_merge: bool = False, adapter_names=None):
        raise ValueError("a bottleneck adapter is non-linear (down, activation, up): it cannot be merged into the "
                         "base weights; save the adapter, or keep the PeftModel")

    def unmerge(self):
        pass  # nothing is ever merged

    def _active(self):
        active = [name for name in self.active_adapters if name in self.bn_down]
        if len(active) > 1:
            raise ValueError(f"bottleneck adapters run one at a time; {active} are active: set_adapter(one name)")
        return active[0] if active else None

    def forward(self, x, *args, **kwargs):
        name = None if self.disable_adapters else self._active()
        if name is None:
            return self.base_layer(x, *args, **kwargs)
        options = self.bn_options[name]
        adapter = lambda inputs: self.bottleneck(name, inputs)  # noqa: E731
        if self.kind == "bert_output":
            return self._bert_output(adapter, options, x, *args, **kwargs)
        if self.kind == "layer_norm":
            return self.base_layer(x + adapter(self.base_layer(x)))
        output = self.base_layer(x, *args, **kwargs)
        first = output[0] if isinstance(output, tuple) else output
        adapted = first + adapter(x if options["is_parallel"] else first)
        return (adapted, *output[1:]) if isinstance(output, tuple) else adapted

    def _bert_output(self, adapter, options, hidden_states, input_tensor):
        """AdapterHub's ``bottleneck_layer_forward`` for one adapter (``pre_forward``, the adapter, ``post_forward``)."""
        base = self.base_layer
        hidden = base.dropout(base.dense(hidden_states))
        if options["is_parallel"]:
            out = hidden + adapter(input_tensor)
        else:
            residual = hidden
            adapter_input = hidden
            if options["original_ln_before"]:
                adapter_input = hidden + input_tensor
                if options["residual_before_ln"] == "post_add":
                    residual = adapter_input
                adapter_input = base.LayerNorm(adapter_input)
            if options["residual_before_ln"] is False:
                residual = adapter_input
            out = adapter(adapter_input) + residual
        if options["original_ln_after"]:
            return base.LayerNorm(out + input_tensor)
        return out


def check_options(kind: str, config, target: str):
    """One clear error where a target cannot hold what the config asks."""
    if kind == "layer_norm":
        pfeiffer = dict(original_ln_before=True, residual_before_ln=True, original_ln_after=True, is_parallel=False)
        wrong = {name: getattr(config, name) for name, value in pfeiffer.items() if getattr(config, name) != value}
        if wrong:
            raise ValueError(f"a LayerNorm target ({target}) takes Pfeiffer's adapter only "
                             f"({', '.join(f'{k}={v}' for k, v in pfeiffer.items())}); the config has {wrong}: "
                             f"target the sublayer's output projection instead")
    if kind == "module" and config.original_ln_before and not config.is_parallel:
        raise ValueError(f"BottleneckConfig.original_ln_before=True (Pfeiffer) reads the sublayer's LayerNorm, which "
                         f"{target} does not hold: target the LayerNorm, or a BERT-style output module, or set "
                         f"original_ln_before=False")
