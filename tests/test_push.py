"""``hf-plm-ext push`` and ``push_to_hub`` end to end against a loopback *test double* of the Hub.

``tests/hub_double.py`` answers the Hub endpoints that ``huggingface_hub`` calls (create repo,
pre-upload, commit with inline files, file metadata and download) on 127.0.0.1. It is a test
double, not a Hub: what these tests show is that the real client code pushes a loadable
repository; the real Hub's behaviour beyond those calls is not exercised.
"""

import hashlib
import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import save_file

from hub_double import HubDouble

TOKEN = "hf_test_double_token"


def hub_env(double, token=TOKEN):
    env = {**os.environ, "HF_ENDPOINT": double.endpoint, "HF_HUB_OFFLINE": "0", "HF_HUB_DISABLE_XET": "1",
           "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HOME": os.environ["HF_HOME"] + "-hub-double"}
    env.pop("HF_TOKEN", None)
    if token is not None:
        env["HF_TOKEN"] = token
    return env


def push(args, env):
    return subprocess.run([sys.executable, "-m", "hf_plm_ext.cli.main", "push", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=300)


def snapshot(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture
def hub():
    with HubDouble(TOKEN) as double:
        yield double


@pytest.fixture
def finetuned(tmp_path, tiny_classifier_dir):
    """A classifier folder as the GLUE runner leaves it: weights, code, tokenizer, eval results."""
    import shutil

    folder = tmp_path / "mrpc-run"
    shutil.copytree(tiny_classifier_dir, folder)
    (folder / "eval_results.json").write_text(json.dumps({
        "benchmark": "glue", "task": "mrpc", "num_train_examples": 3668,
        "results": [{"split": "validation", "metrics": {"f1": 0.8122, "accuracy": 0.6838}}]}))
    (folder / "training_args.json").write_text(json.dumps({"learning_rate": 5e-5, "seed": 42}))
    (folder / "training_args.bin").write_bytes(b"a pickle that must never be pushed")
    return folder


def test_pushed_checkpoint_loads_in_a_fresh_process_without_the_package(hub, finetuned, tmp_path):
    before = snapshot(finetuned)
    proc = push([finetuned, "--repo-id", "someone/tiny-mrpc", "--language", "en", "--license", "mit"], hub_env(hub))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "pushed" in proc.stdout and "someone/tiny-mrpc" in proc.stdout
    files = hub.files("someone/tiny-mrpc")
    assert {"model.safetensors", "config.json", "modeling_macbert.py", "configuration_macbert.py",
            "tokenizer.json", "eval_results.json", "README.md"} <= set(files)
    assert "training_args.bin" not in files  # no pickles
    assert json.loads(files["config.json"])["auto_map"]["AutoModelForSequenceClassification"]
    card = files["README.md"].decode()
    assert "hf-plm-ext" in card and "model-index" in card and "0.8122" in card
    repo_calls = [ok for _, path, ok in hub.requests if path.startswith("/api/repos") or "someone/" in path]
    assert repo_calls and all(repo_calls)  # every call about the repository carried the token
    assert snapshot(finetuned) == before  # the local checkpoint is untouched

    ids = torch.tensor([[2, 100, 200, 300, 3]])
    from transformers import AutoModelForSequenceClassification

    with torch.no_grad():
        expected = AutoModelForSequenceClassification.from_pretrained(finetuned).eval()(ids).logits
    save_file({"ids": ids, "expected": expected}, tmp_path / "inputs.safetensors")
    result = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['hf_plm_ext'] = None\n"
         "import torch\nfrom safetensors.torch import load_file\n"
         "from transformers import AutoModelForSequenceClassification, AutoTokenizer\n"
         "model = AutoModelForSequenceClassification.from_pretrained('someone/tiny-mrpc', trust_remote_code=True)\n"
         "AutoTokenizer.from_pretrained('someone/tiny-mrpc', trust_remote_code=True)\n"
         "data = load_file(sys.argv[1])\n"
         "with torch.no_grad():\n    out = model.eval()(data['ids']).logits\n"
         "print(type(model).__name__, (out - data['expected']).abs().max().item())\n", str(tmp_path / "inputs.safetensors")],
        capture_output=True, text=True, env={**hub_env(hub), "PYTHONPATH": ""}, cwd=str(tmp_path), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    name, diff = result.stdout.split()[-2:]
    assert name == "MacBertForSequenceClassification" and float(diff) == 0.0


def test_branch_and_pull_request(hub, finetuned):
    env = hub_env(hub)
    assert push([finetuned, "--repo-id", "someone/tiny", "--revision", "v1", "--private"], env).returncode == 0
    assert "model.safetensors" in hub.files("someone/tiny", "v1") and hub.repos["someone/tiny"]["private"]
    proc = push([finetuned, "--repo-id", "someone/tiny", "--create-pr"], env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "/discussions/" in proc.stdout
    assert hub.repos["someone/tiny"]["commits"][-1]["branch"].startswith("refs/pr/")


def test_model_push_to_hub_carries_the_family_code(hub):
    code = (
        "import sys, hf_plm_ext\n"
        "from hf_plm_ext import MacBertForMaskedLM\n"
        "from conftest import tiny_macbert_config\n"
        "MacBertForMaskedLM(tiny_macbert_config()).push_to_hub('someone/tiny-mlm')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=hub_env(hub),
                          cwd=os.path.dirname(__file__), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = hub.files("someone/tiny-mlm")
    assert {"model.safetensors", "modeling_macbert.py", "configuration_macbert.py"} <= set(files)
    assert set(json.loads(files["config.json"])["auto_map"]) >= {"AutoConfig", "AutoModel", "AutoModelForMaskedLM"}
    result = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['hf_plm_ext'] = None\n"
         "from transformers import AutoModelForMaskedLM\n"
         "print(type(AutoModelForMaskedLM.from_pretrained('someone/tiny-mlm', trust_remote_code=True)).__name__)\n"],
        capture_output=True, text=True, env={**hub_env(hub), "PYTHONPATH": ""}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split()[-1] == "MacBertForMaskedLM"


@pytest.mark.parametrize("case", ["no token", "wrong token", "invalid repo id", "not a checkpoint",
                                  "connection drops", "connection refused"])
def test_bad_pushes_fail_with_one_clear_error_and_leave_the_folder(case, hub, finetuned, tmp_path):
    args, env = [finetuned, "--repo-id", "someone/x"], hub_env(hub)
    expected = {"no token": "no Hugging Face token", "wrong token": "refused to push",
                "invalid repo id": "invalid --repo-id", "not a checkpoint": "is not a checkpoint folder",
                "connection drops": "connection to", "connection refused": "Connection refused"}[case]
    if case == "no token":
        env = hub_env(hub, token=None)
    elif case == "wrong token":
        env = hub_env(hub, token="hf_wrong")
    elif case == "invalid repo id":
        args[2] = "someone/bad name!"
    elif case == "not a checkpoint":
        args[0] = tmp_path
    elif case == "connection drops":
        hub.fail_commits = True
    else:
        env["HF_ENDPOINT"] = "http://127.0.0.1:9"  # nothing listens on the discard port
    before = snapshot(finetuned)
    proc = push(args, env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.count("hf-plm-ext: error:") == 1 and expected in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert snapshot(finetuned) == before


def test_every_family_renders_a_card_whose_metadata_validates(tmp_path):
    from huggingface_hub import ModelCard

    from hf_plm_ext import FAMILIES
    from hf_plm_ext.hub.cards import render_card
    from hub_double import card_metadata_errors

    for config_class, heads in FAMILIES.items():
        if config_class.model_type == "transfo-xl":
            config = config_class(vocab_size=60, adaptive=False, d_model=16, d_embed=16, n_head=2, d_head=8,
                                  d_inner=32, n_layer=1, mem_len=8, eos_token_id=None)
        elif config_class.model_type == "electra-rtd":
            config = config_class.from_size("tiny", vocab_size=60, mask_token_id=4)
        else:
            config = config_class(vocab_size=60, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=32)
        for auto_name, model_class in heads.items():
            folder = tmp_path / f"{config_class.model_type}-{auto_name}"
            model_class(config).save_pretrained(folder)
            card = render_card(folder, repo_id=f"someone/{folder.name}", language="en", license="apache-2.0")
            assert card_metadata_errors(str(card)) == [], (folder.name, str(card)[:500])
            parsed = ModelCard(str(card))
            assert "hf-plm-ext" in parsed.data.tags and parsed.data.library_name == "transformers"
