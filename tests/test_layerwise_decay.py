import json

import pytest
from transformers import AutoModelForSequenceClassification, TrainingArguments

from hf_plm_ext.errors import UserInputError
from hf_plm_ext.training.layerwise_decay import LayerwiseLRDecayTrainer, parameter_depths

from conftest import run_cli


def _optimizer(model, tmp_path, decay=0.8):
    args = TrainingArguments(output_dir=str(tmp_path), learning_rate=1e-3, weight_decay=0.01, report_to="none",
                             use_cpu=True)
    return LayerwiseLRDecayTrainer(model=model, args=args, layerwise_lr_decay=decay).create_optimizer()


def test_each_layer_gets_its_decayed_rate(tmp_path, tiny_classifier_dir):
    model = AutoModelForSequenceClassification.from_pretrained(tiny_classifier_dir)  # 2 encoder layers
    optimizer = _optimizer(model, tmp_path)
    rate_of = {id(p): (group["lr"], group["weight_decay"]) for group in optimizer.param_groups for p in group["params"]}
    params = dict(model.named_parameters())
    expected_depth = {"bert.embeddings.word_embeddings.weight": 0, "bert.encoder.layer.0.output.dense.weight": 1,
                      "bert.encoder.layer.1.output.dense.weight": 2, "bert.pooler.dense.weight": 3,
                      "classifier.weight": 4}
    for name, depth in expected_depth.items():
        assert rate_of[id(params[name])] == (pytest.approx(1e-3 * 0.8 ** (4 - depth)), 0.01), name
    assert rate_of[id(params["bert.encoder.layer.1.output.LayerNorm.weight"])][1] == 0.0  # no decay on norms
    assert rate_of[id(params["classifier.bias"])] == (pytest.approx(1e-3), 0.0)
    assert sum(len(group["params"]) for group in optimizer.param_groups) == len(params)


def test_depths_need_an_encoder_and_decay_must_be_a_fraction(tmp_path, tiny_classifier_dir):
    import torch

    class NotAnEncoder(torch.nn.Module):
        config = type("Config", (), {"num_hidden_layers": 2})()

        def __init__(self):
            super().__init__()
            self.head = torch.nn.Linear(4, 2)

    with pytest.raises(UserInputError, match="BERT-like encoders only"):
        parameter_depths(NotAnEncoder())
    model = AutoModelForSequenceClassification.from_pretrained(tiny_classifier_dir)
    with pytest.raises(UserInputError, match=r"must be in \(0, 1\]"):
        _optimizer(model, tmp_path, decay=1.5)


def test_finetune_option(tmp_path, tiny_classifier_dir, shared_data, capsys):
    from unittest import mock

    created = []
    original = LayerwiseLRDecayTrainer.create_optimizer

    def spy(self, model=None):
        created.append(original(self, model))
        return created[-1]

    out = tmp_path / "mrpc"
    with mock.patch.object(LayerwiseLRDecayTrainer, "create_optimizer", spy):
        code, _, stderr = run_cli(["finetune", "glue", "--task", "mrpc", "--model", tiny_classifier_dir, "--output",
                                   out, "--data-dir", shared_data / "glue/MRPC", "--max_train_samples", 32,
                                   "--max_steps", 2, "--learning_rate", 1e-3, "--layerwise_lr_decay", 0.5,
                                   "--disable_tqdm", "true", "--report_to", "none"], capsys)
    assert code == 0, stderr[-3000:]
    assert created and sorted({g["initial_lr"] for g in created[-1].param_groups}) == \
        pytest.approx([1e-3 * 0.5 ** k for k in (4, 3, 2, 1, 0)])
    assert json.loads((out / "eval_results.json").read_text())["layerwise_lr_decay"] == 0.5
