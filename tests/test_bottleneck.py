"""Bottleneck adapters as a PEFT method (issue 22, item 1): presets, the math of each target kind, PEFT's API
(save / load adapter-only, several named adapters, disable, delete, unload), the Trainer, and the clear errors."""

import copy
import json
from pathlib import Path

import pytest
import torch
import transformers
from peft import PeftConfig, PeftModel, get_peft_model
from safetensors import safe_open
from transformers import (AlbertConfig, BertConfig, DistilBertConfig, ElectraConfig, RobertaConfig, Trainer,
                          TrainingArguments)

from hf_plm_ext import BottleneckConfig, BottleneckLayer, MacBertConfig, RevLSHConfig, TransfoXLConfig

from conftest import run_cli

VOCAB = 99
PRESETS = ["pfeiffer", "houlsby", "parallel"]


def tiny_bert(**overrides):
    torch.manual_seed(0)
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                        intermediate_size=64, num_labels=2, **overrides)
    return transformers.BertForSequenceClassification(config).eval()


def ids(seed=0):
    return torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(seed))


def logits(model, inputs=None):
    with torch.no_grad():
        return model(ids() if inputs is None else inputs).logits


def test_the_private_peft_hook_still_works(tmp_path):
    """The one private hook (a ``PeftType`` member added to PEFT's closed enum): when a PEFT release breaks it, this
    fails first, by name."""
    from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING, PEFT_TYPE_TO_TUNER_MAPPING
    from peft.utils import PeftType

    assert PeftType("BOTTLENECK") is PeftType.BOTTLENECK
    assert PEFT_TYPE_TO_CONFIG_MAPPING[PeftType.BOTTLENECK] is BottleneckConfig
    assert PEFT_TYPE_TO_TUNER_MAPPING[PeftType.BOTTLENECK].__name__ == "BottleneckModel"
    BottleneckConfig.from_preset("houlsby", reduction_factor=4).save_pretrained(tmp_path)
    loaded = PeftConfig.from_pretrained(tmp_path)
    assert type(loaded) is BottleneckConfig and loaded.reduction_factor == 4 and loaded.mh_adapter


def test_presets_are_adapterhubs():
    pfeiffer, houlsby, parallel = (BottleneckConfig.from_preset(name) for name in PRESETS)
    assert (pfeiffer.mh_adapter, pfeiffer.output_adapter, pfeiffer.original_ln_before, pfeiffer.non_linearity,
            pfeiffer.reduction_factor) == (False, True, True, "relu", 16)
    assert (houlsby.mh_adapter, houlsby.original_ln_before, houlsby.non_linearity) == (True, False, "swish")
    assert (parallel.is_parallel, parallel.scaling, parallel.reduction_factor, parallel.init_weights) == (
        True, 4.0, 2, "mam_adapter")
    assert BottleneckConfig.from_preset("seq_bn", reduction_factor=8).reduction_factor == 8


def adapterhub_output(module, adapter, hidden_states, input_tensor, config):
    """AdapterHub's bottleneck_layer_forward for one adapter, written out from its source (pre_forward, Adapter,
    post_forward) for the three presets."""
    dense = module.base_layer.dropout(module.base_layer.dense(hidden_states))
    norm = module.base_layer.LayerNorm
    activation = transformers.activations.ACT2FN[config.non_linearity]
    bottleneck = lambda x: module.bn_up[adapter](activation(module.bn_down[adapter](x))) * config.scaling  # noqa: E731
    if config.is_parallel:
        return norm(bottleneck(input_tensor) + dense + input_tensor)
    if config.original_ln_before:
        return norm(bottleneck(norm(dense + input_tensor)) + dense + input_tensor)
    return norm(bottleneck(dense) + dense + input_tensor)


@pytest.mark.parametrize("preset", PRESETS)
def test_a_bert_output_module_computes_adapterhubs_formula(preset):
    config = BottleneckConfig.from_preset(preset, init_weights="bert")  # (mam_adapter would start at zero)
    model = get_peft_model(tiny_bert(), config)
    layer = model.base_model.model.bert.encoder.layer[1].output
    assert isinstance(layer, BottleneckLayer) and layer.kind == "bert_output"
    hidden, residual = torch.randn(2, 5, 64), torch.randn(2, 5, 32)
    with torch.no_grad():
        torch.testing.assert_close(layer(hidden, residual),
                                   adapterhub_output(layer, "default", hidden, residual, config))
    attention_outputs = [module for name, module in model.named_modules()
                         if name.endswith("attention.output") and isinstance(module, BottleneckLayer)]
    assert len(attention_outputs) == (3 if preset == "houlsby" else 0)  # Houlsby: after attention too


@pytest.mark.parametrize("preset", PRESETS)
def test_get_peft_model_trains_only_the_adapters_and_saves_them_alone(preset, tmp_path):
    base = tiny_bert()
    pristine = copy.deepcopy(base)
    model = get_peft_model(base, BottleneckConfig.from_preset(preset, task_type="SEQ_CLS"))
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".bn_" in name or "classifier" in name for name in trainable)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if ".bn_" in name:
                parameter.add_(0.05 * torch.randn_like(parameter))  # away from mam_adapter's zero start
    expected = logits(model)
    model.save_pretrained(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} >= {"adapter_model.safetensors", "adapter_config.json"}
    with safe_open(str(tmp_path / "adapter_model.safetensors"), "pt") as weights:
        names = list(weights.keys())
    assert names and all(".bn_" in name or "classifier" in name for name in names), names
    assert not any(".default." in name for name in names)  # PEFT's layout: the adapter name is not saved
    loaded = PeftModel.from_pretrained(pristine, tmp_path).eval()
    assert torch.equal(logits(loaded), expected)
    assert not torch.allclose(expected, logits(tiny_bert()))


def test_several_named_adapters_switch_disable_and_delete():
    base = tiny_bert()
    reference = logits(base)
    model = get_peft_model(base, BottleneckConfig.from_preset("pfeiffer", task_type="SEQ_CLS"))
    model.add_adapter("other", BottleneckConfig.from_preset("houlsby", task_type="SEQ_CLS"))
    first = logits(model)
    model.set_adapter("other")
    second = logits(model)
    assert not torch.allclose(first, second)
    with model.disable_adapter():
        torch.testing.assert_close(logits(model), reference)
    model.set_adapter("default")
    torch.testing.assert_close(logits(model), first)
    model.delete_adapter("other")
    assert all("other" not in name for name in model.state_dict())
    with pytest.raises(ValueError, match="cannot be merged"):
        model.merge_and_unload()
    torch.testing.assert_close(logits(model.unload()), reference)


def test_the_trainer_moves_the_adapters_and_nothing_of_the_backbone(tmp_path):
    base = tiny_bert()
    backbone_before = {name: p.clone() for name, p in base.bert.named_parameters()}
    model = get_peft_model(base, BottleneckConfig.from_preset("houlsby", task_type="SEQ_CLS"))
    adapters_before = {name: p.clone() for name, p in model.named_parameters() if ".bn_" in name}
    examples = [{"input_ids": ids(seed)[0].tolist(), "labels": seed % 2} for seed in range(16)]
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=4, per_device_train_batch_size=4, learning_rate=1e-2,
                             report_to=[], save_strategy="no", use_cpu=True)
    Trainer(model=model, args=args, train_dataset=examples).train()
    assert all(torch.equal(p, backbone_before[name.split("bert.", 1)[1].replace("base_layer.", "")])
               for name, p in model.named_parameters() if ".bert." in name and ".bn_" not in name)
    assert all(not torch.equal(p, adapters_before[name]) for name, p in model.named_parameters() if ".bn_" in name)


def family_model(model_type):
    """A tiny sequence classifier of each family the target table knows."""
    torch.manual_seed(0)
    small = dict(vocab_size=VOCAB, num_labels=2)
    configs = {
        "roberta": RobertaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                 **small),
        "electra": ElectraConfig(hidden_size=32, embedding_size=32, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=64, **small),
        "distilbert": DistilBertConfig(dim=32, n_layers=2, n_heads=2, hidden_dim=64, **small),
        "albert": AlbertConfig(hidden_size=32, embedding_size=16, num_hidden_layers=2, num_attention_heads=2,
                               intermediate_size=64, **small),
        "macbert": MacBertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                 **small),
        "rev-lsh": RevLSHConfig.from_size("tiny", **small),
        "transfo-xl": TransfoXLConfig(d_model=32, d_embed=32, n_head=2, d_head=16, d_inner=64, n_layer=2, mem_len=0,
                                      adaptive=False, cutoffs=[], pad_token_id=0, **small),
    }
    return transformers.AutoModelForSequenceClassification.from_config(configs[model_type]).eval()


FAMILY_PRESETS = [(model_type, preset) for model_type in ("roberta", "electra", "distilbert", "albert", "macbert",
                                                         "rev-lsh", "transfo-xl") for preset in PRESETS
                  if (model_type, preset) not in {("albert", "parallel"), ("rev-lsh", "pfeiffer")}]


@pytest.mark.parametrize("model_type,preset", FAMILY_PRESETS, ids=[f"{m}-{p}" for m, p in FAMILY_PRESETS])
def test_every_target_preset_places_adapters_that_start_where_the_backbone_is(model_type, preset):
    """With the adapters' up-projections at zero the model is the backbone (whatever the target kind); with
    random weights it is not. Each layer gets its adapters."""
    base = family_model(model_type)
    reference = logits(base)
    model = get_peft_model(base, BottleneckConfig.from_preset(preset, task_type="SEQ_CLS", init_weights="mam_adapter"))
    wrapped = [module for module in model.modules() if isinstance(module, BottleneckLayer)]
    per_layer = 2 if preset == "houlsby" else 1
    assert len(wrapped) == per_layer * (1 if model_type == "albert" else 2)  # ALBERT: one layer, shared
    torch.testing.assert_close(logits(model), reference)
    with torch.no_grad():
        for layer in wrapped:
            layer.bn_up["default"].weight.normal_(0.0, 0.5)
    assert not torch.allclose(logits(model), reference)


@pytest.mark.parametrize("model_type,preset,message", [
    ("albert", "parallel", "albert has no module for a output_parallel adapter"),
    ("rev-lsh", "pfeiffer", "rev-lsh has no module for a output_ln adapter"),
])
def test_a_preset_a_family_cannot_hold_is_refused_by_name(model_type, preset, message):
    with pytest.raises(ValueError, match=message):
        get_peft_model(family_model(model_type), BottleneckConfig.from_preset(preset, task_type="SEQ_CLS"))


def test_pfeiffer_in_a_layer_norm_is_adapterhubs_formula():
    """DistilBERT's Pfeiffer adapter sits in the LayerNorm that ends the feed-forward block:
    LayerNorm(h + r + A(LayerNorm(h + r))), AdapterHub's pre_forward / post_forward with the sum ``s = h + r``."""
    model = get_peft_model(family_model("distilbert"), BottleneckConfig.from_preset("pfeiffer"))
    layer = model.base_model.model.distilbert.transformer.layer[0].output_layer_norm
    assert layer.kind == "layer_norm"
    summed, norm = torch.randn(2, 5, 32), layer.base_layer
    with torch.no_grad():
        torch.testing.assert_close(layer(summed), norm(summed + layer.bn_up["default"](torch.relu(
            layer.bn_down["default"](norm(summed))))))


def test_leave_out_and_a_per_layer_reduction_factor():
    model = get_peft_model(tiny_bert(), BottleneckConfig.from_preset(
        "pfeiffer", leave_out=[0], reduction_factor={"2": 4, "default": 16}))
    layers = model.base_model.model.bert.encoder.layer
    assert not isinstance(layers[0].output, BottleneckLayer)
    assert layers[1].output.bn_down["default"].out_features == 32 // 16
    assert layers[2].output.bn_down["default"].out_features == 32 // 4


@pytest.mark.parametrize("overrides,message", [
    (dict(reduction_factor=64), "leaves 32 / 64 < 1 unit"),
    (dict(target_modules=["no_such_module"]), "no_such_module"),
    (dict(target_modules=r".*\.output\.LayerNorm", original_ln_before=False), "takes Pfeiffer's adapter only"),
    (dict(target_modules=r".*\.output\.dense"), "original_ln_before=True \\(Pfeiffer\\) reads the sublayer's LayerNorm"),
    (dict(target_modules=r".*\.intermediate\.dense", original_ln_before=False, is_parallel=True), "widths differ"),
])
def test_what_a_target_cannot_hold_is_one_clear_error(overrides, message):
    with pytest.raises(ValueError, match=message):
        get_peft_model(tiny_bert(), BottleneckConfig.from_preset("pfeiffer", **overrides))


@pytest.mark.parametrize("overrides,field", [
    (dict(reduction_factor=0), "reduction_factor"),
    (dict(reduction_factor={"1": 4}), "reduction_factor"),
    (dict(init_weights="xavier"), "init_weights"),
    (dict(residual_before_ln="yes"), "residual_before_ln"),
    (dict(scaling="channel"), "scaling"),
    (dict(non_linearity="nope"), "non_linearity"),
    (dict(mh_adapter=False, output_adapter=False), "mh_adapter and output_adapter"),
])
def test_a_bad_config_names_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        BottleneckConfig.from_preset("pfeiffer", **overrides)
    with pytest.raises(ValueError, match="preset must be one of"):
        BottleneckConfig.from_preset("compacter")


ADAPTERHUB = Path(__file__).parent / "fixtures" / "adapterhub"


@pytest.mark.parametrize("name", ["pfeiffer", "houlsby"])
def test_an_adapterhub_adapter_converts_with_the_same_logits(name, tmp_path, capsys):
    """Fixtures made by AdapterHub 1.3 itself (``fixtures/adapterhub/make_fixtures.py``): the converted adapter and
    head on the same backbone give AdapterHub's logits, padding included."""
    from safetensors.torch import load_file

    code, out, err = run_cli(["convert", "adapterhub", ADAPTERHUB / name, tmp_path / "converted"], capsys)
    assert code == 0, err
    config = PeftConfig.from_pretrained(tmp_path / "converted")
    assert type(config) is BottleneckConfig and config.mh_adapter == (name == "houlsby")
    expected = load_file(ADAPTERHUB / "expected.safetensors")
    base = transformers.AutoModelForSequenceClassification.from_pretrained(ADAPTERHUB / "backbone", num_labels=2)
    model = PeftModel.from_pretrained(base.eval(), tmp_path / "converted").eval()
    with torch.no_grad():
        converted = model(expected["input_ids"], attention_mask=expected["attention_mask"]).logits
    torch.testing.assert_close(converted, expected[f"logits_{name}"], atol=1e-6, rtol=1e-5)


def test_a_converted_adapter_on_a_backbone_of_another_width_is_refused_by_name(tmp_path):
    from hf_plm_ext.convert import convert_adapterhub

    convert_adapterhub(ADAPTERHUB / "pfeiffer", tmp_path / "converted")
    wider = transformers.BertForSequenceClassification(BertConfig(vocab_size=VOCAB, hidden_size=48, num_hidden_layers=2,
                                                                  num_attention_heads=2, intermediate_size=64))
    with pytest.raises(ValueError, match=r"encoder.layer.0.output's bn_down.* is \[8\] in the adapter, \[12\] here"):
        PeftModel.from_pretrained(wider, tmp_path / "converted")


def adapterhub_copy(tmp_path, **config_changes):
    import shutil

    folder = tmp_path / "adapter"
    shutil.copytree(ADAPTERHUB / "pfeiffer", folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    if "model_type" in config_changes:
        config["model_type"] = config_changes.pop("model_type")
    config["config"].update(config_changes)
    (folder / "adapter_config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("changes,remove,message", [
    (dict(ln_after=True), None, "ln_after=True, which this package's bottleneck adapters do not have"),
    (dict(use_gating=True), None, "use_gating"),
    (dict(scaling="channel"), None, "scaling='channel' is not converted"),
    ({}, "adapter.safetensors", "no adapter.safetensors in"),
    ({}, "adapter_config.json", "AdapterHub adapter config not found"),
    ({"model_type": "roberta"}, None, "a 'roberta' model's head is not converted"),
])
def test_what_cannot_convert_is_one_clear_error_and_nothing_is_written(changes, remove, message, tmp_path, capsys):
    folder = adapterhub_copy(tmp_path, **changes)
    if remove:
        (folder / remove).unlink()
    code, _, err = run_cli(["convert", "adapterhub", folder, tmp_path / "out"], capsys)
    assert code == 2 and message in err and err.count("error:") == 1, err
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- PEFT's own checks (its custom-model tests'), reproduced


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin0, self.relu, self.lin1 = torch.nn.Linear(10, 20), torch.nn.ReLU(), torch.nn.Linear(20, 20)
        self.head = torch.nn.Linear(20, 2)

    def forward(self, x):
        return self.head(self.lin1(self.relu(self.lin0(x))))


class WithLayerNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin0, self.layernorm, self.head = torch.nn.Linear(10, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 2)

    def forward(self, x):
        return self.head(self.layernorm(self.lin0(x)))


class WithMultiheadAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mha, self.head = torch.nn.MultiheadAttention(16, 2, batch_first=True), torch.nn.Linear(16, 2)

    def forward(self, x):
        return self.head(self.mha(x, x, x)[0])


PLAIN = dict(original_ln_before=False, original_ln_after=False)  # y + adapter(y) on a module without a LayerNorm
CUSTOM = {  # model, its input, the targets, the config (a LayerNorm takes Pfeiffer's adapter only)
    "mlp": (MLP, (4, 10), ["lin0", "lin1"], dict(scaling=2.0, **PLAIN)),
    "mlp-modules-to-save": (MLP, (4, 10), ["lin1"], dict(modules_to_save=["head"], **PLAIN)),
    "layernorm": (WithLayerNorm, (4, 10), ["layernorm"], dict(original_ln_before=True, original_ln_after=True,
                                                               residual_before_ln=True)),
    "mha": (WithMultiheadAttention, (2, 5, 16), ["mha"], dict(reduction_factor=4, **PLAIN)),
}


def custom(case):
    model_class, shape, targets, fields = CUSTOM[case]
    torch.manual_seed(0)
    config = BottleneckConfig(target_modules=targets, init_weights="bert", **fields)  # a non-zero adapter from the start
    return model_class().eval(), torch.randn(*shape, generator=torch.Generator().manual_seed(1)), config


@pytest.mark.parametrize("case", list(CUSTOM))
def test_unload_gives_back_the_original_module_tree_and_outputs(case):
    model, x, config = custom(case)
    with torch.no_grad():
        expected = model(x)
    tree = [(name, type(module)) for name, module in model.named_modules()]
    peft_model = get_peft_model(copy.deepcopy(model), config)
    with torch.no_grad():
        assert not torch.allclose(peft_model(x), expected)  # the adapter is in the way
    unloaded = peft_model.unload()
    assert [(name, type(module)) for name, module in unloaded.named_modules()] == tree
    with torch.no_grad():
        torch.testing.assert_close(unloaded(x), expected)
    assert not hasattr(unloaded, "peft_config")


def test_unload_of_a_feature_extraction_model_gives_back_bert():
    torch.manual_seed(0)
    base = transformers.BertModel(BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                             num_attention_heads=2, intermediate_size=64)).eval()
    with torch.no_grad():
        expected = base(ids()).last_hidden_state
    tree = [(name, type(module)) for name, module in base.named_modules()]
    for preset in PRESETS:
        model = get_peft_model(copy.deepcopy(base), BottleneckConfig.from_preset(
            preset, task_type="FEATURE_EXTRACTION", init_weights="bert"))
        unloaded = model.unload()
        assert [(name, type(module)) for name, module in unloaded.named_modules()] == tree, preset
        with torch.no_grad():
            torch.testing.assert_close(unloaded(ids()).last_hidden_state, expected)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", list(CUSTOM))
def test_a_model_in_half_precision_runs_its_adapters(case, dtype):
    """PEFT keeps the adapters in float32 on a float16 / bfloat16 model (autocast_adapter_dtype): the adapter takes
    the input in its own dtype and gives the input's back, as LoRA's layers do."""
    model, x, config = custom(case)
    peft_model = get_peft_model(model.to(dtype), config)
    assert {p.dtype for n, p in peft_model.named_parameters() if ".bn_" in n} == {torch.float32}
    with torch.no_grad():
        out = peft_model(x.to(dtype))
    assert out.dtype == dtype and torch.isfinite(out).all()
    with torch.no_grad(), peft_model.disable_adapter():
        assert not torch.allclose(peft_model(x.to(dtype)).float(), out.float())


def test_wrapped_layers_expose_in_and_out_features():
    model, _, config = custom("mlp")
    peft_model = get_peft_model(model, config)
    layers = {name: module for name, module in peft_model.named_modules() if isinstance(module, BottleneckLayer)}
    assert {name.rsplit(".", 1)[-1]: (m.in_features, m.out_features) for name, m in layers.items()} == \
        {"lin0": (10, 20), "lin1": (20, 20)}
    with pytest.raises(ValueError, match="cannot be merged"):
        peft_model.merge_adapter()


def test_a_family_declares_where_its_bottleneck_adapters_go_and_the_method_reads_it(monkeypatch):
    """Each family folder's BOTTLENECK_TARGETS (a table of slots, or the model type whose table its layers share) is
    what the presets use: a new family declares its own and needs no edit in adapters/."""
    import types

    from hf_plm_ext.adapters.bottleneck import targets
    from hf_plm_ext.registry import family_folders

    declared = {folder.AUTO_CLASSES["AutoConfig"].model_type: folder.BOTTLENECK_TARGETS
                for folder in family_folders() if hasattr(folder, "BOTTLENECK_TARGETS")}
    assert set(declared) >= {"macbert", "electra-rtd", "transfo-xl", "rev-lsh"}
    for model_type, table in declared.items():
        expected = targets.TRANSFORMERS_TARGETS[table] if isinstance(table, str) else table
        assert targets.targets()[model_type] == expected
    toy_config = type("ToyConfig", (), {"model_type": "toy"})
    toy = types.SimpleNamespace(AUTO_CLASSES={"AutoConfig": toy_config},
                                BOTTLENECK_TARGETS=dict(layer=r"(?:.*\.)?blocks\.(\d+)", output="mlp"))
    monkeypatch.setattr(targets, "family_folders", lambda: [*family_folders(), toy])
    config = BottleneckConfig.from_preset("houlsby")
    config.mh_adapter = False
    assert targets.target_regex("toy", config) == r"(?:.*\.)?blocks\.(\d+)\.(?:mlp)"
    assert targets.layer_index("model.blocks.3.mlp", "toy") == 3
