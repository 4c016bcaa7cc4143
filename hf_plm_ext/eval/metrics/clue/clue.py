"""CLUE metrics as the benchmark defines them (accuracy for every classification task), as a local
``evaluate`` module (nothing is downloaded)."""

import datasets
import evaluate

TASKS = ("afqmc", "tnews", "iflytek", "cmnli", "ocnli", "csl", "cluewsc2020")


class Clue(evaluate.Metric):
    def _info(self):
        if self.config_name not in TASKS:
            raise KeyError(f"unknown CLUE task {self.config_name!r}; choose one of {TASKS}")
        return evaluate.MetricInfo(
            description="CLUE metrics (Xu et al., 2020), computed locally.",
            citation="@inproceedings{xu2020clue, title={CLUE: A Chinese Language Understanding Evaluation "
                     "Benchmark}, author={Xu, Liang and others}, booktitle={COLING}, year={2020}}",
            inputs_description="predictions, references: class ids. Returns {'accuracy': float}.",
            features=datasets.Features({"predictions": datasets.Value("int64"),
                                        "references": datasets.Value("int64")}),
        )

    def _compute(self, predictions, references):
        return {"accuracy": float(sum(int(p == r) for p, r in zip(predictions, references)) / len(references))}
