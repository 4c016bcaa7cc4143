import json
from unittest import mock

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from hf_plm_ext import MacBertForMaskedLM, MacBertForSequenceClassification

from conftest import run_cli, tiny_macbert_config

QUICK = ["--per_device_train_batch_size", 16, "--per_device_eval_batch_size", 64, "--seed", 0,
         "--disable_tqdm", "true", "--report_to", "none"]


def _finetune(capsys, benchmark, task, model, output, *extra):
    return run_cli(["finetune", benchmark, "--task", task, "--model", model, "--output", output, *extra, *QUICK],
                   capsys)


def saved_model_predictions(folder, benchmark, task, path, max_length):
    """The saved classifier's outputs on a whole split, computed here, with the split's labels."""
    from hf_plm_ext.eval.readers import read_examples
    from hf_plm_ext.eval.tasks import get_task

    examples = read_examples(get_task(benchmark, task), path).to_dict()
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    texts = [examples["text_a"]] + ([examples["text_b"]] if "text_b" in examples else [])
    batch = AutoTokenizer.from_pretrained(folder)(*texts, padding=True, truncation=True, max_length=max_length,
                                                  return_tensors="pt")
    with torch.no_grad():
        return model(**batch).logits, examples["label"]


def test_tiny_macbert_on_real_mrpc_writes_results_and_a_loadable_model(tmp_path, tiny_classifier_dir,
                                                                     shared_data, capsys):
    out = tmp_path / "mrpc"
    code, stdout, stderr = _finetune(capsys, "glue", "mrpc", tiny_classifier_dir, out,
                                     "--data-dir", shared_data / "glue/MRPC", "--max_steps", 4,
                                     "--max_train_samples", 64, "--max_seq_length", 64)
    assert code == 0, stderr
    results = json.loads((out / "eval_results.json").read_text())
    assert results["task"] == "mrpc" and results["num_train_examples"] == 64
    [dev] = results["results"]
    assert dev["split"] == "dev" and dev["num_examples"] == 408
    assert set(dev["metrics"]) == {"f1", "accuracy"}
    from sklearn.metrics import accuracy_score, f1_score

    logits, labels = saved_model_predictions(out, "glue", "mrpc", shared_data / "glue/MRPC/dev.tsv", 64)
    predicted = logits.argmax(-1).numpy()
    assert dev["metrics"]["accuracy"] == pytest.approx(accuracy_score(labels, predicted), abs=1e-6)
    assert dev["metrics"]["f1"] == pytest.approx(f1_score(labels, predicted), abs=1e-6)
    assert "| glue | mrpc | dev | f1 |" in (out / "eval_results.md").read_text()
    assert "| glue | mrpc | dev | accuracy |" in stdout
    files = {p.name for p in out.iterdir()}
    assert {"model.safetensors", "modeling_macbert.py", "tokenizer.json", "training_args.json"} <= files
    assert not any(name.endswith((".bin", ".pt", ".pth")) for name in files)  # no pickles
    model = AutoModelForSequenceClassification.from_pretrained(out)
    assert isinstance(model, MacBertForSequenceClassification)
    assert model.config.id2label == {0: "0", 1: "1"} and model.config.finetuning_task == "mrpc"
    assert [p.name for p in tmp_path.iterdir()] == ["mrpc"]  # no staging folder left behind


def test_regression_task_stsb(tmp_path, tiny_classifier_dir, shared_data, capsys):
    args = ["--data-dir", shared_data / "glue/STS-B", "--max_steps", 2]
    code, _, stderr = _finetune(capsys, "glue", "stsb", tiny_classifier_dir, tmp_path / "stsb", *args)
    assert code == 2 and "--ignore_mismatched_sizes" in stderr  # a 2-label head cannot do regression
    code, _, stderr = _finetune(capsys, "glue", "stsb", tiny_classifier_dir, tmp_path / "stsb",
                                *args, "--ignore_mismatched_sizes",
                                "--max_train_samples", 32, "--max_seq_length", 32)
    assert code == 0, stderr
    [dev] = json.loads((tmp_path / "stsb" / "eval_results.json").read_text())["results"]
    assert set(dev["metrics"]) == {"pearson", "spearmanr"}
    from scipy.stats import pearsonr, spearmanr

    logits, scores = saved_model_predictions(tmp_path / "stsb", "glue", "stsb", shared_data / "glue/STS-B/dev.tsv", 32)
    assert dev["metrics"]["pearson"] == pytest.approx(pearsonr(logits[:, 0].numpy(), scores)[0], abs=1e-5)
    assert dev["metrics"]["spearmanr"] == pytest.approx(spearmanr(logits[:, 0].numpy(), scores)[0], abs=1e-5)
    assert AutoModelForSequenceClassification.from_pretrained(tmp_path / "stsb").config.num_labels == 1


def test_clue_with_fewclue_files_and_labels_file(tmp_path, shared_data, capsys):
    from transformers import AutoTokenizer as AT

    from hf_plm_ext.data.tokenizer_training import train_tokenizer

    tok = train_tokenizer([str(shared_data / "corpus/zh/CLUECorpusSmall_bert_sampled.txt")], vocab_size=3000)
    model_dir = tmp_path / "zh-model"
    MacBertForMaskedLM(tiny_macbert_config(vocab_size=len(tok))).save_pretrained(model_dir)  # a "pre-trained" encoder
    tok.save_pretrained(str(model_dir))
    assert len(AT.from_pretrained(model_dir)) == len(tok)
    code, _, stderr = _finetune(capsys, "clue", "tnews", model_dir, tmp_path / "tnews",
                                "--data-dir", shared_data / "clue/tnews", "--max_steps", 2,
                                "--max_train_samples", 32, "--max_seq_length", 32)
    assert code == 0, stderr
    model = AutoModelForSequenceClassification.from_pretrained(tmp_path / "tnews")
    assert model.config.num_labels == 15 and model.config.id2label[5] == "106"

    code, _, stderr = _finetune(capsys, "clue", "cluewsc2020", model_dir, tmp_path / "wsc",
                                "--train-file", shared_data / "clue/fewclue/cluewsc/train_few_all.json",
                                "--validation-file", shared_data / "clue/fewclue/cluewsc/dev_few_all.json",
                                "--max_steps", 2, "--max_seq_length", 64)
    assert code == 0, stderr
    [dev] = json.loads((tmp_path / "wsc" / "eval_results.json").read_text())["results"]
    assert dev["num_examples"] == 159


@pytest.mark.slow
def test_minilm_learns_sst2_from_a_few_thousand_examples(tmp_path, minilm_dir, shared_data, capsys):
    """Real pretrained weights: 2,048 SST-2 examples lift dev accuracy well above chance (0.51)."""
    code, _, stderr = _finetune(capsys, "glue", "sst2", minilm_dir, tmp_path / "sst2",
                                "--data-dir", shared_data / "glue/SST-2", "--max_train_samples", 2048,
                                "--num_train_epochs", 1, "--learning_rate", 5e-5, "--max_seq_length", 64)
    assert code == 0, stderr
    [dev] = json.loads((tmp_path / "sst2" / "eval_results.json").read_text())["results"]
    assert dev["num_examples"] == 872
    assert dev["metrics"]["accuracy"] > 0.70


def test_the_same_seed_gives_the_same_classifier(tmp_path, minilm_dir, shared_data, capsys):
    """MiniLM has no classification head: --seed covers its fresh weights (made before the Trainer seeds itself)."""
    heads = {}
    for name, seed in (("first", 0), ("again", 0), ("other", 1)):
        code, _, stderr = run_cli(["finetune", "glue", "--task", "mrpc", "--model", minilm_dir, "--output",
                                   tmp_path / name, "--data-dir", shared_data / "glue/MRPC", "--max_steps", 1,
                                   "--max_train_samples", 16, "--max_seq_length", 32, "--per_device_train_batch_size",
                                   16, "--per_device_eval_batch_size", 64, "--seed", seed, "--disable_tqdm", "true",
                                   "--report_to", "none"], capsys)
        assert code == 0, stderr
        heads[name] = load_file(tmp_path / name / "model.safetensors")["classifier.weight"]
    assert torch.equal(heads["first"], heads["again"]) and not torch.equal(heads["first"], heads["other"])


def test_bad_inputs_exit_2_and_write_nothing(tmp_path, tiny_classifier_dir, english_tokenizer_dir,
                                             shared_data, minilm_dir, capsys):
    sst2 = shared_data / "glue/SST-2"
    cases = {
        "unknown task": (["glue", "sst5", tiny_classifier_dir, "--data-dir", sst2], "unknown GLUE task 'sst5'"),
        "missing data": (["glue", "sst2", tiny_classifier_dir, "--data-dir", tmp_path / "none"], "not a directory"),
        "missing model": (["glue", "sst2", tmp_path / "no-model", "--data-dir", sst2], "directory not found"),
    }
    bad_label = tmp_path / "bad"
    bad_label.mkdir()
    (bad_label / "train.tsv").write_text("sentence\tlabel\ngood\t1\nbad\tpositive\n")
    (bad_label / "dev.tsv").write_text("sentence\tlabel\ngood\t1\n")
    cases["label outside set"] = (["glue", "sst2", tiny_classifier_dir, "--data-dir", bad_label],
                                  f"{bad_label / 'train.tsv'}:3: label 'positive'")
    # The MiniLM classifier head with its 30k-token vocabulary but our 1.5k-row tiny model: mismatch.
    mismatched = tmp_path / "mismatched"
    MacBertForSequenceClassification(tiny_macbert_config(vocab_size=100)).save_pretrained(mismatched)
    AutoTokenizer.from_pretrained(english_tokenizer_dir).save_pretrained(mismatched)
    cases["sequence too long"] = (["glue", "sst2", tiny_classifier_dir, "--data-dir", sst2, "--max_seq_length", 512],
                                  "exceeds the model's max_position_embeddings (128)")
    cases["tokenizer too big"] = (["glue", "sst2", mismatched, "--data-dir", sst2], "do not belong together")
    for name, ((benchmark, task, model, *extra), message) in cases.items():
        out = tmp_path / f"out-{name.replace(' ', '-')}"
        code, _, stderr = _finetune(capsys, benchmark, task, model, out, *extra)
        assert code == 2, (name, stderr[-2000:])
        assert message in stderr and "Traceback" not in stderr, (name, stderr[-2000:])
        assert not out.exists(), name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad", "mismatched"]


def test_existing_output_is_refused(tmp_path, tiny_classifier_dir, shared_data, capsys):
    (tmp_path / "out").mkdir()
    code, _, stderr = _finetune(capsys, "glue", "sst2", tiny_classifier_dir, tmp_path / "out",
                                "--data-dir", shared_data / "glue/SST-2")
    assert code == 2 and "already exists" in stderr
    assert list((tmp_path / "out").iterdir()) == []


def test_a_failure_during_training_leaves_no_output(tmp_path, tiny_classifier_dir, shared_data, capsys):
    with mock.patch("transformers.Trainer.train", side_effect=RuntimeError("power cut")):
        with pytest.raises(RuntimeError, match="power cut"):
            _finetune(capsys, "glue", "sst2", tiny_classifier_dir, tmp_path / "out",
                      "--data-dir", shared_data / "glue/SST-2", "--max_train_samples", 16)
    assert list(tmp_path.iterdir()) == []


def test_labels_json_that_disagrees_with_the_task_table_is_refused(tmp_path, shared_data):
    from hf_plm_ext.errors import UserInputError
    from hf_plm_ext.eval.readers import check_labels_file
    from hf_plm_ext.eval.tasks import get_task

    tnews = get_task("clue", "tnews")
    check_labels_file(tnews, shared_data / "clue/tnews")  # the official file agrees
    (tmp_path / "labels.json").write_text('{"label": "100", "label_desc": "news_story"}\n'
                                          '{"label": "117", "label_desc": "news_new"}\n')
    with pytest.raises(UserInputError, match=r"labels.json: labels \['117'\] are not in the tnews label set"):
        check_labels_file(tnews, tmp_path)


def test_peft_config_trains_and_saves_only_the_adapter_and_the_head(tmp_path, tiny_classifier_dir, shared_data,
                                                                     capsys):
    from peft import AutoPeftModelForSequenceClassification
    from safetensors.torch import load_file

    lora = tmp_path / "lora.json"
    lora.write_text(json.dumps({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["query", "value"]}))
    out = tmp_path / "mrpc-lora"
    code, _, stderr = _finetune(capsys, "glue", "mrpc", tiny_classifier_dir, out, "--peft-config", lora,
                                "--data-dir", shared_data / "glue/MRPC", "--max_steps", 4, "--max_train_samples", 64,
                                "--max_seq_length", 64, "--learning_rate", 1e-2)
    assert code == 0, stderr
    files = {p.name for p in out.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "eval_results.json"} <= files
    assert "model.safetensors" not in files and "README.md" not in files  # adapter only; PEFT's generic card gone
    saved = load_file(out / "adapter_model.safetensors")
    assert saved and all("lora_" in name or ".classifier." in name for name in saved), sorted(saved)
    assert json.loads((out / "eval_results.json").read_text())["peft_config"].endswith("lora.json")

    import torch

    ids = torch.tensor([[2, 100, 200, 300, 3]])
    with torch.no_grad():
        base = AutoModelForSequenceClassification.from_pretrained(tiny_classifier_dir).eval()(ids).logits
        adapted_model = AutoPeftModelForSequenceClassification.from_pretrained(out).eval()
        adapted = adapted_model(ids).logits
        with adapted_model.disable_adapter():
            without_lora = adapted_model(ids).logits
    assert not torch.allclose(adapted, base)  # trained LoRA + head
    assert not torch.allclose(adapted, without_lora)  # the LoRA update itself changes the outputs
    # the adapter folder given as a model: said what it is, and how to use it
    code, _, stderr = _finetune(capsys, "glue", "mrpc", out, tmp_path / "again", "--data-dir",
                                shared_data / "glue/MRPC", "--max_steps", 1)
    assert code == 2 and f"{out} is a PEFT adapter (of {tiny_classifier_dir.resolve()}), not a model" in stderr, \
        stderr[-600:]
    assert "merge_and_unload" in stderr and not (tmp_path / "again").exists()


@pytest.mark.parametrize("adapter,prefix", [("pfeiffer", ".bn_"), ("houlsby", ".bn_"), ("lora", "lora_")])
def test_adapter_trains_and_saves_only_the_adapter_and_the_head(adapter, prefix, tmp_path, tiny_classifier_dir,
                                                                 shared_data, capsys):
    from peft import AutoPeftModelForSequenceClassification
    from safetensors.torch import load_file

    out = tmp_path / f"mrpc-{adapter}"
    code, _, stderr = _finetune(capsys, "glue", "mrpc", tiny_classifier_dir, out, "--adapter", adapter,
                                "--data-dir", shared_data / "glue/MRPC", "--max_steps", 4, "--max_train_samples", 64,
                                "--max_seq_length", 64, "--learning_rate", 1e-2)
    assert code == 0, stderr
    assert "model.safetensors" not in {p.name for p in out.iterdir()}
    saved = load_file(out / "adapter_model.safetensors")
    assert any(prefix in name for name in saved)
    assert all(prefix in name or ".classifier." in name for name in saved), sorted(saved)
    record = json.loads((out / "eval_results.json").read_text())
    assert record["adapter"] == adapter
    # the record counts what trained: the saved adapter and head, nothing of the frozen backbone
    assert record["parameters"]["trainable"] == sum(tensor.numel() for tensor in saved.values())
    assert record["parameters"]["trainable"] < record["parameters"]["total"]
    import torch

    ids = torch.tensor([[2, 100, 200, 300, 3]])
    adapted = AutoPeftModelForSequenceClassification.from_pretrained(out).eval()
    with torch.no_grad():
        with adapted.disable_adapter():
            without = adapted(ids).logits
        assert not torch.allclose(adapted(ids).logits, without)
    # the adapter folder given as a model: the advice that works for it (a bottleneck adapter has no merge)
    code, _, stderr = _finetune(capsys, "glue", "mrpc", out, tmp_path / "again", "--data-dir",
                                shared_data / "glue/MRPC", "--max_steps", 1)
    assert code == 2 and f"{out} is a PEFT adapter" in stderr and not (tmp_path / "again").exists()
    if adapter == "lora":
        assert "merge_and_unload()" in stderr
    else:
        assert "cannot be merged" in stderr and "merge_and_unload" not in stderr
        with pytest.raises(ValueError, match="cannot be merged"):  # what the advice no longer says: it raises
            adapted.merge_and_unload()
        adapted.unload()  # what it says instead works


def test_an_adapter_on_an_encoder_without_a_pooler_trains_and_saves_the_pooler_too(tmp_path, english_tokenizer_dir,
                                                                                    shared_data, capsys):
    """A masked-LM checkpoint has no pooler: the classifier's is new, so it trains and is saved with the adapter
    (frozen at its random start, it would differ at every load; it did)."""
    from peft import AutoPeftModelForSequenceClassification
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from conftest import tiny_macbert_config
    from hf_plm_ext import MacBertForMaskedLM

    encoder = tmp_path / "encoder"
    MacBertForMaskedLM(tiny_macbert_config()).save_pretrained(encoder)
    AutoTokenizer.from_pretrained(english_tokenizer_dir).save_pretrained(encoder)
    out = tmp_path / "mrpc-houlsby"
    code, _, stderr = _finetune(capsys, "glue", "mrpc", encoder, out, "--adapter", "houlsby", "--data-dir",
                                shared_data / "glue/MRPC", "--max_steps", 2, "--max_train_samples", 32,
                                "--max_seq_length", 32)
    assert code == 0, stderr
    assert any(".pooler." in name for name in load_file(out / "adapter_model.safetensors"))
    import torch

    ids = torch.tensor([[2, 100, 200, 300, 3]])
    with torch.no_grad():
        first, second = (AutoPeftModelForSequenceClassification.from_pretrained(out).eval()(ids).logits
                         for _ in range(2))
    assert torch.equal(first, second)


@pytest.mark.parametrize("content, extra, message", [
    ("{not json", [], "lora.json:1: not valid JSON"),
    ('{"peft_type": "NOPE"}', [], '"peft_type" must be one of'),
    ('{"peft_type": "LORA", "task_type": "CAUSAL_LM"}', [], "task_type must be SEQ_CLS"),
    ('{"peft_type": "LORA", "rank": 4, "target_modules": ["query"]}', [], "unexpected keyword argument 'rank'"),
    ('{"peft_type": "LORA", "target_modules": ["no_such_module"]}', [], "No modules were targeted"),
    ('{"peft_type": "LORA", "target_modules": ["query"]}', ["--layerwise_lr_decay", 0.8], "do not go together"),
    ('{"peft_type": "LORA", "target_modules": ["query"]}', ["--adapter", "houlsby"], "do not go together"),
])
def test_bad_peft_config_is_one_clear_error(content, extra, message, tmp_path, tiny_classifier_dir, shared_data,
                                            capsys):
    (tmp_path / "lora.json").write_text(content)
    out = tmp_path / "out"
    code, _, stderr = _finetune(capsys, "glue", "mrpc", tiny_classifier_dir, out, "--peft-config",
                                tmp_path / "lora.json", "--data-dir", shared_data / "glue/MRPC", "--max_steps", 1,
                                *extra)
    assert code == 2 and message in stderr and stderr.count("error:") == 1, stderr
    assert not out.exists()


def test_fsdp_on_the_cpu_is_refused_rather_than_run_as_ddp(tmp_path, tiny_classifier_dir, shared_data, capsys,
                                                          monkeypatch):
    """accelerate 1.15 shards only on accelerators: on the CPU a run asked for FSDP (the Trainer's --fsdp, or an
    `accelerate launch` FSDP config) trained as plain DDP with no warning (seen: model_wrapped was a
    DistributedDataParallel under both)."""
    args = ["--data-dir", shared_data / "glue/SST-2", "--max_steps", 1]
    code, _, stderr = _finetune(capsys, "glue", "sst2", tiny_classifier_dir, tmp_path / "a", *args, "--fsdp",
                                "full_shard")
    assert code == 2 and "FSDP needs GPUs" in stderr
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")  # what `accelerate launch --config_file fsdp.yaml` sets
    code, _, stderr = _finetune(capsys, "glue", "sst2", tiny_classifier_dir, tmp_path / "b", *args)
    assert code == 2 and "FSDP needs GPUs" in stderr
    assert not any(tmp_path.iterdir())


def test_train_and_validation_files_are_looked_up_in_the_data_dir_first(tmp_path, tiny_classifier_dir, shared_data,
                                                                        capsys, monkeypatch):
    """docs/glue-clue.md's FewCLUE example: ``--data-dir fewclue/csl --train-file train_few_all.json`` (issue 69,
    item 5), run from another working directory."""
    monkeypatch.chdir(tmp_path)
    few = shared_data / "clue" / "fewclue" / "cluewsc"
    code, _, stderr = _finetune(capsys, "clue", "cluewsc2020", tiny_classifier_dir, tmp_path / "out", "--data-dir",
                                few, "--train-file", "train_few_all.json", "--validation-file", "dev_few_all.json",
                                "--max_seq_length", 32)
    assert code == 0, stderr[-2000:]
    results = json.loads((tmp_path / "out" / "eval_results.json").read_text())
    assert results["train_file"] == str(few / "train_few_all.json")
    assert results["results"][0]["file"] == str(few / "dev_few_all.json")
