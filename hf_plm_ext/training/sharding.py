"""Sharding past DDP with PyTorch's FSDP2 (``torch.distributed.fsdp.fully_shard``), on any device, CPU (gloo)
included: accelerate's FSDP path, and so the Trainer's ``--fsdp``, shards only on accelerators.

Under ``torchrun``::

    from torch.distributed.device_mesh import init_device_mesh
    from hf_plm_ext.training.sharding import shard, save_sharded, load_sharded

    torch.distributed.init_process_group("gloo")            # "nccl" on GPUs
    model = shard(AutoModelForMaskedLM.from_pretrained(path), init_device_mesh("cpu", (world_size,)))
    ...  # an optimizer over model.parameters(), the usual loop: each rank holds 1/world_size of every weight
    save_sharded(model, "step-100")                           # torch.distributed.checkpoint, every rank its shard
    # later, in one process or many: a fresh model from the config, the shards read into it
    load_sharded(model, "step-100"); model.save_pretrained("final")   # a from_pretrained folder again

The units are the model's layers: every ``GradientCheckpointingLayer`` and every module named in a
``_no_split_modules`` (transformers' list of modules not to split; the reversible stack names its attention and
feed-forward blocks, which its backward recomputes one at a time), except a module whose weights are tied to one
outside it (BERT's embeddings and masked-LM decoder), which stays with the root, as do the embeddings and heads.
"""

import os

from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_layers import GradientCheckpointingLayer


def unit_class_names(model: nn.Module) -> set[str]:
    """The class names that the model and its sub-models list in ``_no_split_modules``."""
    return {name for module in model.modules() if isinstance(module, PreTrainedModel)
            for name in (module._no_split_modules or [])}


def shard_units(model: nn.Module) -> list[nn.Module]:
    """The modules :func:`shard` shards before the root, innermost first (``fully_shard``'s order)."""
    owners = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        owners.setdefault(id(parameter), set()).add(name)
    names = unit_class_names(model)
    units = []
    for prefix, module in reversed(list(model.named_modules())):  # children before their parents
        if module is model or not (isinstance(module, GradientCheckpointingLayer) or type(module).__name__ in names):
            continue
        inside = {f"{prefix}.{name}" for name, _ in module.named_parameters(remove_duplicate=False)}
        if all(owners[id(parameter)] <= inside for parameter in module.parameters()):  # no weight tied outside it
            units.append(module)
    return units


def shard(model: nn.Module, mesh=None, **fully_shard_kwargs) -> nn.Module:
    """``fully_shard`` each unit (:func:`shard_units`), then the whole model; returns the model, sharded in place.
    ``mesh``: a 1-D ``DeviceMesh`` (default: the world, on the default device type); further arguments go to
    ``fully_shard`` (``reshard_after_forward``, ``mp_policy``, ...)."""
    from torch.distributed.fsdp import fully_shard

    for unit in shard_units(model):
        fully_shard(unit, mesh=mesh, **fully_shard_kwargs)
    fully_shard(model, mesh=mesh, **fully_shard_kwargs)
    return model


def save_sharded(model: nn.Module, folder: str) -> None:
    """Every rank writes its shards of the model's weights to ``folder`` (``torch.distributed.checkpoint``, a
    collective). Its ``.metadata`` file is pickled by torch: read back only checkpoints you wrote."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    dcp.save(get_model_state_dict(model), checkpoint_id=folder)


def load_sharded(model: nn.Module, folder: str) -> nn.Module:
    """Read a :func:`save_sharded` checkpoint into ``model``: sharded over any number of ranks, or a plain model in
    one process (then ``model.save_pretrained`` makes a ``from_pretrained`` folder of it)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

    state = get_model_state_dict(model)
    dcp.load(state, checkpoint_id=folder)
    set_model_state_dict(model, state)
    if isinstance(model, PreTrainedModel):
        model.tie_weights()
    return model


__all__ = ["shard", "shard_units", "save_sharded", "load_sharded"]


def refuse_trainer_fsdp_on_cpu(use_cpu: bool, fsdp) -> None:
    """The Trainer's ``--fsdp`` (or an FSDP accelerate config) on a run without an accelerator, refused: accelerate
    1.15 shards only on accelerators (``AcceleratorState``: FSDP for MULTI_GPU and its kind, not MULTI_CPU); on the
    CPU the same run would train as plain DDP, with no warning."""
    from hf_plm_ext.errors import UserInputError

    if use_cpu and (fsdp or os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true"):
        raise UserInputError("the Trainer's FSDP needs GPUs (or another accelerator): on the CPU accelerate would "
                             "train with plain DDP instead; drop --fsdp (or the FSDP accelerate config), or shard "
                             "with FSDP2 yourself: hf_plm_ext.training.sharding (README, 'Several processes')")


def leave_process_group() -> None:
    """Under torchrun, a rank that finished waits for the others and closes the group before it exits: a rank
    that exited with the group open while another still wrote aborted now and then ("terminate called without an
    active exception", SIGABRT). A no-op outside a process group."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
