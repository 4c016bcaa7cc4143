"""Reversible LSH layers and models: the reversible backward, LSH against full attention, masks, seeds, any length,
bad configs (issue 21). The family tester covers what every model class does."""

import json
from unittest import mock

import pytest
import torch
from huggingface_hub.errors import StrictDataclassError

from hf_plm_ext import RevLSHConfig, RevLSHForCausalLM, RevLSHForMaskedLM, RevLSHModel
from hf_plm_ext.modeling.rev_lsh import FullSelfAttention, LocalSelfAttention, LSHSelfAttention, rotate_by_position
from hf_plm_ext.modeling.rev_lsh.reversible_rev_lsh import ReversibleFunction

from family_common import tiny_rev_lsh

KINDS = ["lsh", "local", "full"]


def layer(kind, causal=False, **overrides):
    shared = dict(hidden_size=32, num_heads=2, head_size=16, causal=causal)
    if kind == "lsh":
        return LSHSelfAttention(**shared, **{**dict(chunk_length=8, num_hashes=2, num_buckets=4, hash_seed=0),
                                             **overrides})
    if kind == "local":
        return LocalSelfAttention(**shared, **{**dict(chunk_length=8), **overrides})
    return FullSelfAttention(**shared, **overrides)


@pytest.mark.parametrize("positions", ["absolute", "rotary"])
def test_reversible_gradients_equal_those_of_the_same_weights_without_the_reversible_function(positions):
    """float64, dropout on everywhere (replayed in backward), every layer kind, two hash rounds, padding inside."""
    torch.manual_seed(0)
    dropout = dict(hidden_dropout_prob=0.1, lsh_attention_probs_dropout_prob=0.1,
                   local_attention_probs_dropout_prob=0.1, full_attention_probs_dropout_prob=0.1)
    settings = dict(attn_layers=["local", "lsh", "full", "lsh"], hash_seed=None, position_embedding_type=positions,
                    **dropout)
    reversible = RevLSHForMaskedLM(tiny_rev_lsh(**settings)).double().train()
    plain = RevLSHForMaskedLM(tiny_rev_lsh(**settings, reversible=False)).double().train()
    plain.load_state_dict(reversible.state_dict())
    ids = torch.randint(5, 99, (2, 30))  # 30: padded to 32 inside

    def gradients(model):
        model.zero_grad()
        torch.manual_seed(5)  # the same hashes and dropout masks in both forwards
        loss = model(ids, labels=ids).loss
        loss.backward()
        return loss, {name: p.grad for name, p in model.named_parameters()}

    reversible_loss, reversible_grads = gradients(reversible)
    plain_loss, plain_grads = gradients(plain)
    assert torch.equal(reversible_loss, plain_loss)
    assert reversible_grads.keys() == plain_grads.keys()
    for name, grad in plain_grads.items():
        torch.testing.assert_close(reversible_grads[name], grad, rtol=1e-10, atol=1e-12, msg=name)
    assert any(grad.abs().sum() > 0 for grad in plain_grads.values())


def test_a_compiled_reversible_step_is_one_graph_with_the_gradients_of_the_plain_stack():
    """torch.compile: the model's forward, the reversible function and its backward in one graph (no break), and,
    float64 with dropout everywhere, the loss and gradients of the same weights without the reversible function
    under the same seed (the masks drawn from the layers' seeds, the same in the recompute)."""
    torch.manual_seed(0)
    dropout = dict(hidden_dropout_prob=0.1, lsh_attention_probs_dropout_prob=0.1,
                   local_attention_probs_dropout_prob=0.1, full_attention_probs_dropout_prob=0.1)
    settings = dict(attn_layers=["local", "lsh", "full", "lsh"], hash_seed=None, **dropout)
    reversible = RevLSHForMaskedLM(tiny_rev_lsh(**settings)).double().train()
    plain = RevLSHForMaskedLM(tiny_rev_lsh(**settings, reversible=False)).double().train()
    plain.load_state_dict(reversible.state_dict())
    ids = torch.randint(5, 99, (2, 30))
    explained = torch._dynamo.explain(reversible)(input_ids=ids, labels=ids)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons

    def compiled_step(model, seed):
        model.zero_grad()
        torch.manual_seed(seed)
        loss = torch.compile(model, backend="aot_eager", fullgraph=True)(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss, {name: p.grad for name, p in model.named_parameters()}

    reversible_loss, reversible_grads = compiled_step(reversible, 5)
    plain_loss, plain_grads = compiled_step(plain, 5)
    assert torch.equal(reversible_loss, plain_loss)
    for name, grad in plain_grads.items():
        torch.testing.assert_close(reversible_grads[name], grad, rtol=1e-10, atol=1e-12, msg=name)
    assert any(grad.abs().sum() > 0 for grad in plain_grads.values())
    assert compiled_step(reversible, 6)[0] != reversible_loss  # other seeds, other masks

    # every layer's states and probabilities come out of the compiled function as out of the eager one
    reversible.eval()  # (no dropout: the compiled masks are not the eager ones) and gradients on: the function runs
    asked = dict(input_ids=ids, labels=ids, output_hidden_states=True, output_attentions=True)
    torch.manual_seed(7)  # the same hashes
    compiled = torch.compile(reversible, backend="aot_eager", fullgraph=True)(**asked)
    torch.manual_seed(7)
    eager = reversible(**asked)
    assert len(compiled.hidden_states) == len(eager.hidden_states) == 5
    for got, expected in zip([*compiled.hidden_states, *compiled.attentions],
                             [*eager.hidden_states, *eager.attentions]):
        torch.testing.assert_close(got, expected)


def test_a_compiled_step_through_the_fused_kernel_has_the_eager_gradients():
    """Without attention dropout the layers attend through the fused kernel, which a traced graph runs in pieces of
    a length-free count (each round's edges and inner chunks), with gathers whose backward gathers: float64, two
    rounds of 8 chunks and a padded row, the compiled reversible step's loss and gradients are the eager plain
    stack's."""
    torch.manual_seed(0)
    settings = dict(attn_layers=["lsh", "local", "lsh"], position_embedding_type="rotary", hash_seed=0,
                    lsh_attention_probs_dropout_prob=0.0)
    reversible = RevLSHForMaskedLM(tiny_rev_lsh(**settings)).double().train()
    plain = RevLSHForMaskedLM(tiny_rev_lsh(**settings, reversible=False)).double().train()
    plain.load_state_dict(reversible.state_dict())
    ids = torch.randint(5, 99, (2, 30))
    mask = torch.ones_like(ids)
    mask[1, 23:] = 0

    def step(model, call):
        loss = call(input_ids=ids, attention_mask=mask, labels=ids).loss
        loss.backward()
        return loss, {name: p.grad for name, p in model.named_parameters()}

    compiled_loss, compiled_grads = step(reversible, torch.compile(reversible, backend="aot_eager", fullgraph=True))
    eager_loss, eager_grads = step(plain, plain)
    torch.testing.assert_close(compiled_loss, eager_loss, rtol=1e-12, atol=0)
    for name, grad in eager_grads.items():
        torch.testing.assert_close(compiled_grads[name], grad, rtol=1e-9, atol=1e-12, msg=name)
    assert all(grad.abs().sum() > 0 for name, grad in eager_grads.items() if "attention" in name)


@pytest.mark.parametrize("traced", [False, True])
def test_seeded_dropout_masks_repeat_under_one_seed_and_keep_the_asked_share(traced):
    """Eager (torch's generator) and traced (the counter-based hash): one seed and count, one mask; another seed or
    the next count, another; kept with probability 1 - p, scaled by 1 / (1 - p)."""
    from hf_plm_ext.modeling.rev_lsh.reversible_rev_lsh import SeededMasks

    def two_masks(seed):
        masks = SeededMasks(seed)
        like = torch.zeros(200, 500)
        return masks.keep(like, 0.1), masks.keep(like, 0.1)

    draw = torch.compile(two_masks, backend="eager", fullgraph=True) if traced else two_masks
    first, second = draw(torch.tensor(7))
    again, _ = draw(torch.tensor(7))
    other, _ = draw(torch.tensor(8))
    assert torch.equal(first, again) and not torch.equal(first, second) and not torch.equal(first, other)
    assert first.unique().tolist() == [0.0, pytest.approx(1 / 0.9)]
    for mask in (first, second, other):
        assert abs(float(mask.ne(0).float().mean()) - 0.9) < 0.01
    assert abs(float((first.ne(0) & second.ne(0)).float().mean()) - 0.81) < 0.01  # independent draws


def test_the_reversible_forward_keeps_no_activations_of_the_layers():
    """Autograd holds the stack's input and output only: the saved tensors do not grow with depth."""
    def saved_bytes(depth, reversible=True):
        config = tiny_rev_lsh(attn_layers=["local", "lsh"] * depth, reversible=reversible)
        model = RevLSHModel(config).train()
        total = 0

        def pack(tensor):
            nonlocal total
            total += tensor.numel() * tensor.element_size()
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            model(torch.randint(5, 99, (2, 64))).last_hidden_state.sum()
        return total

    assert saved_bytes(8) == saved_bytes(2) < saved_bytes(2, reversible=False) < saved_bytes(8, reversible=False)



def test_sorting_by_a_unique_key_gives_the_stable_sort_s_order():
    """The LSH order is (bucket, position) through the argsort of bucket x length + position (an operator ONNX
    has), equal to a stable sort of the buckets, ties and every integer type included."""
    from hf_plm_ext.modeling.rev_lsh.attention_rev_lsh import sort_by_bucket

    for dtype, high in ((torch.uint8, 9), (torch.int16, 300), (torch.int64, 5)):
        buckets = torch.randint(0, high, (2, 3, 200)).to(dtype)
        assert torch.equal(sort_by_bucket(buckets), buckets.long().argsort(dim=-1, stable=True))


def test_the_backward_record_keeps_buckets_in_the_smallest_integer_type():
    """The reversible backward keeps every LSH layer's buckets: one byte each while rounds x (buckets + the padding
    bucket) fit in uint8, two to 32,767 (int64 kept 8 bytes for every token, round and head of every layer)."""
    from hf_plm_ext.modeling.rev_lsh.attention_rev_lsh import bucket_dtype, offset_buckets

    assert [bucket_dtype(n) for n in (255, 256, 32767, 32768)] == [torch.uint8, torch.int16, torch.int16,
                                                                     torch.int32]
    raw = torch.randint(0, 64, (1, 2, 2, 10))
    mask = torch.ones(1, 10, dtype=torch.long)
    mask[0, -2:] = 0
    offset = offset_buckets(raw, 64, mask)
    assert offset.dtype == torch.uint8 and int(offset.max()) <= 2 * 65 - 1
    assert torch.equal(offset.long(), offset_buckets(raw, 64, mask).long())
    assert offset_buckets(raw, 200).dtype == torch.int16  # 2 rounds x 200 buckets
    config = tiny_rev_lsh(attn_layers=["lsh", "local", "lsh"])
    model = RevLSHModel(config).train()
    kept = []
    original = ReversibleFunction.forward

    def spy(ctx, *args):
        out = original(ctx, *args)
        kept.extend(record.get("buckets") for record in ctx.records)
        return out

    with mock.patch.object(ReversibleFunction, "forward", staticmethod(spy)):
        model(torch.randint(5, 99, (2, 64))).last_hidden_state.sum().backward()
    assert [None if b is None else b.dtype for b in kept] == [torch.uint8, None, torch.uint8]


@pytest.mark.parametrize("output_hidden_states", [False, True])
def test_inference_keeps_the_layers_hidden_states_only_when_asked(output_hidden_states):
    """Without gradients the stack runs layer by layer; at its last layer the joined hidden states of the earlier
    layers are alive only if ``output_hidden_states`` asked for them (kept all, inference memory grew with depth)."""
    import gc

    depth, seq = 6, 48
    model = RevLSHModel(tiny_rev_lsh(attn_layers=["local", "lsh"] * (depth // 2))).eval()
    width = 2 * model.config.hidden_size
    alive = []

    def count_joined_hidden_states(*_):
        alive.append(sum(1 for o in gc.get_objects() if type(o) is torch.Tensor and tuple(o.shape) == (1, seq, width)))

    model.layers[-1].register_forward_hook(count_joined_hidden_states)
    with torch.no_grad():
        model(torch.randint(5, 99, (1, seq)), output_hidden_states=output_hidden_states)
    assert alive[0] >= depth if output_hidden_states else alive[0] <= 1
def test_lsh_attention_approaches_full_attention_as_hash_rounds_grow():
    torch.manual_seed(0)
    hidden = torch.randn(2, 128, 32)
    errors = []
    for num_hashes in (1, 2, 4, 8):
        squared = []
        for seed in range(5):
            torch.manual_seed(seed)
            lsh = layer("lsh", chunk_length=16, num_hashes=num_hashes, num_buckets=8, hash_seed=100 + seed).eval()
            full = layer("lsh", chunk_length=128).eval()  # one chunk: the same shared-QK attention over everything
            full.load_state_dict(lsh.state_dict())
            with torch.no_grad():
                squared.append((lsh(hidden)[0] - full(hidden)[0]).pow(2).mean())
        errors.append(torch.stack(squared).mean().item())
    assert errors == sorted(errors, reverse=True) and errors[-1] < errors[0] / 3, errors  # seen: 0.017 -> 0.0028


@pytest.mark.parametrize("rotary_base", [None, 10000.0])
@pytest.mark.parametrize("kind", KINDS)
def test_causal_attention_never_reads_a_later_position(kind, rotary_base):
    torch.manual_seed(0)
    attention = layer(kind, causal=True, rotary_base=rotary_base).eval()
    hidden = torch.randn(1, 40, 32, requires_grad=True)
    out = attention(hidden)[0]
    for position in (0, 13, 39):
        (grad,) = torch.autograd.grad(out[0, position].sum(), hidden, retain_graph=True)
        assert grad[0, position + 1:].abs().sum() == 0 and grad[0, :position + 1].abs().sum() > 0
    if kind != "lsh":  # (LSH's buckets, not differentiable, depend on every position: the chunks do)
        changed = hidden.detach().clone()
        changed[0, 20:] = torch.randn(20, 32)
        with torch.no_grad():
            torch.testing.assert_close(attention(changed)[0][0, :20], out.detach()[0, :20])


@pytest.mark.parametrize("kind", KINDS)
def test_padding_receives_no_attention_and_its_content_changes_no_real_token(kind):
    torch.manual_seed(0)
    attention = layer(kind).eval()
    hidden = torch.randn(2, 37, 32)
    mask = torch.ones(2, 37, dtype=torch.long)
    mask[1, 25:] = 0
    with torch.no_grad():
        out, _, probs = attention(hidden, mask, output_attentions=True)
        noisy = hidden.clone()
        noisy[1, 25:] = 100 * torch.randn(12, 32)
        torch.testing.assert_close(attention(noisy, mask)[0][1, :25], out[1, :25])
        if kind == "full":
            # fewer padding tokens: the same real outputs. Not so for the chunked kinds: as in trax and
            # transformers the first chunk's look-back is the last chunk (circular), whose content the padding's
            # length decides; and LSH's hash rounds are aligned by the count.
            torch.testing.assert_close(attention(hidden[1:, :30], mask[1:, :30])[0][0, :25], out[1, :25])
    if kind == "full":
        assert probs[1, :, :, 25:].abs().max() == 0


def test_lsh_buckets_depend_only_on_the_seed():
    hidden = torch.randn(2, 64, 32)
    attention = layer("lsh", hash_seed=3)
    first, second = attention(hidden)[1], attention(hidden)[1]
    assert torch.equal(first, second) and first.shape == (2, 2, 2, 64)
    other = layer("lsh", hash_seed=4)
    other.load_state_dict(attention.state_dict())
    assert not torch.equal(other(hidden)[1], first)
    unseeded = layer("lsh", hash_seed=None)
    unseeded.load_state_dict(attention.state_dict())
    torch.manual_seed(1)
    drawn = unseeded(hidden)[1]
    torch.manual_seed(1)
    assert torch.equal(unseeded(hidden)[1], drawn)
    state = torch.get_rng_state()
    attention(hidden)
    assert torch.equal(torch.get_rng_state(), state)  # a seeded layer leaves torch's RNG alone


def test_lsh_bucket_count_is_chosen_from_the_length_and_factorised_when_large():
    from hf_plm_ext.modeling.rev_lsh.attention_rev_lsh import auto_num_buckets

    assert auto_num_buckets(1024, 64, 4096) == 32
    assert auto_num_buckets(65536, 64, 65536) == [32, 64]  # above 2 * max(sqrt(65536 / 64), 64) = 128


@pytest.mark.parametrize("length", [1, 3, 16, 37, 64])
def test_any_length_trains_and_the_padding_is_cut(length):
    model = RevLSHForCausalLM(tiny_rev_lsh(lsh_attn_chunk_length=8, local_attn_chunk_length=4)).train()
    ids = torch.randint(5, 99, (2, length))
    outputs = model(ids, labels=ids, output_hidden_states=True)
    assert outputs.logits.shape == (2, length, 99)
    assert all(h.shape == (2, length, 64) for h in outputs.hidden_states)
    if length > 1:  # (one token has no next token to predict)
        outputs.loss.backward()
        assert all(p.grad is not None for p in model.parameters())
        if length >= 16:  # (below, an LSH query may have one key it can see: a softmax of one has no gradient)
            assert [name for name, p in model.named_parameters() if not p.grad.any()] == []


def test_a_padded_batch_gives_each_row_what_it_gives_alone():
    """Right padding with a mask: a causal model of full and local layers gives the real tokens the unpadded row's
    outputs (bidirectional local attention's first chunk looks back at the last one, circularly, as in trax)."""
    model = RevLSHModel(tiny_rev_lsh(attn_layers=["local", "full"], is_decoder=True)).eval()
    short = torch.randint(5, 99, (1, 9))
    batch = torch.cat([short, torch.zeros(1, 6, dtype=torch.long)], dim=1)
    mask = torch.tensor([[1] * 9 + [0] * 6])
    with torch.no_grad():
        torch.testing.assert_close(model(batch, attention_mask=mask).last_hidden_state[:, :9],
                                   model(short).last_hidden_state)


def step_by_step(model, ids, prompt_length, attention_mask=None):
    """Logits of each position after the prompt, decoded one token at a time from the cache, beside those of the
    last position of a call over the sequence up to it (no cache)."""
    decoded, recomputed = [], []
    with torch.no_grad():
        mask = None if attention_mask is None else attention_mask[:, :prompt_length]
        cache = model(ids[:, :prompt_length], attention_mask=mask, use_cache=True).cache
        for position in range(prompt_length, ids.shape[1]):
            mask = None if attention_mask is None else attention_mask[:, :position + 1]
            decoded.append(model(ids[:, position:position + 1], attention_mask=mask, cache=cache).logits[:, 0])
            recomputed.append(model(ids[:, :position + 1], attention_mask=mask, use_cache=False).logits[:, -1])
    return torch.stack(decoded, 1), torch.stack(recomputed, 1)


@pytest.mark.parametrize("positions", ["absolute", "rotary"])
def test_decoding_from_the_cache_equals_recomputing_for_full_and_local_layers_and_a_padded_prompt(positions):
    torch.manual_seed(0)
    model = RevLSHForCausalLM(tiny_rev_lsh(attn_layers=["local", "full", "local"],
                                           position_embedding_type=positions)).eval()
    ids = torch.randint(5, 99, (2, 23))
    mask = torch.ones(2, 23, dtype=torch.long)
    mask[1, :3] = 0  # left padding, as a batched prompt has
    decoded, recomputed = step_by_step(model, ids, 3, mask)  # from one chunk to six: the circular look-back too
    torch.testing.assert_close(decoded, recomputed, atol=1e-5, rtol=1e-4)
    with torch.no_grad():  # several new tokens in one call: the same as one at a time
        cache = model(ids[:, :5], use_cache=True).cache
        together = model(ids[:, 5:12], cache=cache).logits
    torch.testing.assert_close(together, model(ids[:, :12], use_cache=False).logits[:, 5:], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("num_hashes,positions", [(1, "absolute"), (3, "absolute"), (3, "rotary")])
def test_an_lsh_layer_decodes_what_the_last_position_of_a_recompute_gives(num_hashes, positions):
    """One LSH layer (fixed rotations and bucket count): each decoded token equals the recompute's last position,
    through the sorted chunks, their look-back across rounds and the round combination."""
    torch.manual_seed(0)
    model = RevLSHForCausalLM(tiny_rev_lsh(attn_layers=["lsh"], num_buckets=4, num_hashes=num_hashes,
                                           position_embedding_type=positions)).eval()
    ids = torch.randint(5, 99, (2, 30))
    decoded, recomputed = step_by_step(model, ids, 2)
    torch.testing.assert_close(decoded, recomputed, atol=1e-5, rtol=1e-4)


def test_generate_uses_the_cache_and_a_bidirectional_model_refuses_one():
    torch.manual_seed(0)
    model = RevLSHForCausalLM(tiny_rev_lsh(attn_layers=["local", "full"])).eval()
    prompt = torch.randint(5, 99, (2, 5))
    calls = []
    model.register_forward_pre_hook(lambda module, args, kwargs: calls.append(kwargs["input_ids"].shape[1]),
                                    with_kwargs=True)
    cached = model.generate(prompt, max_new_tokens=8, do_sample=False, num_beams=2)
    assert calls[0] == 5 and set(calls[1:]) == {1}  # the prompt once, then one token a step
    assert torch.equal(cached, model.generate(prompt, max_new_tokens=8, do_sample=False, num_beams=2,
                                              use_cache=False))
    with pytest.raises(ValueError, match="causal"):
        RevLSHModel(tiny_rev_lsh())(prompt, use_cache=True)


def test_bf16_autocast_and_fp16_masks_stay_finite():
    model = RevLSHForMaskedLM(tiny_rev_lsh()).train()
    ids = torch.randint(5, 99, (2, 21))
    mask = torch.ones(2, 21, dtype=torch.long)
    mask[0, 15:] = 0
    full_precision = model(ids, attention_mask=mask, labels=ids).loss
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(ids, attention_mask=mask, labels=ids).loss
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in model.parameters())
    assert abs(loss.item() - full_precision.item()) < 0.02 * full_precision.item()  # bfloat16's 8 bits of mantissa
    # one LSH chunk (32 >= the padded 21 tokens): float16's rounding may move a token to another bucket, which
    # changes its output by more than rounding (4 % of the logits off by up to 0.06 under torch 2.11 on another CPU; flips in 3 of 40 seeds here)
    half = RevLSHForMaskedLM(tiny_rev_lsh(lsh_attn_chunk_length=32)).eval()
    with torch.no_grad():
        expected = half(ids, attention_mask=mask).logits
        logits = half.half()(ids, attention_mask=mask).logits
    assert logits.dtype == torch.float16 and torch.isfinite(logits).all()
    real = mask.bool()  # (padding's outputs are anything)
    torch.testing.assert_close(logits.float()[real], expected[real], atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("overrides,field", [
    (dict(num_buckets=5), "num_buckets"),
    (dict(num_buckets=[4, 3]), "num_buckets"),
    (dict(lsh_attn_chunk_length=0), "lsh_attn_chunk_length"),
    (dict(local_attn_chunk_length=100, max_position_embeddings=64), "local_attn_chunk_length"),
    (dict(attn_layers=["lsh", "sparse"]), "attn_layers"),
    (dict(position_embedding_type="axial", axial_pos_embds_dim=[8, 8]), "axial_pos_embds_dim"),
    (dict(position_embedding_type="rotary", attention_head_size=15), "attention_head_size"),
    (dict(position_embedding_type="relative"), "position_embedding_type"),
])
def test_a_bad_config_names_the_field(overrides, field):
    with pytest.raises((ValueError, StrictDataclassError), match=field):
        tiny_rev_lsh(**overrides)


def test_a_padding_mask_of_the_wrong_shape_is_refused():
    model = RevLSHModel(tiny_rev_lsh()).eval()
    with pytest.raises(ValueError, match=r"attention_mask must be \[batch, seq\] = \[2, 9\]"):
        model(torch.randint(5, 99, (2, 9)), attention_mask=torch.ones(2, 8))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model(torch.randint(5, 99, (1, 65)))


def test_generation_past_the_position_table_is_refused_not_wrapped():
    """A prompt longer than the table, and decoding from the cache past its end: one clear error each."""
    model = RevLSHForCausalLM(tiny_rev_lsh(max_position_embeddings=16, is_decoder=True)).eval()
    with pytest.raises(ValueError, match=r"20 positions, more than max_position_embeddings \(16\)"):
        model.generate(torch.randint(5, 99, (1, 20)), max_new_tokens=2, pad_token_id=0)
    with pytest.raises(ValueError, match=r"position_ids must be in \[0, 16\)"):
        model.generate(torch.randint(5, 99, (1, 12)), max_new_tokens=8, min_new_tokens=8, pad_token_id=0)


def test_rotary_scores_depend_on_content_and_distance_alone():
    torch.manual_seed(0)
    query, key = torch.randn(2, 1, 1, 1, 16).unbind(0)
    at = lambda x, position: rotate_by_position(x, torch.tensor([position]), 10000.0)  # noqa: E731
    scores = [(at(query, start + 5) * at(key, start)).sum() for start in (0, 7, 300)]
    torch.testing.assert_close(scores[1], scores[0])
    torch.testing.assert_close(scores[2], scores[0])
    assert not torch.allclose((at(query, 6) * at(key, 0)).sum(), scores[0])  # another distance, another score
    torch.testing.assert_close(at(query, 9).norm(), query.norm())  # a rotation: LSH's unit keys stay unit


def test_a_rotary_model_has_no_position_weights_takes_any_length_and_refuses_position_ids():
    torch.manual_seed(0)
    config = tiny_rev_lsh(position_embedding_type="rotary", attn_layers=["full", "full"])
    model = RevLSHForMaskedLM(config).eval()
    assert not [name for name in model.state_dict() if "position" in name]
    ids = torch.randint(5, 99, (1, 2 * config.max_position_embeddings + 3))  # beyond any table
    with torch.no_grad():
        assert model(ids).logits.shape == (1, ids.shape[1], config.vocab_size)
        # full attention alone is blind to order; with rotary positions shuffling the rest changes the first output
        shuffled = ids[:, torch.cat([torch.tensor([0]), 1 + torch.randperm(ids.shape[1] - 1)])]
        assert not torch.allclose(model(shuffled).logits[:, 0], model(ids).logits[:, 0], atol=1e-4)
    with pytest.raises(ValueError, match="position_ids"):
        model(ids[:, :8], position_ids=torch.arange(8)[None])


def test_axial_positions_give_any_length_and_follow_the_factorisation():
    config = tiny_rev_lsh(position_embedding_type="axial", axial_pos_shape=[8, 8], axial_pos_embds_dim=[12, 20])
    model = RevLSHModel(config).train()
    assert model(torch.randint(5, 99, (1, 13))).last_hidden_state.shape == (1, 13, 32)  # 13 is not 8 x 8
    axial = model.embeddings.position_embeddings
    encoding = axial(torch.tensor([[19]]))[0, 0]
    torch.testing.assert_close(encoding, torch.cat([axial.weights[0][19 // 8, 0], axial.weights[1][0, 19 % 8]]))
    # a position past the 8 x 8 table is refused, as an nn.Embedding refuses an id past its rows (it would wrap)
    ids = torch.randint(5, 99, (1, 4))
    with pytest.raises(ValueError, match=r"position_ids must be in \[0, 64\)"):
        model(ids, position_ids=torch.tensor([[0, 1, 2, 64]]))
    absolute = RevLSHModel(tiny_rev_lsh())
    with pytest.raises(ValueError, match=r"position_ids must be in \[0, 64\)"):
        absolute(ids, position_ids=torch.tensor([[60, 61, 62, 70]]))
    model(ids, position_ids=torch.tensor([[60, 61, 62, 63]]))  # the last ones are in

def test_from_size_and_the_layer_pattern():
    config = RevLSHConfig.from_size("small", vocab_size=1000, num_hashes=4)
    assert config.num_hidden_layers == 6 and config.num_hashes == 4 and config.hidden_size == 256
    with pytest.raises(ValueError, match="size must be one of"):
        RevLSHConfig.from_size("huge")


REFORMER = dict(vocab_size=99, hidden_size=32, num_attention_heads=2, attention_head_size=16, feed_forward_size=64,
                attn_layers=["local", "lsh", "local", "lsh"], lsh_attn_chunk_length=8, local_attn_chunk_length=4,
                num_hashes=2, hash_seed=0, max_position_embeddings=64)


@pytest.mark.parametrize("architecture,overrides", [
    ("ReformerModelWithLMHead", dict(is_decoder=True, axial_pos_shape=[8, 8], axial_pos_embds_dim=[12, 20])),
    ("ReformerForMaskedLM", dict(axial_pos_shape=[8, 8], axial_pos_embds_dim=[12, 20], num_buckets=[2, 2])),
    ("ReformerForSequenceClassification", dict(axial_pos_embds=False, num_labels=3, hidden_dropout_prob=0.0,
                                               lsh_attention_probs_dropout_prob=0.0)),
])
def test_a_transformers_reformer_checkpoint_converts_with_the_same_logits(architecture, overrides, tmp_path, capsys):
    import transformers
    from transformers import AutoModel, ReformerConfig

    from conftest import run_cli

    torch.manual_seed(0)
    reformer = getattr(transformers, architecture)(ReformerConfig(**{**REFORMER, **overrides})).eval()
    for parameter in reformer.parameters():  # far from the init, so that every weight shows
        torch.nn.init.normal_(parameter, std=0.5)
    reformer.save_pretrained(tmp_path / "reformer")
    saved = json.loads((tmp_path / "reformer" / "config.json").read_text())
    # a dropout of 0 as other writers' config.json files hold it: an int
    saved.update({name: 0 for name, value in saved.items() if name.endswith("dropout_prob") and value == 0.0})
    (tmp_path / "reformer" / "config.json").write_text(json.dumps(saved))
    code, stdout, stderr = run_cli(["convert", "reformer", tmp_path / "reformer", tmp_path / "rev"], capsys)
    assert code == 0, stderr[-2000:]
    auto_name = {"ReformerModelWithLMHead": "AutoModelForCausalLM", "ReformerForMaskedLM": "AutoModelForMaskedLM",
                 "ReformerForSequenceClassification": "AutoModelForSequenceClassification"}[architecture]
    converted = getattr(transformers, auto_name).from_pretrained(tmp_path / "rev").eval()
    assert converted.config.model_type == "rev-lsh"
    for length in (3, 37, 40):  # one chunk; padded inside (to 40) by both; chunked without padding
        ids = torch.randint(0, 99, (2, length))
        with torch.no_grad():
            torch.testing.assert_close(converted(ids).logits, reformer(ids).logits, rtol=1e-5, atol=1e-5)
        # a padding mask (left, inside, right): every position, the padding's too, as transformers computes it
        # (a padding query that sees no key weighs its window's keys alike, in both the fused and the plain path)
        mask = torch.ones(2, length, dtype=torch.long)
        mask[0, :length // 3] = 0
        mask[1, length // 2:] = 0
        mask[1, 1] = 0
        with torch.no_grad():
            torch.testing.assert_close(converted(ids, attention_mask=mask).logits,
                                       reformer(ids, attention_mask=mask).logits, rtol=1e-5, atol=1e-5)
    assert isinstance(AutoModel.from_pretrained(tmp_path / "rev"), RevLSHModel)


def test_converting_something_else_is_refused_by_name(tmp_path, capsys):
    from conftest import run_cli

    RevLSHModel(tiny_rev_lsh()).save_pretrained(tmp_path / "not-reformer")
    code, _, stderr = run_cli(["convert", "reformer", tmp_path / "not-reformer", tmp_path / "out"], capsys)
    assert code == 2 and "model_type is 'rev-lsh', not 'reformer'" in stderr and not (tmp_path / "out").exists()
    # the folder's config.json named instead of the folder: the folder is read
    code, _, stderr = run_cli(["convert", "reformer", tmp_path / "not-reformer" / "config.json", tmp_path / "out"],
                              capsys)
    assert code == 2 and "model_type is 'rev-lsh', not 'reformer'" in stderr and "config.json/config.json" not in stderr
    code, _, stderr = run_cli(["convert", "reformer", tmp_path / "not-reformer", tmp_path / "not-reformer"], capsys)
    assert code == 2 and "already exists; give a new folder or remove it" in stderr and "--output" not in stderr


def test_pretrain_rev_lsh_masked_and_causal_then_finetune_from_the_command_line(tmp_path, english_tokenizer_dir,
                                                                                shared_data, capsys):
    import json

    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    from conftest import run_cli
    from hf_plm_ext import RevLSHForSequenceClassification, render_card

    common = ["--corpus", shared_data / "corpus/en/gutenberg/11-0.txt", "--tokenizer", english_tokenizer_dir,
              "--size", "tiny", "--max_seq_length", 512, "--max_steps", 20, "--learning_rate", 2e-3,
              "--per_device_train_batch_size", 4, "--disable_tqdm", "true", "--report_to", "none"]
    code, _, stderr = run_cli(["pretrain", "rev-lsh", *common, "--output", tmp_path / "mlm"], capsys)
    assert code == 0, stderr[-3000:]
    results = json.loads((tmp_path / "mlm/pretrain_results.json").read_text())
    assert results["model_type"] == "rev-lsh" and results["final_eval_loss"] < results["initial_eval_loss"]
    card = render_card(tmp_path / "mlm", repo_id="someone/rev-lsh-tiny")
    assert "| layers (attention of each) | 2 (local, lsh) |" in card.text and "kitaev2020reformer" in card.text

    code, stdout, stderr = run_cli(["finetune", "glue", "--task", "sst2", "--model", tmp_path / "mlm", "--output",
                                    tmp_path / "sst2", "--data-dir", shared_data / "glue/SST-2",
                                    "--max_train_samples", 32, "--max_steps", 2, "--disable_tqdm", "true",
                                    "--report_to", "none"], capsys)
    assert code == 0, stderr[-3000:]
    assert isinstance(AutoModelForSequenceClassification.from_pretrained(tmp_path / "sst2"),
                      RevLSHForSequenceClassification)

    # a causal LM's tokens carry their spaces (WordPiece's are refused: test_bad_input)
    code, _, stderr = run_cli(["tokenizer", "train", "--corpus", common[1], "--kind", "bpe", "--vocab-size", 2000,
                               "--output", tmp_path / "bpe"], capsys)
    assert code == 0, stderr[-2000:]
    causal_common = [*common[:2], "--tokenizer", tmp_path / "bpe", *common[4:]]
    code, _, stderr = run_cli(["pretrain", "rev-lsh", *causal_common, "--causal", "true", "--model", tmp_path / "mlm",
                               "--output", tmp_path / "wrong"], capsys)
    assert code == 2 and "is bidirectional: drop --causal to continue it" in stderr, stderr[-2000:]
    code, _, stderr = run_cli(["pretrain", "rev-lsh", *causal_common, "--causal", "true", "--output",
                               tmp_path / "clm"], capsys)
    assert code == 0, stderr[-3000:]
    causal = AutoModelForCausalLM.from_pretrained(tmp_path / "clm").eval()
    assert causal.config.is_decoder
    # a new model's positions are rotary: no position weights; its saved config says so
    assert causal.config.position_embedding_type == "rotary"
    assert not [name for name in causal.state_dict() if "position" in name]
    generated = causal.generate(torch.tensor([[5, 6, 7]]), max_new_tokens=4, do_sample=False)
    greedy = torch.tensor([[5, 6, 7]])
    with torch.no_grad():
        for _ in range(4):  # greedy by hand: each step's most likely next token, the whole prefix recomputed
            greedy = torch.cat([greedy, causal(greedy).logits[:, -1:].argmax(-1)], dim=1)
    assert torch.equal(generated, greedy)


def test_low_and_double_precision_keep_their_dtypes_through_the_lsh_rounds():
    """The rounds' weights are computed in float32 (bfloat16 would not sum them to one); bfloat16 decoding with
    the cache and several rounds then stays bfloat16, and a float64 model computes in float64 throughout."""
    torch.manual_seed(0)
    config = tiny_rev_lsh(attn_layers=["lsh", "lsh"], num_hashes=2, lsh_attn_chunk_length=4, is_decoder=True)
    model = RevLSHForCausalLM(config).eval()
    prompt = torch.randint(5, 99, (1, 6))
    half = RevLSHForCausalLM(config).eval()
    half.load_state_dict(model.state_dict())
    half = half.to(torch.bfloat16)
    cached = half.generate(prompt, max_new_tokens=5, do_sample=False)
    assert torch.equal(cached, half.generate(prompt, max_new_tokens=5, do_sample=False, use_cache=False))
    double = model.double()
    with torch.no_grad():
        logits = double(prompt).logits
        ids = prompt.clone()
        ids[0, -1] = (ids[0, -1] + 1) % 99  # a later token changes nothing before it, to float64's precision
        assert logits.dtype == torch.float64
        torch.testing.assert_close(double(ids).logits[:, :-1], logits[:, :-1], rtol=0, atol=1e-12)


def test_a_saved_config_names_its_positions_even_at_the_class_default(tmp_path):
    """from_size's positions are rotary, the class default stays absolute, and config.json always names which."""
    assert RevLSHConfig.from_size("tiny", vocab_size=50).position_embedding_type == "rotary"
    RevLSHConfig(vocab_size=50).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["position_embedding_type"] == "absolute" and saved["combine_halves"] == "concat"


def masked_gradients(attention, hidden, mask, sdpa, seed=1, weigh=None):
    """``(out, d hidden, d parameters)`` of a fixed weighting of the real tokens' outputs (``mask`` None: all;
    ``weigh``: the positions that count, default the real tokens)."""
    hidden = hidden.clone().requires_grad_()
    attention.zero_grad()
    torch.manual_seed(seed)
    out = attention(hidden, mask, sdpa=sdpa)[0]
    weigh = mask if weigh is None else weigh
    real = (torch.ones(out.shape[:2], device=out.device) if weigh is None else weigh)[..., None]
    weights = torch.linspace(-1, 1, out.numel(), dtype=out.dtype, device=out.device).view_as(out) * real
    (out * weights).sum().backward()
    return out * real, hidden.grad, [parameter.grad.clone() for parameter in attention.parameters()]


def assert_same_attention(fused, plain, rtol=1e-12, atol=1e-12):
    """Two :func:`masked_gradients` results agree: outputs, input gradients, every parameter's gradient."""
    for fused_value, plain_value in zip(fused[:2] + tuple(fused[2]), plain[:2] + tuple(plain[2])):
        torch.testing.assert_close(fused_value, plain_value, rtol=rtol, atol=atol)


@pytest.mark.parametrize("kind, num_hashes", [("lsh", 1), ("lsh", 2), ("lsh", 4), ("local", 1)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("piece_bytes", [2**30, 1])
@pytest.mark.parametrize("padded", [True, False])
def test_the_fused_kernel_gives_the_plain_path_s_outputs_and_gradients(kind, num_hashes, causal, piece_bytes, padded,
                                                                       monkeypatch):
    """float64: chunks of 8 over 45 tokens (padded inside) and a padded row, or over 64 tokens and no mask (an LSH
    round's inner chunks then take one self-mask, broadcast); several rounds (whose log-sum-exp the gradient flows
    through), tokens that see only themselves (causal position 0, in two copies across rounds); the kernel over all
    chunks at once and over one chunk at a time."""
    from hf_plm_ext.modeling.rev_lsh import attention_rev_lsh

    monkeypatch.setattr(attention_rev_lsh, "PIECE_BYTES", piece_bytes)
    torch.manual_seed(0)
    attention = layer(kind, causal, **(dict(num_hashes=num_hashes) if kind == "lsh" else {})).double()
    hidden = torch.randn(2, 45 if padded else 64, 32, dtype=torch.float64)
    mask = None
    if padded:
        mask = torch.ones(2, 45, dtype=torch.long)
        mask[1, 30:] = 0
    plain, fused = (masked_gradients(attention, hidden, mask, sdpa) for sdpa in (False, True))
    assert_same_attention(fused, plain)
    assert plain[1].abs().sum() > 0


@pytest.mark.parametrize("kind, num_hashes", [("lsh", 1), ("lsh", 2), ("local", 1)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("length", [6, 45])
def test_the_fused_kernel_gives_the_plain_path_s_outputs_at_the_padding_too(kind, num_hashes, causal, dtype, length):
    """Every position counts, the padding's included, forward and gradients: left, inner and right padding, and
    rows of padding whose queries see no key at all (a causal local layer's padding query whose window is padding
    and future: the plain path weighs every key alike, exp(mask - fl(mask + log k)), which is 1 in float32; the
    kernel weighed them by their scores, 0.05-3 off), in one chunk (6 tokens) and over several (45)."""
    torch.manual_seed(0)
    attention = layer(kind, causal, **(dict(num_hashes=num_hashes) if kind == "lsh" else {})).to(dtype)
    hidden = torch.randn(3, length, 32, dtype=dtype)
    mask = torch.ones(3, length, dtype=torch.long)
    mask[0, :length // 2] = 0  # left padding: whole chunks of it
    mask[1, 1:length // 3] = 0
    mask[2, length - 4:] = 0
    everything = torch.ones_like(mask)
    plain, fused = (masked_gradients(attention, hidden, mask, sdpa, weigh=everything) for sdpa in (False, True))
    tolerance = 1e-12 if dtype == torch.float64 else 2e-5
    assert_same_attention(fused, plain, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("piece_bytes", [2**30, 1])
def test_the_fused_kernel_s_backward_carries_the_log_sum_exp_s_gradient(piece_bytes, monkeypatch):
    """gradcheck (float64) of the windowed kernel with a loss on the output and on the log-sum-exp: 3 chunks of 2
    queries, each against its window of 2 padded chunks (overlapping views), a masked key, a query that sees only
    itself; in one piece and one chunk at a time."""
    from hf_plm_ext.modeling.rev_lsh import attention_rev_lsh

    monkeypatch.setattr(attention_rev_lsh, "PIECE_BYTES", piece_bytes)
    torch.manual_seed(0)
    queries = torch.randn(2, 1, 3, 2, 4, dtype=torch.float64, requires_grad=True)
    keys, values = (torch.randn(2, 1, 4, 2, 4, dtype=torch.float64, requires_grad=True) for _ in range(2))
    query_positions = torch.tensor([[2, 3], [4, 5], [0, 1]])
    key_positions = torch.tensor([[0, 1, 2, 3], [2, 3, 4, 5], [4, 5, 0, 1]])
    key_mask = torch.ones(2, 1, 3, 4, dtype=torch.bool)
    key_mask[1, :, 0, 1] = False

    def attention(q, k, v):
        out, logsumexp, _ = attention_rev_lsh.attend_in_windows(q, k, v, query_positions, key_positions, key_mask,
                                                                causal=True)
        return out, logsumexp

    out, logsumexp = attention(queries, keys, values)
    assert logsumexp[0, 0, 2, 0] < -1e4  # position 0 sees only itself (causal)
    assert torch.autograd.gradcheck(attention, (queries, keys, values))


@pytest.mark.parametrize("positions", ["absolute", "rotary"])
def test_a_reversible_model_gives_the_same_logits_and_gradients_with_sdpa_and_eager(positions, tmp_path):
    """The reversible backward replays the fused kernel; attn_implementation picks the path on loading and by
    set_attn_implementation; output_attentions and attention dropout in training take the plain path."""
    torch.manual_seed(0)
    config = tiny_rev_lsh(attn_layers=["local", "lsh", "lsh"], is_decoder=True, position_embedding_type=positions)
    RevLSHForCausalLM(config).double().save_pretrained(tmp_path)
    models = {name: RevLSHForCausalLM.from_pretrained(tmp_path, attn_implementation=name, dtype=torch.float64)
              for name in ("sdpa", "eager")}
    assert {name: model.config._attn_implementation for name, model in models.items()} == {"sdpa": "sdpa",
                                                                                           "eager": "eager"}
    ids = torch.randint(5, 99, (2, 30))
    mask = torch.ones_like(ids)
    mask[0, 25:] = 0
    results = {}
    for name, model in models.items():
        output = model(ids, attention_mask=mask, labels=ids)
        output.loss.backward()
        results[name] = output.logits, {key: p.grad for key, p in model.named_parameters()}
    torch.testing.assert_close(results["sdpa"][0], results["eager"][0], rtol=1e-12, atol=1e-12)
    for key, grad in results["eager"][1].items():
        torch.testing.assert_close(results["sdpa"][1][key], grad, rtol=1e-10, atol=1e-12, msg=key)
    fused = models["sdpa"]
    assert all(probs is not None for probs in fused(ids, output_attentions=True).attentions)
    fused.set_attn_implementation("eager")
    assert fused.config._attn_implementation == "eager"


def test_the_fused_kernel_runs_in_low_precision_and_falls_back_with_attention_dropout():
    """bfloat16 and float16 on the CPU: close to the plain path; with attention dropout in training the plain
    path runs (the kernel has none), so the two agree exactly under one seed."""
    from hf_plm_ext.modeling.rev_lsh.attention_rev_lsh import fused_kernel_applies

    torch.manual_seed(0)
    hidden = torch.randn(2, 40, 32)
    for dtype in (torch.bfloat16, torch.float16):
        attention = layer("lsh", causal=True).to(dtype)
        with torch.no_grad():
            plain, fused = (attention(hidden.to(dtype), sdpa=sdpa)[0] for sdpa in (False, True))
        assert fused.dtype == dtype
        torch.testing.assert_close(fused.float(), plain.float(), rtol=0.02, atol=0.02)
    attention = layer("local", dropout=0.3).train()
    assert not fused_kernel_applies(hidden, attention.dropout, attention.training)
    torch.manual_seed(3)
    plain = attention(hidden, sdpa=False)[0]
    torch.manual_seed(3)
    assert torch.equal(attention(hidden, sdpa=True)[0], plain)


def test_a_character_level_causal_model_pretrains_and_eval_lm_scores_it_at_two_contexts(tmp_path, shared_data,
                                                                                         capsys):
    """A chars tokenizer has no [CLS] / [SEP]: causal blocks end with its eos alone (trained under the Trainer's
    --torch_compile); eval lm reads a causal model without segment memory one --tgt-len segment at a time and
    reports bits per character."""
    from conftest import run_cli

    book = shared_data / "corpus/en/gutenberg/11-0.txt"
    code, _, stderr = run_cli(["tokenizer", "train", "--corpus", book, "--kind", "chars", "--output",
                               tmp_path / "chars"], capsys)
    assert code == 0, stderr[-2000:]
    # through the Trainer's torch.compile (the reversible step one graph; aot_eager: inductor's C++ takes minutes)
    code, _, stderr = run_cli(["pretrain", "rev-lsh", "--causal", "true", "--corpus", book, "--tokenizer",
                               tmp_path / "chars", "--size", "tiny", "--max_seq_length", 256, "--max_steps", 3,
                               "--per_device_train_batch_size", 2, "--disable_tqdm", "true", "--report_to", "none",
                               "--torch_compile", "true", "--torch_compile_backend", "aot_eager",
                               "--output", tmp_path / "clm"], capsys)
    assert code == 0, stderr[-3000:]
    scores = {}
    for context in (32, 128):
        code, _, stderr = run_cli(["eval", "lm", "--model", tmp_path / "clm", "--corpus", book, "--tgt-len", context,
                                   "--output", tmp_path / f"at-{context}.json"], capsys)
        assert code == 0, stderr[-2000:]
        scores[context] = json.loads((tmp_path / f"at-{context}.json").read_text())
    assert scores[32]["tokens"] == scores[128]["tokens"] > 0
    assert all(0 < score["bits_per_character"] < 8 for score in scores.values())
    assert scores[32]["loss"] != scores[128]["loss"]  # each segment alone: the context differs
    code, _, stderr = run_cli(["eval", "lm", "--model", tmp_path / "clm", "--corpus", book, "--mem-len", 4], capsys)
    assert code == 2 and "the rev-lsh model has no mem_len" in stderr


def test_the_reversible_backward_recomputes_under_the_forward_s_autocast():
    """bfloat16 autocast: the reversible stack's gradients are those of the same weights without the reversible
    function (its backward recomputes each layer in bfloat16 as the forward ran it; recomputed in float32 they were
    26 % off)."""
    torch.manual_seed(0)
    fields = dict(attn_layers=["local", "lsh", "lsh", "local"], is_decoder=True, position_embedding_type="rotary")
    reversible = RevLSHForCausalLM(tiny_rev_lsh(**fields))
    plain = RevLSHForCausalLM(tiny_rev_lsh(**fields, reversible=False))
    plain.load_state_dict(reversible.state_dict())
    ids = torch.randint(5, 99, (2, 30))
    for model in (reversible, plain):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(ids, labels=ids).loss.backward()
    for (name, grad), plain_grad in zip(((n, p.grad) for n, p in reversible.named_parameters()),
                                        (p.grad for p in plain.parameters())):
        torch.testing.assert_close(grad, plain_grad, rtol=1e-4, atol=1e-5 * plain_grad.abs().max().item(), msg=name)


@pytest.mark.parametrize("kind, causal, padded", [("local", False, True), ("local", True, True),
                                                  ("local", False, False), ("lsh", True, True)])
def test_the_mask_as_cuda_s_kernel_takes_it_gives_the_same_attention(kind, causal, padded, monkeypatch):
    """CUDA's memory-efficient kernel takes the mask only in full (``[n, h, q, k]``, no broadcast dims), with rows
    that start 16-aligned, and a tensor where there is none (its backward has no None). The mask cuda_kernel_mask
    makes, handed to the CPU kernel, gives the plain path's outputs and gradients in float64: local chunks of 5
    (windows of 10 keys, a padding mask broadcast over the queries, or none at all), LSH windows of 16 keys."""
    from hf_plm_ext.modeling.rev_lsh import attention_rev_lsh

    cpu_forward, cpu_gradients, shapes = attention_rev_lsh.kernel_forward, attention_rev_lsh.kernel_gradients, []

    def as_cuda_takes_it(mask, queries, keys):
        full = attention_rev_lsh.cuda_kernel_mask(mask, queries, keys)
        assert full.shape == (*queries.shape[:-1], keys.shape[-2]) and full.stride(-1) == 1
        assert all(stride % 16 == 0 for stride in full.stride()[:-1]), full.stride()
        shapes.append(None if mask is None else tuple(mask.shape))
        return full

    monkeypatch.setattr(attention_rev_lsh, "kernel_forward",
                        lambda q, k, v, mask: cpu_forward(q, k, v, as_cuda_takes_it(mask, q, k)))
    monkeypatch.setattr(attention_rev_lsh, "kernel_gradients", lambda grad_out, q, k, v, out, lse, mask: cpu_gradients(
        grad_out, q, k, v, out, lse, as_cuda_takes_it(mask, q, k)))
    torch.manual_seed(0)
    attention = layer(kind, causal, **(dict(chunk_length=5) if kind == "local" else {})).double()
    hidden = torch.randn(2, 45, 32, dtype=torch.float64)
    mask = torch.ones(2, 45, dtype=torch.long)
    if padded:
        mask[1, 30:] = 0
    plain, fused = (masked_gradients(attention, hidden, mask if padded else None, sdpa) for sdpa in (False, True))
    assert_same_attention(fused, plain)
    assert shapes and (padded or causal or shapes[0] is None)


@pytest.mark.parametrize("kind", ["lsh", "lsh-two-rounds", "local", "full"])
def test_a_cache_s_attentions_are_the_probabilities_each_output_is_made_of(kind):
    """With a cache the layer lays its (chunked, sorted, per-round) probabilities over every position so far: the
    values weighted by them are its output, whole-sequence and decoding, padding to the chunks cut away."""
    from hf_plm_ext.modeling.rev_lsh.attention_rev_lsh import merge_heads, split_heads
    from hf_plm_ext.modeling.rev_lsh.cache_rev_lsh import RevLSHLayerCache

    torch.manual_seed(0)
    shared = dict(hidden_size=16, num_heads=2, head_size=8, causal=True)
    layer = {"lsh": lambda: LSHSelfAttention(**shared, chunk_length=4, num_buckets=4, hash_seed=0),
             "lsh-two-rounds": lambda: LSHSelfAttention(**shared, chunk_length=4, num_buckets=4, num_hashes=2,
                                                        hash_seed=0),
             "local": lambda: LocalSelfAttention(**shared, chunk_length=4),
             "full": lambda: FullSelfAttention(**shared)}[kind]().eval()
    hidden = torch.randn(2, 14, 16)
    values = split_heads((layer.value(hidden)), 2)
    with torch.no_grad():
        cache = RevLSHLayerCache()
        out, _, probs = layer(hidden[:, :11], output_attentions=True, cache=cache)
        assert probs.shape == (2, 2, 11, 11) and not probs.triu(1).any()
        torch.testing.assert_close(out, merge_heads(probs @ values[:, :, :11]), atol=1e-5, rtol=1e-4)
        for position in range(11, 14):  # decoding, each call one token; a whole-sequence call would pad to 16
            out, _, probs = layer(hidden[:, position:position + 1], output_attentions=True, cache=cache,
                                  padded_length=16 if kind != "full" else None)
            assert probs.shape == (2, 2, 1, position + 1)
            torch.testing.assert_close(out, merge_heads(probs @ values[:, :, :position + 1]), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("attn_layers,num_hashes", [(["lsh"], 1), (["lsh"], 2), (["local"], 1), (["lsh", "local"], 2),
                                                    (["full", "local"], 1)])
def test_a_draft_in_one_call_equals_decoding_it_one_token_at_a_time(attn_layers, num_hashes):
    """Issue 70, item 3: a multi-token cached call (assisted decoding's verification of a draft) runs its tokens
    through each layer together; each token still attends as it would alone, its LSH bucket placed as decoding places
    it: the logits and the cache it leaves equal one-token-at-a-time decoding's."""
    torch.manual_seed(0)
    model = RevLSHForCausalLM(tiny_rev_lsh(attn_layers=attn_layers, num_buckets=4, num_hashes=num_hashes)).eval()
    ids = torch.randint(5, 99, (2, 40))
    mask = torch.ones(2, 40, dtype=torch.long)
    mask[1, :3] = 0
    with torch.no_grad():
        together_cache = model(ids[:, :21], attention_mask=mask[:, :21], use_cache=True).cache
        together = model(ids[:, 21:], attention_mask=mask, cache=together_cache).logits
        alone_cache = model(ids[:, :21], attention_mask=mask[:, :21], use_cache=True).cache
        alone = torch.cat([model(ids[:, p:p + 1], attention_mask=mask[:, :p + 1], cache=alone_cache).logits
                           for p in range(21, 40)], dim=1)
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-4)
    assert torch.equal(together.argmax(-1), alone.argmax(-1))
    for mine, theirs in zip(together_cache.layers, alone_cache.layers):
        assert mine.get_seq_length() == theirs.get_seq_length() == 40
        for name in mine.buffers:
            if name == "buckets":
                assert torch.equal(mine[name], theirs[name])
            else:
                torch.testing.assert_close(mine[name], theirs[name], atol=1e-5, rtol=1e-4)
        if mine.counts is not None:
            assert torch.equal(mine.counts, theirs.counts)
