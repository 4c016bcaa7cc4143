"""What the training sub-commands share: ``HfArgumentParser`` over a dataclass plus ``TrainingArguments``."""

import argparse
import dataclasses
import os


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a flag's default unless it is None or its help already says it (HfArgumentParser's default
    formatter wrote "(default: plain softmax) (default: None)")."""

    def _get_help_string(self, action):
        if action.default in (None, argparse.SUPPRESS) or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def int_at_least(minimum: int):
    """An argparse type: a whole number of at least ``minimum``."""
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value
    parse.__name__ = f"int (at least {minimum})"  # what argparse names in "invalid ... value"
    return parse


positive_int = int_at_least(1)  # a batch size, a count


def has_accelerator() -> bool:
    import torch

    accelerator = getattr(torch, "accelerator", None)
    return accelerator.is_available() if accelerator is not None else torch.cuda.is_available()


def add_training_command(subparsers, name, help, dataclass_types, handler, **defaults):
    """A sub-command whose options are the fields of ``dataclass_types`` (``TrainingArguments`` included)."""
    parser = subparsers.add_parser(name, help=help, description=help, dataclass_types=dataclass_types,
                                   allow_abbrev=False, formatter_class=HelpFormatter)
    # On a machine without an accelerator, `torchrun` only gets gloo data parallelism with use_cpu=True;
    # otherwise every rank would silently train its own copy.
    parser.set_defaults(handler=handler, dataclass_types=dataclass_types, use_cpu=not has_accelerator(), **defaults)
    parser.add_argument("--retain_freed_memory", choices=("auto", "true", "false"), default="auto",
                        help="keep the memory a training step frees for the next step's tensors (glibc's malloc; "
                             "see hf_plm_ext.training.cpu_memory); auto: on a CPU run under glibc, unless "
                             "GLIBC_TUNABLES or a MALLOC_*_ variable already tunes malloc")
    return parser


def dataclasses_from(namespace):
    """Build each of the command's dataclasses from the parsed namespace (``HfArgumentParser``'s rule), after the
    checks and the process set-up every training command shares (FSDP on a CPU refused, ``--retain_freed_memory``)."""
    from hf_plm_ext.errors import UserInputError, last_line
    from hf_plm_ext.training.sharding import refuse_trainer_fsdp_on_cpu

    values = vars(namespace)
    if values.get("output_dir") is not None:
        raise UserInputError("give the output folder with --output (--output_dir is managed by hf-plm-ext)")
    refuse_trainer_fsdp_on_cpu(values.get("use_cpu"), values.get("fsdp"))
    retain_freed_memory_as_asked(values.get("retain_freed_memory", "auto"), values.get("use_cpu"))
    instances = []
    for dataclass_type in namespace.dataclass_types:
        names = {f.name for f in dataclasses.fields(dataclass_type) if f.init}
        try:
            instances.append(dataclass_type(**{k: v for k, v in values.items() if k in names}))
        except ValueError as err:  # a dataclass's own check of its flags (the Trainer's too): one line, exit 2
            raise UserInputError(last_line(err)) from None
    return instances


def retain_freed_memory_as_asked(choice: str, use_cpu: bool) -> None:
    """``--retain_freed_memory``: :func:`~hf_plm_ext.training.cpu_memory.retain_freed_memory` for ``auto`` on a CPU
    run where it can, for ``true`` always (refused where it cannot be done)."""
    from hf_plm_ext.errors import UserInputError
    from hf_plm_ext.training.cpu_memory import (
        GLIBC_MALLOC_VARIABLES,
        can_retain_freed_memory,
        retain_freed_memory,
    )

    if choice == "false" or (choice == "auto" and not (use_cpu and can_retain_freed_memory())):
        return
    if not can_retain_freed_memory():
        raise UserInputError("--retain_freed_memory true needs glibc's malloc (Linux); use auto or false here")
    if not retain_freed_memory() and choice == "true":
        set_here = ", ".join(name for name in GLIBC_MALLOC_VARIABLES if name in os.environ)
        raise UserInputError(f"--retain_freed_memory true: {set_here} already tunes malloc in this environment; "
                             "unset it, or leave the flag at auto to keep it")


def as_switches(parser, dataclass_type) -> None:
    """The dataclass's bool fields as switches (``--resume``, never ``--resume VALUE``) on a command that also takes
    positionals: HfArgumentParser gives a bool an optional value, which would take the positional after it
    (``--resume MODEL``)."""
    names = {f.name for f in dataclasses.fields(dataclass_type) if f.type is bool}
    for action in parser._actions:
        if action.dest in names and action.option_strings and action.nargs == "?":
            action.__class__, action.nargs = argparse._StoreConstAction, 0


def command_line(argv, *, adding: list[str], without: str | None = None) -> str:
    """``hf-plm-ext argv`` with ``without`` (a flag and its value, ``--flag=value`` too) left out and ``adding``
    added: the command that continues a stopped run."""
    import shlex

    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == without:
            skip = True
        elif without is None or not arg.startswith(f"{without}="):
            kept.append(arg)
    return shlex.join(["hf-plm-ext", *kept, *adding])


def checkpoint_resume_hint(args, argv) -> str:
    """After a stop: the command that continues from the newest complete checkpoint, or why there is none."""
    from hf_plm_ext.checkpoints.resuming import checkpoints_folder, newest_complete_checkpoint

    checkpoints = checkpoints_folder(args.output, getattr(args, "checkpoints", None))
    last, _ = newest_complete_checkpoint(checkpoints) if checkpoints.is_dir() else (None, [])
    if last is None:
        return f"no checkpoint was written yet (--save_steps {args.save_steps}); the same command starts over"
    return (f"continue from {last.name} with: "
            + command_line(argv, without="--resume_from_checkpoint", adding=["--resume_from_checkpoint", "last"]))
