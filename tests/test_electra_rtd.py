import warnings

import pytest
import torch
from huggingface_hub.errors import StrictDataclassError
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForPreTraining,
    AutoModelForSequenceClassification,
    ElectraConfig,
    ElectraForMaskedLM,
    ElectraForPreTraining,
)

from hf_plm_ext import ElectraForRTDPreTraining, ElectraRTDConfig
from hf_plm_ext.modeling.electra_rtd import ElectraRTDForSequenceClassification, ElectraRTDModel


MASK, PAD, CLS, SEP = 4, 0, 2, 3


def tiny_config(**overrides):
    return ElectraRTDConfig.from_size("tiny", vocab_size=300, mask_token_id=MASK, **overrides)


def batch(rows=8, length=40, seed=0):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(10, 300, (rows, length), generator=generator)
    ids[:, 0], ids[:, -1] = CLS, SEP
    lengths = torch.randint(length // 2, length + 1, (rows,), generator=generator)
    attention_mask = (torch.arange(length)[None] < lengths[:, None]).long()
    ids = ids.masked_fill(attention_mask == 0, PAD)
    special = (ids == CLS) | (ids == SEP) | (ids == PAD)
    return ids, attention_mask, special.long()


def test_sizes_follow_the_paper():
    small = ElectraRTDConfig.from_size("small", vocab_size=30522)
    d, g = small.discriminator_config, small.generator_config
    assert (d.num_hidden_layers, d.hidden_size, d.num_attention_heads, d.intermediate_size, d.embedding_size) == \
        (12, 256, 4, 1024, 128)
    assert (g.num_hidden_layers, g.hidden_size, g.num_attention_heads, g.intermediate_size, g.embedding_size) == \
        (12, 64, 1, 256, 128)
    base = ElectraRTDConfig.from_size("base", vocab_size=30522).generator_config
    assert (base.hidden_size, base.num_attention_heads, base.intermediate_size) == (256, 4, 1024)
    assert (small.gen_weight, small.disc_weight, small.mask_prob, small.mask_replace_prob) == (1.0, 50.0, 0.15, 0.85)


def test_bad_fields_are_named():
    with pytest.raises((ValueError, StrictDataclassError), match="mask_prob"):
        tiny_config(mask_prob=1.5)
    with pytest.raises((ValueError, StrictDataclassError), match="embedding_size"):
        ElectraRTDConfig(discriminator_config=ElectraConfig(vocab_size=300, embedding_size=128, hidden_size=128,
                                                            num_attention_heads=2, intermediate_size=256),
                         generator_config=ElectraConfig(vocab_size=300, embedding_size=64, hidden_size=64,
                                                        num_attention_heads=1, intermediate_size=256))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tiny_config(generator_hidden_fraction=2.0)
    assert any("larger than the discriminator" in str(w.message) for w in caught)


def test_masking_takes_exactly_the_share_of_ordinary_tokens():
    torch.manual_seed(0)
    model = ElectraForRTDPreTraining(tiny_config())
    ids, attention_mask, special = batch(rows=64, length=64)
    shown_as_mask = kept = 0
    for _ in range(20):
        masked_ids, labels = model.mask_tokens(ids, attention_mask, special)
        selected = labels != -100
        ordinary = (special == 0) & (attention_mask == 1)
        expected = (ordinary.sum(-1).float() * 0.15).round().clamp(min=1)
        assert torch.equal(selected.sum(-1).float(), expected)
        assert not (selected & ~ordinary).any()
        assert torch.equal(labels[selected], ids[selected])
        assert torch.equal(masked_ids[~selected], ids[~selected])
        shown_as_mask += (masked_ids[selected] == MASK).sum().item()
        kept += (masked_ids[selected] == ids[selected]).sum().item()
    assert shown_as_mask + kept == pytest.approx(shown_as_mask / 0.85, rel=0.05)  # no random tokens
    assert shown_as_mask / (shown_as_mask + kept) == pytest.approx(0.85, abs=0.02)


def test_discriminator_labels_mark_only_real_replacements(monkeypatch):
    torch.manual_seed(0)
    model = ElectraForRTDPreTraining(tiny_config())
    ids, attention_mask, special = batch()
    masked_ids, labels = model.mask_tokens(ids, attention_mask, special)
    sample = model.sample_replacements

    def half_correct(logits, originals):  # every other masked position samples its original token
        sampled = sample(logits, originals)
        sampled[::2] = originals[::2]
        return sampled

    monkeypatch.setattr(model, "sample_replacements", half_correct)
    out = model(masked_ids, attention_mask=attention_mask, labels=labels)
    selected = labels != -100
    sampled = out.sampled_input_ids
    assert torch.equal(sampled[~selected], ids[~selected])  # unmasked tokens are the originals
    expected = ((sampled != ids) & selected).long().masked_fill(attention_mask == 0, -100)
    assert torch.equal(out.discriminator_labels, expected)  # a correctly sampled token is "original"
    masked_labels = out.discriminator_labels[selected]
    assert (masked_labels[::2] == 0).all() and (masked_labels[1::2] == 1).any()


def test_rtd_metrics_equal_scikit_learn_on_the_models_own_predictions():
    """The evaluation metrics from what the Trainer gathers (the output fields but sampled_input_ids)."""
    import numpy as np
    from sklearn.metrics import accuracy_score, precision_score, recall_score, roc_auc_score
    from transformers import EvalPrediction

    from hf_plm_ext import rtd_metrics

    torch.manual_seed(0)
    model = ElectraForRTDPreTraining(tiny_config()).eval()
    ids, attention_mask, special = batch()
    with torch.no_grad():
        out = model(ids, attention_mask=attention_mask, special_tokens_mask=special)
    predictions = tuple(v.numpy() for k, v in out.items() if k not in ("loss", "sampled_input_ids"))
    metrics = rtd_metrics(EvalPrediction(predictions=predictions, label_ids=None))
    active = out.discriminator_labels != -100
    scores, replaced = out.discriminator_logits[active].numpy(), out.discriminator_labels[active].numpy()
    assert 0 < replaced.sum() < replaced.size
    assert metrics["discriminator_auc"] == pytest.approx(roc_auc_score(replaced, scores))
    assert metrics["discriminator_accuracy"] == pytest.approx(accuracy_score(replaced, scores > 0))
    assert metrics["discriminator_precision"] == pytest.approx(precision_score(replaced, scores > 0, zero_division=0))
    assert metrics["discriminator_recall"] == pytest.approx(recall_score(replaced, scores > 0))
    assert metrics["replaced_share"] == pytest.approx(float(np.mean(replaced)))
    assert metrics["generator_accuracy"] == pytest.approx(out.generator_accuracy.item())


def test_disallow_correct_never_samples_the_original():
    torch.manual_seed(0)
    model = ElectraForRTDPreTraining(tiny_config(disallow_correct=True))
    logits = torch.zeros(500, 300)
    originals = torch.randint(0, 300, (500,))
    logits[torch.arange(500), originals] = 20.0  # the generator is sure of the original
    assert not (model.sample_replacements(logits, originals) == originals).any()


def test_no_gradient_from_the_discriminator_reaches_the_generator():
    torch.manual_seed(0)
    model = ElectraForRTDPreTraining(tiny_config(tie_embeddings=False))
    ids, attention_mask, special = batch()
    out = model(ids, attention_mask=attention_mask, special_tokens_mask=special)
    out.discriminator_loss.backward()
    generator_grads = [p.grad for p in model.generator.parameters() if p.grad is not None and p.grad.abs().sum() > 0]
    assert generator_grads == []
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.discriminator.parameters())


def test_loss_is_weighted_sum_and_gradient_reaches_both():
    torch.manual_seed(0)
    model = ElectraForRTDPreTraining(tiny_config())
    ids, attention_mask, special = batch()
    out = model(ids, attention_mask=attention_mask, special_tokens_mask=special)
    assert torch.allclose(out.loss, out.generator_loss + 50.0 * out.discriminator_loss)
    out.loss.backward()
    assert model.generator.electra.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0
    assert model.discriminator.electra.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0
    assert 0.0 <= out.generator_accuracy <= 1.0 and 0.0 <= out.discriminator_accuracy <= 1.0


def test_embeddings_are_shared_through_save_load_and_resize(tmp_path):
    model = ElectraForRTDPreTraining(tiny_config())
    shared = model.discriminator.electra.embeddings.word_embeddings.weight
    assert model.generator.electra.embeddings.word_embeddings.weight is shared
    assert model.generator.generator_lm_head.weight is shared
    model.save_pretrained(tmp_path / "rtd")
    loaded = AutoModelForPreTraining.from_pretrained(tmp_path / "rtd")
    assert isinstance(loaded, ElectraForRTDPreTraining)
    shared = loaded.discriminator.electra.embeddings.word_embeddings.weight
    assert loaded.generator.electra.embeddings.word_embeddings.weight is shared
    assert loaded.generator.generator_lm_head.weight is shared
    state, reloaded = model.state_dict(), loaded.state_dict()
    assert all(torch.equal(state[name], reloaded[name]) for name in state)
    loaded.resize_token_embeddings(320)
    shared = loaded.discriminator.electra.embeddings.word_embeddings.weight
    assert shared.shape[0] == 320 and loaded.generator.generator_lm_head.weight is shared
    assert loaded.generator.generator_lm_head.bias.shape[0] == 320


def test_exported_halves_load_in_stock_transformers(tmp_path):
    torch.manual_seed(0)
    model = ElectraForRTDPreTraining(tiny_config()).eval()
    model.save_discriminator(tmp_path / "discriminator")
    model.save_generator(tmp_path / "generator")
    ids, attention_mask, _ = batch()
    discriminator = ElectraForPreTraining.from_pretrained(tmp_path / "discriminator").eval()
    generator = ElectraForMaskedLM.from_pretrained(tmp_path / "generator").eval()
    assert discriminator.config.model_type == generator.config.model_type == "electra"
    with torch.no_grad():
        assert torch.equal(discriminator(ids, attention_mask=attention_mask).logits,
                           model.discriminator(ids, attention_mask=attention_mask).logits)
        assert torch.equal(generator(ids, attention_mask=attention_mask).logits,
                           model.generator(ids, attention_mask=attention_mask).logits)


def test_pretrain_export_and_finetune_from_the_command_line(tmp_path, english_tokenizer_dir, shared_data, capsys):
    import json

    from conftest import run_cli

    run_dir = tmp_path / "electra"
    code, stdout, stderr = run_cli([
        "pretrain", "electra", "--corpus", shared_data / "corpus/en/gutenberg/11-0.txt",
        "--tokenizer", english_tokenizer_dir, "--size", "tiny", "--max_seq_length", 64, "--output", run_dir,
        "--max_steps", 40, "--learning_rate", 2e-3, "--per_device_train_batch_size", 16, "--logging_steps", 20,
        "--seed", 0, "--disable_tqdm", "true", "--save_strategy", "no",
    ], capsys)
    assert code == 0, stderr[-3000:]
    results = json.loads((run_dir / "pretrain_results.json").read_text())
    assert results["final_eval_loss"] < results["initial_eval_loss"]
    # training improved the discrimination (initial: the evaluation before any update)
    initial_auc = results["initial_eval_metrics"]["initial_discriminator_auc"]
    assert results["final_eval_metrics"]["eval_discriminator_auc"] > initial_auc  # gains seen: 0.012-0.054
    assert [entry["step"] for entry in results["train_sub_losses"]] == [20, 40]
    assert {"generator_loss", "discriminator_loss", "generator_accuracy", "discriminator_accuracy"} <= \
        set(results["train_sub_losses"][-1])
    model = AutoModelForPreTraining.from_pretrained(run_dir)
    assert isinstance(model, ElectraForRTDPreTraining)
    assert model.config.generator_config.hidden_size == 32 and model.config.discriminator_config.hidden_size == 128
    from hf_plm_ext.hub.cards import render_card

    card = render_card(run_dir, repo_id="someone/electra-tiny")
    assert {"hf-plm-ext", "electra-rtd", "electra", "custom_code"} <= set(card.data.tags)
    assert "| size | tiny |" in card.text and "| held-out discriminator AUC |" in card.text
    assert "| hidden size / heads | 128 / 2 | 32 / 1 |" in card.text and "{ELECTRA}" in card.text

    exported = tmp_path / "discriminator"
    code, _, stderr = run_cli(["export", "electra", "--part", "discriminator", run_dir, exported], capsys)
    assert code == 0, stderr
    assert json.loads((exported / "config.json").read_text())["model_type"] == "electra"
    assert not list(exported.glob("*.py"))  # stock transformers, no remote code
    code, _, stderr = run_cli(["finetune", "glue", "--task", "sst2", "--model", exported, "--output", tmp_path / "sst2",
                               "--data-dir", shared_data / "glue/SST-2", "--max_train_samples", 32, "--max_steps", 2,
                               "--disable_tqdm", "true", "--report_to", "none"], capsys)
    assert code == 0, stderr[-3000:]
    assert json.loads((tmp_path / "sst2/config.json").read_text())["architectures"] == \
        ["ElectraForSequenceClassification"]

    # the run's folder itself: AutoModel is the discriminator's encoder, and the runner fine-tunes it directly
    encoder = AutoModel.from_pretrained(run_dir).eval()
    assert isinstance(encoder, ElectraRTDModel)
    stock_encoder = AutoModel.from_pretrained(exported).eval()
    ids = torch.randint(5, 500, (2, 9))
    with torch.no_grad():
        assert torch.equal(encoder(ids).last_hidden_state, stock_encoder(ids).last_hidden_state)
    code, stdout, stderr = run_cli(["finetune", "glue", "--task", "sst2", "--model", run_dir, "--output",
                                    tmp_path / "sst2-run", "--data-dir", shared_data / "glue/SST-2",
                                    "--max_train_samples", 32, "--max_steps", 2, "--disable_tqdm", "true",
                                    "--report_to", "none"], capsys)
    assert code == 0, stderr[-3000:]
    assert "| glue | sst2 | dev | accuracy |" in stdout
    classifier = AutoModelForSequenceClassification.from_pretrained(tmp_path / "sst2-run")
    assert isinstance(classifier, ElectraRTDForSequenceClassification)
    assert classifier.config.id2label == {0: "0", 1: "1"} == classifier.discriminator.config.id2label
    assert not any(name.startswith("generator.") for name, _ in classifier.named_parameters())

    code, _, stderr = run_cli(["export", "electra", run_dir, tmp_path / "again"], capsys)  # default: the pair
    assert code == 0, stderr
    assert AutoConfig.from_pretrained(tmp_path / "again/generator").hidden_size == 32
    assert (json.loads((tmp_path / "again/discriminator/config.json").read_text()) ==
            json.loads((exported / "config.json").read_text()))
    code, _, stderr = run_cli(["export", "electra", tmp_path / "sst2", tmp_path / "wrong"], capsys)
    assert code == 2 and "is a 'electra' checkpoint, not an ELECTRA run" in stderr
    assert not (tmp_path / "wrong").exists()


def test_untied_halves_resize_separately():
    model = ElectraForRTDPreTraining(tiny_config(tie_embeddings=False))
    model.resize_token_embeddings(320)
    generator, discriminator = model.generator, model.discriminator
    generator_words = generator.electra.embeddings.word_embeddings.weight
    assert generator_words is not discriminator.electra.embeddings.word_embeddings.weight
    assert generator.electra.embeddings.word_embeddings.weight.shape[0] == 320
    assert discriminator.electra.embeddings.word_embeddings.weight.shape[0] == 320
    assert generator.generator_lm_head.weight is generator.electra.embeddings.word_embeddings.weight


def test_pre_training_continues_from_stock_electra_checkpoints(tmp_path):
    """Released ELECTRA weights come as two stock checkpoints; the pair is built from them, outputs unchanged."""
    pair = ElectraForRTDPreTraining(tiny_config())
    pair.save_discriminator(tmp_path / "discriminator")
    pair.save_generator(tmp_path / "generator")
    stock_discriminator = ElectraForPreTraining.from_pretrained(tmp_path / "discriminator").eval()
    stock_generator = ElectraForMaskedLM.from_pretrained(tmp_path / "generator").eval()

    model = ElectraForRTDPreTraining.from_discriminator_and_generator(
        tmp_path / "discriminator", tmp_path / "generator", mask_token_id=MASK).eval()
    assert model.config.mask_token_id == MASK
    assert model.generator.electra.embeddings is model.discriminator.electra.embeddings
    ids, attention_mask, _ = batch()
    with torch.no_grad():
        torch.testing.assert_close(model.discriminator(ids, attention_mask=attention_mask).logits,
                                   stock_discriminator(ids, attention_mask=attention_mask).logits, rtol=0, atol=0)
        torch.testing.assert_close(model.generator(ids, attention_mask=attention_mask).logits,
                                   stock_generator(ids, attention_mask=attention_mask).logits, rtol=0, atol=0)


def test_a_stock_electra_config_read_from_a_pair_folder_is_the_discriminators(tmp_path):
    from transformers import ElectraConfig as StockConfig

    model = ElectraForRTDPreTraining(tiny_config())
    model.save_pretrained(tmp_path)
    read = StockConfig.from_pretrained(tmp_path)  # transformers takes the last sub-config of type electra
    assert read.to_dict() == model.config.discriminator_config.to_dict()
    assert type(AutoModelForPreTraining.from_pretrained(tmp_path).config.generator_config) is StockConfig
