"""A run stopped while it wrote a checkpoint resumes from the newest complete one (issue 69, item 4), on every
command that continues from checkpoints; Ctrl-C and the commands that do not resume."""

import json
import os
import signal
import subprocess
import sys
from importlib.resources import files
from pathlib import Path

import pytest

from conftest import run_cli, tiny_macbert_config

from hf_plm_ext.checkpoints.resuming import checkpoint_problem, checkpoint_to_resume, newest_complete_checkpoint
from hf_plm_ext.errors import UserInputError

HERE = Path(__file__).parent
TEXT = files("hf_plm_ext") / "demo_data" / "alice.txt"
TINY = "hidden_size=32,num_hidden_layers=2,num_attention_heads=2,intermediate_size=37,max_position_embeddings=128"


def checkpoint(folder: Path, step: int, state: str | None = "{}", weights: bool = True) -> Path:
    path = folder / f"checkpoint-{step}"
    path.mkdir(parents=True)
    if weights:
        (path / "model.safetensors").write_bytes(b"weights")
    if state is not None:
        (path / "trainer_state.json").write_text(state)
    return path


def test_last_takes_the_newest_complete_checkpoint_and_names_each_cut_one_it_passes_over(tmp_path):
    folder = tmp_path / "run.checkpoints"
    checkpoint(folder, 5)
    complete = checkpoint(folder, 10)
    cut_state = checkpoint(folder, 15, state='{"global_step": 15, "log_hist')
    no_state = checkpoint(folder, 20, state=None)
    checkpoint(folder, 100, weights=False)  # numerically newest: 100 > 20 (not the names' order)
    last, passed_over = newest_complete_checkpoint(folder)
    assert [path.name for path, _ in passed_over] == ["checkpoint-100", "checkpoint-20", "checkpoint-15"]
    assert last == complete
    assert "cut short" in checkpoint_problem(cut_state) and "no trainer_state.json" in checkpoint_problem(no_state)
    assert checkpoint_to_resume("last", folder) == str(complete)
    with pytest.raises(UserInputError, match="cannot be resumed from: its trainer_state.json is cut short"):
        checkpoint_to_resume(str(cut_state), folder)
    with pytest.raises(UserInputError, match="holds checkpoints of an earlier run"):
        checkpoint_to_resume(None, folder)
    only_cut = tmp_path / "cut.checkpoints"
    checkpoint(only_cut, 3, state=None)
    with pytest.raises(UserInputError, match=r"no complete checkpoint-\* folder .*only cut ones: checkpoint-3"):
        checkpoint_to_resume("last", only_cut)


@pytest.fixture(scope="module")
def tiny_masked_lm(tmp_path_factory, english_tokenizer_dir):
    from transformers import AutoTokenizer

    from hf_plm_ext import MacBertForMaskedLM

    out = tmp_path_factory.mktemp("masked-lm") / "macbert"
    MacBertForMaskedLM(tiny_macbert_config()).save_pretrained(out)
    AutoTokenizer.from_pretrained(english_tokenizer_dir).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def text_store(tmp_path_factory, english_tokenizer_dir):
    from types import SimpleNamespace

    from hf_plm_ext.data.token_store.prepare import prepare_corpus

    out = tmp_path_factory.mktemp("store") / "alice"
    prepare_corpus(SimpleNamespace(corpus=[str(TEXT)], tokenizer=str(english_tokenizer_dir), output=str(out),
                                   workers=1, executor="local", documents="lines", text_field="text",
                                   sentences=False, words=False, segmenter=None, piece_megabytes=None,
                                   slurm_partition=None, slurm_time=None), progress=lambda line: None)
    return out


def command_line(command, out, english_tokenizer_dir, tiny_classifier_dir, tiny_masked_lm, shared_data, store):
    common = ["--output", out, "--max_steps", 6, "--save_strategy", "steps", "--save_steps", 2,
              "--per_device_train_batch_size", 4, "--seed", 0, "--disable_tqdm", "true", "--report_to", "none"]
    if command.startswith("pretrain"):
        data = ["--data", store] if command == "pretrain --data" else ["--corpus", TEXT]
        return ["pretrain", "mlm", *data, "--tokenizer", english_tokenizer_dir, "--config_overrides",
                TINY, "--max_seq_length", 32, *common]
    if command == "distill":
        return ["distill", "general", "--teacher", tiny_classifier_dir, "--corpus", TEXT, "--student-layers",
                "last:1", "--max_seq_length", 32, *common]
    return ["finetune", "csc", "--model", tiny_masked_lm, "--train_file", shared_data / "csc/sighan15/test.tsv",
            "--max_train_samples", 64, "--max_seq_length", 32, *common]


def hf_plm_ext(*argv, kill_at_step=None):
    """The command in a fresh process (transformers' warnings included in its stderr)."""
    prefix = [str(HERE / "kill_during_save.py"), str(kill_at_step)] if kill_at_step else ["-m", "hf_plm_ext_cli"]
    return subprocess.run([sys.executable, *prefix, *map(str, argv)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE)})


@pytest.mark.parametrize("command", ["pretrain", "pretrain --data", "distill", "csc"])
def test_a_checkpoint_cut_by_a_kill_is_passed_over_and_the_run_resumes_from_the_one_before(
        command, tmp_path, english_tokenizer_dir, tiny_classifier_dir, tiny_masked_lm, shared_data, text_store):
    out = tmp_path / "out"
    argv = command_line(command, out, english_tokenizer_dir, tiny_classifier_dir, tiny_masked_lm, shared_data,
                        text_store)
    killed = hf_plm_ext(*argv, kill_at_step=4)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    checkpoints = tmp_path / "out.checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["checkpoint-2", "checkpoint-4"]
    assert not (checkpoints / "checkpoint-4" / "trainer_state.json").exists()  # cut: its state never written
    assert not (checkpoints / "checkpoint-2" / "training_args.bin").exists()  # checkpoints hold no pickles either
    assert (checkpoints / "checkpoint-2" / "training_args.json").is_file()
    assert not out.exists()

    resumed = hf_plm_ext(*argv, "--resume_from_checkpoint", "last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"passing over {checkpoints / 'checkpoint-4'}, cut by a stop while it was written" in resumed.stderr
    assert "Traceback" not in resumed.stderr
    assert "There were missing keys" not in resumed.stderr  # tied weights, restored by tying, are not missing
    results = json.loads(next(out.glob("*_results.json")).read_text())
    assert results["resumed_from"] == str(checkpoints / "checkpoint-2")
    assert not checkpoints.exists() and not list(tmp_path.glob(".out.partial-*"))


def test_ctrl_c_during_a_run_with_no_checkpoint_yet_says_the_command_starts_over(tmp_path, english_tokenizer_dir,
                                                                                  capsys):
    from unittest import mock

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with mock.patch("hf_plm_ext.training.trainer.SubLossTrainer.training_step", interrupted):
        code, _, stderr = run_cli(["pretrain", "mlm", "--corpus", TEXT, "--tokenizer", english_tokenizer_dir,
                                   "--config_overrides", TINY, "--max_seq_length", 32, "--output", tmp_path / "out",
                                   "--max_steps", 4, "--disable_tqdm", "true"], capsys)
    assert code == 130 and "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == ("hf-plm-ext pretrain mlm: interrupted; no checkpoint was written yet "
                                               "(--save_steps 500); the same command starts over")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv", [["finetune", "glue", "--task", "sst2"], ["distill", "task", "--task", "glue/sst2"]])
def test_commands_that_do_not_resume_refuse_the_flag_instead_of_ignoring_it(argv, tmp_path, tiny_classifier_dir,
                                                                             shared_data, capsys):
    model = ["--model" if argv[0] == "finetune" else "--teacher", tiny_classifier_dir]
    code, _, stderr = run_cli([*argv, *model, "--data-dir", shared_data / "glue/SST-2", "--output", tmp_path / "out",
                               "--resume_from_checkpoint", "last"], capsys)
    assert code == 2 and f"`{' '.join(argv[:2])}` does not continue from checkpoints" in stderr, stderr[-2000:]
    assert not (tmp_path / "out").exists()
