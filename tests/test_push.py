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

from family_common import CASE_IDS, CASES, TINY_CONFIGS
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
    return subprocess.run([sys.executable, "-m", "hf_plm_ext_cli", "push", *map(str, args)],
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


def logits_in_a_fresh_process(hub, tmp_path, expected_model, load, without_package=True):
    """Run ``load`` (code that binds ``model``) in a process where ``import hf_plm_ext`` fails (unless
    ``without_package`` is False), against the test double; return (the class name of ``model``'s underlying
    transformers model, max |logit diff|)."""
    ids = torch.tensor([[2, 100, 200, 300, 3]])
    with torch.no_grad():
        expected = expected_model.eval()(ids).logits
    save_file({"ids": ids, "expected": expected}, tmp_path / "inputs.safetensors")
    code = (("import sys; sys.modules['hf_plm_ext'] = None\n" if without_package else "import sys\n") +
            "import torch\nfrom safetensors.torch import load_file\n"
            f"{load}\ndata = load_file(sys.argv[1])\n"
            "with torch.no_grad():\n    out = model.eval()(data['ids']).logits\n"
            "inner = model.base_model.model if hasattr(model, 'peft_config') else model\n"
            "print(type(inner).__name__, (out - data['expected']).abs().max().item())\n")
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path / "inputs.safetensors")], capture_output=True,
                            text=True, env={**hub_env(hub), "PYTHONPATH": ""}, cwd=str(tmp_path), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    name, diff = result.stdout.split()[-2:]
    return name, float(diff)


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

    from transformers import AutoModelForSequenceClassification

    name, diff = logits_in_a_fresh_process(
        hub, tmp_path, AutoModelForSequenceClassification.from_pretrained(finetuned),
        "from transformers import AutoModelForSequenceClassification, AutoTokenizer\n"
        "model = AutoModelForSequenceClassification.from_pretrained('someone/tiny-mrpc', trust_remote_code=True)\n"
        "AutoTokenizer.from_pretrained('someone/tiny-mrpc', trust_remote_code=True)")
    assert name == "MacBertForSequenceClassification" and diff == 0.0


def test_a_fine_tuned_stock_bert_run_pushes_with_a_generic_card(hub, minilm_dir, shared_data, tmp_path, capsys):
    """What a new user does first: fine-tune the packaged MiniLM (model_type bert, no family template) and push."""
    from transformers import AutoModelForSequenceClassification

    from conftest import run_cli

    out = tmp_path / "minilm-mrpc"
    code, _, stderr = run_cli(["finetune", "glue", "--task", "mrpc", "--model", minilm_dir, "--output", out,
                               "--data-dir", shared_data / "glue/MRPC", "--max_steps", 1, "--max_train_samples", 8,
                               "--per_device_train_batch_size", 8, "--max_seq_length", 32, "--disable_tqdm", "true",
                               "--report_to", "none"], capsys)
    assert code == 0, stderr[-3000:]
    proc = push([out, "--repo-id", "someone/minilm-mrpc", "--language", "en"], hub_env(hub))
    assert proc.returncode == 0, proc.stderr[-3000:]
    card = hub.files("someone/minilm-mrpc")["README.md"].decode()
    from hub_double import card_metadata_errors

    assert card_metadata_errors(card) == []
    measured = json.loads((out / "eval_results.json").read_text())["results"][0]["metrics"]
    assert "model-index" in card and f"{round(measured['f1'], 4)}" in card
    assert "A `bert` checkpoint (`BertForSequenceClassification`)" in card
    assert "trust_remote_code" not in card  # a stock model: nothing but transformers is needed

    name, diff = logits_in_a_fresh_process(
        hub, tmp_path, AutoModelForSequenceClassification.from_pretrained(out),
        "from transformers import AutoModelForSequenceClassification\n"
        "model = AutoModelForSequenceClassification.from_pretrained('someone/minilm-mrpc')")
    assert name == "BertForSequenceClassification" and diff == 0.0


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


@pytest.fixture(scope="module")
def lora_run_once(tmp_path_factory, tiny_classifier_dir, shared_data):
    """A LoRA adapter as ``finetune --peft-config`` leaves it: adapter weights, tokenizer, eval results."""
    from hf_plm_ext_cli.main import main

    folder = tmp_path_factory.mktemp("lora")
    (folder / "lora.json").write_text(json.dumps({"peft_type": "LORA", "r": 4, "target_modules": ["query", "value"]}))
    main(list(map(str, ["finetune", "glue", "--task", "mrpc", "--model", tiny_classifier_dir, "--output",
                        folder / "mrpc-lora", "--peft-config", folder / "lora.json", "--data-dir",
                        shared_data / "glue/MRPC", "--max_steps", 3, "--max_train_samples", 32, "--max_seq_length",
                        32, "--learning_rate", 1e-2, "--disable_tqdm", "true", "--report_to", "none"])))
    return folder / "mrpc-lora"


@pytest.fixture
def lora_run(lora_run_once, tmp_path):
    import shutil

    return shutil.copytree(lora_run_once, tmp_path / "mrpc-lora")


def test_adapter_pushes_adapter_only_and_loads_on_its_pushed_base(hub, lora_run, tiny_classifier_dir, tmp_path):
    env = hub_env(hub)
    proc = push([tiny_classifier_dir, "--repo-id", "someone/tiny-base"], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    before = snapshot(lora_run)
    proc = push([lora_run, "--repo-id", "someone/tiny-mrpc-lora", "--base-model", "someone/tiny-base"], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert snapshot(lora_run) == before  # the local adapter_config.json still names the local base
    files = hub.files("someone/tiny-mrpc-lora")
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "eval_results.json",
            "README.md"} <= set(files)
    assert not {"model.safetensors", "config.json"} & set(files) and not any(f.endswith(".py") for f in files)
    assert json.loads(files["adapter_config.json"])["base_model_name_or_path"] == "someone/tiny-base"
    card = files["README.md"].decode()
    assert "library_name: peft" in card and "base_model: someone/tiny-base" in card and "model-index" in card
    assert "trust_remote_code=True" in card  # the base is a macbert checkpoint with remote code

    from peft import AutoPeftModelForSequenceClassification

    name, diff = logits_in_a_fresh_process(
        hub, tmp_path, AutoPeftModelForSequenceClassification.from_pretrained(lora_run),
        "from peft import AutoPeftModelForSequenceClassification\n"
        "model = AutoPeftModelForSequenceClassification.from_pretrained('someone/tiny-mrpc-lora', "
        "trust_remote_code=True)")
    assert name == "MacBertForSequenceClassification" and diff == 0.0


@pytest.mark.parametrize("case", ["local base", "pickled adapter"])
def test_adapter_that_a_stranger_could_not_load_is_refused(case, lora_run):
    from hf_plm_ext.errors import UserInputError
    from hf_plm_ext.hub.push import push_checkpoint

    if case == "pickled adapter":
        (lora_run / "adapter_model.safetensors").rename(lora_run / "adapter_model.bin")
    before = snapshot(lora_run)
    expected = {"local base": "pass --base-model", "pickled adapter": "no adapter_model.safetensors"}[case]
    with pytest.raises(UserInputError, match=expected):
        push_checkpoint(lora_run, "someone/x")  # refused before any token or connection is needed
    assert snapshot(lora_run) == before


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
    assert proc.stderr.count(": error:") == 1 and expected in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert snapshot(finetuned) == before


@pytest.mark.parametrize("variant,auto_name,model_class", CASES, ids=CASE_IDS)
def test_every_family_renders_a_card_whose_metadata_validates(variant, auto_name, model_class, tmp_path):
    from huggingface_hub import ModelCard

    from hf_plm_ext.hub.cards import render_card
    from hub_double import card_metadata_errors

    folder = tmp_path / f"{variant}-{auto_name}"
    model_class(TINY_CONFIGS[variant]()).save_pretrained(folder)
    card = render_card(folder, repo_id=f"someone/{folder.name}", language="en", license="apache-2.0")
    assert card_metadata_errors(str(card)) == [], (folder.name, str(card)[:500])
    parsed = ModelCard(str(card))
    assert "hf-plm-ext" in parsed.data.tags and parsed.data.library_name == "transformers"


def test_adapter_card_metadata_validates(lora_run):
    from huggingface_hub import ModelCard

    from hf_plm_ext.hub.cards import render_card
    from hub_double import card_metadata_errors

    card = render_card(lora_run, repo_id="someone/lora", base_model="someone/base", language="en", license="mit")
    assert card_metadata_errors(str(card)) == [], str(card)[:800]
    parsed = ModelCard(str(card))
    assert parsed.data.library_name == "peft" and parsed.data.base_model == "someone/base"
    assert {"hf-plm-ext", "lora"} <= set(parsed.data.tags) and parsed.data.pipeline_tag == "text-classification"
    measured = json.loads((lora_run / "eval_results.json").read_text())["results"][0]["metrics"]
    assert {r.metric_type: r.metric_value for r in parsed.data.eval_results} == {
        name: round(value, 4) for name, value in measured.items()}
    assert "AutoPeftModelForSequenceClassification" in str(card) and "r | 4" in str(card)
    assert "Loading needs hf-plm-ext" not in str(card)  # LoRA is PEFT's own


def test_a_bottleneck_adapter_pushes_adapter_only_and_its_card_says_loading_needs_the_package(
        hub, tiny_classifier_dir, shared_data, tmp_path):
    from hf_plm_ext_cli.main import main

    run = tmp_path / "mrpc-pfeiffer"
    main(list(map(str, ["finetune", "glue", "--task", "mrpc", "--model", tiny_classifier_dir, "--output", run,
                        "--adapter", "pfeiffer", "--data-dir", shared_data / "glue/MRPC", "--max_steps", 3,
                        "--max_train_samples", 32, "--max_seq_length", 32, "--learning_rate", 1e-2,
                        "--disable_tqdm", "true", "--report_to", "none"])))
    env = hub_env(hub)
    assert push([tiny_classifier_dir, "--repo-id", "someone/tiny-base"], env).returncode == 0
    proc = push([run, "--repo-id", "someone/tiny-mrpc-pfeiffer", "--base-model", "someone/tiny-base"], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = hub.files("someone/tiny-mrpc-pfeiffer")
    assert "adapter_model.safetensors" in files and "model.safetensors" not in files
    card = files["README.md"].decode()
    assert "**Loading needs hf-plm-ext**" in card and "import hf_plm_ext  # registers BOTTLENECK with PEFT" in card
    assert "bottleneck" in card and "reduction_factor | 16" in card and "Houlsby" in card

    from peft import AutoPeftModelForSequenceClassification

    load = ("import hf_plm_ext\nfrom peft import AutoPeftModelForSequenceClassification\n"
            "model = AutoPeftModelForSequenceClassification.from_pretrained('someone/tiny-mrpc-pfeiffer', "
            "trust_remote_code=True)")
    name, diff = logits_in_a_fresh_process(hub, tmp_path, AutoPeftModelForSequenceClassification.from_pretrained(run),
                                           load, without_package=False)
    assert name == "MacBertForSequenceClassification" and diff == 0.0


def test_a_card_hf_plm_ext_wrote_is_rendered_again_for_the_repo_and_an_edited_one_goes_up_as_it_is(hub, finetuned):
    """distill writes a card into its output (named by the output); pushed, the card names the repo."""
    from hf_plm_ext import render_card

    render_card(finetuned).save(str(finetuned / "README.md"))
    assert "path/to/mrpc-run" in (finetuned / "README.md").read_text()
    proc = push([finetuned, "--repo-id", "someone/tiny-card"], hub_env(hub))
    assert proc.returncode == 0, proc.stderr[-3000:]
    card = hub.files("someone/tiny-card")["README.md"].decode()
    assert "someone/tiny-card" in card and "path/to/mrpc-run" not in card
    edited = "---\nlicense: mit\n---\n# my own words\n"
    (finetuned / "README.md").write_text(edited, encoding="utf-8")
    proc = push([finetuned, "--repo-id", "someone/edited-card"], hub_env(hub))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert hub.files("someone/edited-card")["README.md"].decode() == edited
