"""Distillation: the losses against their definitions, layer maps, attention read by hooks, the model and trainer."""

import json

import pytest
import torch
import torch.nn.functional as F
from transformers import (AutoModelForSequenceClassification, BertConfig, BertForSequenceClassification, BertModel,
                          DistilBertConfig, DistilBertModel, TrainingArguments)

from hf_plm_ext.distill import (DistillationArguments, DistillationModel, DistillationTrainer, layer_map_from,
                                student_config, student_from_teacher_layers, uniform_layer_map)
from hf_plm_ext.distill import losses
from hf_plm_ext.distill.features import AttentionProjections


def bert_config(**overrides):
    fields = dict(vocab_size=120, hidden_size=48, num_hidden_layers=4, num_attention_heads=4, intermediate_size=64,
                  max_position_embeddings=64, num_labels=2, attn_implementation="eager")
    fields.update(overrides)
    return BertConfig(**fields)


def batch(size=3, length=10, vocab=120, seed=0):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (size, length), generator=generator)
    mask = torch.ones(size, length, dtype=torch.long)
    mask[0, 6:] = 0
    mask[1, 8:] = 0
    return {"input_ids": ids, "attention_mask": mask}


# losses ---------------------------------------------------------------------------------------------------------

def test_hidden_mse_counts_only_the_tokens():
    student, teacher = torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    expected = F.mse_loss(torch.cat([student[0, :3], student[1]]), torch.cat([teacher[0, :3], teacher[1]]))
    assert torch.allclose(losses.hidden_mse(student, teacher, mask), expected)
    changed = student.clone()
    changed[0, 3:] += 100  # padding changes nothing
    assert torch.allclose(losses.hidden_mse(changed, teacher, mask), expected)
    assert torch.allclose(losses.hidden_mse(student, teacher), F.mse_loss(student, teacher))


def test_hidden_cosine_is_zero_for_parallel_states_and_skips_padding():
    teacher = torch.randn(2, 4, 6)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    student = 3 * teacher
    student[0, 2:] = -teacher[0, 2:]  # opposite, but padding
    assert losses.hidden_cosine(student, teacher, mask).abs() < 1e-6
    assert losses.hidden_cosine(-teacher, teacher, mask) == pytest.approx(2.0)


def test_attention_score_mse_excludes_pairs_with_padding_and_refuses_other_head_counts():
    student, teacher = torch.randn(2, 3, 4, 4), torch.randn(2, 3, 4, 4)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    expected = torch.cat([(student[0, :, :3, :3] - teacher[0, :, :3, :3]).pow(2).flatten(),
                          (student[1] - teacher[1]).pow(2).flatten()]).mean()
    assert torch.allclose(losses.attention_score_mse(student, teacher, mask), expected)
    with pytest.raises(ValueError, match="3 heads, the teacher 2"):
        losses.attention_score_mse(student, teacher[:, :2], mask)


def test_attention_kl_is_the_row_kl_of_the_masked_distributions():
    student, teacher = torch.randn(2, 2, 4, 4), torch.randn(2, 2, 4, 4)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    assert losses.attention_kl(teacher, teacher, mask).abs() < 1e-6
    p = teacher[0, :, :3, :3].softmax(-1)
    q = student[0, :, :3, :3].softmax(-1)
    first = (p * (p.log() - q.log())).sum(-1)  # [h, 3]
    p1, q1 = teacher[1].softmax(-1), student[1].softmax(-1)
    second = (p1 * (p1.log() - q1.log())).sum(-1)  # [h, 4]
    expected = torch.cat([first.flatten(), second.flatten()]).mean()
    assert torch.allclose(losses.attention_kl(student, teacher, mask), expected, atol=1e-6)
    # other head counts: the head-averaged distributions
    fewer = student[:, :1]
    p_avg, q_avg = teacher[1].softmax(-1).mean(0), fewer[1, 0].softmax(-1)
    row = (p_avg * (p_avg.log() - q_avg.log())).sum(-1)
    assert torch.allclose(losses.attention_kl(fewer[1:], teacher[1:]), row.mean(), atol=1e-6)
    p0, q0 = teacher[0].softmax(-1).mean(0), fewer[0, 0].softmax(-1)
    row0 = (p0 * (p0.log() - q0.log())).sum(-1)
    full = losses.attention_kl(fewer, teacher, torch.ones(2, 4))  # both examples' rows, averaged
    assert torch.allclose(full, torch.cat([row0, row]).mean(), atol=1e-6)


def test_value_relation_kl_compares_relations_whatever_the_widths():
    values = torch.randn(2, 5, 12)
    assert losses.value_relation_kl(values, values, 3).abs() < 1e-6
    other_width = torch.randn(2, 5, 6)
    assert losses.value_relation_kl(other_width, values, 3) > 0
    with pytest.raises(ValueError, match="width of 12"):
        losses.value_relation_kl(values, values, 5)


def test_prediction_losses_against_their_references():
    student, teacher = torch.randn(4, 3), torch.randn(4, 3)
    # TinyBERT's soft_cross_entropy(...).mean() over batch and classes, times the class count
    tinybert = (-teacher.softmax(-1) * student.log_softmax(-1)).mean()
    assert torch.allclose(losses.soft_cross_entropy(student, teacher), 3 * tinybert)
    t = 2.0
    kl = (teacher / t).softmax(-1) * ((teacher / t).log_softmax(-1) - (student / t).log_softmax(-1))
    assert torch.allclose(losses.kl_div_t2(student, teacher, t), kl.sum(-1).mean() * t * t)
    assert losses.kl_div_t2(teacher, teacher, t).abs() < 1e-6
    assert torch.allclose(losses.regression_mse(torch.ones(4, 1), torch.zeros(4)), torch.tensor(1.0))


def test_hidden_projection_shared_or_per_layer():
    shared = losses.HiddenProjection(8, 16, num_matched_layers=3, shared=True)
    per_layer = losses.HiddenProjection(8, 16, num_matched_layers=3, shared=False)
    assert len(shared.maps) == 1 and len(per_layer.maps) == 3
    hidden = torch.randn(2, 4, 8)
    assert shared(hidden, 2).shape == (2, 4, 16)
    assert not torch.allclose(per_layer(hidden, 0), per_layer(hidden, 2))
    assert losses.HiddenProjection(16, 16, 3).identity


# layer maps -----------------------------------------------------------------------------------------------------

def test_layer_maps():
    assert uniform_layer_map(4, 12).teacher_layers == (3, 6, 9, 12)  # TinyBERT's g(m) = 3m
    assert uniform_layer_map(3, 6).teacher_layers == (2, 4, 6)
    assert uniform_layer_map(2, 6).hidden_pairs == ((0, 0), (1, 3), (2, 6))
    assert layer_map_from("last", 2, 6).teacher_layers == (5, 6)
    assert layer_map_from("1,3", 2, 6).attention_pairs == ((1, 1), (2, 3))
    with pytest.raises(ValueError, match=r"past the teacher's depth: its layers are 1..6"):
        layer_map_from([2, 7], 2, 6)
    with pytest.raises(ValueError, match="names 3 teacher layers .* student of 2 layers"):
        layer_map_from("1,2,3", 2, 6)
    with pytest.raises(ValueError, match="no deeper than its teacher"):
        uniform_layer_map(8, 6)
    with pytest.raises(ValueError, match="such as '2,4,6'"):
        layer_map_from("every other", 2, 6)


# attention read by hooks ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", ["bert", "distilbert", "albert"])
def test_hooked_scores_give_the_models_own_attention_probabilities(family):
    torch.manual_seed(0)
    if family == "bert":
        model = BertModel(bert_config()).eval()
    elif family == "albert":  # one shared layer, recorded at each of its uses
        from transformers import AlbertConfig, AlbertModel

        model = AlbertModel(AlbertConfig(vocab_size=120, embedding_size=16, hidden_size=48, num_hidden_layers=3,
                                         num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                                         attn_implementation="eager")).eval()
    else:
        model = DistilBertModel(DistilBertConfig(vocab_size=120, dim=48, n_layers=3, n_heads=4, hidden_dim=64,
                                                 max_position_embeddings=64, attn_implementation="eager")).eval()
    inputs = batch()
    projections = AttentionProjections(model)
    with torch.no_grad(), projections.capture():
        outputs = model(**inputs, output_attentions=True)
    mask = inputs["attention_mask"][:, None, None, :] == 0
    for layer, probabilities in enumerate(outputs.attentions, start=1):
        scores = projections.scores(layer).masked_fill(mask, torch.finfo(torch.float32).min)
        assert torch.allclose(scores.softmax(-1), probabilities, atol=1e-5)
    assert projections.values(1).shape == (3, 10, 48)


def test_a_model_without_bert_like_attention_is_refused_by_name():
    from hf_plm_ext import TransfoXLConfig, TransfoXLModel

    model = TransfoXLModel(TransfoXLConfig(vocab_size=50, d_model=16, d_embed=16, n_head=2, d_head=8, d_inner=32,
                                           n_layer=2, cutoffs=[], mem_len=4, tgt_len=4))
    with pytest.raises(ValueError, match="'transfo-xl' model has none .* hidden-state losses only"):
        AttentionProjections(model)


# students ---------------------------------------------------------------------------------------------------------

def test_student_config_presets_and_files(tmp_path):
    teacher = bert_config(hidden_size=768, num_attention_heads=12, intermediate_size=3072, num_hidden_layers=12)
    tiny = student_config(teacher, "tinybert4")
    assert (tiny.num_hidden_layers, tiny.hidden_size, tiny.intermediate_size, tiny.num_attention_heads) == (4, 312, 1200, 12)
    assert tiny.vocab_size == teacher.vocab_size and tiny.model_type == "bert"
    spec = tmp_path / "student.json"
    spec.write_text(json.dumps({"num_hidden_layers": 2, "hidden_size": 96, "num_attention_heads": 12}))
    assert student_config(teacher, str(spec)).hidden_size == 96
    spec.write_text(json.dumps({"vocab_size": 999}))
    with pytest.raises(ValueError, match="teacher's vocabulary"):
        student_config(teacher, str(spec))
    spec.write_text(json.dumps({"hidden_sise": 96}))
    with pytest.raises(ValueError, match="hidden_sise"):
        student_config(teacher, str(spec))
    spec.write_text("{\n  oops")
    with pytest.raises(ValueError, match=r"student.json:2: not JSON"):
        student_config(teacher, str(spec))
    with pytest.raises(ValueError, match="tinybert4"):
        student_config(teacher, "tinybert9")


def test_student_from_teacher_layers_copies_those_layers():
    torch.manual_seed(0)
    teacher = BertForSequenceClassification(bert_config())
    student = student_from_teacher_layers(teacher, [2, 4])
    assert student.config.num_hidden_layers == 2
    assert torch.equal(student.bert.encoder.layer[0].output.dense.weight, teacher.bert.encoder.layer[1].output.dense.weight)
    assert torch.equal(student.bert.encoder.layer[1].attention.self.query.bias,
                       teacher.bert.encoder.layer[3].attention.self.query.bias)
    assert torch.equal(student.classifier.weight, teacher.classifier.weight)
    with pytest.raises(ValueError, match="layers in 1..4"):
        student_from_teacher_layers(teacher, [0, 5])


# the model ------------------------------------------------------------------------------------------------------

def test_a_student_made_of_all_the_teachers_layers_has_nothing_left_to_learn():
    torch.manual_seed(0)
    teacher = BertForSequenceClassification(bert_config()).eval()
    student = student_from_teacher_layers(teacher, [1, 2, 3, 4]).eval()
    model = DistillationModel(student, teacher, DistillationArguments(value_relation_heads=4)).eval()
    model.train()
    model.student.eval()  # no dropout: the student is the teacher
    out = model(**batch())
    for name in ("embedding_loss", "hidden_loss", "attention_loss", "value_relation_loss"):
        assert out[name].abs() < 1e-5, name
    assert out.prediction_loss.item() == pytest.approx(
        -(out.logits.softmax(-1) * out.logits.log_softmax(-1)).sum(-1).mean().item(), abs=1e-5)  # the entropy


def test_the_losses_reach_the_student_and_its_projection():
    torch.manual_seed(0)
    teacher = BertForSequenceClassification(bert_config())
    student = BertForSequenceClassification(bert_config(hidden_size=24, num_hidden_layers=2))
    model = DistillationModel(student, teacher, DistillationArguments(stage="intermediate"))
    assert model.layer_map.teacher_layers == (2, 4) and len(model.projection.maps) == 1
    out = model(**batch())
    assert set(k for k in out.keys() if k.endswith("_loss")) == {"embedding_loss", "hidden_loss", "attention_loss"}
    out.loss.backward()
    assert model.projection.maps[0].weight.grad.abs().sum() > 0
    assert student.bert.encoder.layer[1].attention.self.key.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in teacher.parameters())
    assert not any(name.startswith("teacher") for name in model.state_dict())
    projections = [module for model_ in (student, teacher) for name, module in model_.named_modules()
                   if name.endswith((".query", ".key", ".value"))]
    assert all(module._forward_hooks for module in projections)
    model.remove_hooks()  # (transformers' own output-capturing hooks sit on the layers, not on these)
    assert not any(module._forward_hooks for module in projections)


def test_bad_pairs_get_one_clear_error_each():
    teacher = BertForSequenceClassification(bert_config())
    with pytest.raises(ValueError, match="share a vocabulary: the student has 99 tokens, the teacher 120"):
        DistillationModel(BertForSequenceClassification(bert_config(vocab_size=99)), teacher)
    regression = BertForSequenceClassification(bert_config(num_labels=1))
    with pytest.raises(ValueError, match="regression student .* classification loss 'kl'"):
        DistillationModel(regression, teacher, DistillationArguments(prediction_loss="kl"))
    with pytest.raises(ValueError, match="student's 3 outputs with the teacher's 2"):
        DistillationModel(BertForSequenceClassification(bert_config(num_labels=3)), teacher)
    with pytest.raises(ValueError, match="student has 2 heads, the teacher 4; use attention_loss='kl'"):
        DistillationModel(BertForSequenceClassification(bert_config(num_attention_heads=2)), teacher)
    with pytest.raises(ValueError, match="past the teacher's depth"):
        DistillationModel(BertForSequenceClassification(bert_config(num_hidden_layers=2)), teacher,
                          DistillationArguments(layer_map="2,5"))
    with pytest.raises(ValueError, match="BertModel is an encoder"):
        DistillationModel(BertModel(bert_config()), BertModel(bert_config()))
    with pytest.raises(ValueError, match="stage must be one of"):
        DistillationArguments(stage="all")


def test_other_head_counts_distil_with_the_attention_kl():
    teacher = BertForSequenceClassification(bert_config())
    student = BertForSequenceClassification(bert_config(num_attention_heads=2, hidden_size=32, num_hidden_layers=2))
    out = DistillationModel(student, teacher, DistillationArguments(attention_loss="kl")).train()(**batch())
    assert torch.isfinite(out.attention_loss) and out.attention_loss > 0


# the trainer ----------------------------------------------------------------------------------------------------

class _Examples(torch.utils.data.Dataset):
    def __init__(self, count=48, seed=0):
        data = batch(count, 12, seed=seed)
        self.rows = [{"input_ids": data["input_ids"][i], "attention_mask": data["attention_mask"][i],
                      "labels": torch.tensor(int(data["input_ids"][i, 0] % 2))} for i in range(count)]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        return self.rows[index]


def _trainer(tmp_path, student, teacher, **overrides):
    settings = dict(output_dir=str(tmp_path / "run"), per_device_train_batch_size=8, learning_rate=3e-3,
                    logging_steps=2, report_to="none", use_cpu=True, save_strategy="no", disable_tqdm=True,
                    remove_unused_columns=False)
    settings.update(overrides)
    return DistillationTrainer(model=student, teacher=teacher, distillation_args=DistillationArguments(),
                               args=TrainingArguments(**settings), train_dataset=_Examples())


def test_the_trainer_logs_every_sub_loss_lowers_them_and_saves_the_student_alone(tmp_path):
    from safetensors.torch import load_file

    torch.manual_seed(0)
    teacher = BertForSequenceClassification(bert_config())
    student = BertForSequenceClassification(bert_config(hidden_size=24, num_hidden_layers=2))
    trainer = _trainer(tmp_path, student, teacher, num_train_epochs=4)
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "attention_loss" in entry]
    assert {"embedding_loss", "hidden_loss", "attention_loss", "prediction_loss"} <= set(logged[0])
    for name in ("hidden_loss", "attention_loss"):
        assert logged[-1][name] < 0.7 * logged[0][name], (name, logged[0][name], logged[-1][name])
    trainer.save_model(str(tmp_path / "student"))
    saved = load_file(tmp_path / "student" / "model.safetensors")
    assert not any("projection" in key for key in saved)
    reloaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / "student").eval()
    assert reloaded.config.hidden_size == 24
    student.eval()
    inputs = batch()
    with torch.no_grad():
        assert torch.allclose(reloaded(**inputs).logits, student(**inputs).logits, atol=1e-6)


def test_a_checkpoint_keeps_the_projection_and_training_resumes_from_it(tmp_path):
    torch.manual_seed(0)
    teacher = BertForSequenceClassification(bert_config())
    student = BertForSequenceClassification(bert_config(hidden_size=24, num_hidden_layers=2))
    trainer = _trainer(tmp_path, student, teacher, max_steps=4, save_strategy="steps", save_steps=2)
    trainer.train()
    from safetensors.torch import load_file

    checkpoint = tmp_path / "run" / "checkpoint-2"
    assert any(key.startswith("projection.") for key in load_file(checkpoint / "model.safetensors"))
    resumed = _trainer(tmp_path, BertForSequenceClassification(bert_config(hidden_size=24, num_hidden_layers=2)),
                       teacher, max_steps=4, save_strategy="no")
    resumed.train(resume_from_checkpoint=str(checkpoint))
    for mine, theirs in zip(resumed.model.parameters(), trainer.model.parameters()):
        assert torch.allclose(mine, theirs, atol=1e-6)


# the recipes on the command line --------------------------------------------------------------------------------

TINY_STUDENT = {"num_hidden_layers": 1, "hidden_size": 16, "num_attention_heads": 2, "intermediate_size": 24}
STEPS = ["--max_steps", 3, "--per_device_train_batch_size", 8, "--disable_tqdm", "true", "--report_to", "none",
         "--learning_rate", 1e-3]


@pytest.fixture
def student_json(tmp_path):
    path = tmp_path / "student.json"
    path.write_text(json.dumps(TINY_STUDENT))
    return path


def test_distill_task_runs_both_stages_and_saves_a_stock_student_with_its_card(tmp_path, tiny_classifier_dir,
                                                                              shared_data, student_json, capsys):
    from safetensors.torch import load_file

    from conftest import run_cli

    out = tmp_path / "student"
    code, stdout, stderr = run_cli(["distill", "task", "--teacher", tiny_classifier_dir, "--task", "glue/mrpc",
                                    "--data-dir", shared_data / "glue/MRPC", "--max_train_samples", 64,
                                    "--student-config", student_json, "--output", out, *STEPS,
                                    "--learning_rate", 2e-5, "--prediction_learning_rate", 1e-5], capsys)
    assert code == 0, stderr
    assert "teacher (" in stdout and "student (" in stdout
    record = json.loads((out / "eval_results.json").read_text())
    stages = record["distillation"]["stages"]
    assert [stage["stage"] for stage in stages] == ["intermediate", "prediction"]
    assert {"embedding_loss", "hidden_loss", "attention_loss"} <= set(stages[0]["sub_losses"][0])
    assert "prediction_loss" in stages[1]["sub_losses"][0] and "attention_loss" not in stages[1]["sub_losses"][0]
    assert record["distillation"]["teacher_results"][0]["split"] == "dev"
    assert record["parameters"]["total"] < record["distillation"]["teacher_parameters"]
    assert not any("projection" in key for key in load_file(out / "model.safetensors"))
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == []
    model = AutoModelForSequenceClassification.from_pretrained(out)
    assert model.config.model_type == "macbert" and model.config.hidden_size == 16
    card = (out / "README.md").read_text()
    assert "distilled from" in card and str(tiny_classifier_dir) in card
    assert "stage 1 | intermediate, 3 steps, learning rate 2e-05" in card
    assert "stage 2 | prediction, 3 steps, learning rate 1e-05" in card
    # the card and the recorded arguments name the output, not the hidden folder it was written in
    assert "partial" not in card and "partial" not in (out / "training_args.json").read_text()
    assert "path/to/student" in card


def test_distill_task_student_from_the_teachers_layers(tmp_path, tiny_classifier_dir, shared_data, capsys):
    from conftest import run_cli

    out = tmp_path / "student"
    code, _, stderr = run_cli(["distill", "task", "--teacher", tiny_classifier_dir, "--task", "glue/sst2",
                               "--data-dir", shared_data / "glue/SST-2", "--max_train_samples", 32,
                               "--student-layers", "last:1", "--stage", "prediction", "--output", out, *STEPS], capsys)
    assert code == 0, stderr
    record = json.loads((out / "eval_results.json").read_text())
    assert [stage["stage"] for stage in record["distillation"]["stages"]] == ["prediction"]
    assert record["distillation"]["student_from"] == "teacher layers last:1"


def test_distill_task_bad_input_one_clear_error_each_and_nothing_written(tmp_path, tiny_classifier_dir,
                                                                       english_tokenizer_dir, shared_data,
                                                                       student_json, capsys):
    from transformers import AutoTokenizer

    from conftest import run_cli, tiny_macbert_config
    from hf_plm_ext import MacBertForSequenceClassification, MacBertModel

    encoder = tmp_path / "encoder"  # no classifier: not fine-tuned for anything
    MacBertModel(tiny_macbert_config()).save_pretrained(encoder)
    AutoTokenizer.from_pretrained(english_tokenizer_dir).save_pretrained(encoder)
    other_task, other_labels = tmp_path / "other-task", tmp_path / "other-labels"
    for folder, fields in ((other_task, {"finetuning_task": "sst2"}),
                           (other_labels, {"id2label": {0: "negative", 1: "positive"},
                                           "label2id": {"negative": 0, "positive": 1}})):
        MacBertForSequenceClassification(tiny_macbert_config(**fields)).save_pretrained(folder)
        AutoTokenizer.from_pretrained(english_tokenizer_dir).save_pretrained(folder)
    other_vocab = tmp_path / "other-vocab"
    MacBertForSequenceClassification(tiny_macbert_config(vocab_size=900)).save_pretrained(other_vocab)
    AutoTokenizer.from_pretrained(english_tokenizer_dir).save_pretrained(other_vocab)
    common = ["--data-dir", shared_data / "glue/MRPC", "--max_train_samples", 16, *STEPS]
    cases = [
        (["--teacher", encoder, "--task", "glue/mrpc", "--student-config", student_json], "not fine-tuned for mrpc"),
        (["--teacher", tiny_classifier_dir, "--task", "glue/stsb", "--student-config", student_json,
          "--data-dir", shared_data / "glue/STS-B"], "classifier of 2 labels; stsb has 1"),
        (["--teacher", tiny_classifier_dir, "--task", "glue/mrpc", "--student", other_vocab],
         "share a vocabulary: the student has 900 tokens, the teacher 1500"),
        (["--teacher", tiny_classifier_dir, "--task", "glue/mrpc", "--student-config", student_json,
          "--layer_map", "3"], "past the teacher's depth"),
        (["--teacher", tiny_classifier_dir, "--task", "glue/mrpc"], "give one of --student, --student-config"),
        (["--teacher", other_task, "--task", "glue/mrpc", "--student-config", student_json],
         "was fine-tuned for sst2, not mrpc"),
        (["--teacher", other_labels, "--task", "glue/mrpc", "--student-config", student_json],
         "predicts the labels ['negative', 'positive']; mrpc's are ['0', '1']"),
        (["--teacher", tiny_classifier_dir, "--task", "mrpc", "--student-config", student_json], "benchmark/task"),
        # the distillation flags' own checks (and the Trainer's): one line, exit 2, not a ValueError traceback
        *((["--teacher", tiny_classifier_dir, "--task", "glue/mrpc", "--student-config", student_json, *flags],
           message) for flags, message in [
            (["--temperature", 0], "--temperature must be > 0, got 0.0"),
            (["--stage", "predict"], "--stage must be one of ['intermediate', 'prediction', 'both']"),
            (["--attention_loss", "foo"], "--attention_loss must be one of ['mse', 'kl', 'none'], got 'foo'"),
            (["--hard_label_weight", -1], "--hard_label_weight must be >= 0, got -1.0"),
            (["--lr_scheduler_type", "sideways"], "sideways")]),
    ]
    for number, (args, message) in enumerate(cases):
        out = tmp_path / f"out-{number}"
        code, _, stderr = run_cli(["distill", "task", *common, *args, "--output", out], capsys)
        assert code == 2 and message in stderr and "Traceback" not in stderr, (args, stderr[-600:])
        assert not out.exists() and not list(tmp_path.glob(f".out-{number}*"))


def test_distill_general_on_text_lowers_the_held_out_loss(tmp_path, tiny_classifier_dir, student_json, capsys):
    from importlib.resources import files

    from transformers import AutoModel

    from conftest import run_cli

    out = tmp_path / "general"
    corpus = files("hf_plm_ext") / "demo_data" / "alice.txt"
    code, stdout, stderr = run_cli(["distill", "general", "--teacher", tiny_classifier_dir, "--corpus", corpus,
                                    "--student-config", student_json, "--max_seq_length", 32, "--output", out,
                                    "--max_steps", 30, "--per_device_train_batch_size", 8, "--learning_rate", 3e-3,
                                    "--disable_tqdm", "true", "--report_to", "none"], capsys)
    assert code == 0, stderr
    record = json.loads((out / "distill_results.json").read_text())
    assert record["final_eval_loss"] < 0.8 * record["initial_eval_loss"], record
    assert AutoModel.from_pretrained(out).config.num_hidden_layers == 1
    assert "general distillation" in (out / "README.md").read_text()
    code, _, stderr = run_cli(["distill", "general", "--teacher", tiny_classifier_dir, "--corpus", corpus,
                               "--student-config", student_json, "--stage", "prediction", "--output",
                               tmp_path / "nope"], capsys)
    assert code == 2 and "only the intermediate stage" in stderr


# augmentation ---------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def augmenter_parts(english_tokenizer_dir):
    from transformers import AutoTokenizer

    from hf_plm_ext.data.similar_words import EmbeddingNeighbours

    tokenizer = AutoTokenizer.from_pretrained(english_tokenizer_dir)
    torch.manual_seed(0)
    embeddings = torch.randn(len(tokenizer), 16)
    return tokenizer, EmbeddingNeighbours(embeddings, tokenizer, top_k=4, cache=None)


SENTENCES = ["Alice was beginning to get very tired of sitting by her sister", "the Queen said nothing , and Alice",
             "what is the use of a book without pictures"]


def test_augmented_copies_keep_the_original_first_skip_stopwords_and_do_not_depend_on_batching(augmenter_parts):
    from hf_plm_ext.data.augmentation import STOPWORDS, TinyBertAugmenter

    tokenizer, neighbours = augmenter_parts
    augmenter = TinyBertAugmenter(tokenizer, neighbours, num_candidates=5, copies=6, seed=3)
    together = augmenter.augment(SENTENCES, [0, 1, 2])
    apart = [augmenter.augment([sentence], [index])[0] for index, sentence in enumerate(SENTENCES)]
    assert together == apart
    for sentence, copies in zip(SENTENCES, together):
        assert copies[0] == sentence and len(copies) == len(set(copies)) and 2 <= len(copies) <= 7
        original = sentence.split()
        for copy in copies[1:]:
            words = copy.split()
            assert len(words) == len(original)  # single words replaced by single words, spacing kept
            assert all(o == w for o, w in zip(original, words) if o.lower() in STOPWORDS or not o.isalpha())
    assert TinyBertAugmenter(tokenizer, neighbours, replace_probability=0.0).augment(SENTENCES, [0, 1, 2]) == \
        [[s] for s in SENTENCES]
    with pytest.raises(ValueError, match="replace_probability"):
        TinyBertAugmenter(tokenizer, neighbours, replace_probability=1.5)


def test_chinese_characters_are_words_of_their_own(tmp_path):
    """Text without spaces: each CJK character is a word (one vocabulary piece), not the whole run."""
    from transformers import BertTokenizerFast

    from hf_plm_ext.data.augmentation import TinyBertAugmenter
    from hf_plm_ext.data.similar_words import EmbeddingNeighbours

    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "今", "天", "气", "很", "好", "坏", "冷", "，", "hi",
                  "##king"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocabulary) + "\n", encoding="utf-8")
    tokenizer = BertTokenizerFast(str(tmp_path / "vocab.txt"))
    sentence = "今天天气很好，hiking"
    augmenter = TinyBertAugmenter(tokenizer, EmbeddingNeighbours(torch.randn(len(vocabulary), 8), tokenizer,
                                                                 top_k=3, cache=None), num_candidates=3, copies=5)
    words = augmenter.words(sentence)
    assert [word for word, _ in words] == ["今", "天", "天", "气", "很", "好", "，", "hiking"]
    assert all(sentence[start:end] == word for word, (start, end) in words)
    copies = augmenter.augment([sentence], [0])[0]
    assert copies[0] == sentence and len(copies) > 1
    assert all(copy.count("，") == 1 for copy in copies[1:])  # punctuation is never replaced


def test_a_masked_lm_gives_single_piece_words_their_candidates(augmenter_parts):
    from transformers import BertForMaskedLM

    from hf_plm_ext.data.augmentation import TinyBertAugmenter

    tokenizer, neighbours = augmenter_parts
    masked_lm = BertForMaskedLM(bert_config(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1)).eval()
    augmenter = TinyBertAugmenter(tokenizer, neighbours, masked_lm, num_candidates=5)
    candidates = augmenter.candidates(["Alice was beginning to get tired"])[0]
    words = [word for word, _ in augmenter.words("Alice was beginning to get tired")]
    assert candidates[words.index("was")] == []  # a stop-word
    tired = candidates[words.index("tired")]
    assert len(tired) == 5 and all(token.isalpha() and token != "tired" for token in tired)


def test_distill_task_augments_the_training_set_and_reuses_the_cache(tmp_path, tiny_classifier_dir, shared_data,
                                                                    student_json, capsys, monkeypatch):
    from conftest import run_cli
    from hf_plm_ext.data.augmentation import TinyBertAugmenter

    def run(out):
        return run_cli(["distill", "task", "--teacher", tiny_classifier_dir, "--task", "glue/sst2", "--data-dir",
                        shared_data / "glue/SST-2", "--max_train_samples", 24, "--augment", 3,
                        "--student-config", student_json, "--stage", "intermediate", "--output", out, *STEPS], capsys)

    code, _, stderr = run(tmp_path / "first")
    assert code == 0, stderr
    record = json.loads((tmp_path / "first" / "eval_results.json").read_text())
    augmentation = record["distillation"]["augmentation"]
    assert augmentation["original_examples"] == 24 and 24 < augmentation["augmented_examples"] <= 4 * 24
    assert record["num_train_examples"] == augmentation["augmented_examples"]
    assert "3 copies per example" in (tmp_path / "first" / "README.md").read_text()

    def no_augmenting(*args, **kwargs):
        raise AssertionError("augmented again instead of reading the cache")

    monkeypatch.setattr(TinyBertAugmenter, "augment", no_augmenting)
    code, _, stderr = run(tmp_path / "second")
    assert code == 0, stderr
    second = json.loads((tmp_path / "second" / "eval_results.json").read_text())
    assert second["distillation"]["augmentation"] == augmentation


def test_a_bert_teacher_distils_into_a_distilbert_student_with_a_bfloat16_teacher(tmp_path):
    """Two families, one vocabulary: DistilBERT's attention is read by its own projection names, the batch's
    token_type_ids go only to the model that takes them, and the teacher runs in bfloat16."""
    from transformers import DistilBertForSequenceClassification

    torch.manual_seed(0)
    teacher = BertForSequenceClassification(bert_config())
    student = DistilBertForSequenceClassification(DistilBertConfig(vocab_size=120, dim=24, n_layers=2, n_heads=4,
                                                                   hidden_dim=32, max_position_embeddings=64))
    dataset = _Examples()
    for row in dataset.rows:
        row["token_type_ids"] = torch.zeros_like(row["input_ids"])
    trainer = DistillationTrainer(model=student, teacher=teacher,
                                  distillation_args=DistillationArguments(teacher_dtype="bfloat16"),
                                  args=TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=8,
                                                         max_steps=4, logging_steps=1, report_to="none",
                                                         use_cpu=True, save_strategy="no", disable_tqdm=True),
                                  train_dataset=dataset)
    trainer.train()
    assert next(trainer.model.teacher.parameters()).dtype == torch.bfloat16
    logged = [entry for entry in trainer.state.log_history if "attention_loss" in entry]
    weights = trainer.accelerator.unwrap_model(trainer.model).weights
    assert len(logged) == 4 and all(torch.isfinite(torch.tensor(entry["loss"])) for entry in logged)
    for entry in logged:  # each step's loss: the weighted sum of the sub-losses logged beside it (4 digits each)
        weighted = sum(weight * entry[name] for name, weight in weights.items() if weight)
        assert entry["loss"] == pytest.approx(weighted, abs=1e-3 * (1 + len(weights))), (entry, weights)


@pytest.mark.parametrize("family", ["rev-lsh", "transfo-xl"])
def test_this_packages_other_families_distil_with_the_hidden_state_losses(family):
    from hf_plm_ext import RevLSHConfig, RevLSHForSequenceClassification, TransfoXLConfig, TransfoXLForSequenceClassification

    def make():
        if family == "rev-lsh":
            return RevLSHForSequenceClassification(RevLSHConfig(vocab_size=100, num_labels=2))
        return TransfoXLForSequenceClassification(TransfoXLConfig(vocab_size=100, cutoffs=[], num_labels=2))

    torch.manual_seed(0)
    model = DistillationModel(make(), make(), DistillationArguments(attention_loss="none", layer_map="last")).train()
    out = model(input_ids=torch.randint(0, 100, (2, 16)))
    assert {"embedding_loss", "hidden_loss", "prediction_loss"} <= set(out.keys())
    out.loss.backward()
    with pytest.raises(ValueError, match="hidden-state losses only"):
        DistillationModel(make(), make())


def test_activation_checkpointing_of_the_student_keeps_the_attention_loss_gradient(tmp_path):
    """The hooked query/key outputs inside a checkpointed layer still carry the graph (recomputed in backward):
    the same gradients as without checkpointing."""
    import copy

    torch.manual_seed(0)
    teacher = BertForSequenceClassification(bert_config())
    student = BertForSequenceClassification(bert_config(hidden_size=24, num_hidden_layers=2, hidden_dropout_prob=0.0,
                                                        attention_probs_dropout_prob=0.0))
    plain = copy.deepcopy(student)
    trainer = _trainer(tmp_path, student, teacher, max_steps=1, activation_checkpointing=True, learning_rate=0.0)
    trainer.train()
    assert student.is_activation_checkpointing
    attention_only = DistillationArguments(stage="intermediate", hidden_weight=0, embedding_weight=0)
    for model in (student, plain):
        model.train().zero_grad()
        DistillationModel(model, teacher, attention_only)(**batch()).loss.backward()
    checkpointed, expected = (m.bert.encoder.layer[0].attention.self.query.weight.grad for m in (student, plain))
    assert expected.abs().sum() > 0 and torch.allclose(checkpointed, expected, atol=1e-6)


def test_distill_task_composes_the_fine_tuning_steps_in_one_pass(tmp_path, tiny_classifier_dir, shared_data,
                                                              student_json):
    """The modules of hf_plm_ext that ``distill_task`` calls, in order, each once: the fine-tuning steps twice (the
    data encoded before the stages, the evaluation after, which needs the trained student) and no other return."""
    import sys
    from pathlib import Path

    import hf_plm_ext
    from hf_plm_ext.distill.recipe import DistillTaskArguments, distill_task

    package = str(Path(hf_plm_ext.__file__).parent) + "/"
    recipe = package + "distill/recipe.py"
    called = []

    def record(frame, event, arg):
        if event == "call" and frame.f_back is not None and frame.f_back.f_code.co_filename == recipe:
            module = frame.f_code.co_filename
            if module.startswith(package) and module != recipe and (not called or called[-1] != module):
                called.append(module)

    args = DistillTaskArguments(teacher=str(tiny_classifier_dir), task="glue/mrpc", output=str(tmp_path / "student"),
                                student_config=str(student_json), data_dir=str(shared_data / "glue/MRPC"),
                                max_train_samples=16)
    training = TrainingArguments(output_dir=str(tmp_path / "unused"), max_steps=1, per_device_train_batch_size=8,
                                 report_to="none", use_cpu=True, save_strategy="no", disable_tqdm=True)
    sys.setprofile(record)
    try:
        distill_task(args, DistillationArguments(stage="intermediate"), training)
    finally:
        sys.setprofile(None)
    modules = [module[len(package):] for module in called]
    assert modules == ["checkpoints/resuming.py", "eval/tasks.py", "checkpoints/loading.py", "distill/student.py",
                       "eval/readers.py", "finetuning/steps.py", "distill/trainer.py", "finetuning/steps.py", "checkpoints/saving.py",
                       "checkpoints/results.py",
                       "hub/cards.py"], modules
