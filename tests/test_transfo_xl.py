import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from huggingface_hub.errors import StrictDataclassError
from safetensors.torch import load_file
from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSequenceClassification

from hf_plm_ext import TransfoXLConfig, TransfoXLForSequenceClassification, TransfoXLLMHeadModel
from hf_plm_ext.modeling.transfo_xl.fast_transfo_xl import (SoftmaxNLL, is_plain_linear, reassociated_position_scores,
                                                              softmax_nll_without_grad)
from hf_plm_ext.modeling.transfo_xl.modeling_transfo_xl import (Dropout, rel_shift, relative_attention_scores,
                                                                shifted_position_scores, sinusoid_embeddings)


from family_common import tiny_transfo_xl

LEGACY = Path(__file__).parent / "fixtures" / "transfo_xl_legacy"


def tiny_config(**overrides):
    # the family tester's tiny config with large weights, so that differences show in the logits
    return tiny_transfo_xl(**{**dict(vocab_size=50, mem_len=6, init_std=0.3, proj_init_std=0.3), **overrides})


def tiny_model(seed=0, **overrides):
    torch.manual_seed(seed)
    model = TransfoXLLMHeadModel(tiny_config(**overrides)).eval()
    with torch.no_grad():  # non-zero position biases, so a wrong relative term shows
        for layer in model.transformer.layers:
            layer.dec_attn.r_w_bias.normal_(0, 0.5)
            layer.dec_attn.r_r_bias.normal_(0, 0.5)
    return model


@pytest.mark.parametrize("name", ["adaptive_div2", "adaptive_div1_preln"])
@pytest.mark.parametrize("says_adaptive", [True, False])
def test_transformers_4_checkpoint_loads_with_the_same_outputs(name, says_adaptive, tmp_path):
    """Fixtures written by transformers 4.37.2 (make_fixture.py beside them). 4.x never read ``adaptive``: a
    config of its that says false still belongs to an adaptive model."""
    folder = LEGACY / name
    if not says_adaptive:
        folder = shutil.copytree(folder, tmp_path / name)
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "adaptive": False}))
    expected = load_file(folder / "expected.safetensors")
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    assert type(model) is TransfoXLLMHeadModel
    with torch.no_grad():
        first = model(expected["first"])
        legacy_start = model(expected["first"], mems=model.transformer.legacy_zero_mems(2))
        second = model(expected["second"], mems=first.mems)
        second_losses = model(expected["second"], mems=first.mems, labels=expected["second"]).losses
    torch.testing.assert_close(first.logits, expected["logprobs_first"], rtol=0, atol=1e-5)
    torch.testing.assert_close(legacy_start.logits, expected["logprobs_first_zero_mems"], rtol=0, atol=1e-5)
    torch.testing.assert_close(second.logits, expected["logprobs_second"], rtol=0, atol=1e-5)
    # 4.x returned the adaptive softmax's losses grouped by cluster; ours are in token order
    torch.testing.assert_close(second_losses.flatten().sort().values,
                               expected["losses_second"].flatten().sort().values, rtol=0, atol=1e-5)
    targets = expected["second"][:, 1:]
    in_order = -second.logits[:, :-1].gather(-1, targets[..., None]).squeeze(-1)
    torch.testing.assert_close(second_losses, in_order, rtol=0, atol=1e-5)


def test_attention_scores_equal_an_explicit_gather_over_relative_distances():
    torch.manual_seed(0)
    batch, heads, qlen, mlen, d_head, clamp = 2, 3, 5, 4, 8, 6
    klen = qlen + mlen
    query, key = torch.randn(batch, heads, qlen, d_head), torch.randn(batch, heads, klen, d_head)
    r_w_bias, r_r_bias = torch.randn(heads, d_head), torch.randn(heads, d_head)
    inv_freq = 1 / (10000 ** (torch.arange(0.0, 12, 2.0) / 12))
    r_net = torch.randn(12, heads * d_head)
    embed = lambda d: (sinusoid_embeddings(d, inv_freq) @ r_net).view(-1, heads, d_head)  # noqa: E731

    position_keys = embed(torch.arange(klen - 1, -1, -1).clamp(max=clamp))
    scores = relative_attention_scores(query, key, position_keys, r_w_bias, r_r_bias)

    expected = torch.full_like(scores, float("nan"))
    for i in range(qlen):
        for j in range(mlen + i + 1):  # the keys query i may see
            distance = torch.tensor([min(mlen + i - j, clamp)])
            r = embed(distance)[0]  # [heads, d_head]
            content = ((query[:, :, i] + r_w_bias) * key[:, :, j]).sum(-1)
            position = ((query[:, :, i] + r_r_bias) * r).sum(-1)
            expected[:, :, i, j] = content + position
    visible = ~expected.isnan()
    assert visible.sum() == batch * heads * sum(mlen + i + 1 for i in range(qlen))
    torch.testing.assert_close(scores[visible], expected[visible])


def test_position_term_with_the_queries_through_r_net_first_is_the_same_product():
    torch.manual_seed(0)
    query, r_r_bias = torch.randn(2, 3, 4, 8), torch.randn(3, 8)
    position_embeddings, r_net_weight = torch.randn(11, 12), torch.randn(3 * 8, 12)
    position_keys = (position_embeddings @ r_net_weight.t()).view(11, 3, 8)
    torch.testing.assert_close(rel_shift(reassociated_position_scores(query, position_embeddings, r_net_weight,
                                                                      r_r_bias)),
                               shifted_position_scores(query, position_keys, r_r_bias))


@pytest.mark.parametrize("r_net_hooked", [False, True])
def test_one_token_against_a_long_memory_matches_the_eager_reference(r_net_hooked):
    """Generation's case: one query per row, many distances, so the position term is taken queries first (unless
    r_net is wrapped or hooked, then r_net is called on every distance)."""
    model = tiny_model(mem_len=40, clamp_len=30, n_layer=2)
    calls = []
    if r_net_hooked:
        for layer in model.transformer.layers:
            layer.dec_attn.r_net.register_forward_hook(lambda module, args, out: calls.append(out.shape))
    ids = torch.randint(0, 50, (2, 41))
    with torch.no_grad():
        memory = model(ids[:, :40])
        calls.clear()
        sdpa = model(ids[:, 40:], mems=memory.mems, mem_key_values=memory.mem_key_values).logits
        assert len(calls) == (2 if r_net_hooked else 0)
        model.set_attn_implementation("eager")
        eager = model(ids[:, 40:], mems=memory.mems).logits
    torch.testing.assert_close(sdpa, eager, rtol=0, atol=1e-5)


@pytest.mark.parametrize("same_length", [False, True])
def test_sdpa_and_explicit_attention_agree(same_length):
    model = tiny_model(same_length=same_length, clamp_len=3)
    ids = torch.randint(0, 50, (2, 7))
    with torch.no_grad():
        mems = model(ids).mems
        sdpa = model(ids, mems=mems)
        explicit = model(ids, mems=mems, output_attentions=True)
    torch.testing.assert_close(sdpa.logits, explicit.logits, rtol=0, atol=1e-5)
    model.set_attn_implementation("eager")
    with torch.no_grad():
        torch.testing.assert_close(model(ids, mems=mems).logits, explicit.logits, rtol=0, atol=0)
    probs = explicit.attentions[0]
    assert probs.shape == (2, 2, 7, 13)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 2, 7))
    assert (probs[..., 6:].triu(diagonal=1) == 0).all()  # causal over the segment after the 6 memory slots
    seen = (probs > 0).sum(-1)
    if same_length:  # every query sees the same number of keys (the reference's mask: mem_len of them)
        assert (seen == 6).all()
    else:
        assert torch.equal(seen[0, 0], torch.arange(7, 14))


@pytest.mark.parametrize("dropatt", [0.0, 0.5])
def test_training_attention_path_gives_the_plain_loss_and_gradients(dropatt):
    """With gradients on a CPU the sdpa implementation runs its own three products (fast_transfo_xl); the plain
    attention is the reference: eager without dropout; with dropout, the plain attention (output_attentions) under
    the same lane-dropout masks (eager would draw torch's)."""
    ids = torch.randint(0, 50, (2, 7))
    results = {}
    for implementation, output_attentions in (("sdpa", False), ("eager" if dropatt == 0 else "sdpa", True)):
        model = tiny_model(same_length=True, clamp_len=3, dropatt=dropatt).train()
        model.set_attn_implementation(implementation)
        mems = model(ids).mems
        torch.manual_seed(1)  # the same attention-dropout masks
        loss = model(ids, mems=mems, labels=ids, output_attentions=output_attentions).loss
        loss.backward()
        results[output_attentions] = loss, {name: p.grad for name, p in model.named_parameters()}
    torch.testing.assert_close(results[False][0], results[True][0], rtol=0, atol=1e-5)
    for name, grad in results[True][1].items():
        torch.testing.assert_close(results[False][1][name], grad, rtol=1e-4, atol=1e-5, msg=name)


def test_eager_runs_the_plain_path_without_any_fast_path(monkeypatch):
    """attn_implementation="eager" is the paper's computation as written in modeling_transfo_xl.py: with every fast
    path made to fail, a training step with memory and an evaluation still run, with the same loss as the default."""
    from hf_plm_ext.modeling.transfo_xl import modeling_transfo_xl

    ids = torch.randint(0, 50, (2, 7))
    default = tiny_model(dropout=0.0).train()
    with torch.no_grad():
        expected = default(ids, mems=default(ids).mems, labels=ids).loss

    def fast_path(*args, **kwargs):
        raise AssertionError("a fast path ran under eager")

    for name in ("SoftmaxNLL", "cpu_training_attention", "lane_dropout", "memory_keys_and_values",
                 "queries_first_is_cheaper", "reassociated_position_scores", "softmax_nll_without_grad"):
        monkeypatch.setattr(modeling_transfo_xl, name, fast_path)
    model = tiny_model(dropout=0.1).train()
    model.set_attn_implementation("eager")
    model(ids, mems=model(ids).mems, labels=ids).loss.backward()
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(ids, mems=model(ids).mems, labels=ids).loss, expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_same_length_without_memory_is_only_causal(implementation):
    """same_length means mem_len keys per query; with mem_len 0 (the paper's "no memory" evaluation of a
    same_length model) the reference's mask would block every key: nan in eager and in training, wrong numbers
    in CPU SDPA. Here it is the causal mask."""
    ids = torch.randint(0, 50, (2, 7))
    models = {flag: tiny_model(same_length=flag, mem_len=0) for flag in (False, True)}
    for model in models.values():
        model.set_attn_implementation(implementation)
    with torch.no_grad():
        expected, got = (models[flag](ids, labels=ids) for flag in (False, True))
    torch.testing.assert_close(got.logits, expected.logits, rtol=0, atol=0)
    loss = models[True].train()(ids, labels=ids).loss
    loss.backward()
    first_projection = models[True].transformer.layers[0].dec_attn.qkv_net
    assert torch.isfinite(loss) and torch.isfinite(first_projection.weight.grad).all()


@pytest.mark.parametrize("pre_lnorm", [False, True])
def test_memory_makes_a_segment_equal_to_one_longer_window(pre_lnorm):
    """Segment 2 with segment 1 as memory = the last tokens of segment 1 + 2 in one window (mem_len covers it)."""
    model = tiny_model(pre_lnorm=pre_lnorm, mem_len=8, n_layer=3)
    ids = torch.randint(0, 50, (2, 13))
    with torch.no_grad():
        whole = model(ids)
        first = model(ids[:, :8])
        second = model(ids[:, 8:], mems=first.mems)
        without_memory = model(ids[:, 8:])
    torch.testing.assert_close(second.logits, whole.logits[:, 8:], rtol=0, atol=1e-5)
    torch.testing.assert_close(first.logits, whole.logits[:, :8], rtol=0, atol=1e-5)
    assert (without_memory.logits - whole.logits[:, 8:]).abs().max() > 1e-3  # the memory mattered


def test_lora_on_the_attention_projection_applies_to_the_segment_and_the_memory():
    """PEFT wraps qkv_net: the adapted projection makes the queries and also the memory's keys and values, so a
    segment with memory still equals one longer window."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(tiny_model(mem_len=8, n_layer=2), LoraConfig(r=2, target_modules=["qkv_net"],
                                                                       init_lora_weights=False))
    ids = torch.randint(0, 50, (2, 13))
    with torch.no_grad():
        whole = model(input_ids=ids)
        second = model(input_ids=ids[:, 8:], mems=model(input_ids=ids[:, :8]).mems)
        with model.disable_adapter():
            unadapted = model(input_ids=ids)
    assert (whole.logits - unadapted.logits).abs().max() > 1e-3  # LoRA is applied
    torch.testing.assert_close(second.logits, whole.logits[:, 8:], rtol=0, atol=1e-5)


@pytest.mark.parametrize("pre_lnorm", [False, True])
def test_memory_keys_and_values_from_the_weight_rows_equal_the_whole_projection(pre_lnorm):
    """A plain qkv_net and a hooked one (as under LoRA or offloading, which must be called whole on the memory too)
    give the same loss and gradients in training with memory."""
    ids = torch.randint(0, 50, (2, 12))
    results = []
    for hooked in (False, True):
        model = tiny_model(mem_len=6, n_layer=2, pre_lnorm=pre_lnorm, dropout=0.0, d_inner=24).train()
        calls = []
        if hooked:
            for layer in model.transformer.layers:
                layer.dec_attn.qkv_net.register_forward_hook(lambda module, args, out: calls.append(out.shape))
        mems = model(ids[:, :6]).mems
        loss = model(ids[:, 6:], mems=mems, labels=ids[:, 6:]).loss
        loss.backward()
        results.append((loss, [layer.dec_attn.qkv_net.weight.grad for layer in model.transformer.layers]))
    assert len(calls) == 2 + 2 * 2  # per layer: the first segment alone, then the segment and the memory
    (loss, grads), (hooked_loss, hooked_grads) = results
    torch.testing.assert_close(loss, hooked_loss, rtol=0, atol=1e-6)
    for grad, hooked_grad in zip(grads, hooked_grads):
        torch.testing.assert_close(grad, hooked_grad, rtol=1e-5, atol=1e-7)
        assert grad.abs().sum() > 0


def test_only_a_bias_free_unhooked_linear_is_multiplied_by_its_weight_directly():
    assert is_plain_linear(torch.nn.Linear(4, 4, bias=False))
    assert not is_plain_linear(torch.nn.Linear(4, 4))  # its bias would be lost
    hooked = torch.nn.Linear(4, 4, bias=False)
    hooked.register_forward_pre_hook(lambda module, args: None)
    assert not is_plain_linear(hooked)


@pytest.mark.parametrize("pre_lnorm, same_length", [(False, False), (True, True)])
def test_memory_key_value_cache_changes_nothing_but_the_work(pre_lnorm, same_length):
    """Under no_grad the memory's keys and values are carried instead of recomputed: same outputs."""
    model = tiny_model(pre_lnorm=pre_lnorm, same_length=same_length, clamp_len=5, n_layer=3)
    ids = torch.randint(0, 50, (2, 20))
    cached, recomputed, memory, mems = [], [], {}, None
    with torch.no_grad():
        for segment in ids.split(4, dim=1):
            outputs = model(segment, **memory)
            memory = {"mems": outputs.mems, "mem_key_values": outputs.mem_key_values}
            cached.append(outputs.logits)
            plain = model(segment, mems=mems, use_cache=False)
            assert plain.mem_key_values is None
            mems = plain.mems
            recomputed.append(plain.logits)
    torch.testing.assert_close(torch.cat(cached, 1), torch.cat(recomputed, 1), rtol=0, atol=1e-6)
    for attention, memory_rows, key_value in zip(model.transformer.layers, memory["mems"], memory["mem_key_values"]):
        attention = attention.dec_attn
        rows_in = attention.layer_norm(memory_rows) if pre_lnorm else memory_rows
        expected = attention.qkv_net(rows_in)[..., 16:]  # the key and value columns
        assert key_value.shape == (2, 6, 32)
        torch.testing.assert_close(key_value, expected, rtol=0, atol=1e-6)
    with torch.no_grad():  # the cache is read, not recomputed: a wrong one changes the output
        wrong = model(segment, mems=memory["mems"], mem_key_values=[kv * 0 for kv in memory["mem_key_values"]])
        assert (wrong.logits - model(segment, **memory).logits).abs().max() > 1e-3


def test_memory_key_value_cache_is_for_inference_and_belongs_to_its_mems():
    model = tiny_model()
    ids = torch.randint(0, 50, (2, 5))
    with torch.no_grad():
        cached = model(ids)
    with pytest.raises(ValueError, match="under torch.no_grad"):  # training must recompute them
        model(ids, mems=cached.mems, mem_key_values=cached.mem_key_values)
    assert model(ids).mem_key_values is None and model(ids).mems is not None
    with torch.no_grad():
        with pytest.raises(ValueError, match="pass both"):
            model(ids, mem_key_values=cached.mem_key_values)
        with pytest.raises(ValueError, match=r"mem_key_values\[0\] has shape \(2, 5, 16\)"):
            model(ids, mems=cached.mems, mem_key_values=[kv[..., :16] for kv in cached.mem_key_values])
        with pytest.raises(ValueError, match="one tensor per layer"):
            model(ids, mems=cached.mems, mem_key_values=cached.mem_key_values[:1])


def test_memories_are_detached_per_layer_inputs_and_capped_at_mem_len():
    model = tiny_model(mem_len=4).train()  # dropout is 0
    ids = torch.randint(0, 50, (3, 6))
    outputs = model(ids, labels=ids, output_hidden_states=True)
    assert len(outputs.mems) == model.config.n_layer
    for memory, layer_input in zip(outputs.mems, outputs.hidden_states):
        assert memory.shape == (3, 4, 16) and not memory.requires_grad
        torch.testing.assert_close(memory, layer_input[:, -4:].detach())
    # the embedding output (layer 0's input) is remembered
    torch.testing.assert_close(outputs.mems[0], model.transformer.word_emb(ids[:, -4:]).detach())
    outputs.loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    second = model(ids, mems=outputs.mems)
    assert second.mems[0].shape == (3, 4, 16)
    assert model(ids, mems=None).mems[0].shape == (3, 4, 16)
    assert model(ids, mem_len=0).mems is None
    assert model(ids, mem_len=2).mems[0].shape == (3, 2, 16) and model.config.mem_len == 4  # per call


def test_shift_labels_predict_every_position_and_labels_all_but_the_first():
    model = tiny_model()
    ids, following = torch.randint(0, 50, (2, 6)), torch.randint(0, 50, (2, 1))
    with torch.no_grad():
        logits = model(ids).logits.log_softmax(-1)
        shifted_targets = torch.cat([ids[:, 1:], following], dim=1)
        by_shift = model(ids, shift_labels=shifted_targets)
        by_labels = model(ids, labels=ids)
        both = model(ids, labels=torch.zeros_like(ids), shift_labels=shifted_targets)  # shift_labels wins
    torch.testing.assert_close(both.losses, by_shift.losses)
    expected = -logits.gather(-1, shifted_targets[..., None]).squeeze(-1)
    torch.testing.assert_close(by_shift.losses, expected)
    torch.testing.assert_close(by_labels.losses, expected[:, :-1])
    torch.testing.assert_close(by_shift.loss, expected.mean())
    ignored = shifted_targets.clone()
    ignored[:, :3] = -100
    partial = model(ids, shift_labels=ignored)
    assert (partial.losses[:, :3] == 0).all()
    torch.testing.assert_close(partial.loss, expected[:, 3:].mean())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_softmax_nll_equals_cross_entropy_in_value_and_gradient(dtype):
    scores = (torch.randn(12, 30) * 3).to(dtype).requires_grad_()
    targets = torch.randint(0, 30, (12,))
    targets[[2, 7]] = -100
    scores.data[4, targets[4]] -= 300  # a target whose probability underflows to 0 in float32
    scores.data[2, 0] = -math.inf  # an ignored row (its target read as 0) whose score is -inf: 0, not nan
    weights = torch.rand(12)  # an upstream gradient that differs per token
    ours = SoftmaxNLL.apply(scores, targets)
    (ours * weights).sum().backward()
    ours_grad, scores.grad = scores.grad, None
    reference = torch.nn.functional.cross_entropy(scores.float(), targets, ignore_index=-100, reduction="none")
    (reference * weights).sum().backward()
    assert ours.dtype == torch.float32 and ours_grad.dtype == dtype
    torch.testing.assert_close(ours, reference, rtol=0, atol=1e-6)
    torch.testing.assert_close(ours_grad, scores.grad, rtol=0, atol=1e-6 if dtype == torch.float32 else 1e-2)
    assert torch.all(ours_grad[[2, 7]] == 0)
    # evaluation's blocked form (blocks of 5 rows: the last one partial) gives the same values
    torch.testing.assert_close(softmax_nll_without_grad(scores.detach(), targets, rows=5), reference, rtol=0,
                               atol=1e-6)


def test_softmax_nll_keeps_its_precision_under_a_large_common_offset():
    scores = torch.randn(256, 1000) * 3 + 1000
    targets = torch.randint(0, 1000, (256,))
    exact = torch.nn.functional.cross_entropy(scores.double(), targets, reduction="none")
    torch.testing.assert_close(SoftmaxNLL.apply(scores, targets).double(), exact, rtol=0, atol=1e-5)
    torch.testing.assert_close(softmax_nll_without_grad(scores, targets).double(), exact, rtol=0, atol=1e-5)


def test_adaptive_softmax_is_a_distribution_and_its_loss_matches_it():
    torch.manual_seed(0)
    model = TransfoXLLMHeadModel(tiny_config(adaptive=True, cutoffs=[10, 30], div_val=2)).eval()
    ids = torch.randint(0, 50, (2, 9))
    with torch.no_grad():
        log_probs = model(ids).logits
        losses = model(ids, labels=ids).losses
    torch.testing.assert_close(log_probs.logsumexp(-1), torch.zeros(2, 9), rtol=0, atol=1e-5)
    torch.testing.assert_close(losses, -log_probs[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1))


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_cpu_dropout_drops_at_rate_p_keeps_the_expectation_and_masks_the_gradient(p):
    config = tiny_config()
    dropout = Dropout(p, config)
    x = torch.ones(400_000, requires_grad=True)
    torch.manual_seed(0)
    out = dropout(x)
    dropped = (out == 0).float().mean().item()
    assert abs(dropped - p) < 5 * math.sqrt(p * (1 - p) / x.numel())  # 5 sigma
    assert abs(out.mean().item() - 1) < 5 * math.sqrt(p / (1 - p) / x.numel())
    out.sum().backward()
    assert torch.equal(x.grad, out.detach())  # d out / d x = mask * scale = out for x = 1
    torch.manual_seed(0)
    assert torch.equal(dropout(x), out)  # torch's seed reproduces the mask
    dropped_per_lane = (dropout(torch.ones(100_000, 4)) == 0).float().mean(0)  # column i = lane i of each draw
    assert (dropped_per_lane - p).abs().max() < 5 * math.sqrt(p * (1 - p) / 100_000)
    assert torch.equal(dropout.eval()(x), x)
    config._attn_implementation = "eager"  # the plain path: torch's own dropout, the same mask for the same seed
    torch.manual_seed(0)
    plain = dropout.train()(x)
    torch.manual_seed(0)
    assert torch.equal(plain, torch.nn.functional.dropout(x, p)) and not torch.equal(plain, out)


def test_mems_are_not_saved_and_auto_classes_load(tmp_path):
    model = tiny_model()
    ids = torch.randint(0, 50, (2, 5))
    model.save_pretrained(tmp_path / "xl")
    names = load_file(tmp_path / "xl" / "model.safetensors").keys()
    assert not any("mem" in name for name in names)
    assert "mems" not in (tmp_path / "xl" / "config.json").read_text()
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "xl").eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(ids).logits, model(ids).logits, rtol=0, atol=0)
    assert type(AutoModel.from_pretrained(tmp_path / "xl")).__name__ == "TransfoXLModel"
    classifier = AutoModelForSequenceClassification.from_pretrained(tmp_path / "xl", num_labels=3)
    assert isinstance(classifier, TransfoXLForSequenceClassification)


def test_generate_with_memory_equals_recomputing_the_prefix():
    model = tiny_model(mem_len=64)
    prompt = torch.randint(1, 50, (2, 5))
    fed, cache_read = [], []
    hooks = [model.transformer.register_forward_pre_hook(lambda module, args: fed.append(args[0].shape[1])),
             model.transformer.register_forward_pre_hook(  # the memory's keys and values the model is given
                 lambda module, args, kwargs: cache_read.append(kwargs["cache"].layers[0].key_values is not None),
                 with_kwargs=True)]
    with_memory = model.generate(prompt, max_new_tokens=12, do_sample=False, use_cache=True)
    for hook in hooks:
        hook.remove()
    assert fed == [5] + [1] * 11  # the prompt once, then one token per step
    assert cache_read == [False] + [True] * 11  # with the memory's keys and values carried
    recomputed = model.generate(prompt, max_new_tokens=12, do_sample=False, use_cache=False)
    assert with_memory.shape == (2, 17)
    assert torch.equal(with_memory, recomputed)
    # the reference: greedy decoding by hand over the whole prefix
    ids = prompt
    with torch.no_grad():
        for _ in range(12):
            ids = torch.cat([ids, model(ids).logits[:, -1:].argmax(-1)], dim=1)
    assert torch.equal(with_memory, ids)


@pytest.mark.parametrize("num_beams", [1, 2])
def test_a_left_padded_batch_generates_for_each_row_what_the_row_generates_alone(num_beams):
    """lm-eval, pipelines and batched generation pad on the left: with the padding masked (and the mask kept with
    the memory) each row's tokens are its own, while its padded length stays within mem_len + 1 (mem_len 6 here)."""
    model = tiny_model()
    assert model.config.mem_len == 6
    torch.manual_seed(1)
    rows = [torch.randint(1, 50, (1, length)) for length in (4, 2, 1)]
    padded = torch.cat([torch.cat([torch.zeros(1, 4 - row.shape[1], dtype=torch.long), row], dim=1) for row in rows])
    mask = (torch.arange(4) >= torch.tensor([[0], [2], [3]])).long()
    options = dict(max_new_tokens=3, min_new_tokens=3, do_sample=False, num_beams=num_beams, pad_token_id=0)
    batched = model.generate(padded, attention_mask=mask, **options)
    for index, row in enumerate(rows):
        alone = model.generate(row, **options)
        assert torch.equal(batched[index, -3:], alone[0, -3:]), index
    # the same by hand: each step recomputes the padded prefix, no memory
    recomputed = model.generate(padded, attention_mask=mask, use_cache=False, **options)
    assert torch.equal(recomputed, batched)


def test_the_padding_s_keys_are_never_attended_and_a_padding_query_sees_itself():
    model = tiny_model().transformer
    ids = torch.randint(1, 50, (2, 5))
    mask = torch.tensor([[0, 0, 1, 1, 1], [1] * 5])
    with torch.no_grad():
        out = model(ids, attention_mask=mask, output_attentions=True)
        alone = model(ids[:1, 2:]).last_hidden_state
    torch.testing.assert_close(out.last_hidden_state[:1, 2:], alone, atol=1e-5, rtol=1e-4)
    for probs in out.attentions:
        assert not probs[0, :, 2:, :2].any()  # real tokens: nothing on the padding
        torch.testing.assert_close(probs[0, :, :2, :2], torch.eye(2).expand(probs.shape[1], 2, 2))


def test_sequence_classifier_reads_the_last_real_token():
    torch.manual_seed(0)
    model = TransfoXLForSequenceClassification(tiny_config(num_labels=3, pad_token_id=0)).eval()
    short = torch.randint(1, 50, (1, 4))
    padded = torch.cat([short, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    with torch.no_grad():
        alone = model(short).logits
        in_batch = model(padded, labels=torch.tensor([2]))
        by_mask = model(padded, attention_mask=(padded != 0).long()).logits
    torch.testing.assert_close(in_batch.logits, alone)
    torch.testing.assert_close(by_mask, alone)
    assert math.isclose(in_batch.loss.item(), -alone.log_softmax(-1)[0, 2].item(), rel_tol=1e-5)


def test_bad_mems_are_refused_with_the_reason():
    model = tiny_model()
    ids = torch.randint(0, 50, (2, 5))
    mems = model(ids).mems
    with pytest.raises(ValueError, match="batch=3"):
        model(torch.randint(0, 50, (3, 5)), mems=mems)
    with pytest.raises(ValueError, match="one tensor per layer"):
        model(ids, mems=mems[:1])
    with pytest.raises(ValueError, match="d_model=16"):
        model(ids, mems=[m[..., :8] for m in mems])
    with pytest.raises(ValueError, match=r"mems\[1\] has shape \(2, 4, 16\).*equal for every layer"):
        model(ids, mems=[mems[0], mems[1][:, 1:]])
    with pytest.raises(ValueError, match=r"attention_mask must be \[batch, seq\] = \[2, 5\]"):
        model(ids, attention_mask=torch.tensor([[0, 0, 1, 1], [1] * 4]))


def test_right_padding_leaves_the_tokens_states_as_alone():
    """sentence-transformers and pipelines pad batches on the right with a mask: accepted, and harmless."""
    model = tiny_model().transformer
    short = torch.randint(1, 50, (1, 3))
    padded = torch.cat([torch.cat([short, torch.zeros(1, 2, dtype=torch.long)], dim=1), torch.randint(1, 50, (1, 5))])
    with torch.no_grad():
        alone = model(short).last_hidden_state
        batched = model(padded, attention_mask=torch.tensor([[1, 1, 1, 0, 0], [1] * 5])).last_hidden_state
    torch.testing.assert_close(batched[:1, :3], alone)


@pytest.mark.parametrize("fields, message", [
    (dict(d_model=0), r"'d_model':\s+ValueError: Value must be greater or equal to 1"),
    (dict(n_layer=-1), r"'n_layer':\s+ValueError: Value must be greater or equal to 1"),
    (dict(mem_len=-5), r"'mem_len':\s+ValueError: Value must be greater or equal to 0"),
    (dict(attn_type=2), "attn_type must be 0"),
    (dict(adaptive=True, cutoffs=[30, 10]), "strictly increasing"),
    (dict(adaptive=True, cutoffs=[10, 50]), "must be < vocab_size"),
    (dict(sample_softmax=100), "sampled softmax is not implemented"),
    (dict(dropout=1.5), "dropout must be in"),
])
def test_bad_config_fields_are_named(fields, message):
    with pytest.raises((ValueError, StrictDataclassError), match=message):
        tiny_config(**fields)


def test_config_has_the_fields_generation_reads_and_no_length_limit_unless_given(tmp_path):
    config = tiny_config()
    # no limit: no attribute, so clients take the tokenizer's or their own (4.x's -1 and the earlier None too)
    assert config.use_cache is True and config.bos_token_id is None
    for no_limit in (None, -1):
        assert not hasattr(tiny_config(max_position_embeddings=no_limit), "max_position_embeddings")
    limited = tiny_config(max_position_embeddings=256, bos_token_id=3)
    limited.save_pretrained(tmp_path)
    assert TransfoXLConfig.from_pretrained(tmp_path).max_position_embeddings == 256
    for bad in (0, -2, 1.5):
        with pytest.raises((ValueError, StrictDataclassError), match="max_position_embeddings"):
            tiny_config(max_position_embeddings=bad)


def test_unknown_arguments_are_refused_and_token_type_ids_ignored():
    model = tiny_model()
    ids = torch.randint(0, 50, (2, 5))
    with torch.no_grad():
        expected = model(ids).logits
        torch.testing.assert_close(model(ids, token_type_ids=torch.zeros_like(ids)).logits, expected)
        for forward in (model, model.transformer):
            with pytest.raises(TypeError, match=r"unexpected arguments \['mem_lenn'\]"):
                forward(ids, mem_lenn=4)


def test_text_generation_pipeline_on_a_words_model_spaces_the_continuation_from_its_prompt(caplog):
    import logging

    from transformers import pipeline

    from hf_plm_ext import train_tokenizer

    alice = Path(__file__).parents[1] / "hf_plm_ext/demo_data/alice.txt"
    tokenizer = train_tokenizer([alice], "words", vocab_size=2000)
    model = TransfoXLLMHeadModel(tiny_config(vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id)).eval()
    generate = pipeline("text-generation", model=model, tokenizer=tokenizer)
    torch.manual_seed(0)
    text = generate("alice was beginning to", max_new_tokens=5, min_new_tokens=5, do_sample=True)[0]["generated_text"]
    assert text.startswith("alice was beginning to ") and len(text.split()) == 4 + 5  # was "...towas ..."
    assert tokenizer.decode(tokenizer("the queen said")["input_ids"]).split() == ["the", "queen", "said"]
    with caplog.at_level(logging.WARNING):
        assert len(tokenizer(alice.read_text(encoding="utf-8"))["input_ids"]) > 10_000
    assert "longer than the specified maximum sequence length" not in caplog.text  # a memory model has no limit


def test_a_cached_calls_memory_is_a_view_that_later_steps_and_crops_leave_as_it_was():
    """Issue 70: a decode step returns its mems as views of the cache, not copies of mem_len rows; a row once written
    is never written again in place, so the views keep their values through later steps, a crop and the appends
    after it."""
    from hf_plm_ext.modeling.transfo_xl import TransfoXLCache

    model = tiny_model()
    cache = TransfoXLCache(model.config.n_layer)
    ids = torch.randint(0, 50, (2, 12))
    with torch.no_grad():
        model(ids[:, :8], past_key_values=cache, use_cache=True)
        step = model.transformer(ids[:, 8:9], past_key_values=cache, use_cache=True)
        rows = cache.layers[0].buffers["rows"]
        assert step.mems[0].untyped_storage().data_ptr() == rows.untyped_storage().data_ptr()  # no copy
        kept = [memory.clone() for memory in step.mems]
        model(ids[:, 9:11], past_key_values=cache, use_cache=True)
        cache.crop(-3)  # back to 8 tokens seen, then other tokens where the cropped ones were
        model(torch.randint(0, 50, (2, 3)), past_key_values=cache, use_cache=True)
    for memory, before in zip(step.mems, kept):
        assert torch.equal(memory, before)
