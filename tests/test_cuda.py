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
