"""K-Adapter (issue 22, item 3): the chain over the backbone's layers, the frozen backbone referred to by path,
the entity-typing and relation heads, and separately trained adapters combined for a downstream task. The
family tester covers what every Auto class does."""

import json

import pytest
import torch
import transformers
from safetensors import safe_open
from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer, BertConfig, BertModel

from hf_plm_ext import (KAdapterConfig, KAdapterForEntityTyping, KAdapterForRelationClassification,
                        KAdapterForSequenceClassification, KAdapterModel)
from hf_plm_ext.adapters.k_adapter import new_k_adapter

from conftest import run_cli
from family_common import tiny_k_adapter

SMALL_ADAPTERS = dict(adapter_size=16, adapter_num_layers=1, adapter_num_attention_heads=2,
                      adapter_intermediate_size=32)


@pytest.fixture(scope="module")
def backbone_dir(tmp_path_factory, english_tokenizer_dir):
    """A tiny BERT (4 layers) with the test tokenizer, as a user's encoder folder."""
    folder = tmp_path_factory.mktemp("backbone") / "bert"
    tokenizer = AutoTokenizer.from_pretrained(english_tokenizer_dir)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
                         intermediate_size=64)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def saved_keys(folder):
    with safe_open(str(folder / "model.safetensors"), "pt") as weights:
        return list(weights.keys())


def ids(batch=2, length=9):
    return torch.randint(5, 99, (batch, length), generator=torch.Generator().manual_seed(0))


def test_a_checkpoint_refers_to_its_backbone_by_path_and_loads_it_with_the_auto_classes(backbone_dir, tmp_path):
    out = new_k_adapter(backbone_dir, tmp_path / "k", adapter_names=["factual"], **SMALL_ADAPTERS)
    keys = saved_keys(out)
    assert keys and not any("backbone." in key for key in keys)  # adapters and fusion only
    loaded = AutoModel.from_pretrained(out).eval()
    assert type(loaded) is KAdapterModel and loaded.config.adapter_layers == [0, 1, 2]  # spread over 4 layers
    reference = BertModel.from_pretrained(backbone_dir)
    assert all(torch.equal(p, reference.state_dict()[name]) for name, p in loaded.backbone.state_dict().items())
    assert not any(p.requires_grad for p in loaded.backbone.parameters())
    again = AutoModel.from_pretrained(out).eval()
    with torch.no_grad():
        assert torch.equal(loaded(ids()).last_hidden_state, again(ids()).last_hidden_state)
    embedded = new_k_adapter(backbone_dir, tmp_path / "embedded", embed_backbone=True, **SMALL_ADAPTERS)
    assert any(key.startswith("backbone.") for key in saved_keys(embedded))
    classifier = AutoModelForSequenceClassification.from_pretrained(embedded, num_labels=3)
    trainable = {name for name, p in classifier.named_parameters() if p.requires_grad}
    assert trainable and not any(".backbone." in name for name in trainable)  # frozen after loading too


def test_the_adapters_chain_over_the_backbone_layers_and_fuse_as_the_paper():
    """fusion_state = hidden_states[i] + previous adapter output; per adapter dense([backbone; adapter]), then a
    dense over their concatenation (microsoft/K-Adapter's AdapterModel and its two-adapter heads)."""
    torch.manual_seed(0)
    model = KAdapterModel(tiny_k_adapter(adapter_layers=[0, 2, 3])).eval()
    inputs = ids()
    with torch.no_grad():
        outputs = model(inputs, output_hidden_states=True)
        hidden = model.backbone(inputs, output_hidden_states=True).hidden_states
        states = []
        for name in ("factual", "linguistic"):
            last = torch.zeros_like(hidden[-1])
            for block, index in zip(model.adapters[name].blocks, [0, 2, 3]):
                x = block.down_project(hidden[index] + last)
                for layer in block.layers:
                    x = layer(x)
                last = hidden[index] + last + block.up_project(x)
            states.append(last)
        fusion = model.fusion
        fused = fusion.combine(torch.cat([dense(torch.cat([hidden[-1], state], -1))
                                          for dense, state in zip(fusion.per_adapter, states)], -1))
    torch.testing.assert_close(outputs.last_hidden_state, fused)
    torch.testing.assert_close(outputs.adapter_states[:, 1], states[1])
    assert len(outputs.hidden_states) == 4  # the backbone's: embeddings + 3 layers
    add = KAdapterModel(tiny_k_adapter(fusion="add")).eval()
    with torch.no_grad():
        out = add(inputs)
        torch.testing.assert_close(out.last_hidden_state, add.fusion.dense(out.backbone_last_hidden_state
                                                                           + out.adapter_states.sum(1)))


def test_training_moves_the_adapters_fusion_and_head_and_never_the_backbone(tmp_path):
    torch.manual_seed(0)
    model = KAdapterForSequenceClassification(tiny_k_adapter(frozen_adapters=["linguistic"], num_labels=2))
    before = {name: p.clone() for name, p in model.named_parameters()}
    examples = [{"input_ids": ids(1)[0].roll(seed).tolist(), "labels": seed % 2} for seed in range(16)]
    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=3, per_device_train_batch_size=4,
                                          learning_rate=1e-2, report_to=[], save_strategy="no", use_cpu=True)
    transformers.Trainer(model=model, args=args, train_dataset=examples).train()
    changed = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    assert changed and not any(".backbone." in name or ".linguistic." in name for name in changed)
    assert any(".factual." in name for name in changed) and any("fusion" in name for name in changed)
    assert {"classifier.out_proj.weight", "classifier.dense.weight"} <= changed


def test_a_checkpoint_with_the_head_at_the_top_level_loads_into_the_classifier_and_saves_the_new_names(tmp_path):
    """Before the head was one module (``classifier``) its layers were saved as ``dense.*`` / ``out_proj.*``."""
    from safetensors.torch import load_file, save_file

    torch.manual_seed(0)
    model = KAdapterForSequenceClassification(tiny_k_adapter(num_labels=3)).eval()
    model.save_pretrained(tmp_path / "old")
    weights = tmp_path / "old" / "model.safetensors"
    save_file({key.removeprefix("classifier."): value for key, value in load_file(weights).items()}, weights,
              metadata={"format": "pt"})
    reloaded, info = KAdapterForSequenceClassification.from_pretrained(tmp_path / "old", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    with torch.no_grad():
        torch.testing.assert_close(reloaded.eval()(ids(2)).logits, model(ids(2)).logits)
    reloaded.save_pretrained(tmp_path / "new")
    saved = load_file(tmp_path / "new" / "model.safetensors")
    assert "classifier.dense.weight" in saved and "dense.weight" not in saved


def test_entity_typing_and_relation_heads_read_the_marked_positions(tmp_path):
    torch.manual_seed(0)
    typing = KAdapterForEntityTyping(tiny_k_adapter(num_labels=9)).eval()
    inputs, labels = ids(), torch.zeros(2, 9)
    labels[0, 3] = labels[1, [1, 5]] = 1
    out = typing(inputs, entity_positions=torch.tensor([1, 4]), labels=labels)
    assert out.logits.shape == (2, 9) and torch.isfinite(out.loss)
    other = typing(inputs, entity_positions=torch.tensor([2, 4])).logits
    assert not torch.equal(other[0], out.logits[0]) and torch.equal(other[1], out.logits[1])
    typing.save_pretrained(tmp_path / "typing")
    reloaded = KAdapterForEntityTyping.from_pretrained(tmp_path / "typing").eval()
    with torch.no_grad():
        assert torch.equal(reloaded(inputs, entity_positions=torch.tensor([1, 4])).logits, out.logits.detach())
    relation = KAdapterForRelationClassification(tiny_k_adapter(num_labels=5)).eval()
    out = relation(inputs, subject_positions=torch.tensor([1, 2]), object_positions=torch.tensor([5, 6]),
                   labels=torch.tensor([0, 4]))
    assert out.logits.shape == (2, 5) and torch.isfinite(out.loss)
    with pytest.raises(ValueError, match="entity_positions"):
        typing(inputs)
    with pytest.raises(ValueError, match="subject_positions and object_positions"):
        relation(inputs, subject_positions=torch.tensor([1, 2]))


def finetune(capsys, task, model, out, *extra):
    from conftest import SHARED_DATA

    data = {"cola": "CoLA", "stsb": "STS-B", "mrpc": "MRPC"}[task]
    code, _, err = run_cli(["finetune", "glue", "--task", task, "--model", model, "--output", out, "--data-dir",
                            SHARED_DATA / "glue" / data, "--max_steps", 3, "--max_train_samples", 32,
                            "--max_seq_length", 32, "--learning_rate", 1e-2, "--per_device_train_batch_size", 8,
                            "--disable_tqdm", "true", "--report_to", "none", *extra], capsys)
    assert code == 0, err
    return out


def adapter_weights(model, name):
    return {key: value.clone() for key, value in model.k_adapter.adapters[name].state_dict().items()}


def test_adapters_trained_on_two_tasks_combine_and_fine_tune_on_a_third(backbone_dir, tmp_path, capsys, shared_data):
    """The paper's recipe, on the command line: an adapter per task (CoLA, STS-B), combined with a new fusion,
    fine-tuned on MRPC with the adapters frozen."""
    for name in ("cola", "stsb"):
        code, _, err = run_cli(["k-adapter", "new", "--backbone", backbone_dir, "--adapters", name, "--adapter-size",
                                16, "--adapter-num-layers", 1, "--adapter-num-attention-heads", 2,
                                "--adapter-intermediate-size", 32, "--output", tmp_path / f"new-{name}"], capsys)
        assert code == 0, err
        finetune(capsys, name, tmp_path / f"new-{name}", tmp_path / f"trained-{name}")
    trained = {name: AutoModelForSequenceClassification.from_pretrained(tmp_path / f"trained-{name}")
               for name in ("cola", "stsb")}
    assert trained["stsb"].config.problem_type == "regression"
    code, _, err = run_cli(["k-adapter", "combine", tmp_path / "trained-cola", tmp_path / "trained-stsb",
                            "--freeze-adapters", "--output", tmp_path / "combined"], capsys)
    assert code == 0, err
    combined = AutoModel.from_pretrained(tmp_path / "combined")
    assert combined.config.adapter_names == ["cola", "stsb"] and combined.config.frozen_adapters == ["cola", "stsb"]
    for name in ("cola", "stsb"):
        for key, value in adapter_weights(trained[name], name).items():
            assert torch.equal(combined.adapters[name].state_dict()[key], value)
    finetune(capsys, "mrpc", tmp_path / "combined", tmp_path / "mrpc")
    mrpc = AutoModelForSequenceClassification.from_pretrained(tmp_path / "mrpc")
    for name in ("cola", "stsb"):  # frozen through the MRPC fine-tuning
        assert all(torch.equal(mrpc.k_adapter.adapters[name].state_dict()[key], value)
                   for key, value in adapter_weights(trained[name], name).items())
    results = json.loads((tmp_path / "mrpc" / "eval_results.json").read_text())
    assert set(results["results"][0]["metrics"]) == {"accuracy", "f1"}
    from hf_plm_ext.hub.cards import render_card

    card = str(render_card(tmp_path / "mrpc", repo_id="someone/ka-mrpc"))
    assert "A K-Adapter model of hf-plm-ext" in card and "| adapters | cola, stsb (frozen in this training" in card
    assert "loading fetches the backbone's weights from" in card and "model-index" in card


@pytest.mark.parametrize("argv,message", [
    (["new", "--adapter-layers", 0, 9], "adapter_layers must be hidden-state indices of the backbone, in [0, 4]"),
    (["new", "--adapters", "a", "a"], "adapter_names must be distinct"),
    (["new", "--adapter-size", 30, "--adapter-num-attention-heads", 4], "must split into adapter_num_attention_heads"),
])
def test_a_bad_k_adapter_is_one_clear_error_and_nothing_is_written(argv, message, backbone_dir, tmp_path, capsys):
    code, _, err = run_cli(["k-adapter", *argv, "--backbone", backbone_dir, "--output", tmp_path / "out"], capsys)
    assert code == 2 and message in err and err.count("error:") == 1, err
    assert not (tmp_path / "out").exists()


def test_combining_what_does_not_combine_is_refused_by_name(backbone_dir, tmp_path, capsys, shared_data):
    new_k_adapter(backbone_dir, tmp_path / "a", adapter_names=["same"], **SMALL_ADAPTERS)
    new_k_adapter(backbone_dir, tmp_path / "b", adapter_names=["same"], **SMALL_ADAPTERS)
    code, _, err = run_cli(["k-adapter", "combine", tmp_path / "a", tmp_path / "b", "--output", tmp_path / "c"], capsys)
    assert code == 2 and "adapter names repeat" in err and not (tmp_path / "c").exists()
    new_k_adapter(backbone_dir, tmp_path / "wide", adapter_names=["wide"], **{**SMALL_ADAPTERS, "adapter_size": 32})
    code, _, err = run_cli(["k-adapter", "combine", tmp_path / "a", tmp_path / "wide", "--output", tmp_path / "c"],
                           capsys)
    assert code == 2 and "adapters differ from" in err and "adapter_size" in err
    code, _, err = run_cli(["finetune", "glue", "--task", "mrpc", "--model", backbone_dir, "--freeze-adapters",
                            "--output", tmp_path / "x", "--data-dir", shared_data / "glue/MRPC"], capsys)
    assert code == 2 and "--freeze-adapters is for K-Adapter checkpoints" in err


def test_the_config_validates_and_spreads_the_layers_as_the_paper():
    from hf_plm_ext.modeling.k_adapter import spread_layers

    assert spread_layers(24) == [0, 11, 22] and spread_layers(6) == [0, 2, 4]
    with pytest.raises(Exception, match="frozen_adapters names no adapter"):
        tiny_k_adapter(frozen_adapters=["nope"])
    with pytest.raises(Exception, match="fusion must be one of"):
        tiny_k_adapter(fusion="mean")
    assert isinstance(tiny_k_adapter().backbone_config, BertConfig)
    assert KAdapterConfig.from_dict(tiny_k_adapter().to_dict()).adapter_names == ["factual", "linguistic"]


def test_adapters_start_near_the_identity_while_fusion_and_head_pass_the_backbone_on():
    """The paper's 0.0002 init is the adapters' alone; the fusion and head start as the backbone's layers (0.02).
    With everything at 0.0002 the head saw almost nothing of the input and MRPC / STS-B training collapsed to one
    constant output (benchmarks/adapters_glue.py, 2026-12-01)."""
    torch.manual_seed(0)
    model = KAdapterForSequenceClassification(tiny_k_adapter(num_labels=1, problem_type="regression")).eval()
    adapter_std = model.k_adapter.adapters["factual"].blocks[0].down_project.weight.std().item()
    fusion_std = model.k_adapter.fusion.per_adapter[0].weight.std().item()
    head_std = model.classifier.dense.weight.std().item()
    assert adapter_std == pytest.approx(2e-4, rel=0.2)
    assert fusion_std == pytest.approx(0.02, rel=0.2) and head_std == pytest.approx(0.02, rel=0.2)
    with torch.no_grad():
        predictions = model(input_ids=ids(batch=4)).logits.squeeze(-1)
    assert predictions.std() > 1e-4  # the inputs reach the output (about 1e-6 times smaller before)


def test_a_k_adapter_is_not_a_backbone_for_another(backbone_dir, tmp_path, capsys):
    new_k_adapter(backbone_dir, tmp_path / "first", **SMALL_ADAPTERS)
    code, _, err = run_cli(["k-adapter", "new", "--backbone", tmp_path / "first", "--output", tmp_path / "second"],
                           capsys)
    assert code == 2 and "is a K-Adapter itself: give its backbone" in err and "k-adapter combine" in err, err
    assert not (tmp_path / "second").exists()


def test_new_adapters_default_to_the_papers_proportions_of_their_backbone(backbone_dir, tmp_path, capsys):
    """K-Adapter's 768-wide adapters (12 heads, a 3072 feed-forward) sit on RoBERTa-large's 1024: on a 32-wide
    backbone the defaults are 24 wide, not 768 (issue 69, item 10)."""
    from hf_plm_ext.modeling.k_adapter import adapter_shape_for

    assert adapter_shape_for(1024) == {"adapter_size": 768, "adapter_num_attention_heads": 12,
                                       "adapter_intermediate_size": 3072}
    code, _, err = run_cli(["k-adapter", "new", "--backbone", backbone_dir, "--output", tmp_path / "new"], capsys)
    assert code == 0, err
    model = AutoModel.from_pretrained(tmp_path / "new")
    config = model.config
    assert (config.adapter_size, config.adapter_num_attention_heads, config.adapter_intermediate_size) == (24, 1, 96)
    adapters = sum(p.numel() for p in model.adapters.parameters())
    backbone = sum(p.numel() for p in model.backbone.parameters())
    assert adapters < backbone
    # a width given sets the rest by the same rule; every field given is kept as given
    assert tiny_k_adapter(adapter_size=64, adapter_num_attention_heads=None,
                          adapter_intermediate_size=None).adapter_intermediate_size == 256
