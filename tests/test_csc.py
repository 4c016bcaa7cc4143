"""Chinese spelling correction: MacBERT4CSC's model, the confusion-set pairs, SIGHAN's scores, the commands."""

import json
from collections import Counter

import pytest
import torch
from transformers import AutoTokenizer, BertModel

from hf_plm_ext import (
    ConfusionSet,
    MacBertForMaskedLM,
    MacBertForSpellingCorrection,
    SpellingCorrector,
    SpellingErrorGenerator,
    build_spelling_pairs,
    csc_scores,
    read_spelling_pairs,
)
from hf_plm_ext.csc.data import is_chinese_character, read_clean_sentences
from hf_plm_ext.csc.recipe import spelling_correction_model
from hf_plm_ext.errors import UserInputError
from hf_plm_ext.modeling.macbert.modeling_macbert import sigmoid_focal_loss

from conftest import run_cli, tiny_macbert_config

# ---------------------------------------------------------------- scores, worked out by hand


HAND_MADE = (  # (source, target, prediction)
    ("我爱北京", "我爱北京", "我爱北京"),  # clean, left alone
    ("我爰北京", "我爱北京", "我爱北京"),  # one error, corrected
    ("他是学生", "他是学生", "她是学生"),  # clean, changed: a false positive
    ("天汽很好", "天气很好", "天汽很好"),  # one error, missed
    ("今天下羽", "今天下雨", "今天下语"),  # one error, found, wrong character
    ("我门去公圆", "我们去公园", "我们去公圆"),  # two errors, one corrected
)


def test_scores_of_hand_made_cases_are_those_worked_out_by_hand():
    sources, targets, predictions = zip(*HAND_MADE)
    scores = csc_scores(sources, targets, predictions)
    expected = {
        # sentences edited: 2, 3, 5, 6; with errors: 2, 4, 5, 6; positions exactly right and edited: 2, 5
        "sentence_detection_precision": 2 / 4, "sentence_detection_recall": 2 / 4, "sentence_detection_f1": 0.5,
        "sentence_detection_accuracy": 3 / 6,  # 1, 2, 5
        "sentence_correction_precision": 1 / 4, "sentence_correction_recall": 1 / 4, "sentence_correction_f1": 0.25,
        "sentence_correction_accuracy": 2 / 6,  # 1, 2
        "sentence_false_positive_rate": 1 / 2,  # clean: 1, 3; edited: 3
        # characters edited: 4 (one each in 2, 3, 5, 6); gold errors: 5; edited errors: 3; corrected: 2
        "char_detection_precision": 3 / 4, "char_detection_recall": 3 / 5, "char_detection_f1": 2 / 3,
        "char_correction_precision": 2 / 4, "char_correction_recall": 2 / 5, "char_correction_f1": 4 / 9,
        # pycorrector: TP sentence 2, FP sentence 3, FN sentences 4, 5 and 6, TN sentence 1
        "pycorrector_sentence_accuracy": 2 / 6, "pycorrector_sentence_precision": 1 / 2,
        "pycorrector_sentence_recall": 1 / 4, "pycorrector_sentence_f1": 1 / 3,
        # over correctly detected positions (2: 爱 right; 5: 语 wrong; 6: 们 right, 园 missed; 4 not counted)
        "pycorrector_char_correction_precision": 2 / 3, "pycorrector_char_correction_recall": 2 / 4,
        "pycorrector_char_correction_f1": 4 / 7,
    }
    assert scores.keys() == expected.keys()
    for name, value in expected.items():
        assert scores[name] == pytest.approx(value), name


def test_perfect_and_untouched_predictions_score_at_the_ends():
    sources, targets, _ = zip(*HAND_MADE)
    perfect = csc_scores(sources, targets, targets)
    assert all(perfect[f"{level}_f1"] == 1.0 for level in ("sentence_detection", "sentence_correction",
                                                           "char_detection", "char_correction"))
    assert perfect["sentence_false_positive_rate"] == 0.0 and perfect["pycorrector_sentence_accuracy"] == 1.0
    untouched = csc_scores(sources, targets, sources)
    assert untouched["sentence_detection_recall"] == 0.0 and untouched["char_correction_recall"] == 0.0
    assert untouched["sentence_false_positive_rate"] == 0.0
    assert untouched["sentence_detection_accuracy"] == 2 / 6  # the clean sentences


def test_scores_refuse_a_prediction_of_another_length():
    with pytest.raises(ValueError, match="sentence 1: .*differ in length"):
        csc_scores(["我爰北京"], ["我爱北京"], ["我爱北京了"])


# ---------------------------------------------------------------- confusion sets and generated pairs


@pytest.fixture(scope="module")
def confusion():
    return ConfusionSet.from_pycorrector()


def test_pycorrectors_confusion_sets_load_and_restrict(confusion):
    assert "有" in confusion.same_sound["友"] and "友" not in confusion.same_sound["友"]
    assert "拢" in confusion.same_shape["龙"] and "龙" in confusion.same_shape["拢"]  # a shape group, both ways
    assert len(confusion.same_sound) > 3000 and len(confusion.same_shape) > 2000
    small = confusion.restricted_to("友有又由龙")
    assert set(small.same_sound) <= set("友有又由龙") and set(small.same_sound["友"]) <= set("有又由")


def test_generated_pairs_keep_length_change_only_confusable_characters_at_sighans_rates(confusion, shared_data):
    sentences = read_clean_sentences([shared_data / "corpus/zh/CLUECorpusSmall_bert_sampled.txt"])[:3000]
    generator = SpellingErrorGenerator(confusion)
    pairs = build_spelling_pairs(sentences, generator, seed=3)
    changes = Counter()
    for source, target in zip(pairs["source"], pairs["target"]):
        assert len(source) == len(target)
        edits = [(t, s) for s, t in zip(source, target) if s != t]
        for right, wrong in edits:
            assert is_chinese_character(wrong)
            assert wrong in confusion.same_sound.get(right, []) + confusion.same_shape.get(right, [])
        changes[min(len(edits), 3)] += 1
    clean = changes[0] / len(pairs)
    assert abs(clean - generator.clean_fraction) < 0.04, clean
    assert changes[1] > 3 * changes[2] > 0 and changes[3] > 0
    assert list(pairs["target"]) == list(sentences)
    # seeded per example: the same pairs whatever the batching
    assert build_spelling_pairs(sentences, generator, seed=3, batch_size=17)["source"] == pairs["source"]
    assert build_spelling_pairs(sentences, generator, seed=4)["source"] != pairs["source"]


def test_generator_settings_are_checked(confusion):
    with pytest.raises(ValueError, match="clean_fraction"):
        SpellingErrorGenerator(confusion, clean_fraction=1.5)
    with pytest.raises(ValueError, match="error_counts"):
        SpellingErrorGenerator(confusion, error_counts={0: 1.0})


# ---------------------------------------------------------------- reading pair files


def test_sighan15_reads_the_same_from_json_and_tsv(shared_data):
    from_json = read_spelling_pairs(shared_data / "csc/sighan15/test.json")
    from_tsv = read_spelling_pairs(shared_data / "csc/sighan15/test.tsv")
    assert len(from_json) == 1100
    assert from_json["source"] == from_tsv["source"] and from_json["target"] == from_tsv["target"]
    # 550 records list wrong_ids, but in 7 the error vanished with the conversion to simplified characters (the
    # texts are equal): scored from the texts, as every CSC scorer does, the set has 543 erroneous sentences
    assert sum(s != t for s, t in zip(from_json["source"], from_json["target"])) == 543


def test_json_lines_read_too(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"original_text": "我爰北京", "correct_text": "我爱北京"}, ensure_ascii=False) + "\n")
    assert read_spelling_pairs(path)["target"] == ["我爱北京"]


@pytest.mark.parametrize("content,message", [
    ("我爰北京\t我爱北京\n你好吗\t你好\n", r"pairs.tsv:2: source and target differ in length \(3 vs 2"),
    ("我爰北京\t我爱北京\n\t\n", r"pairs.tsv:2: empty source"),
    ("我爰北京 我爱北京\n", r"pairs.tsv:1: expected source<TAB>target"),
])
def test_bad_pair_files_name_the_file_and_line(tmp_path, content, message):
    path = tmp_path / "pairs.tsv"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(UserInputError, match=message):
        read_spelling_pairs(path)


def test_a_sighan_json_record_of_unequal_length_names_its_line(tmp_path):
    records = [{"id": "a", "original_text": "我爰北京", "correct_text": "我爱北京"},
               {"id": "b", "original_text": "你好吗", "correct_text": "你好"}]
    path = tmp_path / "test.json"
    path.write_text(json.dumps(records, ensure_ascii=False, indent=4), encoding="utf-8")
    with pytest.raises(UserInputError, match=r"test.json:7: source and target differ in length"):
        read_spelling_pairs(path)


# ---------------------------------------------------------------- the model


def test_loss_is_the_weighted_sum_of_correction_and_a_focal_detection_loss():
    torch.manual_seed(0)
    model = MacBertForSpellingCorrection(tiny_macbert_config(vocab_size=99, correction_loss_weight=0.3))
    ids = torch.randint(5, 99, (2, 6))
    labels = ids.clone()
    labels[0, 2], labels[1, 4] = 7, 9
    mask = torch.ones_like(ids)
    mask[1, 5] = 0
    labels[1, 5] = -100
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    correction = torch.nn.functional.cross_entropy(out.correction_logits.reshape(-1, 99), labels.reshape(-1))
    # pycorrector's FocalLoss(activation_type="sigmoid"), gamma 2, alpha 0.25, over the attended tokens
    p = torch.sigmoid(out.detection_logits[mask.bool()])
    wrong = (labels != ids)[mask.bool()].float()
    focal = (-0.25 * wrong * (1 - p) ** 2 * (p + 1e-9).log()
             - 0.75 * (1 - wrong) * p ** 2 * (1 - p + 1e-9).log()).mean()
    torch.testing.assert_close(out.correction_loss, correction)
    torch.testing.assert_close(out.detection_loss, focal)
    torch.testing.assert_close(out.loss, 0.3 * correction + 0.7 * focal)
    # gamma 0 and alpha 0.5: half of binary cross-entropy
    logits, targets = torch.randn(10), (torch.rand(10) > 0.5).float()
    torch.testing.assert_close(sigmoid_focal_loss(logits, targets, 0.0, 0.5),
                               0.5 * torch.nn.functional.binary_cross_entropy_with_logits(logits, targets))


def test_spelling_correction_starts_from_a_bert_checkpoint_with_the_same_encoder(minilm_dir):
    model = spelling_correction_model(str(minilm_dir))
    bert = BertModel.from_pretrained(minilm_dir)
    encoder = model.bert.state_dict()
    for name, weight in bert.state_dict().items():
        if name in encoder:
            assert torch.equal(encoder[name], weight), name
    assert model.config.model_type == "macbert"
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight


def test_spelling_correction_keeps_a_masked_lm_checkpoints_head(tmp_path):
    torch.manual_seed(0)
    mlm = MacBertForMaskedLM(tiny_macbert_config())
    mlm.save_pretrained(tmp_path)
    model = spelling_correction_model(str(tmp_path))
    assert torch.equal(model.cls.predictions.transform.dense.weight, mlm.cls.predictions.transform.dense.weight)
    assert torch.equal(model.cls.predictions.bias, mlm.cls.predictions.bias)


def test_a_checkpoint_of_another_family_is_refused(tmp_path):
    from hf_plm_ext import TransfoXLConfig, TransfoXLModel

    TransfoXLModel(TransfoXLConfig(vocab_size=50, d_model=16, d_embed=16, n_head=2, d_head=8, d_inner=32, n_layer=1,
                                   adaptive=False, cutoffs=[])).save_pretrained(tmp_path)
    with pytest.raises(UserInputError, match="'transfo-xl' checkpoint: spelling correction starts from a 'bert' or "
                                             "'macbert' one"):
        spelling_correction_model(str(tmp_path))


# ---------------------------------------------------------------- correcting


@pytest.fixture(scope="module")
def chinese_tokenizer(tmp_path_factory, shared_data):
    from hf_plm_ext.data.tokenizer_training import train_tokenizer

    out = tmp_path_factory.mktemp("zh-tokenizer")
    train_tokenizer([str(shared_data / "corpus/zh/zhwiki_bert_sampled.txt")], "wordpiece", vocab_size=4000,
                    model_max_length=128).save_pretrained(str(out))
    return AutoTokenizer.from_pretrained(out)


class MappingModel(torch.nn.Module):
    """A test double of the correction head: at every position the logits favour ``mapping[input_id]`` (else the
    input id), so what the corrector makes of them can be checked exactly."""

    def __init__(self, vocab_size, mapping, max_positions=128):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(1))
        self.mapping, self.vocab_size = mapping, vocab_size
        self.config = type("Config", (), {"max_position_embeddings": max_positions})()
        self.device = torch.device("cpu")

    def forward(self, input_ids, **kwargs):
        targets = input_ids.clone().apply_(lambda i: self.mapping.get(i, i))
        logits = torch.nn.functional.one_hot(targets, self.vocab_size).float()
        return {"correction_logits": logits}


def test_the_corrector_replaces_only_chinese_characters_and_keeps_the_length(chinese_tokenizer):
    tok = chinese_tokenizer
    wrong, right, unknown = (tok.convert_tokens_to_ids(c) for c in "有友唷")
    assert unknown == tok.unk_token_id and tok.unk_token_id not in (wrong, right)
    # mapped to a non-Chinese token (a digit), a character stays; so does one the tokenizer reads as [UNK]
    other = tok.convert_tokens_to_ids("打")
    mapping = {wrong: right, other: tok.convert_tokens_to_ids("1"), unknown: right}
    corrector = SpellingCorrector(MappingModel(len(tok), mapping), tok)
    text = "下个星期，我跟我朋有打算去法国玩儿唷。ABC 123"
    result = corrector(text)
    assert result["target"] == text.replace("有", "友")
    assert result["errors"] == [(9, "有", "友")]
    assert corrector("hello, world 42") == {"source": "hello, world 42", "target": "hello, world 42", "errors": []}
    assert corrector([text, ""])[1]["target"] == ""


def test_the_corrector_goes_through_long_text_in_windows(chinese_tokenizer):
    tok = chinese_tokenizer
    wrong, right = tok.convert_tokens_to_ids("有"), tok.convert_tokens_to_ids("友")
    corrector = SpellingCorrector(MappingModel(len(tok), {wrong: right}), tok, max_length=16)
    text = "我的朋有说" * 20  # 100 characters: windows of 14
    assert corrector(text)["target"] == text.replace("有", "友")


def test_a_model_without_a_detection_head_is_refused(tmp_path, chinese_tokenizer):
    MacBertForMaskedLM(tiny_macbert_config(vocab_size=len(chinese_tokenizer))).save_pretrained(tmp_path)
    chinese_tokenizer.save_pretrained(tmp_path)
    with pytest.raises(UserInputError, match="not a spelling-correction model .*MacBertForMaskedLM.*no detection head"):
        SpellingCorrector.from_pretrained(str(tmp_path))


# ---------------------------------------------------------------- the commands, end to end


@pytest.fixture(scope="module")
def tiny_chinese_bert(tmp_path_factory, chinese_tokenizer):
    out = tmp_path_factory.mktemp("zh-bert")
    torch.manual_seed(0)
    MacBertForMaskedLM(tiny_macbert_config(vocab_size=len(chinese_tokenizer), hidden_size=64,
                                           intermediate_size=128)).save_pretrained(out)
    chinese_tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def sighan_sample(tmp_path_factory, shared_data):
    path = tmp_path_factory.mktemp("sighan") / "sample.tsv"
    path.write_text("".join((shared_data / "csc/sighan15/test.tsv").read_text(encoding="utf-8")
                            .splitlines(keepends=True)[:40]), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def fine_tuned(tmp_path_factory, tiny_chinese_bert, shared_data, sighan_sample):
    from hf_plm_ext import finetune_csc
    from hf_plm_ext.csc.recipe import CSCFinetuneArguments
    from transformers import TrainingArguments

    out = tmp_path_factory.mktemp("csc") / "model"
    args = CSCFinetuneArguments(model=str(tiny_chinese_bert), output=str(out), max_train_samples=640,
                                corpus=[str(shared_data / "corpus/zh/CLUECorpusSmall_bert_sampled.txt")],
                                test_file=str(sighan_sample), max_seq_length=64)
    training = TrainingArguments(output_dir="unused", max_steps=30, per_device_train_batch_size=16,
                                 learning_rate=2e-3, logging_steps=10, report_to="none", use_cpu=True,
                                 disable_tqdm=True, save_strategy="no")
    results = finetune_csc(args, training)
    return out, results


def test_finetune_csc_trains_both_heads_and_scores_the_held_out_and_test_pairs(fine_tuned):
    out, results = fine_tuned
    assert results["num_train_examples"] == 640
    assert {r["split"] for r in results["results"]} == {"validation", "test"}
    assert results["results"][1]["num_examples"] == 40
    assert {"correction_loss", "detection_loss"} <= set(results["sub_losses"][0])
    saved = json.loads((out / "eval_results.json").read_text())
    assert saved["results"][0]["metrics"].keys() == csc_scores(["我"], ["我"], ["我"]).keys()
    assert json.loads((out / "config.json").read_text())["architectures"] == ["MacBertForSpellingCorrection"]


def test_training_lowers_both_losses(tiny_chinese_bert, confusion, shared_data):
    from transformers import DataCollatorForTokenClassification

    from hf_plm_ext.csc.data import encode_spelling_pairs

    tokenizer = AutoTokenizer.from_pretrained(tiny_chinese_bert)
    sentences = read_clean_sentences([shared_data / "corpus/zh/zhwiki_bert_sampled.txt"], max_length=40)[:64]
    pairs = build_spelling_pairs(sentences, SpellingErrorGenerator(confusion, clean_fraction=0.0), seed=0)
    batch = DataCollatorForTokenClassification(tokenizer)(list(encode_spelling_pairs(pairs, tokenizer, 48)))
    model = spelling_correction_model(str(tiny_chinese_bert))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    torch.manual_seed(0)
    first = model(**batch)
    for _ in range(40):
        loss = model(**batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    last = model.eval()(**batch)
    assert last.correction_loss < 0.5 * first.correction_loss
    assert last.detection_loss < first.detection_loss


def test_correct_prints_corrections_and_json(fine_tuned, capsys):
    out, _ = fine_tuned
    code, stdout, _ = run_cli(["correct", out, "我跟我朋唷打算去法国玩儿。", "hello", "--json"], capsys)
    assert code == 0
    # options anywhere on the line, as in every command (the README's `correct MODEL TEXT --json TEXT`)
    for argv in (["correct", out, "--json", "我跟我朋唷打算去法国玩儿。", "hello"],
                 ["correct", "--json", out, "我跟我朋唷打算去法国玩儿。", "--batch-size", "1", "hello"]):
        assert run_cli(argv, capsys)[:2] == (0, stdout)
    lines = [json.loads(line) for line in stdout.splitlines()]
    assert [line["source"] for line in lines] == ["我跟我朋唷打算去法国玩儿。", "hello"]
    assert lines[1] == {"source": "hello", "target": "hello", "errors": []}
    assert len(lines[0]["target"]) == len(lines[0]["source"])
    assert all(lines[0]["source"][i] == wrong and lines[0]["target"][i] == right
               for i, wrong, right in lines[0]["errors"])
    code, stdout, _ = run_cli(["correct", out, "hello"], capsys)
    assert code == 0 and stdout == "hello\n"


def test_eval_csc_writes_scores_predictions_and_a_card(fine_tuned, sighan_sample, tmp_path, capsys):
    model, _ = fine_tuned
    code, stdout, _ = run_cli(["eval", "csc", "--model", model, "--test-file", sighan_sample, "--output",
                               tmp_path / "eval"], capsys)
    assert code == 0, stdout
    results = json.loads((tmp_path / "eval/eval_results.json").read_text())
    predictions = (tmp_path / "eval/predictions.tsv").read_text(encoding="utf-8").splitlines()
    sources = [line.split("\t")[0] for line in sighan_sample.read_text(encoding="utf-8").splitlines()]
    assert [line.split("\t")[0] for line in predictions] == sources
    rescored = csc_scores(sources, [line.split("\t")[1] for line in sighan_sample.read_text().splitlines()],
                          [line.split("\t")[1] for line in predictions])
    assert results["results"][0]["metrics"] == rescored
    card = (tmp_path / "eval/README.md").read_text()
    assert "type: text2text-generation" in card and "sentence_correction_f1" in card
    assert "SpellingCorrector.from_pretrained" in card


def test_bad_input_to_the_commands_is_one_clear_error(fine_tuned, tiny_chinese_bert, tmp_path, capsys):
    model, _ = fine_tuned
    bad = tmp_path / "bad.tsv"
    bad.write_text("我爰北京\t我爱北京\n你好吗\t你好\n", encoding="utf-8")
    code, _, stderr = run_cli(["eval", "csc", "--model", model, "--test-file", bad, "--output", tmp_path / "e"],
                              capsys)
    assert code == 2 and "bad.tsv:2: source and target differ in length" in stderr
    assert not (tmp_path / "e").exists()
    code, _, stderr = run_cli(["correct", tiny_chinese_bert, "你好"], capsys)
    assert code == 2 and "not a spelling-correction model" in stderr
    code, _, stderr = run_cli(["finetune", "csc", "--model", tiny_chinese_bert, "--output", tmp_path / "f",
                               "--train_file", bad, "--max_steps", "1"], capsys)
    assert code == 2 and "bad.tsv:2:" in stderr and not (tmp_path / "f").exists()
    code, _, stderr = run_cli(["finetune", "csc", "--model", tiny_chinese_bert, "--output", tmp_path / "g",
                               "--max_steps", "1"], capsys)
    assert code == 2 and "--corpus" in stderr


def test_a_batch_size_below_one_and_a_window_below_three_are_refused_by_the_parser(fine_tuned, tmp_path, capsys):
    model, _ = fine_tuned
    good = tmp_path / "good.tsv"
    good.write_text("我爰北京\t我爱北京\n", encoding="utf-8")
    for argv in (["correct", model, "我爰北京", "--batch-size", "0"],
                 ["eval", "csc", "--model", model, "--test-file", good, "--output", tmp_path / "e", "--batch-size",
                  "0"]):
        code, _, stderr = run_cli(argv, capsys)
        assert code == 2 and "argument --batch-size: must be at least 1, got 0" in stderr, stderr[-500:]
    assert not (tmp_path / "e").exists()
    code, _, stderr = run_cli(["eval", "csc", "--model", model, "--test-file", good, "--output", tmp_path / "e",
                               "--max-length", "1"], capsys)  # [CLS], a character, [SEP]: 3 at least
    assert code == 2 and "argument --max-length: must be at least 3, got 1" in stderr
    code, _, stderr = run_cli(["eval", "csc", "--model", model, "--test-file", good, "--output", tmp_path / "e",
                               "--max-length", "3"], capsys)
    assert code == 0, stderr[-500:]  # the least window, [CLS] + one character + [SEP], runs
    source, prediction = (tmp_path / "e" / "predictions.tsv").read_text(encoding="utf-8").rstrip("\n").split("\t")
    assert source == "我爰北京" and len(prediction) == 4


def test_text_that_is_not_utf8_is_named_with_its_byte(fine_tuned, tiny_chinese_bert, tmp_path, capsys):
    """GBK bytes to each command that reads Chinese text: one line with the file and byte, exit 2, nothing written."""
    model, _ = fine_tuned
    gbk = tmp_path / "gbk.txt"
    gbk.write_bytes("我爰北京\t我爱北京\n".encode("gbk"))
    for argv, out in ((["correct", model, "--file", gbk], None),
                      (["eval", "csc", "--model", model, "--test-file", gbk, "--output", tmp_path / "e"], "e"),
                      (["finetune", "csc", "--model", tiny_chinese_bert, "--corpus", gbk, "--output", tmp_path / "f",
                        "--max_steps", "1"], "f")):
        code, _, stderr = run_cli(argv, capsys)
        assert code == 2 and f"{gbk}: not UTF-8 text (invalid continuation byte at byte 0)" in stderr, stderr[-500:]
        assert out is None or not (tmp_path / out).exists()


def test_correct_reads_standard_input_and_names_an_empty_file(fine_tuned, tmp_path, capsys, monkeypatch):
    import io
    import sys

    model, _ = fine_tuned
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("我爰北京\n".encode("utf-8"))))
    code, stdout, stderr = run_cli(["correct", model, "--file", "-"], capsys)
    assert code == 0, stderr[-500:]
    assert len(stdout.splitlines()) == 1 and len(stdout.split("\t")[0].strip()) == 4
    empty = tmp_path / "empty.txt"
    empty.write_text("\n", encoding="utf-8")
    code, _, stderr = run_cli(["correct", model, "--file", empty], capsys)
    assert code == 2 and f"--file {empty} has no lines to correct" in stderr
    # a pipe by its path (as /dev/stdin is one): read, not "not found"
    import os
    import threading

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    writer = threading.Thread(target=lambda: pipe.write_bytes("我爰北京\n".encode("utf-8")))
    writer.start()
    code, stdout, stderr = run_cli(["correct", model, "--file", pipe], capsys)
    writer.join()
    assert code == 0 and len(stdout.splitlines()) == 1, stderr[-500:]


def test_correct_on_a_model_that_cannot_become_a_corrector_does_not_suggest_fine_tuning_it(tmp_path, capsys):
    from hf_plm_ext import RevLSHConfig, RevLSHForMaskedLM

    RevLSHForMaskedLM(RevLSHConfig.from_size("tiny", vocab_size=50)).save_pretrained(tmp_path / "rev")
    code, _, stderr = run_cli(["correct", tmp_path / "rev", "你好"], capsys)
    assert code == 2 and "is not a spelling-correction model" in stderr
    assert f"--model {tmp_path / 'rev'}" not in stderr and "a 'rev-lsh' checkpoint cannot start one" in stderr


def test_the_application_takes_its_head_and_pipeline_from_the_family_s_declaration(tiny_chinese_bert, monkeypatch):
    """csc/ names no family: the registry finds the folder that declares SPELLING_CORRECTION (MacBERT's) and the
    recipe and the corrector build what it declares."""
    import hf_plm_ext.csc.corrector as corrector
    import hf_plm_ext.csc.recipe as recipe
    from hf_plm_ext.modeling import macbert
    from hf_plm_ext.registry import spelling_correction

    assert spelling_correction() is macbert.SPELLING_CORRECTION
    for module in (recipe, corrector):
        source = open(module.__file__, encoding="utf-8").read()
        assert "MacBert" not in source and "modeling.macbert" not in source, module.__name__

    class OtherHead(MacBertForSpellingCorrection):
        pass

    declared = {**macbert.SPELLING_CORRECTION, "head": OtherHead}
    monkeypatch.setattr(recipe, "spelling_correction", lambda: declared)
    assert type(spelling_correction_model(tiny_chinese_bert)) is OtherHead
