"""``hf-plm-ext finetune glue|clue``."""

from hf_plm_ext_cli.arguments import add_training_command, dataclasses_from

NAME, HELP = "finetune", "fine-tune and evaluate on GLUE or CLUE"


def add_to(finetune_parser):
    from transformers import HfArgumentParser, TrainingArguments

    from hf_plm_ext.eval.runner import FinetuneArguments
    from hf_plm_ext.eval.tasks import TASKS

    benchmarks = finetune_parser.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK",
                                                parser_class=HfArgumentParser)
    for benchmark, tasks in TASKS.items():
        parser = add_training_command(
            benchmarks, benchmark, f"fine-tune a sequence-classification checkpoint on a {benchmark.upper()} "
            f"task ({', '.join(tasks)})", [FinetuneArguments, TrainingArguments], run,
            save_strategy="no", eval_strategy="no",
        )
        parser.set_defaults(benchmark_name=benchmark)


def run(args):
    from hf_plm_ext.eval.results import results_table
    from hf_plm_ext.eval.runner import finetune
    from hf_plm_ext.files import check_new_output

    finetune_args, training_args = dataclasses_from(args)
    check_new_output(finetune_args.output)
    results = finetune(args.benchmark_name, finetune_args, training_args)
    if training_args.process_index == 0:
        print(results_table([results]), end="")
        print(f"saved to {finetune_args.output}")
