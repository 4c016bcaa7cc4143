"""The family tester: what transformers users do with any model, on every model class of every family.

Table-driven (``tests/family_common.py``), in the manner of transformers' ``ModelTesterMixin`` and PEFT's
parametrised tests. A check that a family cannot pass is a defect to fix, not a skip.
"""

import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import transformers
from huggingface_hub.errors import StrictDataclassError
from transformers import AutoConfig

from hf_plm_ext import FAMILIES
from hf_plm_ext.registry import auto_class

from family_common import VOCAB, CASE_IDS, CASES, TINY_CONFIGS, first_output, input_ids, model_classes, run

from conftest import fresh_python


def test_every_family_has_a_tiny_config():
    """The tester's table covers the registry's: a family without a row here would be tested by nothing."""
    covered = {type(row()) for row in TINY_CONFIGS.values()}
    assert [config.model_type for config in FAMILIES if config not in covered] == []


def build(variant, model_class, seed=0, **overrides):
    torch.manual_seed(seed)
    return model_class(TINY_CONFIGS[variant](**overrides)).eval()


def shared_parameter_groups(model) -> list[list[str]]:
    """Names of parameters that are one tensor (tied weights), grouped."""
    groups = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        groups.setdefault(parameter.data_ptr(), []).append(name)
    return sorted(sorted(names) for names in groups.values() if len(names) > 1)


@pytest.mark.parametrize("variant,auto_name,model_class", CASES, ids=CASE_IDS)
def test_the_auto_class_builds_the_registered_class(variant, auto_name, model_class):
    config = TINY_CONFIGS[variant]()
    assert type(AutoConfig.for_model(config.model_type)) is type(config)
    assert type(auto_class(auto_name).from_config(config)) is model_class
    assert model_class._auto_class == auto_name


@pytest.mark.parametrize("variant,auto_name,model_class", CASES, ids=CASE_IDS)
def test_save_and_load_give_the_same_outputs_and_keep_tied_weights_tied(variant, auto_name, model_class, tmp_path):
    model = build(variant, model_class)
    ids = input_ids()
    with torch.no_grad():
        expected = first_output(run(model, ids))
    model.save_pretrained(tmp_path)
    assert not [p.name for p in tmp_path.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".pkl")]
    from safetensors import safe_open

    with safe_open(str(tmp_path / "model.safetensors"), "pt") as weights:
        left_out = set(model.state_dict()) - set(weights.keys())
    # what save leaves out is exactly what the model reports as tied, under the same names (load re-ties those)
    assert left_out == set(model.get_expanded_tied_weights_keys(all_submodels=True))
    loaded, info = auto_class(auto_name).from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    loaded = loaded.eval()
    assert type(loaded) is model_class
    with torch.no_grad():
        assert torch.equal(first_output(run(loaded, ids)), expected)
    assert shared_parameter_groups(loaded) == shared_parameter_groups(model)


@pytest.mark.parametrize("variant,auto_name,model_class", CASES, ids=CASE_IDS)
def test_return_dict_false_returns_a_tuple(variant, auto_name, model_class):
    model = build(variant, model_class)
    ids = input_ids()
    with torch.no_grad():
        as_tuple = run(model, ids, return_dict=False)
        as_output = run(model, ids)
    assert type(as_tuple) is tuple
    assert torch.equal(first_output(as_tuple), first_output(as_output))
    assert len(as_tuple) == len(as_output.to_tuple())
    model.config.return_dict = False  # the config's setting, as transformers reads it
    with torch.no_grad():
        assert torch.equal(first_output(run(model, ids)), first_output(as_output))
        assert type(run(model, ids)) is tuple


@pytest.mark.parametrize("variant,auto_name,model_class", CASES, ids=CASE_IDS)
def test_hidden_states_and_attentions_are_returned_when_asked(variant, auto_name, model_class):
    """As transformers' common tests read them: asked in the call or in the config, counted and shaped by
    ``config.get_text_config()`` (RTD: the discriminator's; K-Adapter: the backbone's), last in a tuple."""
    torch.manual_seed(0)
    model = model_class._from_config(TINY_CONFIGS[variant](), attn_implementation="eager").eval()
    text = model.config.get_text_config()
    ids = input_ids()
    with torch.no_grad():
        outputs = run(model, ids, output_hidden_states=True, output_attentions=True)
        plain = run(model, ids)
        model.config.output_hidden_states = model.config.output_attentions = True
        by_config = run(model, ids)
        as_tuple = run(model, ids, return_dict=False)
    assert plain.get("hidden_states") is None and plain.get("attentions") is None
    for result in (outputs, by_config):
        hidden_states, attentions = result.get("hidden_states"), result.get("attentions")
        assert hidden_states is not None and len(hidden_states) == text.num_hidden_layers + 1
        assert all(h.shape[0] == 2 and h.shape[-1] == TINY_CONFIGS[variant].hidden_state_width(model.config) for h in hidden_states)
        assert attentions is not None and len(attentions) == text.num_hidden_layers
        assert all(a.shape[0] == 2 and a.shape[1] == text.num_attention_heads for a in attentions)
    assert len(as_tuple) == len(by_config.to_tuple())
    assert all(torch.equal(x, y) for x, y in zip(as_tuple[-1], by_config.attentions))  # the attentions last


@pytest.mark.parametrize("variant,auto_name,model_class", CASES, ids=CASE_IDS)
def test_hidden_states_of_chosen_layers(variant, auto_name, model_class):
    """transformers' ``output_hidden_states=index or indices`` (negative ones from the end): every position kept,
    the ones not asked for None."""
    model = build(variant, model_class)
    ids = input_ids()
    with torch.no_grad():
        every = run(model, ids, output_hidden_states=True).hidden_states
        chosen = run(model, ids, output_hidden_states=[0, -1]).hidden_states
        one = run(model, ids, output_hidden_states=1).hidden_states
    assert len(chosen) == len(one) == len(every)
    assert [h is None for h in chosen] == [not (i == 0 or i == len(every) - 1) for i in range(len(every))]
    assert [h is None for h in one] == [i != 1 for i in range(len(every))]
    assert torch.equal(chosen[0], every[0]) and torch.equal(chosen[-1], every[-1]) and torch.equal(one[1], every[1])


SEQUENCE_CLASSIFIERS = [(variant, model_class) for variant, _, model_class in CASES
                        if model_class.__name__.endswith("ForSequenceClassification")]


@pytest.mark.parametrize("variant,model_class", SEQUENCE_CLASSIFIERS,
                         ids=[f"{v}-{m.__name__}" for v, m in SEQUENCE_CLASSIFIERS])
@pytest.mark.parametrize("problem_type,num_labels,labels,settles_on", [
    ("regression", 1, "real", "regression"),
    ("single_label_classification", 3, "classes", "single_label_classification"),
    ("multi_label_classification", 3, "multi_hot", "multi_label_classification"),
    (None, 1, "real", "regression"),
    (None, 3, "classes", "single_label_classification"),
    (None, 3, "multi_hot", "multi_label_classification"),
])
def test_sequence_classification_follows_problem_type(variant, model_class, problem_type, num_labels, labels,
                                                      settles_on):
    """transformers' rule: the config's problem_type, else regression for one label, single-label for integer
    labels and multi-label for float labels (then kept in the config)."""
    model = build(variant, model_class, num_labels=num_labels, problem_type=problem_type)
    generator = torch.Generator().manual_seed(1)
    labels = {"real": torch.randn(2, generator=generator), "classes": torch.tensor([2, 0]),
              "multi_hot": torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])}[labels]
    outputs = run(model, input_ids(), labels=labels)
    logits = outputs.logits
    expected = {"regression": lambda: F.mse_loss(logits.squeeze(-1), labels),
                "single_label_classification": lambda: F.cross_entropy(logits, labels),
                "multi_label_classification": lambda: F.binary_cross_entropy_with_logits(logits, labels)}[settles_on]()
    torch.testing.assert_close(outputs.loss, expected)
    assert model.config.problem_type == settles_on


@pytest.mark.parametrize("variant,model_class", SEQUENCE_CLASSIFIERS,
                         ids=[f"{v}-{m.__name__}" for v, m in SEQUENCE_CLASSIFIERS])
def test_loading_with_mismatched_shapes_needs_ignore_mismatched_sizes(variant, model_class, tmp_path):
    """transformers' check: a head of another size, or the encoder with another vocabulary, loads only with
    ``ignore_mismatched_sizes=True`` (the mismatched weights start fresh)."""
    saved = build(variant, model_class, num_labels=2)
    saved.save_pretrained(tmp_path)
    with pytest.raises((RuntimeError, ValueError)):
        model_class.from_pretrained(tmp_path, num_labels=5)
    resized = model_class.from_pretrained(tmp_path, num_labels=5, ignore_mismatched_sizes=True).eval()
    with torch.no_grad():
        assert run(resized, input_ids()).logits.shape == (2, 5)
    # only the head's last layer starts fresh: every weight of the same shape is the saved one
    kept = {name: weight for name, weight in saved.state_dict().items()
            if weight.shape == resized.state_dict()[name].shape}
    fresh = {name.rsplit(".", 1)[0] for name in saved.state_dict() if name not in kept}
    assert len(fresh) == 1, fresh  # one module: the head's output layer
    assert [name for name, weight in kept.items() if not torch.equal(resized.state_dict()[name], weight)] == []
    encoder = model_classes(TINY_CONFIGS[variant])["AutoModel"]
    try:
        TINY_CONFIGS[variant](vocab_size=10)
    except (ValueError, StrictDataclassError) as refusal:  # (transfo-xl-adaptive: its cutoffs [30, 60] do not fit)
        with pytest.raises((ValueError, StrictDataclassError), match=re.escape(str(refusal).splitlines()[0])):
            encoder.from_pretrained(tmp_path, vocab_size=10, ignore_mismatched_sizes=True)
        return
    small = encoder.from_pretrained(tmp_path, vocab_size=10, ignore_mismatched_sizes=True).eval()
    assert small.config.get_text_config().vocab_size == small.get_input_embeddings().num_embeddings == 10
    with torch.no_grad():
        run(small, input_ids() % 10)


@pytest.mark.parametrize("variant,auto_name,model_class", CASES, ids=CASE_IDS)
def test_eager_and_sdpa_attention_agree(variant, auto_name, model_class):
    config = TINY_CONFIGS[variant]()
    torch.manual_seed(0)
    sdpa = model_class._from_config(config, attn_implementation="sdpa").eval()
    eager = model_class._from_config(config, attn_implementation="eager").eval()
    eager.load_state_dict(sdpa.state_dict())
    ids = input_ids()
    with torch.no_grad():
        torch.testing.assert_close(first_output(run(eager, ids)), first_output(run(sdpa, ids)), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("variant,auto_name,model_class", CASES, ids=CASE_IDS)
def test_loads_in_bfloat16_and_runs(variant, auto_name, model_class, tmp_path):
    build(variant, model_class).save_pretrained(tmp_path)
    model = auto_class(auto_name).from_pretrained(tmp_path, dtype=torch.bfloat16).eval()
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    full_precision = auto_class(auto_name).from_pretrained(tmp_path).eval()
    with torch.no_grad():
        output = first_output(run(model, input_ids())).float()
        expected = first_output(run(full_precision, input_ids()))
        draws_in_forward = not torch.equal(first_output(run(full_precision, input_ids(), seed=1)), expected)
    assert torch.isfinite(output).all()
    if not draws_in_forward:  # (ELECTRA's RTD model samples replacements: other logits, other samples)
        assert (output - expected).norm() <= 0.05 * expected.norm()  # bfloat16's 8 bits of mantissa, two layers


def expected_init_std(config, module) -> float:
    if getattr(module, "is_knowledge_adapter", False):  # K-Adapter: the adapters' own near-identity init
        return config.adapter_initializer_range
    if hasattr(config, "backbone_config"):  # K-Adapter's fusion and heads: as the backbone's layers
        return config.backbone_config.initializer_range
    for name in ("initializer_range", "init_std"):
        if hasattr(config, name):
            return getattr(config, name)
    return config.discriminator_config.initializer_range


@pytest.mark.parametrize("variant,auto_name,model_class", CASES, ids=CASE_IDS)
def test_linear_layers_start_with_the_documented_std(variant, auto_name, model_class):
    model = build(variant, model_class)
    # what the family trains and so initialises (a frozen backbone, a sub-model, initialises itself)
    by_std = {}
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module.weight.requires_grad:
            by_std.setdefault(expected_init_std(model.config, module), []).append(module.weight.detach().flatten())
    for std, weights in by_std.items():
        weights = torch.cat(weights)
        if weights.numel() < 256:
            continue
        assert abs(weights.std().item() - std) < 0.1 * std, (std, weights.std().item())
        assert abs(weights.mean().item()) < 0.002


REMOTE_ROUND_TRIP = """
import json, sys, torch, transformers
try:
    import hf_plm_ext
except ImportError:
    pass
else:
    raise SystemExit("hf_plm_ext is importable here")
folder, cases, ids = sys.argv[1], json.loads(sys.argv[2]), torch.tensor(json.loads(sys.argv[3]))
out = {}
for auto_name, subfolder in cases:
    path = f"{folder}/{subfolder}"
    if hasattr(transformers, auto_name):
        model = getattr(transformers, auto_name).from_pretrained(path, trust_remote_code=True).eval()
    else:  # an Auto class of hf-plm-ext's own: the checkpoint's auto_map names the class
        from transformers.dynamic_module_utils import get_class_from_dynamic_module
        class_ref = transformers.AutoConfig.from_pretrained(path, trust_remote_code=True).auto_map[auto_name]
        model = get_class_from_dynamic_module(class_ref, path).from_pretrained(path).eval()
    assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
    torch.manual_seed(0)
    with torch.no_grad():
        outputs = model(input_ids=ids)
        if outputs.get("mems") is not None:  # a second segment with the first one's memory
            outputs = model(input_ids=ids, mems=outputs.mems)
    first = next(v for v in outputs.to_tuple() if isinstance(v, torch.Tensor) and v.dim() > 0)
    out[subfolder] = [type(model).__name__, first.tolist()]
print("RESULT " + json.dumps(out))
"""


@pytest.mark.parametrize("variant", list(TINY_CONFIGS))
def test_every_class_loads_with_remote_code_where_the_package_cannot_be_imported(variant, tmp_path):
    ids = input_ids()
    expected, cases = {}, []
    for auto_name, model_class in model_classes(TINY_CONFIGS[variant]).items():
        model = build(variant, model_class)
        model.save_pretrained(tmp_path / model_class.__name__)
        with torch.no_grad():
            outputs = run(model, ids)
            if outputs.get("mems") is not None:
                outputs = model(input_ids=ids, mems=outputs.mems)
            expected[model_class.__name__] = first_output(outputs)
        cases.append((auto_name, model_class.__name__))
    proc = fresh_python(REMOTE_ROUND_TRIP, tmp_path, json.dumps(cases), json.dumps(ids.tolist()), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    for name, tensor in expected.items():
        assert result[name][0] == name
        assert torch.equal(torch.tensor(result[name][1]), tensor), name


@pytest.mark.parametrize("variant,auto_name,model_class", CASES, ids=CASE_IDS)
def test_resized_embeddings_stay_tied_and_survive_save_and_load(variant, auto_name, model_class, tmp_path):
    model = build(variant, model_class)
    tied = shared_parameter_groups(model)
    model.resize_token_embeddings(VOCAB - 15)  # transformers' generic check: smaller, then larger
    assert model.config.get_text_config().vocab_size == model.get_input_embeddings().num_embeddings == VOCAB - 15
    with torch.no_grad():
        run(model, input_ids().clamp(max=VOCAB - 16))
    model.resize_token_embeddings(VOCAB + 5)
    assert model.config.get_text_config().vocab_size == model.get_input_embeddings().num_embeddings == VOCAB + 5
    output_embeddings = model.get_output_embeddings()
    if output_embeddings is not None and hasattr(output_embeddings, "weight"):
        assert output_embeddings.weight.shape[0] == VOCAB + 5
    assert shared_parameter_groups(model) == tied
    ids = torch.cat([input_ids(), torch.tensor([[VOCAB + 1, VOCAB + 4]] * 2)], dim=1)  # two of the new tokens
    with torch.no_grad():
        expected = first_output(run(model, ids))
    model.save_pretrained(tmp_path)
    loaded = auto_class(auto_name).from_pretrained(tmp_path).eval()
    assert loaded.get_input_embeddings().num_embeddings == VOCAB + 5
    with torch.no_grad():  # the resized table is laid out anew: the same numbers to rounding (seen: 2e-9)
        torch.testing.assert_close(first_output(run(loaded, ids)), expected, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("variant,auto_name,model_class", CASES, ids=CASE_IDS)
def test_resize_with_untied_weights_resizes_the_output_embeddings_too(variant, auto_name, model_class):
    config = TINY_CONFIGS[variant]()
    config.tie_word_embeddings = False  # transformers' untied check: the head is a matrix of its own
    torch.manual_seed(0)
    model = model_class(config).eval()
    for size in (VOCAB + 10, VOCAB - 15):
        model.resize_token_embeddings(size)
        output_embeddings = model.get_output_embeddings()
        if output_embeddings is not None and hasattr(output_embeddings, "weight"):
            assert output_embeddings.weight.shape[0] == size
        assert model.config.get_text_config().vocab_size == size
        with torch.no_grad():
            run(model, input_ids().clamp(max=size - 1))


def loss_of(model, ids):
    """The model's own loss where its head has one for plain token ids, else a function of its first output."""
    name = type(model).__name__
    labelled = name.endswith(("ForMaskedLM", "LMHeadModel", "ForSpellingCorrection"))
    outputs = run(model, ids, seed=1, **({"labels": ids} if labelled else {}))
    return outputs.loss if outputs.get("loss") is not None else first_output(outputs).float().pow(2).mean()


@pytest.mark.parametrize("variant,auto_name,model_class", CASES, ids=CASE_IDS)
def test_gradient_checkpointing_recomputes_the_layers_and_gives_the_same_gradients(variant, auto_name, model_class):
    model = build(variant, model_class).train()  # the tiny configs' dropout is replayed with the same RNG state
    ids = input_ids()
    layer_calls = []
    layers = [m for m in model.modules() if isinstance(m, transformers.modeling_layers.GradientCheckpointingLayer)
              and any(p.requires_grad for p in m.parameters())]  # (a frozen layer has nothing to recompute)
    assert layers
    # a hook inside the layer (transformers checkpoints `forward`, so the layer's own hooks run once)
    next(layers[0].children()).register_forward_hook(lambda *_: layer_calls.append(1))

    def gradients():
        model.zero_grad()
        loss_of(model, ids).backward()
        return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    plain = gradients()
    plain_calls, layer_calls[:] = len(layer_calls), []
    if getattr(model.config, "reversible", False):  # rev-lsh: the reversible stack recomputes on its own
        with torch.no_grad():
            loss_of(model, ids)
        assert plain_calls == 2 * len(layer_calls)  # forward, and again in backward
        with pytest.raises(ValueError, match="reversible layers already recompute"):
            model.gradient_checkpointing_enable()
        return
    model.gradient_checkpointing_enable()
    checkpointed = gradients()
    assert len(layer_calls) == 2 * plain_calls  # forward, and again in backward
    assert plain.keys() == checkpointed.keys()
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], msg=name)


MAIN_CLASSES = [(variant, model_class) for variant, factory in TINY_CONFIGS.items()
                for auto_name, model_class in model_classes(factory).items()
                if auto_name in ("AutoModelForCausalLM", "AutoModelForMaskedLM")
                or model_classes(factory) == {auto_name: model_class}]


@pytest.mark.parametrize("variant,model_class", MAIN_CLASSES, ids=[f"{v}-{m.__name__}" for v, m in MAIN_CLASSES])
def test_torch_compile_and_torch_export_run_one_forward(variant, model_class):
    model = build(variant, model_class)
    ids = input_ids()
    with torch.no_grad():
        expected = first_output(run(model, ids))
        compiled = first_output(run(torch.compile(model), ids))
    exported = torch.export.export(model, (), {"input_ids": ids}).module()
    with torch.no_grad():
        from_export = first_output(run(exported, ids))
    with torch.no_grad():
        draws_in_forward = not torch.equal(first_output(run(model, ids, seed=1)), expected)
    if draws_in_forward:
        # (ELECTRA's RTD model masks and samples its own inputs): compiled code draws other random numbers, so only
        # the shapes agree
        assert compiled.shape == expected.shape and torch.isfinite(compiled).all()
    else:
        torch.testing.assert_close(compiled, expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(from_export, expected, atol=1e-5, rtol=1e-4)


GENERATORS = [(variant, model_class) for variant, _, model_class in CASES
              if issubclass(model_class, transformers.GenerationMixin)]


@pytest.mark.parametrize("variant,model_class", GENERATORS, ids=[f"{v}-{m.__name__}" for v, m in GENERATORS])
def test_beam_search_with_the_cache_equals_recomputing_and_a_pad_token_in_the_prompt_is_a_token(variant,
                                                                                                   model_class):
    model = build(variant, model_class)
    prompt = input_ids(length=4)
    cached = model.generate(prompt, max_new_tokens=6, num_beams=3, do_sample=False)
    recomputed = model.generate(prompt, max_new_tokens=6, num_beams=3, do_sample=False, use_cache=False)
    assert torch.equal(cached, recomputed)
    pad = int(prompt[0, 1])
    model.generation_config.pad_token_id = pad
    with_pad = model.generate(prompt, max_new_tokens=6, num_beams=3, do_sample=False)
    if type(model)._prepare_attention_mask_for_generation is transformers.GenerationMixin._prepare_attention_mask_for_generation:
        # a model with a padding mask: transformers masks the prompt's pad tokens, as an explicit mask would
        mask = (prompt != pad).long()
        assert torch.equal(with_pad, model.generate(prompt, attention_mask=mask, max_new_tokens=6, num_beams=3,
                                                    do_sample=False))
    else:  # Transformer-XL's pad is its eos: a pad token in a prompt is a token unless a mask says otherwise
        assert torch.equal(with_pad, cached)


@pytest.mark.parametrize("num_beams", [1, 2])
@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("variant,model_class", GENERATORS, ids=[f"{v}-{m.__name__}" for v, m in GENERATORS])
def test_generate_returns_per_step_outputs_and_hands_on_keyword_arguments(variant, model_class, use_cache, num_beams):
    """``GenerateDecoderOnlyOutput``'s layout, as transformers' generation tests read it: one entry per new token,
    each a tuple over the layers, batch (times beams) first; with a cache a step sees only its new token."""
    model = model_class._from_config(TINY_CONFIGS[variant](), attn_implementation="eager").eval()
    text = model.config.get_text_config()
    prompt, new = input_ids(length=5), 3
    assert TINY_CONFIGS[variant].generate_argument, f"{variant} generates: its row names a forward argument"
    name, value = TINY_CONFIGS[variant].generate_argument
    seen = []
    hook = model.register_forward_pre_hook(lambda module, args, kwargs: seen.append(kwargs.get(name)),
                                           with_kwargs=True)
    out = model.generate(prompt, max_new_tokens=new, min_new_tokens=new, do_sample=False, num_beams=num_beams,
                         use_cache=use_cache, return_dict_in_generate=True, output_scores=True,
                         output_hidden_states=True, output_attentions=True, pad_token_id=0, **{name: value})
    hook.remove()
    assert seen and all(v == value for v in seen), seen  # every step's forward got it
    rows = prompt.shape[0] * num_beams
    assert len(out.scores) == len(out.hidden_states) == len(out.attentions) == new
    for step, (hidden_states, attentions) in enumerate(zip(out.hidden_states, out.attentions)):
        length = prompt.shape[1] if step == 0 or not use_cache else 1
        if not use_cache:
            length = prompt.shape[1] + step
        assert len(hidden_states) == text.num_hidden_layers + 1 and len(attentions) == text.num_hidden_layers
        assert all(h.shape[:2] == (rows, length) for h in hidden_states), (step, [h.shape for h in hidden_states])
        assert all(a is not None and a.shape[:2] == (rows, text.num_attention_heads) for a in attentions), step


def declared_float_fields(variant) -> list[str]:
    """The float fields the family's config declares itself (not inherited from transformers' configs)."""
    config_class = type(TINY_CONFIGS[variant]())
    declared = {name for cls in config_class.__mro__ if not cls.__module__.startswith("transformers")
                for name in getattr(cls, "__annotations__", {})}
    return [field.name for field in dataclasses.fields(config_class)
            if field.name in declared and "float" in str(field.type)]


def test_the_float_field_check_finds_fields_to_check():
    assert {variant for variant in TINY_CONFIGS if declared_float_fields(variant)} >= {"macbert", "transfo-xl",
                                                                                       "rev-lsh", "k-adapter"}


@pytest.mark.parametrize("variant", list(TINY_CONFIGS))
def test_float_fields_take_ints_as_config_files_hold_them(variant):
    """``config.json`` files hold a dropout of 0 as ``0``: every float field the family declares takes an int, as
    transformers' configs' dropouts do (a field whose range refuses both 0 and 1 is refused for the range, never
    for the type). Fields inherited from transformers' own configs behave as there."""
    for name in declared_float_fields(variant):
        for value in (0, 1, 2):
            try:
                assert getattr(TINY_CONFIGS[variant](**{name: value}), name) == value
            except (ValueError, StrictDataclassError) as err:
                assert "expected" not in str(err), (name, str(err))  # strict's type error names what it expected


FIXTURES = Path(__file__).parent / "fixtures"
# 0.1.0's, and the code's before issue 38 moved the house (made by the same script, checkpoints_0_1_0/make_fixtures.py)
OLD_CHECKPOINTS = [folder for saved_by in ("checkpoints_0_1_0", "checkpoints_0489e3c")
                   for folder in sorted((FIXTURES / saved_by).iterdir()) if folder.is_dir()]


@pytest.mark.parametrize("folder", OLD_CHECKPOINTS, ids=[f"{f.parent.name}-{f.name}" for f in OLD_CHECKPOINTS])
def test_checkpoints_saved_by_earlier_code_load_and_give_the_same_outputs(folder):
    """Tiny checkpoints of every family as 0.1.0 and 0489e3c saved them (``make_fixtures.py``): every weight loads,
    none is left over, and the outputs are the ones that code computed."""
    from safetensors.torch import load_file

    config = AutoConfig.from_pretrained(folder)
    model_class = next(cls for cls in FAMILIES[type(config)].values() if cls.__name__ == config.architectures[0])
    model, info = model_class.from_pretrained(folder, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    saved = load_file(folder / "expected.safetensors")
    with torch.no_grad():
        torch.testing.assert_close(first_output(run(model.eval(), saved["input_ids"])), saved["expected"])


@pytest.mark.parametrize("variant,auto_name,model_class", CASES, ids=CASE_IDS)
def test_unknown_keywords_are_refused_and_a_row_of_zero_token_types_is_taken(variant, auto_name, model_class):
    """What a tokenizer returns goes into forward; a keyword the model cannot honour is an error, never ignored."""
    model = build(variant, model_class)
    ids = input_ids()
    with pytest.raises(TypeError, match="unexpected (keyword )?argument.*bogus"):
        run(model, ids, bogus=1)
    with torch.no_grad():
        expected = first_output(run(model, ids))
        torch.testing.assert_close(first_output(run(model, ids, token_type_ids=torch.zeros_like(ids))), expected)
    if model.config.model_type in ("rev-lsh", "transfo-xl"):  # no token type embeddings
        with pytest.raises(ValueError, match="token_type_ids must be all zeros"):
            run(model, ids, token_type_ids=torch.ones_like(ids))


def greedy(model, prompt, **kwargs):
    out = model.generate(prompt, max_new_tokens=12, min_new_tokens=12, do_sample=False, return_dict_in_generate=True,
                         output_scores=True, pad_token_id=0, **kwargs)
    return out.sequences, torch.stack(out.scores, 1)


def long_prompt(variant):
    """Past a chunk (rev-lsh) and past the memory (Transformer-XL's mem_len 8), with repeats for prompt lookup."""
    head = input_ids(batch=1, length=6)
    return torch.cat([head, head, head[:, :3]], dim=1)


@pytest.mark.parametrize("variant,model_class", GENERATORS, ids=[f"{v}-{m.__name__}" for v, m in GENERATORS])
def test_a_user_cache_gives_the_default_cache_s_tokens_with_greedy_and_beam_search(variant, model_class):
    from transformers import DynamicCache

    model = build(variant, model_class)
    prompt = long_prompt(variant)
    expected, expected_scores = greedy(model, prompt)
    given = DynamicCache()
    tokens, scores = greedy(model, prompt, past_key_values=given)
    assert torch.equal(tokens, expected)
    torch.testing.assert_close(scores, expected_scores)
    assert given.get_seq_length() == tokens.shape[1] - 1  # the user's cache was filled (the last token is not fed)
    beams = model.generate(prompt.repeat(2, 1), max_new_tokens=6, num_beams=3, do_sample=False, pad_token_id=0)
    assert torch.equal(model.generate(prompt.repeat(2, 1), max_new_tokens=6, num_beams=3, do_sample=False,
                                      pad_token_id=0, past_key_values=DynamicCache()), beams)


@pytest.mark.parametrize("assistant", ["same", "random", "smaller", "prompt_lookup"])
@pytest.mark.parametrize("variant,model_class", GENERATORS, ids=[f"{v}-{m.__name__}" for v, m in GENERATORS])
def test_assisted_decoding_and_prompt_lookup_match_greedy_search(variant, model_class, assistant):
    """transformers' ``test_assisted_decoding_matches_greedy_search`` (same / random assistant) and
    ``test_prompt_lookup_decoding_matches_greedy_search``, and a smaller assistant of the family: greedy's tokens and
    scores, whatever the drafts (a random assistant's are mostly rejected, so the cache is cropped)."""
    model = build(variant, model_class)
    prompt = long_prompt(variant)
    expected, expected_scores = greedy(model, prompt)
    if assistant == "prompt_lookup":
        options = dict(prompt_lookup_num_tokens=3)
    else:
        helper = {"same": lambda: model, "random": lambda: build(variant, model_class, seed=1),
                  "smaller": lambda: build(variant, model_class, seed=2, **TINY_CONFIGS[variant].assistant)}[assistant]()
        helper.generation_config.num_assistant_tokens = 3
        options = dict(assistant_model=helper)
    tokens, scores = greedy(model, prompt, **options)
    assert torch.equal(tokens, expected)
    torch.testing.assert_close(scores, expected_scores, atol=1e-5, rtol=1e-4)


def dict_outputs(model, prompt, **kwargs):
    """transformers' ``GenerationTesterMixin`` generation with every output asked for."""
    return model.generate(prompt, max_new_tokens=5, min_new_tokens=5, do_sample=False, pad_token_id=0,
                          return_dict_in_generate=True, output_scores=True, output_attentions=True,
                          output_hidden_states=True, use_cache=True, **kwargs)


def check_generate_outputs(model, out, prompt_length, variant):
    """``GenerationTesterMixin._check_attentions_for_generate`` / ``_check_hidden_states_for_generate`` with a cache:
    one entry per generated token, the first over the prompt, each later one a token's row over every position so
    far; the hidden states as wide as the family's (rev-lsh: both halves)."""
    config, batch = model.config, out.sequences.shape[0]
    generated = out.sequences.shape[1] - prompt_length
    heads = config.num_attention_heads if hasattr(config, "num_attention_heads") else config.n_head
    layers = config.num_hidden_layers
    width = TINY_CONFIGS[variant].hidden_state_width(config)
    assert len(out.attentions) == generated and len(out.hidden_states) == generated
    for index, (attentions, hidden_states) in enumerate(zip(out.attentions, out.hidden_states)):
        rows = prompt_length if index == 0 else 1
        assert [tuple(a.shape) for a in attentions] == [(batch, heads, rows, prompt_length + index)] * layers
        assert [tuple(h.shape) for h in hidden_states] == [(batch, rows, width)] * (layers + 1)
        for probs in attentions:  # each query's probabilities over the keys it sees, laid over all of them
            # (LSH: a token that sees only itself, in several windows, sums 0.2% short, as in trax and transformers)
            torch.testing.assert_close(probs.sum(-1), torch.ones(batch, heads, rows), atol=3e-3, rtol=0)
            assert (probs.tril(prompt_length + index - rows) == probs).all()  # no key after the query


@pytest.mark.parametrize("assistant", ["same", "random", "prompt_lookup"])
@pytest.mark.parametrize("variant,model_class", GENERATORS, ids=[f"{v}-{m.__name__}" for v, m in GENERATORS])
def test_assisted_decoding_returns_greedy_s_attentions_and_hidden_states_token_by_token(variant, model_class,
                                                                                          assistant):
    """transformers' ``test_assisted_decoding_matches_greedy_search_{same,random}`` and prompt lookup's, with their
    dict outputs: a draft verified in one cached call (several new tokens, attentions and hidden states asked for)
    gives one entry per token, of greedy's shapes."""
    model = build(variant, model_class)
    prompt = long_prompt(variant)
    expected = dict_outputs(model, prompt)
    options = {"same": lambda: dict(assistant_model=model),
               "random": lambda: dict(assistant_model=build(variant, model_class, seed=1)),
               "prompt_lookup": lambda: dict(prompt_lookup_num_tokens=3)}[assistant]()
    if "assistant_model" in options:
        options["assistant_model"].generation_config.num_assistant_tokens = 3
    got = dict_outputs(model, prompt, **options)
    assert torch.equal(got.sequences, expected.sequences)
    torch.testing.assert_close(torch.stack(got.scores), torch.stack(expected.scores), atol=1e-5, rtol=1e-4)
    for out in (expected, got):
        check_generate_outputs(model, out, prompt.shape[1], variant)
    # (values: transformers 5.25's _split_model_outputs gives the first call's draft tokens the prompt's first rows,
    # so they differ from greedy's whatever the model; the next test checks a multi-token call's values)


@pytest.mark.parametrize("variant,model_class", GENERATORS, ids=[f"{v}-{m.__name__}" for v, m in GENERATORS])
def test_a_multi_token_cached_call_gives_the_attentions_of_one_token_calls(variant, model_class):
    """Several new tokens after a filled cache, attentions and hidden states asked for: each token's row is what a
    call with it alone gives (padded with zeros over the keys after it)."""
    model = build(variant, model_class)
    ids = long_prompt(variant)
    with torch.no_grad():
        cache = model(ids[:, :9], use_cache=True).cache
        together = model(ids[:, 9:], cache=cache, output_attentions=True, output_hidden_states=True)
        cache = model(ids[:, :9], use_cache=True).cache
        alone = [model(ids[:, t:t + 1], cache=cache, output_attentions=True, output_hidden_states=True)
                 for t in range(9, ids.shape[1])]
    for layer, probs in enumerate(together.attentions):
        assert probs.shape == (1, probs.shape[1], ids.shape[1] - 9, ids.shape[1])
        expected = torch.cat([F.pad(step.attentions[layer], (0, ids.shape[1] - step.attentions[layer].shape[-1]))
                              for step in alone], dim=2)
        torch.testing.assert_close(probs, expected, atol=1e-5, rtol=1e-4)
    for layer, states in enumerate(together.hidden_states):
        torch.testing.assert_close(states, torch.cat([step.hidden_states[layer] for step in alone], dim=1),
                                   atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("num_beams", [1, 2])
@pytest.mark.parametrize("variant,model_class", GENERATORS, ids=[f"{v}-{m.__name__}" for v, m in GENERATORS])
def test_generating_from_inputs_embeds_continues_as_from_the_ids(variant, model_class, num_beams):
    """transformers' ``test_generate_from_inputs_embeds_{greedy,beam_search}``: the prompt's embeddings in place of
    its ids give the same new tokens, with the cache; ids and embeddings together too."""
    model = build(variant, model_class)
    prompt = long_prompt(variant).repeat(2, 1)
    embeds = model.get_input_embeddings()(prompt)
    options = dict(max_new_tokens=4, min_new_tokens=4, do_sample=False, num_beams=num_beams, pad_token_id=0,
                   attention_mask=torch.ones_like(prompt))
    from_ids = model.generate(prompt, **options)
    assert torch.equal(model.generate(inputs_embeds=embeds, **options), from_ids[:, prompt.shape[1]:])
    assert torch.equal(model.generate(prompt, inputs_embeds=embeds, **options), from_ids)


@pytest.mark.parametrize("variant,model_class", GENERATORS, ids=[f"{v}-{m.__name__}" for v, m in GENERATORS])
def test_assisted_decoding_and_prompt_lookup_sample(variant, model_class):
    """transformers' ``test_assisted_decoding_sample``: sampling with drafts runs and returns the asked length."""
    model = build(variant, model_class)
    prompt = long_prompt(variant)
    helper = build(variant, model_class, seed=2, **TINY_CONFIGS[variant].assistant)
    for options in (dict(assistant_model=helper), dict(prompt_lookup_num_tokens=3)):
        torch.manual_seed(0)
        out = model.generate(prompt, max_new_tokens=8, min_new_tokens=8, do_sample=True, top_k=5, pad_token_id=0,
                             **options)
        assert out.shape == (1, prompt.shape[1] + 8) and torch.equal(out[:, :prompt.shape[1]], prompt)


@pytest.mark.parametrize("variant,model_class", GENERATORS, ids=[f"{v}-{m.__name__}" for v, m in GENERATORS])
def test_crop_takes_back_the_last_call_s_tokens(variant, model_class):
    model = build(variant, model_class)
    ids = long_prompt(variant)
    with torch.no_grad():
        cache = model(ids[:, :9], use_cache=True).cache
        model(ids[:, 9:12], cache=cache)  # a draft of three
        cache.crop(-2)
        assert cache.get_seq_length() == 10
        continued = model(ids[:, 10:], cache=cache).logits
        fresh = model(ids[:, :9], use_cache=True).cache
        expected = model(ids[:, 9:], cache=fresh).logits[:, 1:]
    torch.testing.assert_close(continued, expected, atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="crop"):
        cache.crop(3)  # transformers' convention: minus the count


@pytest.mark.parametrize("implementation", ["static", "offloaded", "quantized", "sliding_window"])
@pytest.mark.parametrize("variant,model_class", GENERATORS, ids=[f"{v}-{m.__name__}" for v, m in GENERATORS])
def test_cache_implementations_the_family_cannot_honour_are_refused(variant, model_class, implementation):
    model = build(variant, model_class)
    with pytest.raises(ValueError, match=f"cache_implementation='{implementation}'.*'dynamic'"):
        model.generate(input_ids(length=4), max_new_tokens=2, cache_implementation=implementation)


@pytest.mark.parametrize("variant,model_class", GENERATORS, ids=[f"{v}-{m.__name__}" for v, m in GENERATORS])
def test_a_cache_of_another_kind_or_another_model_is_refused(variant, model_class):
    from transformers import DynamicCache

    model = build(variant, model_class)
    ids = input_ids(length=4)
    foreign = DynamicCache()  # what PEFT's prefix tuning passes: keys and values of virtual tokens
    foreign.update(torch.zeros(2, 2, 3, 8), torch.zeros(2, 2, 3, 8), layer_idx=0)
    with pytest.raises(ValueError, match="prompt tuning or LoRA"):
        model(ids, past_key_values=foreign)
    overrides = ({"n_layer": 3} if model.config.model_type == "transfo-xl"
                 else {"attn_layers": ["local", "lsh", "full", "full"]})
    with torch.no_grad():
        other = build(variant, model_class, **overrides)(ids, use_cache=True).cache
    with pytest.raises(ValueError, match="another model"):
        model(ids[:, -1:], past_key_values=other)
    with pytest.raises(ValueError, match="not both"):
        model(ids, past_key_values=DynamicCache(), cache=DynamicCache())


@pytest.mark.parametrize("variant,model_class", GENERATORS, ids=[f"{v}-{m.__name__}" for v, m in GENERATORS])
def test_peft_prefix_tuning_is_refused_and_prompt_tuning_and_p_tuning_train(variant, model_class):
    """Prefix tuning's virtual keys and values cannot enter these caches: its first forward says so and names what
    works. Prompt tuning and p-tuning feed virtual token embeddings: the model attends to them (its outputs move),
    the loss's gradient reaches every prompt-encoder parameter, and generate runs from them."""
    from peft import PrefixTuningConfig, PromptEncoderConfig, PromptTuningConfig, get_peft_model

    ids = input_ids()
    prefix = get_peft_model(build(variant, model_class), PrefixTuningConfig(task_type="CAUSAL_LM",
                                                                            num_virtual_tokens=4))
    with pytest.raises(ValueError, match="prefix tuning.*use prompt tuning or LoRA"):
        prefix(input_ids=ids)
    if getattr(prefix.config, "adaptive", False):
        return  # PEFT finds the word embeddings by a vocab-sized weight; an adaptive input embedding has one per cluster
    for config in (PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=4),
                   PromptEncoderConfig(task_type="CAUSAL_LM", num_virtual_tokens=4, encoder_hidden_size=16)):
        base = build(variant, model_class)
        with torch.no_grad():
            plain = base(ids).logits
        tuned = get_peft_model(base, config)
        out = tuned(input_ids=ids, labels=ids)
        assert out.logits.shape[1] == 4 + ids.shape[1]
        assert not torch.allclose(out.logits[:, 4:], plain, atol=1e-4)
        out.loss.backward()
        trainable = {name: p for name, p in tuned.named_parameters() if p.requires_grad}
        assert trainable and all(name.startswith("prompt_encoder.") for name in trainable), sorted(trainable)
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in trainable.values()), type(config).__name__
        generated = tuned.generate(input_ids=ids, max_new_tokens=3, min_new_tokens=3, do_sample=False, pad_token_id=0)
        assert generated.shape == (2, ids.shape[1] + 3)


@pytest.mark.parametrize("variant,model_class", SEQUENCE_CLASSIFIERS,
                         ids=[f"{v}-{m.__name__}" for v, m in SEQUENCE_CLASSIFIERS])
def test_peft_prefix_tuning_of_a_classifier_is_refused_or_honoured_never_ignored(variant, model_class):
    """Prefix tuning's ``past_key_values`` in a classifier's forward: PEFT's check or the family's own refusal stops
    it (peft 0.21), or the prefix reaches the attention (peft 0.22 hands it to a BERT backbone's cache): the logits
    then follow the prompt encoder's weights. Never a step that would train nothing."""
    from peft import PrefixTuningConfig, get_peft_model

    model = build(variant, model_class).eval()
    config = PrefixTuningConfig(task_type="SEQ_CLS", num_virtual_tokens=4, num_layers=2, num_attention_heads=2,
                                token_dim=model.config.get_text_config().hidden_size)
    adapted = get_peft_model(model, config).eval()
    try:
        with torch.no_grad():
            before = adapted(input_ids=input_ids()).logits
    except (ValueError, TypeError) as err:
        assert re.search("past key values|prefix tuning|cache|past_key_values", str(err)), err
        return
    with torch.no_grad():
        for weight in adapted.prompt_encoder.parameters():
            weight.add_(torch.randn_like(weight))
        assert not torch.allclose(adapted(input_ids=input_ids()).logits, before)


@pytest.mark.parametrize("variant,auto_name,model_class", CASES, ids=CASE_IDS)
def test_a_checkpoint_without_weights_reports_every_weight_missing_and_loads_off_the_meta_device(
        variant, auto_name, model_class, tmp_path):
    """transformers' ``test_model_weights_reload_no_missing_tied_weights``: every weight on file replaced by a
    placeholder, ``from_pretrained`` (which builds the model on the meta device) reports each parameter missing once
    (a tied pair's target aside) and no more, ignores only what ``_keys_to_ignore_on_load_missing`` names (no
    non-persistent buffer), and leaves no tensor on the meta device (ELECTRA-RTD's shared embeddings stayed there)."""
    from safetensors.torch import save_file

    build(variant, model_class).save_pretrained(tmp_path)
    save_file({"tensor": torch.tensor([1, 2])}, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    reloaded, info = model_class.from_pretrained(tmp_path, output_loading_info=True)
    assert [name for name, t in [*reloaded.named_parameters(), *reloaded.named_buffers()] if t.is_meta] == []
    names = {name for name, _ in [*reloaded.named_parameters(), *reloaded.named_buffers()]}
    missing = set(info["missing_keys"])
    state = reloaded.state_dict()
    by_storage = {}
    for name, tensor in state.items():
        by_storage.setdefault(tensor.untyped_storage().data_ptr(), []).append(name)
    extra_missing = missing - names
    for group in (group for group in by_storage.values() if len(group) > 1):
        if set(group) - extra_missing:
            extra_missing -= set(group)
    assert extra_missing == set()
    non_persistent = {name for name, _ in reloaded.named_buffers() if name not in state}
    ignored = {name for name in names for pattern in reloaded._keys_to_ignore_on_load_missing or []
               if re.search(pattern, name)}
    assert names - missing - non_persistent == ignored


@pytest.mark.parametrize("variant", list(TINY_CONFIGS))
def test_every_field_a_config_exposes_takes_a_keyword_override(variant, tmp_path):
    """What transformers' configs take and its tests do (``from_pretrained(path, hidden_size=...)``): each of the
    fields transformers' generic code reads, derived ones included (ELECTRA-RTD's and K-Adapter's are their
    discriminator's / backbone's), overridden in ``from_pretrained``, ``from_dict`` and ``AutoConfig``; a doubled
    width reads back."""
    config = TINY_CONFIGS[variant]()
    config.save_pretrained(tmp_path)
    names = [name for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads")
             if hasattr(config, name)]
    assert "hidden_size" in names
    for name in names:
        value = getattr(config, name)
        assert getattr(AutoConfig.from_pretrained(tmp_path, **{name: value}), name) == value, name
        assert getattr(type(config).from_dict(config.to_dict(), **{name: value}), name) == value, name
    wider = AutoConfig.from_pretrained(tmp_path, hidden_size=2 * config.hidden_size)
    assert wider.hidden_size == 2 * config.hidden_size
    model_class = next(iter(model_classes(TINY_CONFIGS[variant]).values()))
    model_class(config).save_pretrained(tmp_path / "model")
    model, info = model_class.from_pretrained(tmp_path / "model", hidden_size=config.hidden_size,
                                              output_loading_info=True)
    assert model.config.hidden_size == config.hidden_size and not info["missing_keys"]


def test_an_electra_rtd_override_of_a_derived_field_sets_the_discriminator_s_or_is_refused_naming_it(tmp_path):
    config = TINY_CONFIGS["electra-rtd"]()
    config.save_pretrained(tmp_path)
    wider = AutoConfig.from_pretrained(tmp_path, hidden_size=2 * config.hidden_size, num_hidden_layers=3)
    assert wider.discriminator_config.hidden_size == 2 * config.hidden_size
    assert wider.discriminator_config.num_hidden_layers == 3
    assert wider.generator_config.hidden_size == config.generator_config.hidden_size  # the generator keeps its own
    with pytest.raises(ValueError, match=r"discriminator_config\.hidden_size \(33\) must be divisible"):
        AutoConfig.from_pretrained(tmp_path, hidden_size=33)
