"""``hf-plm-ext finetune glue|clue|csc``."""

from hf_plm_ext_cli.arguments import add_training_command, checkpoint_resume_hint, dataclasses_from

NAME, HELP = "finetune", "fine-tune and evaluate on GLUE or CLUE, or for Chinese spelling correction (csc)"


def add_to(finetune_parser):
    from transformers import HfArgumentParser, TrainingArguments

    from hf_plm_ext.finetuning import FinetuneArguments
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
    from hf_plm_ext.csc.recipe import CSCFinetuneArguments

    add_training_command(benchmarks, "csc", "MacBERT4CSC: fine-tune a BERT / MacBERT checkpoint for Chinese spelling "
                         "correction (a correction and a detection head) on pairs generated from clean text with "
                         "real confusion sets (--corpus) or read from a file (--train_file)",
                         [CSCFinetuneArguments, TrainingArguments], run_csc, save_strategy="no", eval_strategy="no",
                         learning_rate=5e-5, weight_decay=0.01, per_device_train_batch_size=32,
                         after_interrupt=checkpoint_resume_hint)


def run(args):
    from hf_plm_ext.checkpoints.results import results_table
    from hf_plm_ext.finetuning import finetune
    from hf_plm_ext.files import check_new_output

    finetune_args, training_args = dataclasses_from(args)
    check_new_output(finetune_args.output)
    results = finetune(args.benchmark_name, finetune_args, training_args)
    if training_args.process_index == 0:
        print(results_table([results]), end="")
        print(f"saved to {finetune_args.output}")


def run_csc(args):
    from hf_plm_ext.csc.recipe import finetune_csc
    from hf_plm_ext.checkpoints.results import results_table
    from hf_plm_ext.files import check_new_output

    csc_args, training_args = dataclasses_from(args)
    check_new_output(csc_args.output)
    results = finetune_csc(csc_args, training_args)
    if training_args.process_index == 0:
        print(results_table([results]), end="")
        print(f"saved to {csc_args.output}")
