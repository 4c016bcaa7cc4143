"""GLUE metrics as the benchmark defines them, as a local ``evaluate`` module (nothing is downloaded).

CoLA: Matthews correlation. STS-B: Pearson and Spearman correlation. MRPC, QQP: F1 (positive
class 1) and accuracy. Other tasks: accuracy.
"""

import datasets
import evaluate
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import f1_score, matthews_corrcoef

TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "mnli_matched", "mnli_mismatched", "qnli", "rte", "wnli")

_KWARGS = """
Args:
    predictions: predicted class ids (a float score for stsb).
    references: gold class ids (a float score for stsb).
Returns: a dict with the task's metrics in [0, 1] (correlations in [-1, 1]).
"""


def _accuracy(predictions, references):
    return float(sum(int(p == r) for p, r in zip(predictions, references)) / len(references))


class Glue(evaluate.Metric):
    def _info(self):
        if self.config_name not in TASKS:
            raise KeyError(f"unknown GLUE task {self.config_name!r}; choose one of {TASKS}")
        value_type = "float32" if self.config_name == "stsb" else "int64"
        return evaluate.MetricInfo(
            description="GLUE metrics (Wang et al., 2018), computed locally.",
            citation="@inproceedings{wang2018glue, title={GLUE: A Multi-Task Benchmark and Analysis Platform "
                     "for Natural Language Understanding}, author={Wang, Alex and others}, year={2018}}",
            inputs_description=_KWARGS,
            features=datasets.Features({"predictions": datasets.Value(value_type),
                                        "references": datasets.Value(value_type)}),
        )

    def _compute(self, predictions, references):
        task = self.config_name
        if task == "cola":
            return {"matthews_correlation": float(matthews_corrcoef(references, predictions))}
        if task == "stsb":
            return {"pearson": float(pearsonr(predictions, references)[0]),
                    "spearmanr": float(spearmanr(predictions, references)[0])}
        if task in ("mrpc", "qqp"):
            return {"f1": float(f1_score(references, predictions)), "accuracy": _accuracy(predictions, references)}
        return {"accuracy": _accuracy(predictions, references)}
