"""Score a sequence classifier on a task's validation splits: the Trainer's ``compute_metrics`` and the per-split
results that ``eval_results.json`` lists."""

import numpy as np

from hf_plm_ext.eval.tasks import Task, load_metric


def make_compute_metrics(task: Task):
    metric = load_metric(task)

    def compute_metrics(eval_prediction):
        logits = eval_prediction.predictions
        logits = logits[0] if isinstance(logits, tuple) else logits
        predictions = logits[:, 0] if task.is_regression else np.argmax(logits, axis=-1)
        return metric.compute(predictions=predictions, references=eval_prediction.label_ids)

    return compute_metrics


def evaluate_splits(trainer, data, eval_datasets: dict) -> list[dict]:
    """The task's metrics on every validation split (``data``: the ``TaskData`` they were read as)."""
    results = []
    for split, dataset in eval_datasets.items():
        metrics = trainer.evaluate(dataset, metric_key_prefix="eval")
        results.append({
            "split": split,
            "file": str(data.validation_files[split]),
            "num_examples": len(dataset),
            "metrics": {name: metrics[f"eval_{name}"] for name in data.task.metrics},
            "eval_loss": metrics.get("eval_loss"),
        })
    return results
