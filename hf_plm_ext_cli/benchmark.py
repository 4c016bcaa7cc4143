"""``hf-plm-ext benchmark glue|clue MODEL``."""

from pathlib import Path

from hf_plm_ext_cli.arguments import add_training_command, as_switches, command_line, dataclasses_from

NAME, HELP = "benchmark", ("every task of GLUE or CLUE over learning rates and seeds: the papers' table and "
                           "leaderboard files")


def add_to(benchmark_parser):
    from transformers import HfArgumentParser, TrainingArguments

    from hf_plm_ext.eval.tasks import TASKS
    from hf_plm_ext.finetuning.benchmark import BenchmarkArguments

    benchmarks = benchmark_parser.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK",
                                                 parser_class=HfArgumentParser)
    for benchmark, tasks in TASKS.items():
        parser = add_training_command(
            benchmarks, benchmark, f"fine-tune MODEL on every {benchmark.upper()} task in --data-dir "
            f"({', '.join(tasks)}) for each learning rate and seed, write results.json, results.md (the papers' "
            f"table) and submission.zip", [BenchmarkArguments, TrainingArguments], run,
            save_strategy="no", eval_strategy="no", report_to="none", disable_tqdm=True,
            after_interrupt=resume_hint,
        )
        parser.add_argument("model", nargs="?", metavar="MODEL", help="the checkpoint every run starts from")
        as_switches(parser, BenchmarkArguments)
        parser.set_defaults(benchmark_name=benchmark)


def resume_hint(args, argv) -> str:
    if not (Path(args.output) / "results.json").is_file():
        return "no run had ended; the same command starts over"
    return f"continue the benchmark with: {command_line(argv, adding=[] if args.resume else ['--resume'])}"


def run(args):
    from hf_plm_ext.finetuning.benchmark import run_benchmark

    benchmark_args, training_args = dataclasses_from(args)
    state = run_benchmark(args.benchmark_name, benchmark_args, training_args)
    if state.get("runs") and training_args.process_index == 0:
        written = [name for name in ("results.md", "results.json", "submission.zip")
                   if (Path(benchmark_args.output) / name).is_file()]
        print(f"results in {benchmark_args.output}: {', '.join(written)}")
