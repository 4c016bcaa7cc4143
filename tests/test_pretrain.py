import json

import pytest

from transformers import AutoConfig, AutoModelForMaskedLM, AutoTokenizer

from hf_plm_ext import MacBertForMaskedLM

from conftest import run_cli

TINY = "hidden_size=64,num_hidden_layers=2,num_attention_heads=2,intermediate_size=128"


def test_mlm_pretraining_on_real_text_lowers_held_out_loss(tmp_path, english_tokenizer_dir, shared_data, capsys):
    out = tmp_path / "pretrained"
    code, stdout, stderr = run_cli([
        "pretrain", "mlm", "--corpus", shared_data / "corpus/en/gutenberg/11-0.txt",
        "--tokenizer", english_tokenizer_dir, "--config_overrides", TINY, "--max_seq_length", 64,
        "--output", out, "--max_steps", 60, "--learning_rate", 2e-3, "--per_device_train_batch_size", 16,
        "--seed", 0, "--disable_tqdm", "true", "--save_strategy", "no",
    ], capsys)
    assert code == 0, stderr
    results = json.loads((out / "pretrain_results.json").read_text())
    assert results["final_eval_loss"] < results["initial_eval_loss"] - 0.5
    model = AutoModelForMaskedLM.from_pretrained(out)
    assert isinstance(model, MacBertForMaskedLM) and model.config.hidden_size == 64
    assert model.config.vocab_size == len(AutoTokenizer.from_pretrained(out))
    assert "eval loss" in stdout


def test_bad_config_override_and_unknown_family(tmp_path, english_tokenizer_dir, shared_data, capsys):
    base = ["pretrain", "mlm", "--corpus", shared_data / "corpus/en/gutenberg/11-0.txt",
            "--tokenizer", english_tokenizer_dir, "--output", tmp_path / "out"]
    code, _, stderr = run_cli(base + ["--config_overrides", "hidden_size=30,num_attention_heads=4"], capsys)
    assert code == 2 and "hidden_size" in stderr
    code, _, stderr = run_cli(base + ["--model_type", "gpt9"], capsys)
    assert code == 2 and "unknown --model_type 'gpt9'" in stderr
    assert not (tmp_path / "out").exists()


def test_macbert_pretraining_on_chinese_logs_both_losses(tmp_path, shared_data, capsys):
    corpus = shared_data / "corpus/zh/zhwiki_bert_sampled.txt"
    code, _, stderr = run_cli(["tokenizer", "train", "--corpus", corpus, "--vocab-size", 4000,
                               "--output", tmp_path / "tok"], capsys)
    assert code == 0, stderr
    out = tmp_path / "macbert"
    code, stdout, stderr = run_cli([
        "pretrain", "macbert", "--corpus", corpus, "--tokenizer", tmp_path / "tok", "--segmenter", "jieba",
        "--similar_words", "cilin", "--config_overrides", TINY, "--max_seq_length", 64, "--output", out,
        "--max_steps", 30, "--learning_rate", 2e-3, "--per_device_train_batch_size", 16, "--logging_steps", 10,
        "--seed", 0, "--disable_tqdm", "true", "--save_strategy", "no",
    ], capsys)
    assert code == 0, stderr[-3000:]
    results = json.loads((out / "pretrain_results.json").read_text())
    assert results["objective"] == "macbert"
    assert results["final_eval_loss"] < results["initial_eval_loss"]
    assert [entry["step"] for entry in results["train_sub_losses"]] == [10, 20, 30]
    assert all({"mlm_loss", "sop_loss"} <= set(entry) for entry in results["train_sub_losses"])
    assert not (out / "embedding_neighbours.safetensors").exists()
    from transformers import AutoModelForPreTraining

    from hf_plm_ext import MacBertForPreTraining

    assert isinstance(AutoModelForPreTraining.from_pretrained(out), MacBertForPreTraining)

    from hf_plm_ext.hub.cards import render_card

    card = render_card(out, language="zh")
    assert card.data.pipeline_tag == "feature-extraction" and "macbert" in card.data.tags
    assert "| masking | correction |" in card.text and "| similar_words | cilin |" in card.text
    assert "| corpus | zhwiki_bert_sampled.txt |" in card.text


def test_macbert_correction_needs_a_similar_word_source(tmp_path, english_tokenizer_dir, shared_data, capsys):
    base = ["pretrain", "macbert", "--corpus", shared_data / "corpus/en/gutenberg/11-0.txt",
            "--tokenizer", english_tokenizer_dir, "--output", tmp_path / "out"]
    code, _, stderr = run_cli(base, capsys)
    assert code == 2 and "--masking correction needs --similar_words" in stderr
    bad_table = tmp_path / "table.txt"
    bad_table.write_text("glad happy\nalone\n")
    code, _, stderr = run_cli(base + ["--similar_words", bad_table], capsys)
    assert code == 2 and f"{bad_table}:2:" in stderr
    code, _, stderr = run_cli(base + ["--masking", "mask", "--segmenter", "mecab"], capsys)
    assert code == 2 and "unknown --segmenter 'mecab'" in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table.txt"]


def _recording_training_step(stop_at_call=None):
    """A ``training_step`` that records (global step, learning rate) and raises on call ``stop_at_call``."""
    from hf_plm_ext.training.trainer import SubLossTrainer

    original, calls = SubLossTrainer.training_step, []

    def training_step(self, *args, **kwargs):
        calls.append((self.state.global_step, self.optimizer.param_groups[0]["lr"]))
        if len(calls) == stop_at_call:
            raise KeyboardInterrupt("killed")
        return original(self, *args, **kwargs)

    return training_step, calls


@pytest.mark.parametrize("objective, shape", [("mlm", ["--config_overrides", TINY]), ("electra", ["--size", "tiny"])])
def test_a_stopped_run_resumes_from_its_last_checkpoint(objective, shape, tmp_path, english_tokenizer_dir, shared_data,
                                                         capsys):
    from unittest import mock

    def pretrain(out, *extra, stop_at_call=None):
        step, calls = _recording_training_step(stop_at_call)
        with mock.patch("hf_plm_ext.training.trainer.SubLossTrainer.training_step", step):
            code, _, stderr = run_cli([
                "pretrain", objective, "--corpus", shared_data / "corpus/en/gutenberg/11-0.txt",
                "--tokenizer", english_tokenizer_dir, *shape, "--max_seq_length", 64,
                "--output", out, "--max_steps", 6, "--save_steps", 2, "--per_device_train_batch_size", 8,
                "--seed", 0, "--disable_tqdm", "true", *extra,
            ], capsys)
        return code, stderr, calls

    code, _, uninterrupted = pretrain(tmp_path / "uninterrupted")
    assert code == 0 and not (tmp_path / "uninterrupted.checkpoints").exists()
    out, checkpoints = tmp_path / "resumed", tmp_path / "resumed.checkpoints"
    code, stderr, _ = pretrain(out, stop_at_call=5)  # Ctrl-C: one line, the shell's 130, the command to continue
    assert code == 130 and "Traceback" not in stderr and not out.exists()
    assert stderr.strip().splitlines()[-1].startswith(
        f"hf-plm-ext pretrain {objective}: interrupted; continue from checkpoint-4 with: hf-plm-ext pretrain")
    assert stderr.strip().endswith("--resume_from_checkpoint last")
    assert sorted(p.name for p in checkpoints.iterdir()) == ["checkpoint-2", "checkpoint-4"]

    code, stderr, _ = pretrain(out)
    assert code == 2 and "--resume_from_checkpoint last" in stderr and not out.exists()

    stopped_history = json.loads((checkpoints / "checkpoint-4" / "trainer_state.json").read_text())["log_history"]
    code, stderr, resumed = pretrain(out, "--resume_from_checkpoint", "last")
    assert code == 0, stderr[-3000:]
    # Steps 5 and 6 only, on the restored learning-rate schedule.
    assert resumed == uninterrupted[4:] and [step for step, _ in resumed] == [4, 5]
    results = json.loads((out / "pretrain_results.json").read_text())
    assert results["resumed_from"].endswith("checkpoint-4")
    # "initial" is the run's first evaluation, before any update, also when it was resumed (not the checkpoint's)
    first = next(entry for entry in stopped_history if "eval_loss" in entry)
    assert first["step"] == 0 and results["initial_eval_loss"] == first["eval_loss"]
    assert all(name.startswith("initial_") for name in results["initial_eval_metrics"])
    assert not checkpoints.exists()  # removed once the model is saved


def test_the_same_seed_gives_the_same_run(tmp_path, english_tokenizer_dir, shared_data, capsys):
    """--seed covers the fresh model's weights too (built before the Trainer, which seeds itself)."""
    def run(name, seed):
        code, _, stderr = run_cli(["pretrain", "mlm", "--corpus", shared_data / "corpus/en/gutenberg/11-0.txt",
                                   "--tokenizer", english_tokenizer_dir, "--config_overrides", TINY,
                                   "--max_seq_length", 64, "--output", tmp_path / name, "--max_steps", 2,
                                   "--per_device_train_batch_size", 8, "--seed", seed, "--disable_tqdm", "true",
                                   "--logging_steps", 1],  # a head without sub-losses logs only `loss`
                           capsys)
        assert code == 0, stderr
        results = json.loads((tmp_path / name / "pretrain_results.json").read_text())
        return results["initial_eval_loss"], results["final_eval_loss"]

    assert run("first", 0) == run("again", 0) != run("other", 1)


def test_each_objective_has_its_own_flags_and_refuses_another_objectives(tmp_path, english_tokenizer_dir,
                                                                         shared_data, capsys):
    code, stdout, _ = run_cli(["pretrain", "macbert", "--help"], capsys)
    assert code == 0 and "--similar_words" in stdout and "--max_seq_length" in stdout and "--corpus" in stdout
    assert "--mem-len" not in stdout and "--size" not in stdout and "--model_type" not in stdout
    code, stdout, _ = run_cli(["pretrain", "transfo-xl", "--help"], capsys)
    assert code == 0 and "--mem-len" in stdout and "--similar_words" not in stdout and "--max_seq_length" not in stdout

    base = ["pretrain", "macbert", "--corpus", shared_data / "corpus/en/gutenberg/11-0.txt",
            "--tokenizer", english_tokenizer_dir, "--output", tmp_path / "out", "--masking", "mask"]
    code, _, stderr = run_cli(base + ["--mem-len", 32], capsys)
    assert code == 2 and "`pretrain macbert` has no --mem-len (a flag of `pretrain transfo-xl`)" in stderr
    code, _, stderr = run_cli(base + ["--size=tiny"], capsys)
    assert code == 2 and "--size (a flag of `pretrain electra / transfo-xl / rev-lsh`)" in stderr
    code, _, stderr = run_cli(["pretrain", "bert-nsp", "--corpus", "x"], capsys)
    assert code == 2 and "invalid choice: 'bert-nsp'" in stderr
    assert not any(tmp_path.iterdir())


def test_a_model_of_another_family_is_refused(tmp_path, tiny_classifier_dir, shared_data, capsys):
    corpus = shared_data / "corpus/en/gutenberg/11-0.txt"
    for objective, needs in (("transfo-xl", "trains 'transfo-xl' models"),
                             ("electra", "trains 'electra-rtd' models")):
        code, _, stderr = run_cli(["pretrain", objective, "--corpus", corpus, "--tokenizer", tiny_classifier_dir,
                                   "--model", tiny_classifier_dir, "--output", tmp_path / objective], capsys)
        assert code == 2 and f"is a 'macbert' checkpoint; `pretrain {objective}` {needs}" in stderr, stderr
    assert not any(tmp_path.iterdir())


def test_transfo_xl_from_a_checkpoint_keeps_its_memory_length_unless_asked(tmp_path, shared_data, capsys):
    from hf_plm_ext import TransfoXLConfig, TransfoXLLMHeadModel
    from hf_plm_ext.data.tokenizer_training import train_tokenizer

    text = tmp_path / "shakespeare.txt"
    text.write_text((shared_data / "corpus/en/tinyshakespeare/input.txt").read_text()[:6000])
    start = tmp_path / "start"
    TransfoXLLMHeadModel(TransfoXLConfig.from_size("tiny", vocab_size=80, mem_len=24, d_model=16, d_embed=16,
                                                   d_inner=32)).save_pretrained(start)
    train_tokenizer([text], "chars", vocab_size=70, min_frequency=1).save_pretrained(start)

    def continued(name, *flags):
        code, _, stderr = run_cli(["pretrain", "transfo-xl", "--corpus", text, "--tokenizer", start, "--model", start,
                                   "--tgt-len", 16, "--max_steps", 1, "--per_device_train_batch_size", 2,
                                   "--output", tmp_path / name, "--disable_tqdm", "true", *flags], capsys)
        assert code == 0, stderr[-2000:]
        return AutoConfig.from_pretrained(tmp_path / name).mem_len

    assert continued("kept") == 24  # the CLI default used to overwrite it with 128
    assert continued("asked", "--mem-len", 8) == 8


def test_a_tokenizer_too_big_for_the_model_is_named_by_its_own_folder(tmp_path, english_tokenizer_dir, shared_data,
                                                                      capsys):
    """``pretrain mlm --tokenizer TOK --model ENCODER``: the error names TOK as the tokenizer and ENCODER as the
    model (issue 69, item 8)."""
    from conftest import tiny_macbert_config

    from hf_plm_ext import MacBertForMaskedLM

    encoder = tmp_path / "my-encoder"
    MacBertForMaskedLM(tiny_macbert_config(vocab_size=100)).save_pretrained(encoder)
    code, _, stderr = run_cli(["pretrain", "mlm", "--corpus", shared_data / "corpus/en/gutenberg/11-0.txt",
                               "--tokenizer", english_tokenizer_dir,
                               "--model", encoder, "--output", tmp_path / "out"], capsys)
    assert code == 2, stderr[-2000:]
    assert (f"the tokenizer at {english_tokenizer_dir} has 1500 tokens but the model at {encoder} has only 100 rows "
            f"of input embeddings") in stderr
