"""The training commands run unchanged under torchrun / accelerate launch (gloo on CPU)."""

import json
import math
import os
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForMaskedLM, AutoModelForPreTraining, AutoModelForSequenceClassification

LAUNCHERS = {
    "torchrun": [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"],
    # accelerate only forks several processes through its torchrun path (--multi_gpu); with no GPU the
    # ranks run on the CPU with gloo (hf-plm-ext sets use_cpu when there is no accelerator).
    "accelerate": [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2", "--multi_gpu",
                   "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"],
}
COMMON = ["--max_steps", "3", "--per_device_train_batch_size", "4", "--disable_tqdm", "true", "--save_strategy", "no"]


def _launch(launcher, args, cwd, common=COMMON):
    command = LAUNCHERS[launcher] + ["-m", "hf_plm_ext_cli", *map(str, args), *common]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.mark.slow
@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_finetune_on_two_processes(launcher, tmp_path, tiny_classifier_dir, shared_data):
    out = tmp_path / "sst2"
    proc = _launch(launcher, ["finetune", "glue", "--task", "sst2", "--model", tiny_classifier_dir,
                              "--data-dir", shared_data / "glue/SST-2", "--max_train_samples", 64,
                              "--output", out], tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]  # the launcher fails if any rank fails
    results = json.loads((out / "eval_results.json").read_text())
    assert results["world_size"] == 2
    # what was saved is what was evaluated: the saved model, on the whole dev split in this process
    from hf_plm_ext.eval.readers import read_examples
    from hf_plm_ext.eval.tasks import get_task
    from transformers import AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    dev = read_examples(get_task("glue", "sst2"), shared_data / "glue/SST-2/dev.tsv").to_dict()
    with torch.no_grad():
        logits = model(**tokenizer(dev["text_a"], padding=True, truncation=True, max_length=128,
                                   return_tensors="pt")).logits
    accuracy = (logits.argmax(-1) == torch.tensor(dev["label"])).float().mean().item()
    assert accuracy == pytest.approx(results["results"][0]["metrics"]["accuracy"], abs=1e-6)
    assert results["results"][0]["num_examples"] == len(dev["label"])
    assert [p.name for p in tmp_path.iterdir()] == ["sst2"]


@pytest.mark.slow
def test_a_bottleneck_adapter_trains_on_two_processes(tmp_path, tiny_classifier_dir, shared_data):
    """DDP over the adapters alone (the backbone frozen): both ranks step the same adapter; rank 0 saves it."""
    out = tmp_path / "sst2-houlsby"
    proc = _launch("torchrun", ["finetune", "glue", "--task", "sst2", "--model", tiny_classifier_dir, "--adapter",
                                "houlsby", "--data-dir", shared_data / "glue/SST-2", "--max_train_samples", 64,
                                "--learning_rate", 1e-2, "--output", out], tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert json.loads((out / "eval_results.json").read_text())["world_size"] == 2
    from peft import AutoPeftModelForSequenceClassification

    model = AutoPeftModelForSequenceClassification.from_pretrained(out).eval()
    ids = torch.tensor([[2, 100, 200, 300, 3]])
    with torch.no_grad():
        with model.disable_adapter():
            without = model(ids).logits
        assert not torch.allclose(model(ids).logits, without)


@pytest.mark.slow
def test_pretrain_on_two_processes(tmp_path, english_tokenizer_dir, shared_data):
    out = tmp_path / "pretrained"
    proc = _launch("torchrun", ["pretrain", "mlm", "--corpus", shared_data / "corpus/en/gutenberg/11-0.txt",
                                "--tokenizer", english_tokenizer_dir, "--max_seq_length", 32, "--output", out,
                                "--config_overrides", "hidden_size=32,num_hidden_layers=1,num_attention_heads=2",
                                "--max_steps", 60, "--learning_rate", 2e-3, "--per_device_train_batch_size", 16],
                   tmp_path, common=COMMON[4:])  # enough steps to learn: the loss must fall
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads((out / "pretrain_results.json").read_text())
    assert results["world_size"] == 2 and results["final_eval_loss"] < results["initial_eval_loss"] - 0.3
    assert AutoModelForMaskedLM.from_pretrained(out).config.hidden_size == 32


@pytest.mark.slow
def test_macbert_pretraining_on_two_processes(tmp_path, english_tokenizer_dir, shared_data):
    table = tmp_path / "synonyms.txt"
    table.write_text("said cried replied\nlittle small tiny\nqueen king\n")
    out = tmp_path / "macbert"
    proc = _launch("torchrun", ["pretrain", "macbert", "--corpus", shared_data / "corpus/en/gutenberg/11-0.txt",
                                "--tokenizer", english_tokenizer_dir, "--similar_words", table,
                                "--max_seq_length", 64, "--output", out,
                                "--config_overrides", "hidden_size=32,num_hidden_layers=1,num_attention_heads=2",
                                "--max_steps", 40, "--learning_rate", 2e-3, "--per_device_train_batch_size", 16,
                                "--logging_steps", 20],
                   tmp_path, common=COMMON[4:])
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads((out / "pretrain_results.json").read_text())
    assert results["world_size"] == 2 and results["objective"] == "macbert"
    assert results["final_eval_loss"] < results["initial_eval_loss"]
    # the sub-losses are averaged over the ranks (a collective in log()) at every logging step
    assert [entry["step"] for entry in results["train_sub_losses"]] == [20, 40]
    assert all({"mlm_loss", "sop_loss"} <= set(entry) for entry in results["train_sub_losses"])
    assert type(AutoModelForPreTraining.from_pretrained(out)).__name__ == "MacBertForPreTraining"


@pytest.mark.slow
def test_electra_pretraining_on_two_processes(tmp_path, english_tokenizer_dir, shared_data):
    out = tmp_path / "electra"
    proc = _launch("accelerate", ["pretrain", "electra", "--corpus", shared_data / "corpus/en/gutenberg/11-0.txt",
                                  "--tokenizer", english_tokenizer_dir, "--size", "tiny", "--max_seq_length", 64,
                                  "--output", out, "--max_steps", 40, "--learning_rate", 2e-3,
                                  "--per_device_train_batch_size", 8], tmp_path, common=COMMON[4:])
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads((out / "pretrain_results.json").read_text())
    assert results["world_size"] == 2 and results["objective"] == "electra"
    initial_auc = results["initial_eval_metrics"]["initial_discriminator_auc"]
    assert results["final_eval_metrics"]["eval_discriminator_auc"] > initial_auc  # gains seen: 0.012-0.054
    assert type(AutoModelForPreTraining.from_pretrained(out)).__name__ == "ElectraForRTDPreTraining"


@pytest.mark.slow
def test_reversible_lsh_pretraining_on_two_processes(tmp_path, english_tokenizer_dir, shared_data):
    """The reversible stack under DDP: its parameters' gradients come out of one autograd node (no reentrant
    backward, which DDP refused: "Expected to mark a variable ready only once")."""
    out = tmp_path / "rev-lsh"
    proc = _launch("torchrun", ["pretrain", "rev-lsh", "--corpus", shared_data / "corpus/en/gutenberg/11-0.txt",
                                "--tokenizer", english_tokenizer_dir, "--size", "tiny", "--max_seq_length", 256,
                                "--output", out, "--max_steps", 20, "--learning_rate", 2e-3,
                                "--per_device_train_batch_size", 4], tmp_path, common=COMMON[4:])
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads((out / "pretrain_results.json").read_text())
    assert results["world_size"] == 2 and results["objective"] == "rev-lsh"
    assert results["final_eval_loss"] < results["initial_eval_loss"]
    assert type(AutoModelForMaskedLM.from_pretrained(out)).__name__ == "RevLSHForMaskedLM"


# not slow (~15 s): the one default-run check that pre-training under torchrun trains one model across ranks
def test_transfo_xl_pretraining_on_two_processes_with_gradient_accumulation(tmp_path, shared_data):
    from hf_plm_ext.data.tokenizer_training import train_tokenizer

    corpus = shared_data / "corpus/en/wikitext-2/wiki.valid.tokens"
    train_tokenizer([corpus], "words", vocab_size=3000, lowercase=False).save_pretrained(tmp_path / "tok")
    out = tmp_path / "xl"
    held_out = tmp_path / "test_head.tokens"
    test_lines = (shared_data / "corpus/en/wikitext-2/wiki.test.tokens").read_text().splitlines(keepends=True)
    held_out.write_text("".join(test_lines[:300]))
    proc = _launch("torchrun", ["pretrain", "transfo-xl", "--corpus", corpus, "--tokenizer", tmp_path / "tok",
                                "--size", "tiny", "--tgt-len", 32, "--mem-len", 32, "--gradient_accumulation_steps", 2,
                                "--validation_corpus", held_out, "--per_device_eval_batch_size", 3,
                                "--output", out], tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads((out / "pretrain_results.json").read_text())
    assert results["world_size"] == 2 and results["objective"] == "transfo-xl"
    # 2 ranks x 4 streams each: the training set is whole batches for every rank
    assert results["train_examples"] % 8 == 0
    assert results["final_eval_loss"] < results["initial_eval_loss"]
    # The final evaluation read 2 ranks x 3 streams with each rank's weights; the saved model reads the same 6
    # streams in one process. Equal only if both ranks trained one model (DDP), per predicted token.
    evaluated = subprocess.run([sys.executable, "-m", "hf_plm_ext_cli", "eval", "lm", "--model", str(out),
                                "--corpus", str(held_out), "--tgt-len", "32", "--batch-size", "6", "--output",
                                str(tmp_path / "ppl.json")], capture_output=True, text=True, timeout=600)
    assert evaluated.returncode == 0, evaluated.stderr[-4000:]
    measured = json.loads((tmp_path / "ppl.json").read_text())
    assert math.isclose(measured["perplexity"], results["final_eval_perplexity"], rel_tol=1e-5)
    from transformers import AutoModelForCausalLM

    assert type(AutoModelForCausalLM.from_pretrained(out)).__name__ == "TransfoXLLMHeadModel"


@pytest.mark.slow
@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_distill_task_on_two_processes(launcher, tmp_path, tiny_classifier_dir, shared_data):
    """DDP over the student and its projection (the teacher outside the module tree); rank 0 saves the student."""
    config = tmp_path / "student.json"
    config.write_text(json.dumps({"num_hidden_layers": 1, "hidden_size": 16, "num_attention_heads": 2,
                                  "intermediate_size": 24}))
    out = tmp_path / "student"
    proc = _launch(launcher, ["distill", "task", "--teacher", tiny_classifier_dir, "--task", "glue/sst2",
                                "--data-dir", shared_data / "glue/SST-2", "--max_train_samples", 64,
                                "--student-config", config, "--output", out], tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads((out / "eval_results.json").read_text())
    assert results["world_size"] == 2
    assert [stage["stage"] for stage in results["distillation"]["stages"]] == ["intermediate", "prediction"]
    assert AutoModelForSequenceClassification.from_pretrained(out).config.hidden_size == 16
