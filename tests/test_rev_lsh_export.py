"""rev-lsh shipped: torch.export with a dynamic batch and length, torch.compile(dynamic=True) without recompiling,
and ONNX through torch.onnx's dynamo exporter, run with onnxruntime: each at lengths and batches other than the
traced ones, equal to eager."""

import pytest
import torch
from torch._dynamo.utils import counters
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

from hf_plm_ext import RevLSHConfig

CHUNK_MULTIPLE = 16  # the least common multiple of the two chunk lengths below


def exportable(attn_layers, causal=False, **overrides):
    """A tiny model whose LSH and local chunks differ (8 / 16), two hash rounds, a fixed bucket count and seed."""
    torch.manual_seed(0)
    config = RevLSHConfig.from_size("tiny", **{**dict(attn_layers=attn_layers, lsh_attn_chunk_length=8,
                                                      local_attn_chunk_length=CHUNK_MULTIPLE, num_hashes=2,
                                                      num_buckets=4, hash_seed=0, is_decoder=causal,
                                                      use_cache=False), **overrides})
    return (AutoModelForCausalLM if causal else AutoModelForMaskedLM).from_config(config).eval()


def dynamic_inputs(batch=2, chunks=4):
    ids = torch.randint(3, 300, (batch, CHUNK_MULTIPLE * chunks))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def dynamic_shapes():
    batch, length = torch.export.Dim("batch", min=1, max=64), CHUNK_MULTIPLE * torch.export.Dim("chunks", min=2,
                                                                                                 max=256)
    return {"input_ids": {0: batch, 1: length}, "attention_mask": {0: batch, 1: length}}


def other_inputs():
    """Batches and lengths other than the traced (2, 64), the first row's end padding."""
    for batch, length in [(3, 48), (1, 32), (2, 160)]:
        inputs = dynamic_inputs(batch, length // CHUNK_MULTIPLE)
        inputs["attention_mask"][0, -5:] = 0
        yield inputs


STACKS = [(["lsh"], False), (["local"], False), (["lsh"], True), (["local"], True),
          (["lsh", "local", "full"], False), (["lsh", "local", "full"], True)]
STACK_IDS = [f"{'-'.join(kinds)}-{'causal' if causal else 'bidirectional'}" for kinds, causal in STACKS]


@pytest.mark.parametrize("kinds,causal", STACKS, ids=STACK_IDS)
def test_torch_export_with_a_dynamic_batch_and_length_runs_other_shapes_as_eager(kinds, causal):
    model = exportable(kinds, causal)
    program = torch.export.export(model, (), dynamic_inputs(), dynamic_shapes=dynamic_shapes()).module()
    with torch.no_grad():
        for inputs in other_inputs():
            exported = program(**inputs)
            torch.testing.assert_close(exported.logits, model(**inputs).logits, rtol=0, atol=1e-4)
        # the seeded rotations are a buffer, not a generator traced once: a second call hashes the same
        torch.testing.assert_close(program(**inputs).logits, exported.logits, rtol=0, atol=0)


def test_an_exported_program_refuses_a_length_off_the_chunk_multiple():
    model = exportable(["lsh", "local"])
    program = torch.export.export(model, (), dynamic_inputs(), dynamic_shapes=dynamic_shapes()).module()
    ids = torch.randint(3, 300, (2, CHUNK_MULTIPLE * 3 + 5))
    with pytest.raises(AssertionError, match="Guard failed"):
        program(input_ids=ids, attention_mask=torch.ones_like(ids))


def test_a_length_chosen_bucket_count_is_refused_under_a_dynamic_trace_with_what_to_set():
    model = exportable(["lsh"], num_buckets=None)
    with pytest.raises(ValueError, match="set config.num_buckets"):
        torch.export.export(model, (), dynamic_inputs(), dynamic_shapes=dynamic_shapes())


@pytest.mark.parametrize("backend", ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_torch_compile_dynamic_runs_three_lengths_in_one_graph(backend):
    """(inductor: about a minute of compiling here, so in the slow set; aot_eager traces the same graph)"""
    model = exportable(["lsh", "local", "full"])
    counters.clear()
    torch._dynamo.reset()
    compiled = torch.compile(model, dynamic=True, fullgraph=True, backend=backend)
    with torch.no_grad():
        for chunks in (2, 3, 5):
            inputs = dynamic_inputs(chunks=chunks)
            torch.testing.assert_close(compiled(**inputs).logits, model(**inputs).logits, rtol=0, atol=1e-4)
    assert counters["stats"]["unique_graphs"] == 1
    assert not counters["recompiles"] and not counters["graph_break"]


def test_the_seeded_rotations_are_drawn_once_not_saved_and_rebuilt_on_load(tmp_path):
    model = exportable(["lsh"])
    rotations = model.rev_lsh.layers[0].attention.self_attention.seeded_rotations
    assert rotations is not None and not [name for name in model.state_dict() if "rotations" in name]
    model.save_pretrained(tmp_path)
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path)
    torch.testing.assert_close(loaded.rev_lsh.layers[0].attention.self_attention.seeded_rotations, rotations,
                               rtol=0, atol=0)
    # the same numbers as the seed's generator draws per call (a length-chosen bucket count still does)
    generator = torch.Generator().manual_seed(0)
    torch.testing.assert_close(rotations, torch.randn(rotations.shape, generator=generator), rtol=0, atol=0)


@pytest.mark.parametrize("kinds,causal", [(["lsh"], False), (["lsh", "local", "full"], True)],
                         ids=["lsh-bidirectional", "lsh-local-full-causal"])
def test_onnx_export_runs_in_onnxruntime_at_other_lengths_as_eager(kinds, causal, tmp_path):
    import onnx  # (the dev and onnx extras install them)
    import onnxruntime

    model = exportable(kinds, causal)
    path = tmp_path / "model.onnx"
    torch.onnx.export(model, (), path, kwargs=dynamic_inputs(), dynamic_shapes=dynamic_shapes(), dynamo=True,
                      input_names=["input_ids", "attention_mask"], output_names=["logits"])
    onnx.checker.check_model(path)
    session = onnxruntime.InferenceSession(path)
    with torch.no_grad():
        for inputs in other_inputs():
            logits = session.run(["logits"], {name: value.numpy() for name, value in inputs.items()})[0]
            torch.testing.assert_close(torch.from_numpy(logits), model(**inputs).logits, rtol=0, atol=1e-4)
