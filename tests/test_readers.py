import json

import pytest

from hf_plm_ext.errors import UserInputError
from hf_plm_ext.eval.readers import read_examples
from hf_plm_ext.eval.tasks import TASKS, get_task

# (benchmark, task, file under shared/data, examples per the data README)
REAL_FILES = [
    ("glue", "cola", "glue/CoLA/train.tsv", 8551),
    ("glue", "cola", "glue/CoLA/dev.tsv", 1043),
    ("glue", "sst2", "glue/SST-2/dev.tsv", 872),
    ("glue", "mrpc", "glue/MRPC/train.tsv", 3668),
    ("glue", "mrpc", "glue/MRPC/dev.tsv", 408),
    ("glue", "stsb", "glue/STS-B/dev.tsv", 1500),
    ("clue", "afqmc", "clue/afqmc/dev.json", 4316),
    ("clue", "tnews", "clue/tnews/dev.json", 10000),
    ("clue", "iflytek", "clue/fewclue/iflytek/dev_few_all.json", 1373),
    ("clue", "csl", "clue/fewclue/csl/dev_few_all.json", 160),
    ("clue", "cluewsc2020", "clue/fewclue/cluewsc/dev_few_all.json", 159),
]


@pytest.mark.parametrize("benchmark,task,path,count", REAL_FILES, ids=[r[2] for r in REAL_FILES])
def test_reads_every_example_of_the_official_files(benchmark, task, path, count, shared_data):
    examples = read_examples(get_task(benchmark, task), shared_data / path)
    assert len(examples) == count
    assert all(isinstance(t, str) and t for t in examples.text_a)


def test_glue_quirks(shared_data):
    mrpc = read_examples(get_task("glue", "mrpc"), shared_data / "glue/MRPC/dev.tsv")
    assert any('"' in t for t in mrpc.text_a + mrpc.text_b)  # quotes are literal, not CSV quoting
    assert mrpc.label.count(1) + mrpc.label.count(0) == 408
    cola = read_examples(get_task("glue", "cola"), shared_data / "glue/CoLA/dev.tsv")
    assert cola.text_a[0] == "The sailors rode the breeze clear of the rocks."  # no header: row 1 is data
    assert (cola.label.count(1), cola.label.count(0)) == (721, 322)
    stsb = read_examples(get_task("glue", "stsb"), shared_data / "glue/STS-B/dev.tsv")
    assert stsb.label[0] == 5.0 and all(0.0 <= s <= 5.0 for s in stsb.label)


def test_clue_quirks(shared_data):
    tnews_task = get_task("clue", "tnews")
    labels = [json.loads(line)["label"] for line in (shared_data / "clue/tnews/labels.json").read_text().splitlines()]
    assert list(tnews_task.labels) == labels
    wsc = read_examples(get_task("clue", "cluewsc2020"), shared_data / "clue/fewclue/cluewsc/dev_few_all.json")
    assert wsc.text_a[0].count("_") >= 2 and "[它]" in wsc.text_a[0]
    iflytek = read_examples(get_task("clue", "iflytek"), shared_data / "clue/fewclue/iflytek/dev_few_all.json")
    assert max(iflytek.label) <= 118  # integer labels in FewCLUE's files map onto the string label set


def test_label_order_is_fixed_per_task():
    assert get_task("glue", "mnli").labels == ("entailment", "neutral", "contradiction")
    assert get_task("glue", "stsb").labels is None
    assert set(TASKS["glue"]) == {"cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli"}
    assert set(TASKS["clue"]) == {"afqmc", "tnews", "iflytek", "cmnli", "ocnli", "csl", "cluewsc2020"}


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("task,content,message", [
    ("sst2", "sentence\tlabel\ngood film\t1\nbad film\n", ":3: expected 2 tab-separated fields"),
    ("sst2", "sentence\tlabel\ngood film\t7\n", ":2: label '7' is not one of the sst2 labels"),
    ("sst2", "text\tlabel\ngood film\t1\n", ":1: header lacks column(s) ['sentence']"),
    ("cola", "gj04\t1\n", ":1: expected at least 4 tab-separated fields"),
    ("stsb", "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
             "0\tg\tf\ty\t1\tn\tn\ta\tb\t7.5\n", ":2: stsb score must be a number in [0, 5]"),
])
def test_malformed_tsv_names_file_and_line(tmp_path, task, content, message):
    path = _write(tmp_path / "train.tsv", content)
    with pytest.raises(UserInputError) as err:
        read_examples(get_task("glue", task), path)
    assert str(path) in str(err.value) and message in str(err.value)


@pytest.mark.parametrize("content,message", [
    ('{"sentence1": "a", "sentence2": "b", "label": "0"}\n{"sentence1": "a", \n', ":2: not valid JSON"),
    ('{"sentence1": "a", "label": "0"}\n', ":1: missing field 'sentence2'"),
    ('{"sentence1": "a", "sentence2": "b", "label": "2"}\n', ":1: label '2' is not one of the afqmc labels"),
    ('["a", "b"]\n', ":1: expected a JSON object"),
])
def test_malformed_json_lines_names_file_and_line(tmp_path, content, message):
    path = _write(tmp_path / "dev.json", content)
    with pytest.raises(UserInputError) as err:
        read_examples(get_task("clue", "afqmc"), path)
    assert str(path) in str(err.value) and message in str(err.value)


def test_non_utf8_line_names_file_and_line(tmp_path):
    path = tmp_path / "dev.tsv"
    path.write_bytes("sentence\tlabel\ngood\t1\n".encode() + "caf\xe9\t1\n".encode("latin-1"))
    with pytest.raises(UserInputError, match=r"dev.tsv:3: not UTF-8 text"):
        read_examples(get_task("glue", "sst2"), path)


def test_unknown_task_and_missing_file(tmp_path):
    with pytest.raises(UserInputError, match="unknown GLUE task 'sst5'"):
        get_task("glue", "sst5")
    with pytest.raises(UserInputError, match="not found"):
        read_examples(get_task("glue", "sst2"), tmp_path / "train.tsv")
