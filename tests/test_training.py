import json
import os
import subprocess
import sys

import pytest
import torch
from datasets import Dataset
from transformers import Trainer, TrainingArguments

from hf_plm_ext import MacBertForSequenceClassification

from conftest import tiny_macbert_config


def _one_optimizer_step(tmp_path, batch_size, accumulation):
    torch.manual_seed(0)
    model = MacBertForSequenceClassification(tiny_macbert_config(hidden_dropout_prob=0.0,
                                                                 attention_probs_dropout_prob=0.0))
    generator = torch.Generator().manual_seed(1)
    data = Dataset.from_dict({"input_ids": torch.randint(5, 1500, (8, 12), generator=generator).tolist(),
                              "labels": [0, 1, 1, 0, 1, 0, 0, 1]})
    args = TrainingArguments(output_dir=str(tmp_path / f"run{accumulation}"), per_device_train_batch_size=batch_size,
                             gradient_accumulation_steps=accumulation, max_steps=1, learning_rate=0.1, optim="sgd",
                             lr_scheduler_type="constant", train_sampling_strategy="sequential", report_to="none",
                             save_strategy="no", use_cpu=True, disable_tqdm=True)
    Trainer(model=model, args=args, train_dataset=data).train()
    return model.classifier.weight.detach().clone()


def test_gradient_accumulation_matches_one_big_batch(tmp_path):
    """The heads return batch means (accepts_loss_kwargs = False), so the Trainer divides by the
    accumulation steps; a model that claimed to normalise itself would take a 2x step here."""
    assert MacBertForSequenceClassification.accepts_loss_kwargs is False
    big_batch = _one_optimizer_step(tmp_path, batch_size=8, accumulation=1)
    accumulated = _one_optimizer_step(tmp_path, batch_size=4, accumulation=2)
    assert torch.allclose(big_batch, accumulated, atol=1e-6)


FAULTS_OF_A_FREED_BLOCK = """
import json, os, resource, sys
import torch
from hf_plm_ext.training.cpu_memory import retain_freed_memory
retained = retain_freed_memory() if sys.argv[1] == "retain" else None
faults = []
for _ in range(6):  # a 64 MiB tensor, written, freed, allocated again: as a training step's activations
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    torch.ones(16 * 2 ** 20)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print("RESULT " + json.dumps({"retained": retained, "faults": faults}))
"""


def _faults_of_a_freed_block(how, **environment):
    env = {key: value for key, value in os.environ.items() if not key.startswith(("MALLOC_", "GLIBC_TUNABLES"))}
    completed = subprocess.run([sys.executable, "-c", FAULTS_OF_A_FREED_BLOCK, how], capture_output=True, text=True,
                               timeout=120, env={**env, **environment}, check=True)
    return json.loads(completed.stdout.rsplit("RESULT ", 1)[1])


def test_retained_memory_gives_a_freed_block_back_without_the_kernel_s_page_faults():
    """glibc's default hands a 64 MiB block back to the kernel when it is freed: each new one faults in its 16,384
    pages again. Retained, the next allocations reuse it (after one or two that place it: a few faults, not
    thousands)."""
    default = _faults_of_a_freed_block("default")
    fresh = min(default["faults"])  # 16,384 with 4 KiB pages (fewer where the kernel backs it with huge pages)
    assert fresh > 0
    retained = _faults_of_a_freed_block("retain")
    assert retained["retained"] is True
    assert 2 * retained["faults"][0] > fresh  # the first one takes new pages either way
    assert 20 * max(retained["faults"][3:]) < fresh
    # a user's own malloc settings stand (here glibc's default through a tunable): nothing changed, said so
    kept = _faults_of_a_freed_block("retain", GLIBC_TUNABLES="glibc.malloc.mmap_max=65536")
    assert kept["retained"] is False and 2 * min(kept["faults"]) >= fresh


def test_the_retain_freed_memory_flag_is_refused_where_it_cannot_be_honoured(monkeypatch):
    from hf_plm_ext.errors import UserInputError
    from hf_plm_ext.training import cpu_memory
    from hf_plm_ext_cli.arguments import retain_freed_memory_as_asked

    monkeypatch.setenv("MALLOC_ARENA_MAX", "2")  # not one of the variables that decide
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1000000")
    with pytest.raises(UserInputError, match=r"^--retain_freed_memory true: MALLOC_TRIM_THRESHOLD_ already tunes"):
        retain_freed_memory_as_asked("true", use_cpu=True)
    retain_freed_memory_as_asked("auto", use_cpu=True)  # the user's setting stands, no error
    monkeypatch.setattr(cpu_memory, "can_retain_freed_memory", lambda: False)
    with pytest.raises(UserInputError, match=r"needs glibc's malloc \(Linux\); use auto or false here$"):
        retain_freed_memory_as_asked("true", use_cpu=True)
    retain_freed_memory_as_asked("auto", use_cpu=True)
    retain_freed_memory_as_asked("false", use_cpu=True)
    with pytest.raises(RuntimeError, match="needs glibc's malloc"):
        cpu_memory.retain_freed_memory()
