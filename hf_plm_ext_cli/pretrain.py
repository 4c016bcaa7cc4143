"""``hf-plm-ext pretrain OBJECTIVE``: one sub-command per row of the objective table, each with its own flags."""

from hf_plm_ext_cli.arguments import add_training_command, dataclasses_from

NAME, HELP = "pretrain", "pre-train a model from raw text"


def add_to(pretrain_parser):
    from transformers import HfArgumentParser, TrainingArguments

    from hf_plm_ext.training.objectives import OBJECTIVES

    objectives = pretrain_parser.add_subparsers(dest="objective_command", required=True, metavar="OBJECTIVE",
                                                parser_class=HfArgumentParser)
    parsers = {name: add_training_command(objectives, name, objective.help,
                                          [objective.arguments_class, TrainingArguments], run)
               for name, objective in OBJECTIVES.items()}
    flags = {name: {flag for action in parser._actions for flag in action.option_strings}
             for name, parser in parsers.items()}
    for name, parser in parsers.items():
        parser.set_defaults(explain_unrecognized=lambda extras, name=name: _foreign_flags(name, extras, flags))


def _foreign_flags(objective, extras, flags) -> str:
    """Name the objectives that a flag belongs to, for one clear error."""
    unknown = [arg.split("=", 1)[0] for arg in extras if arg.startswith("-")] or extras
    lines = []
    for flag in unknown:
        owners = [name for name, names in flags.items() if flag in names and name != objective]
        where = f" (a flag of `pretrain {' / '.join(owners)}`)" if owners else ""
        lines.append(f"{flag}{where}")
    return f"`pretrain {objective}` has no {', '.join(lines)}; see `hf-plm-ext pretrain {objective} --help`"


def run(args):
    from hf_plm_ext.files import check_new_output
    from hf_plm_ext.training.pretrain import pretrain

    pretrain_args, training_args = dataclasses_from(args)
    check_new_output(pretrain_args.output)
    results = pretrain(pretrain_args, training_args)
    if training_args.process_index == 0:
        perplexity = (f" (perplexity {results['final_eval_perplexity']:.2f})"
                      if "final_eval_perplexity" in results else "")
        print(f"eval loss {results['initial_eval_loss']:.3f} -> {results['final_eval_loss']:.3f}{perplexity}; "
              f"saved to {pretrain_args.output}")
