"""The GLUE and CLUE task table: files, columns, label order and metrics, one row per task.

Label order is fixed here (index = class id); it follows the GLUE/CLUE baselines
(MNLI follows the Hugging Face ``glue`` dataset: entailment, neutral, contradiction).
``labels=None`` marks a regression task (STS-B).
"""

from dataclasses import dataclass
from typing import Callable

from hf_plm_ext.errors import UserInputError


@dataclass(frozen=True)
class Task:
    name: str
    benchmark: str  # "glue" (TSV) or "clue" (JSON lines)
    labels: tuple[str, ...] | None
    metrics: tuple[str, ...]  # the first one is the task's headline metric
    text_a: str | int  # TSV column name (or index when there is no header) / JSON key
    text_b: str | int | None
    label: str | int
    train_file: str
    validation_files: dict[str, str]  # split name -> file name in --data-dir
    has_header: bool = True
    skip_labels: frozenset = frozenset()  # examples without a gold label in the official files
    build_texts: Callable[[dict], tuple[str, str | None]] | None = None  # JSON records needing assembly
    labels_file: str | None = None  # CLUE's labels.json, checked against ``labels`` when present

    @property
    def is_regression(self) -> bool:
        return self.labels is None

    @property
    def num_labels(self) -> int:
        return 1 if self.is_regression else len(self.labels)


def _csl_texts(record):
    """CLUE baseline: the keywords joined by spaces, paired with the abstract."""
    return " ".join(record["keyword"]), record["abst"]


def _wsc_texts(record):
    """CLUE baseline: mark the candidate with ``_..._`` and the pronoun with ``[...]`` in the text."""
    text, target = record["text"], record["target"]
    spans = [
        (target["span1_index"], target["span1_text"], "_", "_"),
        (target["span2_index"], target["span2_text"], "[", "]"),
    ]
    for start, span, _, _ in spans:
        if text[start:start + len(span)] != span:
            raise ValueError(f"span {span!r} is not at index {start} of the text")
    for start, span, left, right in sorted(spans, reverse=True):  # right to left keeps indices valid
        text = text[:start] + left + span + right + text[start + len(span):]
    return text, None


_BINARY = ("0", "1")
_NLI3 = ("entailment", "neutral", "contradiction")
_NLI2 = ("entailment", "not_entailment")
_CLUE_NLI3 = ("contradiction", "entailment", "neutral")
_TNEWS = ("100", "101", "102", "103", "104", "106", "107", "108", "109", "110",
          "112", "113", "114", "115", "116")
_DEV_TSV = {"dev": "dev.tsv"}
_DEV_JSON = {"dev": "dev.json"}

TASKS = {
    "glue": {
        "cola": Task("cola", "glue", _BINARY, ("matthews_correlation",), 3, None, 1,
                     "train.tsv", _DEV_TSV, has_header=False),
        "sst2": Task("sst2", "glue", _BINARY, ("accuracy",), "sentence", None, "label", "train.tsv", _DEV_TSV),
        "mrpc": Task("mrpc", "glue", _BINARY, ("f1", "accuracy"), "#1 String", "#2 String", "Quality",
                     "train.tsv", _DEV_TSV),
        "stsb": Task("stsb", "glue", None, ("pearson", "spearmanr"), "sentence1", "sentence2", "score",
                     "train.tsv", _DEV_TSV),
        "qqp": Task("qqp", "glue", _BINARY, ("f1", "accuracy"), "question1", "question2", "is_duplicate",
                    "train.tsv", _DEV_TSV),
        "mnli": Task("mnli", "glue", _NLI3, ("accuracy",), "sentence1", "sentence2", "gold_label", "train.tsv",
                     {"dev_matched": "dev_matched.tsv", "dev_mismatched": "dev_mismatched.tsv"}),
        "qnli": Task("qnli", "glue", _NLI2, ("accuracy",), "question", "sentence", "label", "train.tsv", _DEV_TSV),
        "rte": Task("rte", "glue", _NLI2, ("accuracy",), "sentence1", "sentence2", "label", "train.tsv", _DEV_TSV),
        "wnli": Task("wnli", "glue", _BINARY, ("accuracy",), "sentence1", "sentence2", "label", "train.tsv",
                     _DEV_TSV),
    },
    "clue": {
        "afqmc": Task("afqmc", "clue", _BINARY, ("accuracy",), "sentence1", "sentence2", "label",
                      "train.json", _DEV_JSON),
        "tnews": Task("tnews", "clue", _TNEWS, ("accuracy",), "sentence", None, "label", "train.json", _DEV_JSON,
                      labels_file="labels.json"),
        "iflytek": Task("iflytek", "clue", tuple(str(i) for i in range(119)), ("accuracy",), "sentence", None,
                        "label", "train.json", _DEV_JSON, labels_file="labels.json"),
        "cmnli": Task("cmnli", "clue", _CLUE_NLI3, ("accuracy",), "sentence1", "sentence2", "label",
                      "train.json", _DEV_JSON, skip_labels=frozenset({"-"})),
        "ocnli": Task("ocnli", "clue", _CLUE_NLI3, ("accuracy",), "sentence1", "sentence2", "label",
                      "train.json", _DEV_JSON, skip_labels=frozenset({"-"})),
        "csl": Task("csl", "clue", _BINARY, ("accuracy",), "keyword", "abst", "label", "train.json", _DEV_JSON,
                    build_texts=_csl_texts),
        "cluewsc2020": Task("cluewsc2020", "clue", ("true", "false"), ("accuracy",), "text", None, "label",
                            "train.json", _DEV_JSON, build_texts=_wsc_texts),
    },
}


def get_task(benchmark: str, name: str) -> Task:
    if benchmark not in TASKS:
        raise UserInputError(f"unknown benchmark {benchmark!r}; choose one of {', '.join(TASKS)}")
    tasks = TASKS[benchmark]
    if name not in tasks:
        raise UserInputError(f"unknown {benchmark.upper()} task {name!r}; choose one of {', '.join(tasks)}")
    return tasks[name]


def load_metric(task: Task):
    """The task's metric as a local ``evaluate`` module shipped with the package."""
    import evaluate
    from importlib.resources import files

    module_dir = files("hf_plm_ext.eval") / "metrics" / task.benchmark
    return evaluate.load(str(module_dir), config_name=task.name)
