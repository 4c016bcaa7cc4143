"""A fine-tuning run's results as files: ``eval_results.json`` (what the model card's ``model-index`` reads) and
``eval_results.md`` (a table)."""

import json
from pathlib import Path


def results_table(all_results: list[dict]) -> str:
    """A markdown table with one row per (task, split, metric)."""
    rows = ["| benchmark | task | split | metric | value |", "|---|---|---|---|---:|"]
    for results in all_results:
        for split in results["results"]:
            for name, value in split["metrics"].items():
                rows.append(f"| {results['benchmark']} | {results['task']} | {split['split']} | {name} | "
                            f"{value:.4f} |")
    return "\n".join(rows) + "\n"


def write_results(directory, results: dict) -> None:
    directory = Path(directory)
    (directory / "eval_results.json").write_text(json.dumps(results, indent=2) + "\n")
    (directory / "eval_results.md").write_text(results_table([results]))
