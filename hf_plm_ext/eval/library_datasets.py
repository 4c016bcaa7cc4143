"""GLUE and CLUE as the datasets library holds them (``nyu-mll/glue``, ``clue/clue``), from the user's cache: each
task's splits turned into the records its files hold, so the readers' checks and label order apply unchanged."""

from pathlib import Path

from hf_plm_ext.errors import UserInputError
from hf_plm_ext.eval.readers import Examples, TaskData, examples_from_records, unlabelled_examples
from hf_plm_ext.eval.tasks import Task

# GLUE's text columns in the datasets library (its files name them otherwise: MRPC's "#1 String" ...)
GLUE_COLUMNS = {"cola": ("sentence", None), "sst2": ("sentence", None), "mrpc": ("sentence1", "sentence2"),
                "stsb": ("sentence1", "sentence2"), "qqp": ("question1", "question2"),
                "mnli": ("premise", "hypothesis"), "qnli": ("question", "sentence"),
                "rte": ("sentence1", "sentence2"), "wnli": ("sentence1", "sentence2")}
# the library's split -> the task's (MNLI's two dev and two test sets)
SPLITS = {"train": "train", "validation": "dev", "validation_matched": "dev_matched",
          "validation_mismatched": "dev_mismatched", "test": "test", "test_matched": "test_matched",
          "test_mismatched": "test_mismatched"}


def load_task_splits(dataset: str, task: Task):
    """The task's ``DatasetDict`` (config = the task's name), from the cache when offline."""
    import datasets

    try:
        return datasets.load_dataset(dataset, task.name)
    except (ConnectionError, FileNotFoundError, ValueError, OSError) as err:
        raise UserInputError(f"--dataset {dataset}: no {task.name!r} configuration in the datasets cache "
                             f"({' '.join(str(err).split())[:200]})") from None


def label_text(task: Task, feature, value) -> str | None:
    """The label as the task's files write it; None for a test row (the library's -1)."""
    if task.is_regression:
        return str(float(value))
    if value is None or int(value) < 0:
        return None
    names = getattr(feature, "names", None)
    if task.benchmark == "clue" and names and set(names) <= set(task.labels):
        return names[int(value)]  # CLUE's label names, whatever the library's order
    return task.labels[int(value)]  # GLUE's order is the library's (tasks.py)


def as_record(task: Task, row: dict, label) -> dict | list:
    if task.benchmark == "clue":
        return {**row, task.label: label}
    first, second = GLUE_COLUMNS[task.name]
    if isinstance(task.text_a, int):  # CoLA: its files have no header
        record = [None] * (max(task.text_a, task.label) + 1)
        record[task.text_a], record[task.label] = row[first], label
        return record
    record = {task.text_a: row[first], task.label: label}
    if second is not None:
        record[task.text_b] = row[second]
    return record


def task_data(dataset: str, task: Task, splits) -> tuple[TaskData, dict]:
    """``(TaskData, {test split: rows})`` of ``splits`` (:func:`load_task_splits`): the train and dev splits as
    the readers read the files, and the test splits' rows (ids = the library's ``idx``)."""
    examples, tests = {}, {}
    for name, split in splits.items():
        ours = SPLITS.get(name)
        if ours is None:
            continue
        feature = split.features.get("label")
        if ours.startswith("test"):
            tests[ours] = split
            continue
        records = ((index, as_record(task, row, label_text(task, feature, row["label"])))
                   for index, row in enumerate(split))
        examples[ours] = examples_from_records(task, records, f"{dataset}/{task.name}:{name}")
    missing = [split for split in ("train", *task.validation_files) if split not in examples]
    if missing:
        raise UserInputError(f"--dataset {dataset}: the {task.name!r} configuration lacks the split(s) {missing}")
    source = Path(f"{dataset}/{task.name}")
    data = TaskData(task, source / "train", {split: source / split for split in task.validation_files},
                    examples["train"], {split: examples[split] for split in task.validation_files})
    return data, tests


def test_examples(task: Task, split) -> tuple[list, Examples]:
    """A test split's ids (the library's ``idx``) and texts."""
    first, second = GLUE_COLUMNS[task.name] if task.benchmark == "glue" else (task.text_a, task.text_b)
    ids, rows = [], []
    for index, row in enumerate(split):
        texts = task.build_texts(row) if task.build_texts is not None else (
            row[first], None if second is None else row[second])
        ids.append(row.get("idx", index))
        rows.append((index, *texts))
    return ids, unlabelled_examples(task, rows)
