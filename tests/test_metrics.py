import math

import pytest

from hf_plm_ext.eval.tasks import get_task, load_metric


def test_cola_matthews_correlation_by_hand():
    # tp=2 tn=1 fp=1 fn=0 -> (2*1 - 1*0) / sqrt(3*2*2*1) = 2/sqrt(12)
    result = load_metric(get_task("glue", "cola")).compute(predictions=[1, 1, 1, 0], references=[1, 1, 0, 0])
    assert result["matthews_correlation"] == pytest.approx(2 / math.sqrt(12))


def test_mrpc_reports_f1_of_the_positive_class_and_accuracy():
    # tp=1 fp=1 fn=1 tn=1 -> precision = recall = 0.5
    result = load_metric(get_task("glue", "mrpc")).compute(predictions=[1, 1, 0, 0], references=[1, 0, 1, 0])
    assert result == pytest.approx({"f1": 0.5, "accuracy": 0.5})


def test_stsb_pearson_and_spearman():
    metric = load_metric(get_task("glue", "stsb"))
    monotone = metric.compute(predictions=[0.0, 1.0, 4.0, 9.0], references=[0.0, 1.0, 2.0, 3.0])
    assert monotone["spearmanr"] == pytest.approx(1.0) and monotone["pearson"] < 0.99
    reversed_ = metric.compute(predictions=[3.0, 2.0, 1.0], references=[1.0, 2.0, 3.0])
    assert reversed_["pearson"] == pytest.approx(-1.0)


@pytest.mark.parametrize("benchmark,task", [("glue", "sst2"), ("glue", "mnli"), ("clue", "tnews"),
                                            ("clue", "cluewsc2020")])
def test_accuracy_tasks(benchmark, task):
    result = load_metric(get_task(benchmark, task)).compute(predictions=[0, 1, 2, 2], references=[0, 1, 1, 0])
    assert result == {"accuracy": 0.5}
