"""Run by ``tests/test_fsdp.py`` under ``torchrun --nproc-per-node 2``: every family's training class sharded with
FSDP2 on the CPU (gloo), against the same model unsharded in each process over the whole batch.

Each step every rank trains on its half of a batch of 4 (Transformer-XL: its half of the streams, the memory
carried), the reference on all 4; after each step the ranks' mean loss and the gathered gradients are compared with
the reference's, then both take the same SGD step. At the end the sharded weights go to a
``torch.distributed.checkpoint`` folder per case and rank 0 saves the reference with ``save_pretrained``.

    python -m torch.distributed.run --nproc-per-node 2 tests/fsdp_worker.py OUT_DIR
"""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor

sys.path.insert(0, str(Path(__file__).parent))

from family_common import TINY_CONFIGS, input_ids  # noqa: E402

from hf_plm_ext import FAMILIES  # noqa: E402
from hf_plm_ext.training.sharding import save_sharded, shard, shard_units  # noqa: E402

STEPS, BATCH, LENGTH = 3, 4, 8
# variant -> (the Auto class of the model its pre-training or fine-tuning trains, config overrides)
CASES = {
    "macbert": ("AutoModelForMaskedLM", {}),
    # the generator's replacements by arg-max (a vanishing temperature): the two runs draw the same tokens
    "electra-rtd": ("AutoModelForPreTraining", {"temperature": 1e-6}),
    "transfo-xl": ("AutoModelForCausalLM", {}),
    "transfo-xl-adaptive": ("AutoModelForCausalLM", {}),
    "rev-lsh": ("AutoModelForMaskedLM", {}),  # reversible: the backward recomputes each block
    "rev-lsh-rotary": ("AutoModelForCausalLM", {}),
    "rev-lsh-plain": ("AutoModelForSequenceClassification", {}),
    "k-adapter": ("AutoModelForSequenceClassification", {}),  # a frozen backbone
}


def batch(auto_name, step):
    ids = input_ids(batch=BATCH, length=LENGTH, seed=step)
    if auto_name == "AutoModelForSequenceClassification":
        return {"input_ids": ids, "labels": torch.tensor([0, 1, 1, 0])}
    if auto_name == "AutoModelForPreTraining":  # ELECTRA: masked ahead, two positions of every row
        masked = torch.zeros_like(ids, dtype=torch.bool)
        masked[:, [2, 5]] = True
        return {"input_ids": ids.masked_fill(masked, 4), "labels": ids.masked_fill(~masked, -100)}
    return {"input_ids": ids, "labels": ids}


def full(tensor):
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def run_case(variant, auto_name, overrides, mesh, rank, out):
    config = TINY_CONFIGS[variant](num_labels=2, **overrides)
    model_class = FAMILIES[type(config)][auto_name]
    torch.manual_seed(0)
    sharded = model_class(config).eval()  # (no dropout: the two runs compute the same)
    torch.manual_seed(0)
    reference = model_class(config).eval()
    units = sorted({type(unit).__name__ for unit in shard_units(sharded)})
    shard(sharded, mesh)
    optimizers = [torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=0.05)
                  for m in (sharded, reference)]
    mine = slice(rank * BATCH // 2, (rank + 1) * BATCH // 2)
    memory = {"sharded": None, "reference": None}
    losses, gradient_gaps = [], []
    for step in range(STEPS):
        inputs = batch(auto_name, step)
        extra = {}
        if memory["sharded"] is not None:
            extra = {"sharded": {"mems": memory["sharded"]}, "reference": {"mems": memory["reference"]}}
        out_sharded = sharded(**{k: v[mine] for k, v in inputs.items()}, **extra.get("sharded", {}))
        out_reference = reference(**inputs, **extra.get("reference", {}))
        if "mems" in out_sharded:  # Transformer-XL: each rank's streams continue with their memory
            memory = {"sharded": out_sharded.mems, "reference": out_reference.mems}
        out_sharded.loss.backward()
        out_reference.loss.backward()
        rank_losses = [None] * dist.get_world_size()
        dist.all_gather_object(rank_losses, out_sharded.loss.item())
        gap, largest = 0.0, 0.0
        for (name, p), (_, q) in zip(sharded.named_parameters(), reference.named_parameters()):
            if q.grad is None:
                continue
            if p.grad is None:
                gap = float("inf")
                continue
            gap, largest = max(gap, (full(p.grad) - q.grad).abs().max().item()), max(largest, q.grad.abs().max().item())
        losses.append([sum(rank_losses) / len(rank_losses), out_reference.loss.item()])
        gradient_gaps.append(gap / largest)  # relative to the largest gradient
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad()
    folder = out / variant
    save_sharded(sharded, str(folder / "sharded"))
    if rank == 0:
        reference.save_pretrained(folder / "reference")
    return {"model_class": model_class.__name__, "units": units, "losses": losses, "gradient_gaps": gradient_gaps}


def main():
    out = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    results = {variant: run_case(variant, auto_name, overrides, mesh, rank, out)
               for variant, (auto_name, overrides) in CASES.items()}
    if rank == 0:
        (out / "results.json").write_text(json.dumps(results, indent=1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
