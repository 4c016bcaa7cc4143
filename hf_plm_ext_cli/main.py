"""``hf-plm-ext``: one console script, argparse sub-commands.

A package of its own, beside ``hf_plm_ext``: importing ``hf_plm_ext`` registers its families with transformers'
Auto classes, which imports torch and transformers' models (seconds). Here only the sub-command that runs is
built in full, and the library is imported when a command runs, so ``--help`` and usage errors answer at once
(except the training commands': their flags are ``TrainingArguments``' fields). Training sub-commands parse
their own dataclass plus ``TrainingArguments`` with ``HfArgumentParser``, as transformers' example scripts do.
"""

import argparse
import signal
import sys

from hf_plm_ext_cli import (benchmark, convert, correct, corpus, demo, distill, evaluate, export, finetune,
                            k_adapter, pretrain, push, tokenizer)

COMMANDS = (tokenizer, corpus, pretrain, finetune, benchmark, distill, evaluate, correct, convert, export, k_adapter,
            push, demo)
DESCRIPTION = ("Post-BERT pre-training ideas as Hugging Face transformers families: train tokenizers, pre-train "
               "(`hf-plm-ext pretrain --help` lists the objectives), fine-tune on GLUE/CLUE, evaluate, "
               "convert other implementations' checkpoints, export and push to a Hub.")


def build_parser(argv=()):
    """The parser, with the sub-commands of the command named in ``argv`` in full and every other command as
    its name and help line."""
    parser = argparse.ArgumentParser(prog="hf-plm-ext", description=DESCRIPTION, allow_abbrev=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = next((arg for arg in argv if not arg.startswith("-")), None)
    for command in COMMANDS:
        if command.NAME == chosen:
            command.add_to(commands.add_parser(command.NAME, help=command.HELP, description=command.HELP,
                                               allow_abbrev=False))
        else:
            commands.add_parser(command.NAME, help=command.HELP)
    return parser


def parse(parser, argv):
    """``(args, unrecognized)``: a command's options anywhere on its line, before, between or after its positionals
    (``correct MODEL --json TEXT TEXT``), ``--`` ending them (for texts that start with a dash). The parser of the
    innermost command named (``tokenizer train``) reads the rest with ``parse_known_intermixed_args``, which
    argparse cannot do at a level that holds sub-commands."""
    namespace, current, rest = argparse.Namespace(), parser, list(argv)
    while True:
        commands = next((action for action in current._actions if isinstance(action, argparse._SubParsersAction)),
                        None)
        if commands is None:
            return current.parse_known_intermixed_args(rest, namespace)
        if not rest or rest[0] not in commands.choices:  # --help, a typo, nothing: argparse's own answer
            return current.parse_known_args(rest, namespace)
        setattr(namespace, commands.dest, rest[0])
        current, rest = commands.choices[rest[0]], rest[1:]
        namespace.command_prog = current.prog  # "hf-plm-ext finetune glue", as argparse names it in errors


def main(argv=None):
    # `kill`, a scheduler's stop, torchrun ending the other ranks: exit as on an error, so that what a command
    # stages is removed (Python's default for SIGTERM ends the process at once)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args, unrecognized = parse(parser, argv)
    if unrecognized:
        command = next(command for command in COMMANDS if command.NAME == args.command)
        explain = getattr(command, "explain_unrecognized", None)  # a command may say whose flags they are
        parser.error(explain(args, unrecognized) if explain else f"unrecognized arguments: {' '.join(unrecognized)}")
    from hf_plm_ext.errors import UserInputError  # the library, and so torch and transformers, from here on
    from hf_plm_ext.training.sharding import leave_process_group

    try:
        args.handler(args)
    except UserInputError as err:
        print(f"{args.command_prog}: error: {err}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:  # Ctrl-C: what was staged is removed on the way here; one line, the shell's 130
        after = getattr(args, "after_interrupt", None)
        print(f"{args.command_prog}: interrupted" + (f"; {after(args, argv)}" if after else ""), file=sys.stderr)
        sys.exit(128 + signal.SIGINT)
    leave_process_group()


def _exit_on_sigterm(signum, frame):
    sys.exit(128 + signum)


if __name__ == "__main__":
    main()
