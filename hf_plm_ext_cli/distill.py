"""``hf-plm-ext distill general|task``: TinyBERT's two-stage distillation (``hf_plm_ext.distill.recipe``)."""

from hf_plm_ext_cli.arguments import add_training_command, checkpoint_resume_hint, dataclasses_from

NAME, HELP = "distill", "distil a teacher into a smaller student (TinyBERT's general and task distillation)"


def add_to(distill_parser):
    from transformers import HfArgumentParser, TrainingArguments

    from hf_plm_ext.distill.recipe import DistillGeneralArguments, DistillTaskArguments
    from hf_plm_ext.distill.trainer import DistillationArguments

    stages = distill_parser.add_subparsers(dest="stage_command", required=True, metavar="RECIPE",
                                           parser_class=HfArgumentParser)
    add_training_command(stages, "general", "general distillation: the intermediate losses (embeddings, hidden "
                         "states, attentions) on unlabelled text", [DistillGeneralArguments, DistillationArguments,
                                                                    TrainingArguments], run_general,
                         save_strategy="no", eval_strategy="no", stage="intermediate", num_train_epochs=3,
                         after_interrupt=checkpoint_resume_hint)
    add_training_command(stages, "task", "task distillation on a GLUE/CLUE task: the intermediate stage, then the "
                         "prediction stage (--stage), then the student evaluated beside its teacher",
                         [DistillTaskArguments, DistillationArguments, TrainingArguments], run_task,
                         save_strategy="no", eval_strategy="no", stage="intermediate,prediction", num_train_epochs=10)


def run_general(args):
    from hf_plm_ext.distill.recipe import distill_general
    from hf_plm_ext.files import check_new_output

    general_args, distill_args, training_args = dataclasses_from(args)
    check_new_output(general_args.output)
    results = distill_general(general_args, distill_args, training_args)
    if training_args.process_index == 0:
        print(f"held-out distillation loss {results['initial_eval_loss']:.4f} -> {results['final_eval_loss']:.4f}; "
              f"student ({results['student_parameters']:,} parameters; teacher {results['teacher_parameters']:,}) "
              f"saved to {general_args.output}")


def run_task(args):
    from hf_plm_ext.distill.recipe import distill_task
    from hf_plm_ext.checkpoints.results import results_table
    from hf_plm_ext.files import check_new_output

    task_args, distill_args, training_args = dataclasses_from(args)
    check_new_output(task_args.output)
    results = distill_task(task_args, distill_args, training_args)
    if training_args.process_index == 0:
        distillation = results["distillation"]
        print(f"student ({distillation['student_parameters']:,} parameters):")
        print(results_table([results]), end="")
        print(f"teacher ({distillation['teacher_parameters']:,} parameters):")
        print(results_table([{**results, "results": distillation["teacher_results"]}]), end="")
        print(f"saved to {task_args.output}")
