"""What a new user hits with bad files and names: one error line naming what is wrong and where, exit 2, nothing
written (issue 20)."""

import json
import shutil
from pathlib import Path

import pytest

from conftest import run_cli

DEMO_TEXT = str(Path(__file__).parents[1] / "hf_plm_ext/demo_data/alice.txt")
SST2 = ["--task", "sst2", "--max_steps", 1, "--max_train_samples", 8, "--disable_tqdm", "true", "--report_to", "none"]


def copy_of(folder, tmp_path, name):
    return shutil.copytree(folder, tmp_path / name)


def test_an_adapter_records_its_local_base_as_a_resolved_path(tmp_path, tiny_classifier_dir, shared_data, capsys,
                                                              monkeypatch):
    from peft import AutoPeftModelForSequenceClassification

    copy_of(tiny_classifier_dir, tmp_path, "my-encoder")
    (tmp_path / "lora.json").write_text('{"peft_type": "LORA", "r": 4, "target_modules": ["query", "value"]}')
    monkeypatch.chdir(tmp_path)
    code, _, stderr = run_cli(["finetune", "glue", *SST2, "--model", "my-encoder", "--peft-config", "lora.json",
                               "--data-dir", shared_data / "glue/SST-2", "--output", "lora-run"], capsys)
    assert code == 0, stderr[-2000:]
    base = json.loads((tmp_path / "lora-run" / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert base == str((tmp_path / "my-encoder").resolve())  # was "my-encoder", as typed
    monkeypatch.chdir(tmp_path.parent)  # from any other folder the adapter finds its base
    AutoPeftModelForSequenceClassification.from_pretrained(tmp_path / "lora-run")


def test_broken_weights_are_one_error_naming_the_file(tmp_path, tiny_classifier_dir, english_tokenizer_dir,
                                                      shared_data, capsys, monkeypatch):
    broken = copy_of(tiny_classifier_dir, tmp_path, "broken")
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # truncated
    from family_common import tiny_transfo_xl
    from hf_plm_ext import TransfoXLLMHeadModel

    broken_xl = tmp_path / "broken-xl"
    TransfoXLLMHeadModel(tiny_transfo_xl()).save_pretrained(broken_xl)
    (broken_xl / "model.safetensors").write_bytes(b"\x00" * 64)  # random bytes
    corpus = shared_data / "corpus/en/gutenberg/11-0.txt"
    monkeypatch.setenv("HF_TOKEN", "hf_not_used")  # push stops at the weights, before any request
    for argv in (["finetune", "glue", *SST2, "--model", broken, "--data-dir", shared_data / "glue/SST-2",
                  "--output", tmp_path / "out"],
                 ["pretrain", "mlm", "--model", broken, "--corpus", corpus, "--tokenizer", broken,
                  "--output", tmp_path / "out"],
                 ["export", "electra", broken, tmp_path / "out"],
                 ["eval", "lm", "--model", broken_xl, "--corpus", corpus],
                 ["push", broken, "--repo-id", "someone/broken"]):
        code, _, stderr = run_cli(argv, capsys)
        assert code == 2, (argv[:2], stderr[-2000:])
        assert "model.safetensors" in stderr and "not a valid safetensors file" in stderr, (argv[:2], stderr)
        assert "Traceback" not in stderr and stderr.count(": error:") == 1, stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken", "broken-xl"]


@pytest.mark.parametrize("field,value,reason", [("hidden_size", "banana", "expected int, got str"),
                                                ("num_attention_heads", 3, "num_attention_heads")])
def test_a_bad_config_names_the_file_the_field_and_the_reason(field, value, reason, tmp_path, tiny_classifier_dir,
                                                             shared_data, capsys):
    bad = copy_of(tiny_classifier_dir, tmp_path, "bad")
    config = json.loads((bad / "config.json").read_text())
    config[field] = value
    (bad / "config.json").write_text(json.dumps(config))
    code, _, stderr = run_cli(["finetune", "glue", *SST2, "--model", bad, "--data-dir", shared_data / "glue/SST-2",
                               "--output", tmp_path / "out"], capsys)
    assert code == 2
    assert f"{bad / 'config.json'}:" in stderr and field in stderr and reason in stderr, stderr
    assert "tokenizer" not in stderr  # it was blamed on the tokenizer
    assert not (tmp_path / "out").exists()


def test_a_name_that_is_neither_a_folder_nor_reachable_fails_at_once(tmp_path, shared_data, capsys, monkeypatch):
    from huggingface_hub import constants

    argv = ["finetune", "glue", *SST2, "--data-dir", shared_data / "glue/SST-2", "--output", tmp_path / "out"]
    code, _, stderr = run_cli([*argv, "--model", "nomodel"], capsys)  # the tests run offline
    assert code == 2 and "'nomodel' is not a local folder, and HF_HUB_OFFLINE is set" in stderr
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there: refused at once
    code, _, stderr = run_cli([*argv, "--model", "nomodel-online"], capsys)
    assert code == 2 and "'nomodel-online' is not a local folder, and the Hub at http://127.0.0.1:9 could not be " \
        "reached" in stderr, stderr
    assert not (tmp_path / "out").exists()


def test_eval_lm_refuses_an_existing_output_file(tmp_path, shared_data, capsys):
    earlier = tmp_path / "results.json"
    earlier.write_text('{"perplexity": 123.4}\n')
    code, _, stderr = run_cli(["eval", "lm", "--model", tmp_path / "missing-but-not-reached", "--corpus",
                               shared_data / "corpus/en/wikitext-2/wiki.test.tokens", "--output", earlier], capsys)
    assert code == 2 and f"output file {earlier} already exists" in stderr
    assert earlier.read_text() == '{"perplexity": 123.4}\n'


def test_every_command_that_reads_text_names_a_bad_corpus(tmp_path, english_tokenizer_dir, capsys):
    empty, latin1, folder = tmp_path / "empty.txt", tmp_path / "latin1.txt", tmp_path / "texts"
    empty.write_bytes(b"")
    latin1.write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    folder.mkdir()
    commands = {
        "pretrain mlm": ["pretrain", "mlm", "--tokenizer", english_tokenizer_dir],
        "pretrain electra": ["pretrain", "electra", "--size", "tiny", "--tokenizer", english_tokenizer_dir],
        "pretrain macbert": ["pretrain", "macbert", "--masking", "mask", "--tokenizer", english_tokenizer_dir],
        "tokenizer train": ["tokenizer", "train"],
    }
    for name, argv in commands.items():
        for corpus, message in ((empty, f"{empty} is empty"), (latin1, f"{latin1}: not UTF-8 text"),
                                (folder, f"{folder} is a directory")):
            code, _, stderr = run_cli([*argv, "--corpus", corpus, "--output", tmp_path / "out"], capsys)
            assert code == 2 and message in stderr, (name, corpus.name, stderr[-1500:])
            assert "Traceback" not in stderr and stderr.count(": error:") == 1, (name, stderr[-1500:])
    assert not (tmp_path / "out").exists()


def test_a_checkpoint_without_the_asked_head_says_which_classes_it_loads_with(tmp_path, capsys):
    from family_common import tiny_macbert

    from hf_plm_ext import MacBertForMaskedLM

    MacBertForMaskedLM(tiny_macbert()).save_pretrained(tmp_path / "macbert")
    capsys.readouterr()  # save_pretrained's progress bar
    code, _, stderr = run_cli(["eval", "lm", "--model", tmp_path / "macbert", "--corpus", DEMO_TEXT], capsys)
    assert code == 2
    assert stderr.strip().splitlines() == [
        f"hf-plm-ext eval lm: error: the model at {(tmp_path / 'macbert').resolve()} is a 'macbert' checkpoint, which "
        "has no "
        "AutoModelForCausalLM class; it loads with AutoModel, AutoModelForMaskedLM, AutoModelForPreTraining, "
        "AutoModelForSequenceClassification, AutoModelForTokenClassification, AutoModelForQuestionAnswering"]


def _start_pretraining(tmp_path, english_tokenizer_dir, output):
    import subprocess
    import sys

    corpus = Path(__file__).parents[1] / "hf_plm_ext/demo_data/alice.txt"
    argv = ["pretrain", "mlm", "--corpus", corpus, "--tokenizer", english_tokenizer_dir, "--output", output,
            "--max_steps", 100000, "--config_overrides", "hidden_size=32,num_hidden_layers=1,num_attention_heads=2,"
            "intermediate_size=37", "--save_strategy", "no", "--disable_tqdm", "true", "--report_to", "none"]
    return subprocess.Popen([sys.executable, "-m", "hf_plm_ext_cli", *map(str, argv)], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def _wait_for_staging(process, output, timeout=120):
    """The staging folders once ``process``'s own is there."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        staged = list(output.parent.glob(f".{output.name}.partial-*"))
        if any(path.name.endswith(f"-{process.pid}") for path in staged):
            return staged
        time.sleep(0.2)
    raise AssertionError(f"no staging folder appeared: {process.communicate()[1][-2000:]}")


def test_a_terminated_run_removes_what_it_staged_and_a_killed_one_is_cleaned_by_the_next(tmp_path,
                                                                                        english_tokenizer_dir):
    import signal

    output = tmp_path / "run"
    terminated = _start_pretraining(tmp_path, english_tokenizer_dir, output)
    _wait_for_staging(terminated, output)
    terminated.send_signal(signal.SIGTERM)
    assert terminated.wait(60) == 128 + signal.SIGTERM
    assert not list(tmp_path.glob(".run.partial-*")) and not output.exists()

    killed = _start_pretraining(tmp_path, english_tokenizer_dir, output)
    left = _wait_for_staging(killed, output)
    killed.kill()
    killed.wait(60)
    assert list(tmp_path.glob(".run.partial-*")) == left  # SIGKILL leaves it; nothing can run on the way out
    rerun = _start_pretraining(tmp_path, english_tokenizer_dir, output)
    again = _wait_for_staging(rerun, output)
    rerun.kill()
    rerun.wait(60)
    assert again == [tmp_path / f".run.partial-{rerun.pid}"]  # the next run to the same --output removed the leftover


def test_a_leftover_is_removed_only_once_its_process_is_gone(tmp_path):
    import os

    from hf_plm_ext.files import remove_leftovers

    final = tmp_path / "out"
    mine, dead, foreign = (tmp_path / f".out.partial-{os.getpid()}", tmp_path / ".out.partial-4194304",
                           tmp_path / ".out.partial-abc")  # 4194304: above Linux's largest PID
    for folder in (mine, dead, foreign):
        folder.mkdir()
    (tmp_path / ".out.json.partial-4194304").write_text("{")  # another output's: not out's
    assert remove_leftovers(final) == [dead]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([mine.name, foreign.name, ".out.json.partial-4194304"])


def test_finetune_says_in_one_line_which_weights_are_new(tmp_path, tiny_classifier_dir, minilm_dir, shared_data,
                                                        capsys, caplog):
    code, stdout, stderr = run_cli(["finetune", "glue", *SST2, "--model", minilm_dir, "--data-dir",
                                    shared_data / "glue/SST-2", "--output", tmp_path / "out"], capsys)
    assert code == 0, stderr[-2000:]
    # a warning of transformers' logger for the module (on stderr where nothing else handles logging), once
    said = [record for record in caplog.records if record.name == "hf_plm_ext.checkpoints.loading"]
    assert [(r.levelname, r.getMessage()) for r in said] == [
        ("WARNING", f"model {minilm_dir.resolve()}: new weights, initialised randomly: classifier")]
    assert "LOAD REPORT" not in stderr and "MISSING" not in stderr


def test_tokenizer_training_prints_no_blank_lines(tmp_path, capfd):
    code, stdout, stderr = run_cli(["tokenizer", "train", "--corpus", DEMO_TEXT, "--vocab-size", 500,
                                    "--output", tmp_path / "tok"], capfd)
    assert code == 0, stderr
    assert stdout.splitlines() == [f"trained a wordpiece tokenizer with 500 tokens; saved to {tmp_path / 'tok'}"]
    assert stderr.strip() == ""


def test_a_causal_lm_refuses_a_tokenizer_whose_continuations_do_not_decode_alone(tmp_path, english_tokenizer_dir,
                                                                                 capsys):
    """WordPiece's continuations lose their space and keep ``##`` when decoded alone (as pipelines and lm-eval
    decode them): `pretrain rev-lsh --causal` says so in one line and names the kind to use; nothing is written."""
    code, _, stderr = run_cli(["pretrain", "rev-lsh", "--corpus", DEMO_TEXT, "--tokenizer", english_tokenizer_dir,
                               "--size", "tiny", "--causal", "true", "--max_seq_length", "64", "--max_steps", "1",
                               "--output", tmp_path / "lm"], capsys)
    assert code == 2 and len(stderr.strip().splitlines()) == 1, stderr
    assert "continuation" in stderr and "--kind bpe" in stderr and str(english_tokenizer_dir) in stderr
    assert not (tmp_path / "lm").exists()
