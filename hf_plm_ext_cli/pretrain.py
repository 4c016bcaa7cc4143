"""``hf-plm-ext pretrain OBJECTIVE``: one sub-command per row of the objective table, each with its own flags."""

from hf_plm_ext_cli.arguments import add_training_command, checkpoint_resume_hint, dataclasses_from

NAME, HELP = "pretrain", "pre-train a model from raw text"


def add_to(pretrain_parser):
    from transformers import HfArgumentParser, TrainingArguments

    from hf_plm_ext.training.objectives import OBJECTIVES

    objectives = pretrain_parser.add_subparsers(dest="objective_command", required=True, metavar="OBJECTIVE",
                                                parser_class=HfArgumentParser)
    for name, objective in OBJECTIVES.items():
        add_training_command(objectives, name, objective.help, [objective.arguments_class, TrainingArguments], run,
                             after_interrupt=checkpoint_resume_hint)


def explain_unrecognized(args, extras) -> str:
    """One clear error for flags the objective lacks, naming the objectives they belong to (a flag is a field of an
    objective's arguments dataclass, as HfArgumentParser spells it: ``--mem_len`` or ``--mem-len``)."""
    import dataclasses

    from hf_plm_ext.training.objectives import OBJECTIVES

    objective = args.objective_command
    fields = {name: {field.name for field in dataclasses.fields(entry.arguments_class)}
              for name, entry in OBJECTIVES.items()}
    unknown = [arg.split("=", 1)[0] for arg in extras if arg.startswith("-")] or extras
    lines = []
    for flag in unknown:
        field = flag.lstrip("-").replace("-", "_")
        owners = [name for name, names in fields.items() if field in names and name != objective]
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
