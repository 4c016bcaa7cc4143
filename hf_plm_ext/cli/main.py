"""``hf-plm-ext``: one console script, argparse sub-commands.

Training sub-commands parse their own dataclass plus ``TrainingArguments`` with
``HfArgumentParser``, as transformers' example scripts do.
"""

import argparse
import dataclasses
import os
import signal
import sys

import torch

from hf_plm_ext.errors import UserInputError


def has_accelerator() -> bool:
    accelerator = getattr(torch, "accelerator", None)
    return accelerator.is_available() if accelerator is not None else torch.cuda.is_available()


def add_training_command(subparsers, name, help, dataclass_types, handler, **defaults):
    """A sub-command whose options are the fields of ``dataclass_types`` (``TrainingArguments`` included)."""
    parser = subparsers.add_parser(name, help=help, description=help, dataclass_types=dataclass_types,
                                   allow_abbrev=False)
    # On a machine without an accelerator, `torchrun` only gets gloo data parallelism with use_cpu=True;
    # otherwise every rank would silently train its own copy.
    parser.set_defaults(handler=handler, dataclass_types=dataclass_types, use_cpu=not has_accelerator(), **defaults)
    return parser


def dataclasses_from(namespace):
    """Build each of the command's dataclasses from the parsed namespace (``HfArgumentParser``'s rule)."""
    values = vars(namespace)
    if values.get("output_dir") is not None:
        raise UserInputError("give the output folder with --output (--output_dir is managed by hf-plm-ext)")
    if values.get("use_cpu") and (values.get("fsdp") or os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true"):
        # accelerate 1.15 shards only on accelerators (AcceleratorState: FSDP for MULTI_GPU and its kind, not
        # MULTI_CPU); on the CPU the same run trains as plain DDP, with no warning
        raise UserInputError("FSDP needs GPUs (or another accelerator): on the CPU accelerate would train with plain "
                             "DDP instead; drop --fsdp (or the FSDP accelerate config), or run where there is one")
    instances = []
    for dataclass_type in namespace.dataclass_types:
        names = {f.name for f in dataclasses.fields(dataclass_type) if f.init}
        instances.append(dataclass_type(**{k: v for k, v in values.items() if k in names}))
    return instances


def build_parser():
    from hf_plm_ext.cli import demo, evaluate, export, finetune, pretrain, push, tokenizer

    parser = argparse.ArgumentParser(prog="hf-plm-ext", description=__doc__.splitlines()[0], allow_abbrev=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (tokenizer, pretrain, finetune, evaluate, export, push, demo):
        module.add_to(commands)
    return parser


def main(argv=None):
    # `kill`, a scheduler's stop, torchrun ending the other ranks: exit as on an error, so that what a command
    # stages is removed (Python's default for SIGTERM ends the process at once)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    parser = build_parser()
    args, unrecognized = parser.parse_known_args(argv)
    if unrecognized:
        explain = getattr(args, "explain_unrecognized", None)
        parser.error(explain(unrecognized) if explain else f"unrecognized arguments: {' '.join(unrecognized)}")
    try:
        args.handler(args)
    except UserInputError as err:
        print(f"hf-plm-ext: error: {err}", file=sys.stderr)
        sys.exit(2)
    _leave_process_group()


def _exit_on_sigterm(signum, frame):
    sys.exit(128 + signum)


def _leave_process_group():
    """Under torchrun, every rank that finished waits for the others and closes the group before exiting: a rank
    that exited with the group open while another still wrote aborted now and then ("terminate called without an
    active exception", SIGABRT)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
