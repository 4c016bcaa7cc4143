"""``hf-plm-ext pretrain mlm``."""

from transformers import HfArgumentParser, TrainingArguments

from hf_plm_ext.cli.main import add_training_command, dataclasses_from
from hf_plm_ext.files import check_new_output
from hf_plm_ext.training.pretrain import OBJECTIVES, PretrainArguments, pretrain


def add_to(commands):
    pretrain_parser = commands.add_parser("pretrain", help="pre-train an encoder from raw text")
    objectives = pretrain_parser.add_subparsers(dest="objective_command", required=True, metavar="OBJECTIVE",
                                                parser_class=HfArgumentParser)
    for objective in OBJECTIVES:
        add_training_command(objectives, objective, f"pre-train with the {objective!r} objective",
                             [PretrainArguments, TrainingArguments], run, objective=objective)


def run(args):
    pretrain_args, training_args = dataclasses_from(args)
    check_new_output(pretrain_args.output)
    results = pretrain(pretrain_args, training_args)
    if training_args.process_index == 0:
        perplexity = (f" (perplexity {results['final_eval_perplexity']:.2f})"
                      if "final_eval_perplexity" in results else "")
        print(f"eval loss {results['initial_eval_loss']:.3f} -> {results['final_eval_loss']:.3f}{perplexity}; "
              f"saved to {pretrain_args.output}")
