"""Read GLUE TSV and CLUE JSON-lines files exactly as the benchmarks distribute them.

GLUE: tab-separated, no quoting (quotes are literal), an optional UTF-8 BOM on the header
(MRPC), no header at all for CoLA. CLUE: one JSON object per line. Every problem is reported
as ``file:line: what``.
"""

import json
import math
from dataclasses import dataclass
from pathlib import Path

from hf_plm_ext.errors import UserInputError
from hf_plm_ext.eval.tasks import Task, get_task
from hf_plm_ext.files import check_file


@dataclass
class Examples:
    """Columns of one split: ``text_a``, ``text_b`` (``None`` entries for single-sentence
    tasks), ``label`` (class index, or float score for regression) and source ``line`` numbers."""

    text_a: list
    text_b: list
    label: list
    line: list

    def __len__(self):
        return len(self.label)

    def first(self, count: int) -> "Examples":
        return Examples(self.text_a[:count], self.text_b[:count], self.label[:count], self.line[:count])

    def to_dict(self):
        columns = {"text_a": self.text_a, "label": self.label, "line": self.line}
        if any(b is not None for b in self.text_b):
            columns["text_b"] = self.text_b
        return columns


def read_examples(task: Task, path) -> Examples:
    path = check_file(path, f"{task.name} data file")
    records = _read_tsv(task, path) if task.benchmark == "glue" else _read_json_lines(path)
    return examples_from_records(task, records, path)


def examples_from_records(task: Task, records, source) -> Examples:
    """``records``: ``(line number, record)`` pairs, a record as the task's files hold it (a TSV row by its header's
    names or, headerless, a list; a JSON object); ``source`` names where they come from in messages."""
    path = source
    examples = Examples([], [], [], [])
    for line_no, record in records:
        where = f"{path}:{line_no}"
        raw_label = _field(record, task.label, where)
        if isinstance(raw_label, (int, float)) and not isinstance(raw_label, bool):
            raw_label = str(raw_label)
        if raw_label in task.skip_labels:
            continue
        examples.label.append(_label_value(task, raw_label, where))
        if task.build_texts is not None:
            try:
                text_a, text_b = task.build_texts(record)
            except (KeyError, TypeError, ValueError) as err:
                raise UserInputError(f"{where}: malformed {task.name} record: {err!r}") from None
        else:
            text_a = _field(record, task.text_a, where)
            text_b = None if task.text_b is None else _field(record, task.text_b, where)
        for text in (text_a, text_b):
            if text is not None and not isinstance(text, str):
                raise UserInputError(f"{where}: expected text, got {type(text).__name__} {text!r}")
        examples.text_a.append(text_a)
        examples.text_b.append(text_b)
        examples.line.append(line_no)
    if not examples.label:
        raise UserInputError(f"{path}: no examples")
    return examples


@dataclass
class TaskData:
    """A task's examples as read from its files."""

    task: Task
    train_file: Path
    validation_files: dict[str, Path]
    train: Examples
    validation: dict[str, Examples]


def load_task_data(benchmark: str, args) -> TaskData:
    """The task's training split and every validation split (MNLI: matched and mismatched), checked; ``args``
    names them as ``FinetuneArguments`` does (``task``, ``data_dir``, ``train_file``, ``validation_file``)."""
    task = get_task(benchmark, args.task)
    train_file, validation_files = task_files(task, args)
    check_labels_file(task, args.data_dir)
    return TaskData(task, train_file, validation_files, read_examples(task, train_file),
                    {split: read_examples(task, path) for split, path in validation_files.items()})


def task_files(task: Task, args) -> tuple[Path, dict[str, Path]]:
    if args.data_dir is None and (args.train_file is None or args.validation_file is None):
        raise UserInputError("give --data-dir, or both --train-file and --validation-file")
    data_dir = Path(args.data_dir) if args.data_dir else None
    if data_dir is not None and not data_dir.is_dir():
        raise UserInputError(f"--data-dir {data_dir} is not a directory")
    train = in_data_dir(args.train_file, data_dir) if args.train_file else data_dir / task.train_file
    if args.validation_file:
        validation = {"dev": in_data_dir(args.validation_file, data_dir)}
    else:
        validation = {split: data_dir / name for split, name in task.validation_files.items()}
    return train, validation


def in_data_dir(name: str, data_dir: Path | None) -> Path:
    """``--train-file`` / ``--validation-file``: a relative name is looked up in ``--data-dir`` first (FewCLUE's
    ``--data-dir fewclue/csl --train-file train_few_all.json``), then from the working directory."""
    path = Path(name)
    if data_dir is not None and not path.is_absolute() and (data_dir / path).is_file():
        return data_dir / path
    return path


def check_labels_file(task: Task, data_dir):
    if task.labels_file is None or data_dir is None:
        return
    path = Path(data_dir) / task.labels_file
    if not path.is_file():
        return
    listed = read_label_list(path)
    unknown = sorted(set(listed) - set(task.labels))
    if unknown:
        raise UserInputError(f"{path}: labels {unknown} are not in the {task.name} label set {list(task.labels)}")


def read_test_file(task: Task, path) -> tuple[list, Examples]:
    """A test file (no labels): the ids the leaderboard wants (GLUE's ``index`` column, CLUE's ``id``; else the
    row's number from 0) and the texts, read as :func:`read_examples` reads the labelled files."""
    path = check_file(path, f"{task.name} test file")
    ids, rows = [], []
    if task.benchmark == "glue":
        lines = _lines(path)
        header_line = next(lines, None)
        if header_line is None:
            raise UserInputError(f"{path}: empty file")
        header = header_line[1].split("\t")
        # CoLA's training files have no header; its test file names the text "sentence"
        columns = [c if isinstance(c, str) else "sentence" for c in (task.text_a, task.text_b) if c is not None]
        missing = [c for c in columns if c not in header]
        if missing:
            raise UserInputError(f"{path}:{header_line[0]}: header lacks column(s) {missing} for task {task.name} "
                                 f"(header: {header})")
        for number, (line_no, line) in enumerate(lines):
            fields = line.split("\t")
            if len(fields) != len(header):
                raise UserInputError(f"{path}:{line_no}: expected {len(header)} tab-separated fields as in the "
                                     f"header, got {len(fields)}")
            record = dict(zip(header, fields))
            ids.append(int(record["index"]) if record.get("index", "").isdigit() else number)
            rows.append((line_no, *(record[c] for c in columns), *[None] * (2 - len(columns))))
    else:
        for number, (line_no, record) in enumerate(_read_json_lines(path)):
            where = f"{path}:{line_no}"
            if task.build_texts is not None:
                try:
                    texts = task.build_texts(record)
                except (KeyError, TypeError, ValueError) as err:
                    raise UserInputError(f"{where}: malformed {task.name} record: {err!r}") from None
            else:
                texts = (_field(record, task.text_a, where),
                         None if task.text_b is None else _field(record, task.text_b, where))
            ids.append(record.get("id", number))
            rows.append((line_no, *texts))
    if not ids:
        raise UserInputError(f"{path}: no examples")
    return ids, unlabelled_examples(task, rows)


def unlabelled_examples(task: Task, rows) -> Examples:
    """``Examples`` of ``(line, text_a, text_b)`` rows without labels (a test set's): each label a placeholder the
    model never sees."""
    examples = Examples([], [], [], [])
    for line, text_a, text_b in rows:
        examples.text_a.append(text_a)
        examples.text_b.append(text_b)
        examples.label.append(0.0 if task.is_regression else 0)
        examples.line.append(line)
    return examples


def read_label_list(path) -> list[str]:
    """CLUE's ``labels.json``: one ``{"label": ..., "label_desc": ...}`` object per line."""
    return [str(_field(record, "label", f"{path}:{line_no}")) for line_no, record in _read_json_lines(path)]


def _lines(path: Path):
    with open(path, "rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8-sig" if line_no == 1 else "utf-8").rstrip("\r\n")
            except UnicodeDecodeError as err:
                raise UserInputError(f"{path}:{line_no}: not UTF-8 text ({err.reason} at byte {err.start})") from None
            if line.strip():
                yield line_no, line


def _read_tsv(task: Task, path: Path):
    lines = _lines(path)
    if not task.has_header:
        yield from ((line_no, line.split("\t")) for line_no, line in lines)
        return
    header_line = next(lines, None)
    if header_line is None:
        raise UserInputError(f"{path}: empty file")
    header_no, header = header_line[0], header_line[1].split("\t")
    wanted = [c for c in (task.text_a, task.text_b, task.label) if c is not None]
    missing = [c for c in wanted if c not in header]
    if missing:
        raise UserInputError(f"{path}:{header_no}: header lacks column(s) {missing} for task {task.name} "
                             f"(header: {header})")
    for line_no, line in lines:
        fields = line.split("\t")
        if len(fields) != len(header):
            raise UserInputError(f"{path}:{line_no}: expected {len(header)} tab-separated fields as in the "
                                 f"header, got {len(fields)}")
        yield line_no, dict(zip(header, fields))


def _read_json_lines(path: Path):
    for line_no, line in _lines(path):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise UserInputError(f"{path}:{line_no}: not valid JSON ({err.msg} at column {err.colno})") from None
        if not isinstance(record, dict):
            raise UserInputError(f"{path}:{line_no}: expected a JSON object, got {type(record).__name__}")
        yield line_no, record


def _field(record, key, where):
    if isinstance(key, int):
        if key >= len(record):
            raise UserInputError(f"{where}: expected at least {key + 1} tab-separated fields, got {len(record)}")
        return record[key]
    if key not in record:
        raise UserInputError(f"{where}: missing field {key!r}")
    return record[key]


def _label_value(task: Task, raw_label, where):
    if task.is_regression:
        try:
            score = float(raw_label)
        except (TypeError, ValueError):
            score = math.nan
        if not 0.0 <= score <= 5.0:
            raise UserInputError(f"{where}: {task.name} score must be a number in [0, 5], got {raw_label!r}")
        return score
    if raw_label not in task.labels:
        raise UserInputError(f"{where}: label {raw_label!r} is not one of the {task.name} labels "
                             f"{list(task.labels)}")
    return task.labels.index(raw_label)
