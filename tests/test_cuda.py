"""The CUDA and bfloat16 paths: `make test-cuda` on a machine with a GPU (deselected by `make test`).

CPU results are the reference: on CUDA the Transformer-XL attention takes SDPA in training too, the
dropout is torch's, and bfloat16 runs through autocast and the Trainer's `bf16=True`.
"""

import copy
import math

import pytest
import torch
from transformers import TrainingArguments, default_data_collator

from hf_plm_ext import ElectraForRTDPreTraining, ElectraRTDConfig, MacBertForPreTraining, TransfoXLConfig
from hf_plm_ext import TransfoXLLMHeadModel
from hf_plm_ext.data.segment_streams import StreamSegments
from hf_plm_ext.training.segment_memory import SegmentMemoryTrainer

from conftest import tiny_macbert_config

pytestmark = pytest.mark.cuda

CUDA = torch.device("cuda")


@pytest.fixture(autouse=True)
def exact_float32_products():
    assert torch.cuda.is_available(), "the cuda tests need a GPU (make test deselects them)"
    previous = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = previous


def transfo_xl(seed=0, **overrides):
    fields = dict(vocab_size=300, adaptive=False, d_model=64, d_embed=64, n_head=4, d_head=16, d_inner=128,
                  n_layer=3, mem_len=12, clamp_len=-1, same_length=False, dropout=0.0, eos_token_id=None)
    fields.update(overrides)
    torch.manual_seed(seed)
    model = TransfoXLLMHeadModel(TransfoXLConfig(**fields))
    with torch.no_grad():  # non-zero position biases, so a wrong relative term shows
        for layer in model.transformer.layers:
            layer.dec_attn.r_w_bias.normal_(0, 0.5)
            layer.dec_attn.r_r_bias.normal_(0, 0.5)
    return model


def segments(count=3, batch=4, length=10, vocab=300, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (batch, length), generator=generator) for _ in range(count)]


def training_losses_and_gradients(model, inputs):
    model.train()
    mems, losses = None, []
    for segment in inputs:
        outputs = model(segment, mems=mems, labels=segment)
        outputs.loss.backward()
        losses.append(outputs.loss.detach().cpu())
        mems = outputs.mems
    return torch.stack(losses), {name: p.grad.cpu() for name, p in model.named_parameters()}


@pytest.mark.parametrize("same_length", [False, True])
def test_transfo_xl_training_on_cuda_equals_cpu(same_length):
    """Loss and every gradient over 3 segments with the memory carried (CUDA: SDPA; CPU: explicit attention)."""
    cpu_model = transfo_xl(same_length=same_length, clamp_len=8)
    cuda_model = copy.deepcopy(cpu_model).to(CUDA)
    inputs = segments()
    cpu_losses, cpu_grads = training_losses_and_gradients(cpu_model, inputs)
    cuda_losses, cuda_grads = training_losses_and_gradients(cuda_model, [s.to(CUDA) for s in inputs])
    torch.testing.assert_close(cuda_losses, cpu_losses, rtol=1e-5, atol=1e-5)
    for name, grad in cpu_grads.items():
        torch.testing.assert_close(cuda_grads[name], grad, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("adaptive", [False, True])
def test_transfo_xl_evaluation_on_cuda_equals_cpu_with_and_without_the_cache(adaptive):
    overrides = dict(adaptive=True, cutoffs=[50, 150], div_val=2) if adaptive else {}
    cpu_model = transfo_xl(**overrides).eval()
    cuda_model = copy.deepcopy(cpu_model).to(CUDA)
    cpu_memory, cached, recomputed = {}, {}, None
    with torch.no_grad():
        for segment in segments():
            expected = cpu_model(segment, **cpu_memory)
            with_cache = cuda_model(segment.to(CUDA), **cached)
            without_cache = cuda_model(segment.to(CUDA), mems=recomputed, use_cache=False)
            assert with_cache.mem_key_values is not None and without_cache.get("mem_key_values") is None
            torch.testing.assert_close(with_cache.logits.cpu(), expected.logits, rtol=1e-5, atol=1e-4)
            torch.testing.assert_close(without_cache.logits, with_cache.logits, rtol=1e-5, atol=1e-4)
            cpu_memory = {"mems": expected.mems, "mem_key_values": expected.mem_key_values}
            cached = {"mems": with_cache.mems, "mem_key_values": with_cache.mem_key_values}
            recomputed = without_cache.mems


def test_transfo_xl_generate_on_cuda_reuses_the_memory_and_gives_the_same_tokens():
    model = transfo_xl(mem_len=60).to(CUDA).eval()
    prompt = segments(count=1, batch=2, length=6)[0].to(CUDA)
    kwargs = dict(max_new_tokens=40, min_new_tokens=40, do_sample=False)
    with_memory = model.generate(prompt, use_cache=True, **kwargs)
    recomputing = model.generate(prompt, use_cache=False, **kwargs)
    assert with_memory.device.type == "cuda" and with_memory.shape == (2, 46)
    assert torch.equal(with_memory, recomputing)


@pytest.mark.parametrize("adaptive", [False, True])
def test_transfo_xl_bfloat16_autocast_training_follows_float32(adaptive):
    overrides = dict(adaptive=True, cutoffs=[50, 150], div_val=2) if adaptive else {}
    model = transfo_xl(dropout=0.1, **overrides).to(CUDA)
    inputs = [s.to(CUDA) for s in segments()]
    torch.manual_seed(0)
    float32_losses, _ = training_losses_and_gradients(model, inputs)
    model.zero_grad()
    torch.manual_seed(0)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        bfloat16_losses, grads = training_losses_and_gradients(model, inputs)
    assert all(torch.isfinite(g).all() for g in grads.values())
    assert sum(g.abs().sum() for g in grads.values()) > 0
    torch.testing.assert_close(bfloat16_losses, float32_losses, rtol=0.03, atol=0.0)


def test_transfo_xl_in_bfloat16_weights_evaluates_close_to_float32():
    model = transfo_xl().to(CUDA).eval()
    segment = segments(count=1)[0].to(CUDA)
    with torch.no_grad():
        float32 = model(segment, labels=segment)
        bfloat16 = model.to(torch.bfloat16)(segment, labels=segment)
    assert bfloat16.mems[0].dtype == torch.bfloat16 and bfloat16.loss.dtype == torch.float32  # loss in float32
    assert math.isclose(bfloat16.loss.item(), float32.loss.item(), rel_tol=0.03)


def test_segment_memory_trainer_trains_in_bfloat16_on_cuda(tmp_path):
    tokens = torch.randperm(300, generator=torch.Generator().manual_seed(3))[:7].repeat(300)  # learnable: period 7
    train, held_out = StreamSegments(tokens[:1600], 4, 10), StreamSegments(tokens[1600:], 4, 10)
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, per_device_eval_batch_size=4,
                             max_steps=30, learning_rate=1e-2, bf16=True, train_sampling_strategy="sequential",
                             report_to="none", remove_unused_columns=False, save_strategy="no",
                             label_names=["shift_labels"], prediction_loss_only=True, disable_tqdm=True)
    model = transfo_xl()
    trainer = SegmentMemoryTrainer(model=model, args=args, train_dataset=train, eval_dataset=held_out,
                                   data_collator=default_data_collator)
    before = trainer.evaluate()["eval_loss"]
    trainer.train()
    after = trainer.evaluate()["eval_loss"]
    assert next(model.parameters()).device.type == "cuda"
    assert trainer.memory["train"]["mems"][0].device.type == "cuda"
    assert math.isfinite(after) and after < before


def test_electra_rtd_bfloat16_step_on_cuda():
    torch.manual_seed(0)
    model = ElectraForRTDPreTraining(ElectraRTDConfig.from_size("tiny", vocab_size=300, mask_token_id=3)).to(CUDA)
    ids = torch.randint(10, 300, (8, 40), generator=torch.Generator().manual_seed(0)).to(CUDA)
    special = torch.zeros_like(ids)
    special[:, 0] = special[:, -1] = 1
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(ids, attention_mask=torch.ones_like(ids), special_tokens_mask=special)
    out.loss.backward()
    assert torch.isfinite(out.loss) and out.discriminator_labels.device.type == "cuda"
    assert 0 < out.discriminator_labels.float().mean() <= 0.15
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_macbert_pretraining_bfloat16_step_on_cuda():
    torch.manual_seed(0)
    model = MacBertForPreTraining(tiny_macbert_config()).to(CUDA)
    ids = torch.randint(5, 1500, (4, 16), device=CUDA)
    labels = torch.full_like(ids, -100)
    labels[:, 4] = ids[:, 4]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(input_ids=ids, labels=labels, sentence_order_label=torch.tensor([0, 1, 1, 0], device=CUDA))
    out.loss.backward()
    assert torch.isfinite(out.loss)
    assert model.bert.embeddings.word_embeddings.weight.grad.abs().sum() > 0


FSDP_RUNS = {  # a pre-training objective per family whose layers the Trainer's FSDP2 wraps, and its flags
    "mlm": ["--model_type", "macbert", "--config_overrides",
            "hidden_size=32,num_hidden_layers=2,num_attention_heads=2,intermediate_size=37", "--max_seq_length", "32"],
    "electra": ["--size", "tiny", "--max_seq_length", "32"],
    "transfo-xl": ["--size", "tiny", "--tgt-len", "16", "--mem-len", "16"],
    "rev-lsh": ["--size", "tiny", "--max_seq_length", "64"],
}


@pytest.mark.parametrize("objective", list(FSDP_RUNS))
def test_the_trainer_shards_every_family_with_fsdp2(objective, tmp_path, english_tokenizer_dir):
    """The Trainer's --fsdp (accelerate's FSDP2) on the GPU, one process: the units are hf_plm_ext.training.sharding's
    (the families' layers; for rev-lsh the blocks its reversible backward recomputes), and the saved model loads."""
    import json
    import os
    import subprocess
    import sys
    from importlib.resources import files

    from transformers import AutoConfig

    from hf_plm_ext import FAMILIES
    from hf_plm_ext.training.sharding import shard_units

    corpus = files("hf_plm_ext") / "demo_data" / "alice.txt"
    tokenizer = english_tokenizer_dir
    if objective == "transfo-xl":
        from hf_plm_ext.data.tokenizer_training import train_tokenizer

        tokenizer = tmp_path / "words"
        train_tokenizer([str(corpus)], "words", vocab_size=2000).save_pretrained(str(tokenizer))
    # the units: from a tiny model of the objective (its head class, a fresh config)
    probe = tmp_path / "probe"
    subprocess.run([sys.executable, "-m", "hf_plm_ext_cli", "pretrain", objective, "--corpus", str(corpus),
                    "--tokenizer", str(tokenizer), "--output", str(probe), "--max_steps", "1",
                    "--per_device_train_batch_size", "2", "--save_strategy", "no", *FSDP_RUNS[objective]],
                   check=True, capture_output=True)
    config = AutoConfig.from_pretrained(probe)
    head = next(cls for cls in FAMILIES[type(config)].values() if cls.__name__ == config.architectures[0])
    units = sorted({type(unit).__name__ for unit in shard_units(head(config))})
    fsdp_config = tmp_path / "fsdp.json"
    fsdp_config.write_text(json.dumps({"fsdp_version": 2, "transformer_layer_cls_to_wrap": units}))
    out = tmp_path / "sharded"
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", "-m",
                           "hf_plm_ext_cli", "pretrain", objective, "--corpus", str(corpus), "--tokenizer",
                           str(tokenizer), "--output", str(out), "--max_steps", "3", "--per_device_train_batch_size",
                           "2", "--save_strategy", "no", "--fsdp", "full_shard auto_wrap", "--fsdp_config",
                           str(fsdp_config), *FSDP_RUNS[objective]],
                          capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads((out / "pretrain_results.json").read_text())
    assert math.isfinite(results["final_eval_loss"])
    assert head.from_pretrained(out).num_parameters() == results["num_parameters"]


def rev_lsh_kernel_calls(monkeypatch):
    """A list that grows by one for each call of the fused kernel's forward."""
    from hf_plm_ext.modeling.rev_lsh import attention_rev_lsh

    calls, kernel_forward = [], attention_rev_lsh.kernel_forward
    monkeypatch.setattr(attention_rev_lsh, "kernel_forward", lambda *args: calls.append(1) or kernel_forward(*args))
    return calls


@pytest.mark.parametrize("kind, overrides", [("lsh", dict(num_hashes=1)), ("lsh", dict(num_hashes=2)),
                                             ("lsh", dict(num_hashes=4)), ("local", {}),
                                             ("local", dict(chunk_length=5))])
@pytest.mark.parametrize("causal", [False, True])
def test_rev_lsh_fused_kernel_on_cuda_gives_the_plain_path_s_outputs_and_gradients(kind, overrides, causal,
                                                                                   monkeypatch):
    """float32 through CUDA's memory-efficient kernel (with its log-sum-exp, the rounds combined by it) against
    the plain path on the same GPU: outputs, input and weight gradients; 45 tokens, a padded row, tokens that see
    only themselves; windows of 16 keys, and of 10 (local chunks of 5: the mask's rows padded to 16)."""
    from test_rev_lsh import assert_same_attention, layer, masked_gradients

    calls = rev_lsh_kernel_calls(monkeypatch)
    torch.manual_seed(0)
    attention = layer(kind, causal, **overrides).to(CUDA)
    hidden = torch.randn(2, 45, 32, device=CUDA)
    mask = torch.ones(2, 45, dtype=torch.long, device=CUDA)
    mask[1, 30:] = 0
    plain = masked_gradients(attention, hidden, mask, sdpa=False)
    assert not calls
    fused = masked_gradients(attention, hidden, mask, sdpa=True)
    assert calls
    assert_same_attention(fused, plain, rtol=1e-4, atol=1e-5)
    assert plain[1].abs().sum() > 0


@pytest.mark.parametrize("kind", ["lsh", "local"])
def test_rev_lsh_fused_kernel_on_cuda_without_a_mask_and_for_a_short_input(kind, monkeypatch):
    """No padding and not causal (local: no mask at all, which CUDA's kernel backward cannot take as None), and an
    input shorter than a chunk (one window of 7 keys)."""
    from test_rev_lsh import assert_same_attention, layer, masked_gradients

    calls = rev_lsh_kernel_calls(monkeypatch)
    torch.manual_seed(0)
    attention = layer(kind).to(CUDA)
    for length in (40, 7):
        hidden = torch.randn(2, length, 32, device=CUDA)
        mask = torch.ones(2, length, dtype=torch.long, device=CUDA)
        plain, fused = (masked_gradients(attention, hidden, mask, sdpa) for sdpa in (False, True))
        assert_same_attention(fused, plain, rtol=1e-4, atol=1e-5)
    assert calls


def test_rev_lsh_on_cuda_takes_the_plain_path_where_the_kernel_does_not_apply(monkeypatch):
    """float64 and a head size that is not a multiple of 8: the plain path, eager's numbers exactly; bfloat16
    through the kernel, close to the plain path in bfloat16 (the same buckets)."""
    from hf_plm_ext.modeling.rev_lsh import LSHSelfAttention
    from hf_plm_ext.modeling.rev_lsh.attention_rev_lsh import fused_kernel_applies

    from test_rev_lsh import layer

    def applies(head_size, dtype):
        return fused_kernel_applies(torch.zeros(1, 2, 4, head_size, device=CUDA, dtype=dtype), 0.0, False)

    assert applies(16, torch.float32) and applies(16, torch.bfloat16) and applies(16, torch.float16)
    assert not applies(16, torch.float64) and not applies(12, torch.float32)
    calls = rev_lsh_kernel_calls(monkeypatch)
    torch.manual_seed(0)
    hidden = torch.randn(2, 40, 32, device=CUDA)
    unaligned = LSHSelfAttention(32, 2, 12, chunk_length=8, num_hashes=2, num_buckets=4, hash_seed=0, causal=True)
    for attention, dtype in ((layer("lsh", causal=True), torch.float64), (unaligned, torch.float32)):
        attention = attention.to(CUDA, dtype)
        with torch.no_grad():
            assert torch.equal(attention(hidden.to(dtype), sdpa=True)[0], attention(hidden.to(dtype), sdpa=False)[0])
    assert not calls
    attention = layer("lsh", causal=True).to(CUDA, torch.bfloat16)
    with torch.no_grad():
        plain, fused = (attention(hidden.to(torch.bfloat16), sdpa=sdpa)[0] for sdpa in (False, True))
    assert calls and fused.dtype == torch.bfloat16
    torch.testing.assert_close(fused.float(), plain.float(), rtol=0.02, atol=0.02)


def test_a_converted_reformer_on_cuda_gives_transformers_logits(tmp_path):
    """transformers' Reformer (causal, axial positions, local and LSH layers) converted and run on the GPU through
    the fused kernel gives transformers' logits on the CPU, for one chunk, a padded length and a chunked one.
    (transformers' own Reformer on CUDA draws its seeded rotations from the GPU's generator, so its buckets there
    are not its CPU buckets; this package draws them on the CPU, the same buckets on every device.)"""
    import transformers
    from transformers import AutoModelForCausalLM, ReformerConfig

    from hf_plm_ext.convert.reformer import convert_reformer
    from test_rev_lsh import REFORMER

    torch.manual_seed(0)
    reformer = transformers.ReformerModelWithLMHead(ReformerConfig(
        **{**REFORMER, **dict(is_decoder=True, axial_pos_shape=[8, 8], axial_pos_embds_dim=[12, 20])})).eval()
    for parameter in reformer.parameters():
        torch.nn.init.normal_(parameter, std=0.5)
    reformer.save_pretrained(tmp_path / "reformer")
    convert_reformer(tmp_path / "reformer", tmp_path / "rev")
    converted = AutoModelForCausalLM.from_pretrained(tmp_path / "rev").eval().to(CUDA)
    assert converted.config._attn_implementation == "sdpa"
    for length in (3, 37, 40):
        ids = torch.randint(0, 99, (2, length))
        with torch.no_grad():
            torch.testing.assert_close(converted(ids.to(CUDA)).logits.cpu(), reformer(ids).logits, rtol=1e-4,
                                       atol=1e-4)


def test_a_reversible_rev_lsh_model_trains_on_cuda_with_the_kernel_as_with_the_plain_path(monkeypatch):
    """A causal reversible model (local, LSH, full layers, rotary): loss and every gradient with sdpa as with
    eager on the GPU (the reversible backward replays the kernel), and a bfloat16 autocast step stays finite."""
    from family_common import tiny_rev_lsh

    from hf_plm_ext import RevLSHForCausalLM

    calls = rev_lsh_kernel_calls(monkeypatch)
    torch.manual_seed(0)
    model = RevLSHForCausalLM(tiny_rev_lsh(attn_layers=["local", "lsh", "full"], is_decoder=True,
                                           position_embedding_type="rotary", attention_head_size=16)).to(CUDA)
    ids = torch.randint(5, 99, (2, 30), device=CUDA)
    mask = torch.ones_like(ids)
    mask[0, 25:] = 0
    labels = ids.masked_fill(mask == 0, -100)  # (a padding query's output is not the same in the full layer)
    results = {}
    for implementation in ("eager", "sdpa"):
        model.set_attn_implementation(implementation)
        model.zero_grad()
        output = model(ids, attention_mask=mask, labels=labels)
        output.loss.backward()
        results[implementation] = output.loss.detach(), {key: p.grad.clone() for key, p in model.named_parameters()}
    assert calls
    torch.testing.assert_close(results["sdpa"][0], results["eager"][0], rtol=1e-5, atol=1e-5)
    for key, grad in results["eager"][1].items():
        torch.testing.assert_close(results["sdpa"][1][key], grad, rtol=1e-3, atol=1e-5)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_a_reversible_rev_lsh_model_replays_its_dropout_on_cuda():
    """With dropout on everywhere, the reversible backward on the GPU restores the CUDA RNG state of each layer's
    forward: loss and gradients equal those of the same weights without the reversible function."""
    from family_common import tiny_rev_lsh

    from hf_plm_ext import RevLSHForMaskedLM

    settings = dict(attn_layers=["local", "lsh", "full", "lsh"], hash_seed=None, attention_head_size=16,
                    hidden_dropout_prob=0.1, lsh_attention_probs_dropout_prob=0.1,
                    local_attention_probs_dropout_prob=0.1, full_attention_probs_dropout_prob=0.1)
    torch.manual_seed(0)
    reversible = RevLSHForMaskedLM(tiny_rev_lsh(**settings)).to(CUDA).train()
    plain = RevLSHForMaskedLM(tiny_rev_lsh(**settings, reversible=False)).to(CUDA).train()
    plain.load_state_dict(reversible.state_dict())
    ids = torch.randint(5, 99, (2, 30), device=CUDA)
    results = []
    for model in (reversible, plain):
        torch.manual_seed(5)  # (seeds the GPU's generator too)
        loss = model(ids, labels=ids).loss
        loss.backward()
        results.append((loss.detach(), {name: p.grad for name, p in model.named_parameters()}))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-6, atol=1e-6)
    for name, grad in results[1][1].items():
        torch.testing.assert_close(results[0][1][name], grad, rtol=1e-4, atol=1e-5, msg=name)
