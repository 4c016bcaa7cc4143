"""Sharding past DDP: every family trains under FSDP2 on two CPU processes (gloo) as one process does over the same
batches, and its sharded checkpoint (``torch.distributed.checkpoint``) comes back as a ``from_pretrained`` folder."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoConfig

from hf_plm_ext import FAMILIES
from hf_plm_ext.registry import auto_class
from hf_plm_ext.training.sharding import load_sharded

WORKER = Path(__file__).with_name("fsdp_worker.py")


@pytest.fixture(scope="module")
def fsdp_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", str(WORKER),
                           str(out)], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-6000:]
    return out, json.loads((out / "results.json").read_text())


def test_every_family_trains_sharded_as_in_one_process(fsdp_run):
    from fsdp_worker import CASES

    _, results = fsdp_run
    assert set(results) == set(CASES)
    for variant, result in results.items():
        assert result["units"], variant  # something was sharded beside the root
        for step, ((sharded, reference), gap) in enumerate(zip(result["losses"], result["gradient_gaps"])):
            assert sharded == pytest.approx(reference, rel=1e-5, abs=1e-6), (variant, step)
            assert gap < 5e-5, (variant, step, gap)  # every gathered gradient (relative), SGD steps on both
    assert results["rev-lsh"]["units"] == ["RevLSHAttentionBlock", "RevLSHFeedForward", "RevLSHLayer"]
    # a unit whose weights are tied outside it stays with the root: BERT's embeddings and masked-LM decoder
    assert "BertEmbeddings" not in results["macbert"]["units"] and "BertLayer" in results["macbert"]["units"]


def test_a_sharded_checkpoint_comes_back_as_a_from_pretrained_folder(fsdp_run, tmp_path):
    out, results = fsdp_run
    for variant, result in results.items():
        reference_dir = out / variant / "reference"
        config = AutoConfig.from_pretrained(reference_dir)
        auto_name = next(name for name, cls in FAMILIES[type(config)].items()
                         if cls.__name__ == result["model_class"])
        fresh = auto_class(auto_name).from_config(config)  # in this process: no process group
        load_sharded(fresh, str(out / variant / "sharded"))
        fresh.save_pretrained(tmp_path / variant)
        loaded = auto_class(auto_name).from_pretrained(tmp_path / variant)
        reference = auto_class(auto_name).from_pretrained(reference_dir)
        trained = load_file(reference_dir / "model.safetensors")
        assert set(load_file(tmp_path / variant / "model.safetensors")) == set(trained), variant
        for (name, p), (_, q) in zip(loaded.state_dict().items(), reference.state_dict().items()):
            assert torch.allclose(p, q, atol=1e-6), (variant, name)  # the weights after the SGD steps


ACCELERATE_PREPARE = """
import json, sys
sys.path.insert(0, {tests!r})
from accelerate import Accelerator, FullyShardedDataParallelPlugin
from accelerate.utils.fsdp_utils import fsdp2_prepare_model
from family_common import TINY_CONFIGS
from hf_plm_ext import FAMILIES
config = TINY_CONFIGS["transfo-xl"]()
model = FAMILIES[type(config)]["AutoModelForCausalLM"](config)
accelerator = Accelerator(cpu=True)
accelerator.state.fsdp_plugin = FullyShardedDataParallelPlugin(fsdp_version=2)  # (accelerate shards on GPUs only)
model = fsdp2_prepare_model(accelerator, model)
print(json.dumps({{tied: model.get_parameter(tied) is model.get_parameter(source)
                  for tied, source in model._tied_weights_keys.items()}}))
"""


def test_accelerate_s_fsdp2_keeps_transfo_xl_s_softmax_tied_to_its_embedding(tmp_path):
    """The Trainer's --fsdp prepares a model with accelerate's fsdp2_prepare_model, which gives the input embeddings a
    unit of their own unless get_output_embeddings() holds the same weight: transfo-xl's softmax returned None, its
    tied table became two parameters, and an H200 run saved two different tables. The one-table softmax now comes
    back with its weight (accelerate's preparation run here on the CPU, gloo, one process)."""
    script = tmp_path / "prepare.py"
    script.write_text(ACCELERATE_PREPARE.format(tests=str(Path(__file__).parent)))
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", str(script)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    ties = json.loads(proc.stdout.strip().splitlines()[-1])
    assert ties == {"crit.out_layers.0.weight": True}
