"""Issue 68: the checkpoints users already have (stock ``bert``, ``roberta``, Google's ELECTRA pairs, TinyBERT's
general students) are continued by the objectives and handed back as the same stock kind, exactly: pre-training at
learning rate 0, exporting, and loading the export with transformers alone (hf_plm_ext not importable) gives the
original checkpoint's logits."""

import json
from importlib.resources import files

import pytest
import torch
from transformers import (AutoConfig, AutoTokenizer, BertConfig, BertForPreTraining, ElectraConfig,
                          ElectraForMaskedLM, ElectraForPreTraining, RobertaConfig, RobertaForMaskedLM)
from transformers.models.bert.modeling_bert import BertPooler

from conftest import run_cli
from stock_checkpoints import outputs_without_package, published_config, roberta_tokenizer, save_stock

TEXT = files("hf_plm_ext") / "demo_data" / "alice.txt"
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37)
AT_LR_0 = ["--learning_rate", 0, "--max_steps", 2, "--per_device_train_batch_size", 4, "--save_strategy", "no",
           "--disable_tqdm", "true", "--seed", 0]


def stock_roberta(config, tokenizer, folder):
    """A RoBERTa masked LM saved as roberta-base is laid out: with its pooler's weights."""
    model = RobertaForMaskedLM(config)
    model.roberta.pooler = BertPooler(config)
    return save_stock(model, tokenizer, folder)


def padded_batch(tokenizer, token_types=True) -> dict:
    batch = tokenizer(["Alice was beginning to get very tired.", "So she was considering in her own mind, as well "
                       "as she could, whether the pleasure would be worth it."],
                      ["The rabbit ran.", "Down the hole."], padding=True, return_tensors="pt")
    return {k: v for k, v in batch.items() if token_types or k != "token_type_ids"}


def original_outputs(model_class, folder, batch, names) -> dict:
    model = model_class.from_pretrained(folder).eval()
    with torch.no_grad():
        output = model(**batch)
    return {name: getattr(output, name) for name in names}


def assert_same_outputs(exported: dict, originals: dict):
    for name, original in originals.items():
        assert exported[name].shape == original.shape
        assert torch.allclose(exported[name], original, atol=1e-5, rtol=0), (
            name, (exported[name] - original).abs().max().item())


@pytest.fixture(scope="module")
def stock_bert(tmp_path_factory, english_tokenizer_dir):
    tokenizer = AutoTokenizer.from_pretrained(english_tokenizer_dir)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tokenizer), max_position_embeddings=128, **TINY)
    return save_stock(BertForPreTraining(config), tokenizer, tmp_path_factory.mktemp("stock") / "bert")


@pytest.fixture(scope="module")
def stock_roberta_dir(tmp_path_factory):
    tokenizer = roberta_tokenizer(tmp_path_factory.mktemp("bpe"))
    torch.manual_seed(0)
    config = RobertaConfig(vocab_size=len(tokenizer), max_position_embeddings=130, type_vocab_size=1, pad_token_id=1,
                           bos_token_id=0, eos_token_id=2, **TINY)
    return stock_roberta(config, tokenizer, tmp_path_factory.mktemp("stock") / "roberta")


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_macbert_continues_a_stock_checkpoint_and_exports_it_exactly(kind, stock_bert, stock_roberta_dir, tmp_path,
                                                                    capsys, caplog):
    stock = stock_bert if kind == "bert" else stock_roberta_dir
    run, exported = tmp_path / "run", tmp_path / "exported"
    code, stdout, stderr = run_cli(["pretrain", "macbert", "--model", stock, "--corpus", TEXT, "--output", run,
                                    "--similar_words", f"embeddings:{stock}", "--max_seq_length", 64, *AT_LR_0],
                                   capsys)
    assert code == 0, stderr[-3000:]
    config = AutoConfig.from_pretrained(run)
    assert (config.model_type, config.stock_model_type) == ("macbert", kind)
    fresh_sop = "new weights, initialised randomly: cls.seq_relationship"
    assert (fresh_sop in caplog.text) == (kind == "roberta")  # BERT's NSP head is the SOP head's start
    results = json.loads((run / "pretrain_results.json").read_text())
    assert results["train_sub_losses"] or results["train_metrics"]["train_loss"] > 0

    code, stdout, stderr = run_cli(["export", "bert", run, exported], capsys)
    assert code == 0, stderr[-3000:]
    assert f"as a stock '{kind}' checkpoint" in stdout
    assert ("left out: the sentence-order head" in stdout) == (kind == "roberta")
    saved = json.loads((exported / "config.json").read_text())
    assert saved["model_type"] == kind and "auto_map" not in saved and "stock_model_type" not in saved
    assert AutoTokenizer.from_pretrained(exported).get_vocab() == AutoTokenizer.from_pretrained(stock).get_vocab()

    tokenizer = AutoTokenizer.from_pretrained(stock)
    batch = padded_batch(tokenizer, token_types=kind == "bert")
    stock_class, names = ((BertForPreTraining, ["prediction_logits", "seq_relationship_logits"]) if kind == "bert"
                          else (RobertaForMaskedLM, ["logits"]))
    outputs, printed = outputs_without_package(exported, stock_class.__name__, batch, names, tmp_path)
    assert printed == f"{stock_class.__name__} {kind} None"
    assert_same_outputs(outputs, original_outputs(stock_class, stock, batch, names))


def test_mlm_trains_a_stock_roberta_as_itself_and_export_hands_it_back(stock_roberta_dir, tmp_path, capsys):
    run, exported = tmp_path / "run", tmp_path / "exported"
    code, _, stderr = run_cli(["pretrain", "mlm", "--model", stock_roberta_dir, "--corpus", TEXT, "--output", run,
                               "--max_seq_length", 64, *AT_LR_0], capsys)
    assert code == 0, stderr[-3000:]
    assert AutoConfig.from_pretrained(run).model_type == "roberta"
    code, stdout, stderr = run_cli(["export", "bert", run, exported], capsys)
    assert code == 0 and "as a stock 'roberta' checkpoint" in stdout, stderr[-2000:]
    batch = padded_batch(AutoTokenizer.from_pretrained(stock_roberta_dir), token_types=False)
    outputs, _ = outputs_without_package(exported, "RobertaForMaskedLM", batch, ["logits"], tmp_path)
    assert_same_outputs(outputs, original_outputs(RobertaForMaskedLM, stock_roberta_dir, batch, ["logits"]))


def test_roberta_pairs_are_framed_as_roberta_frames_them(stock_roberta_dir):
    from hf_plm_ext.data.sop import build_sop_pairs

    tokenizer = AutoTokenizer.from_pretrained(stock_roberta_dir)
    pairs = build_sop_pairs({"text": [TEXT.read_text()[:3000]]}, [0], tokenizer, max_length=64)
    first = pairs["input_ids"][0]
    assert first[0] == tokenizer.cls_token_id and first[-1] == tokenizer.sep_token_id and len(first) <= 64
    separators = [i for i, t in enumerate(first) if t == tokenizer.sep_token_id]
    assert len(separators) == 3 and separators[1] == separators[0] + 1  # <s> A </s></s> B </s>
    assert all(set(types) == {0} for types in pairs["token_type_ids"])  # RoBERTa's one token type
    assert all(w == -1 for k, w in enumerate(pairs["word_ids"][0]) if k in (0, *separators))


def tiny_electra_pair(folder, tokenizer, generator_width=16, **discriminator_changes):
    """A stock pair laid out as Google's: the generator narrower, both holding the same (shared) embeddings."""
    torch.manual_seed(0)
    common = dict(vocab_size=len(tokenizer), embedding_size=24, max_position_embeddings=128)
    discriminator = ElectraForPreTraining(ElectraConfig(**{**common, **TINY, **discriminator_changes}))
    generator = ElectraForMaskedLM(ElectraConfig(**{**common, **TINY, "hidden_size": generator_width,
                                                    "intermediate_size": 4 * generator_width}))
    generator.electra.embeddings.load_state_dict(discriminator.electra.embeddings.state_dict())
    return (save_stock(generator, tokenizer, folder / "generator"),
            save_stock(discriminator, tokenizer, folder / "discriminator"))


def test_electra_continues_a_stock_pair_and_exports_it_as_google_lays_it_out(english_tokenizer_dir, tmp_path, capsys,
                                                                             caplog):
    tokenizer = AutoTokenizer.from_pretrained(english_tokenizer_dir)
    generator, discriminator = tiny_electra_pair(tmp_path / "google", tokenizer)
    run, exported = tmp_path / "run", tmp_path / "exported"
    code, _, stderr = run_cli(["pretrain", "electra", "--generator", generator, "--discriminator", discriminator,
                               "--corpus", TEXT, "--output", run, "--max_seq_length", 64, *AT_LR_0], capsys)
    assert code == 0, stderr[-3000:]
    assert "differ from the discriminator's" not in caplog.text
    code, stdout, stderr = run_cli(["export", "electra", run, exported], capsys)
    assert code == 0, stderr[-2000:]
    assert sorted(p.name for p in exported.iterdir()) == ["discriminator", "generator"]
    batch = padded_batch(tokenizer)
    for half, stock_class, original in (("discriminator", ElectraForPreTraining, discriminator),
                                        ("generator", ElectraForMaskedLM, generator)):
        assert (exported / half / "tokenizer.json").is_file()
        outputs, printed = outputs_without_package(exported / half, stock_class.__name__, batch, ["logits"],
                                                   tmp_path)
        assert printed == f"{stock_class.__name__} electra None"
        assert_same_outputs(outputs, original_outputs(stock_class, original, batch, ["logits"]))


def test_what_cannot_be_carried_is_refused_in_one_line(stock_bert, english_tokenizer_dir, minilm_dir, tmp_path,
                                                       capsys):
    from transformers import AlbertConfig, AlbertForPreTraining

    tokenizer = AutoTokenizer.from_pretrained(english_tokenizer_dir)
    albert = save_stock(AlbertForPreTraining(AlbertConfig(vocab_size=len(tokenizer), embedding_size=16, **TINY)),
                        tokenizer, tmp_path / "albert")
    out = tmp_path / "out"

    def refused(*argv):
        code, _, stderr = run_cli(list(argv), capsys)
        assert code == 2 and not out.exists(), stderr[-2000:]
        return stderr.strip().splitlines()[-1]

    line = refused("pretrain", "macbert", "--model", albert, "--corpus", TEXT, "--output", out, "--masking", "mask")
    assert "'albert' checkpoint (its layers share one set of weights" in line
    assert "'bert', 'roberta', 'xlm-roberta', 'camembert'" in line
    # a tokenizer other than the checkpoint's own (MiniLM's 30522 WordPiece tokens vs the 1500 saved with it)
    line = refused("pretrain", "macbert", "--model", stock_bert, "--tokenizer", minilm_dir, "--corpus", TEXT,
                   "--output", out, "--masking", "mask")
    assert "has 30522 tokens but the model" in line
    other = tmp_path / "other-tokenizer"
    from hf_plm_ext.data.tokenizer_training import train_tokenizer
    train_tokenizer([str(files("hf_plm_ext") / "demo_data" / "frankenstein.txt")], "wordpiece",
                    vocab_size=1200).save_pretrained(str(other))
    line = refused("pretrain", "macbert", "--model", stock_bert, "--tokenizer", other, "--corpus", TEXT,
                   "--output", out, "--masking", "mask")
    assert f"another vocabulary than the one saved with the model at {stock_bert}" in line
    # a generator and a discriminator that are not a pair
    for field, theirs in (("embedding_size", 32), ("vocab_size", 1600)):
        generator, discriminator = tiny_electra_pair(tmp_path / field, tokenizer)
        ours = json.loads((discriminator / "config.json").read_text())
        ElectraForPreTraining(ElectraConfig(**{**ours, field: theirs})).save_pretrained(discriminator)
        line = refused("pretrain", "electra", "--generator", generator, "--discriminator", discriminator,
                       "--corpus", TEXT, "--output", out)
        assert f"are not a pair: {field} {ours[field]} vs {theirs}" in line
    line = refused("pretrain", "electra", "--generator", generator, "--corpus", TEXT, "--output", out)
    assert "--generator and --discriminator go together" in line
    line = refused("pretrain", "electra", "--model", discriminator, "--corpus", TEXT, "--output", out)
    assert "continue the pair with --generator GENERATOR --discriminator DISCRIMINATOR" in line
    # export bert of a run of another family
    line = refused("export", "bert", discriminator, out)
    assert "is a 'electra' run; `export bert` writes 'macbert' runs" in line and "export electra" in line


def test_a_generator_with_embeddings_of_its_own_is_said(english_tokenizer_dir, tmp_path, capsys, caplog):
    tokenizer = AutoTokenizer.from_pretrained(english_tokenizer_dir)
    generator, discriminator = tiny_electra_pair(tmp_path / "pair", tokenizer)
    model = ElectraForMaskedLM.from_pretrained(generator)
    with torch.no_grad():
        model.electra.embeddings.word_embeddings.weight.add_(1.0)
    model.save_pretrained(generator)
    code, _, stderr = run_cli(["pretrain", "electra", "--generator", generator, "--discriminator", discriminator,
                               "--corpus", TEXT, "--output", tmp_path / "run", "--max_seq_length", 64, *AT_LR_0],
                              capsys)
    assert code == 0, stderr[-2000:]
    assert "the generator's own embeddings (word_embeddings.weight) differ from the discriminator's" in caplog.text


def general_student(name, folder, minilm_dir):
    """A TinyBERT general student as published (its config; random weights), with the bert-base-uncased vocabulary
    it shares with MiniLM."""
    from transformers import BertModel

    torch.manual_seed(0)
    return save_stock(BertModel(published_config(name)), AutoTokenizer.from_pretrained(minilm_dir), folder)


@pytest.fixture(scope="module")
def tinybert_general_student(tmp_path_factory, minilm_dir):
    return general_student("huawei-noah/TinyBERT_General_4L_312D",
                           tmp_path_factory.mktemp("tinybert") / "TinyBERT_General_4L_312D", minilm_dir)


@pytest.mark.slow
def test_distill_general_continues_the_6_layer_general_student(minilm_dir, tmp_path, capsys):
    student = general_student("huawei-noah/TinyBERT_General_6L_768D", tmp_path / "6L", minilm_dir)
    test_distill_general_continues_a_published_general_student(student, minilm_dir, tmp_path, capsys, width=768)


def test_distill_general_continues_a_published_general_student(tinybert_general_student, minilm_dir, tmp_path,
                                                               capsys, width=312):
    out = tmp_path / "student"
    code, stdout, stderr = run_cli(["distill", "general", "--teacher", minilm_dir, "--student",
                                    tinybert_general_student, "--corpus", TEXT, "--max_seq_length", 32, "--output",
                                    out, "--max_steps", 2, "--per_device_train_batch_size", 4, "--disable_tqdm",
                                    "true", "--report_to", "none"], capsys)
    assert code == 0, stderr[-3000:]
    assert json.loads((out / "distill_results.json").read_text())["student_from"] == str(tinybert_general_student)
    batch = padded_batch(AutoTokenizer.from_pretrained(minilm_dir))
    outputs, printed = outputs_without_package(out, "BertModel", batch, ["last_hidden_state"], tmp_path)
    assert printed == "BertModel bert None"  # handed back as the stock type it came as
    assert outputs["last_hidden_state"].shape[-1] == width
    started = original_outputs(__import__("transformers").BertModel, tinybert_general_student, batch,
                               ["last_hidden_state"])["last_hidden_state"]
    assert not torch.allclose(outputs["last_hidden_state"], started)  # it trained


def test_task_distillation_from_a_stock_bert_teacher_into_a_stock_4_layer_student(tinybert_general_student,
                                                                                  minilm_dir, shared_data, tmp_path,
                                                                                  capsys):
    from transformers import BertForSequenceClassification

    teacher = save_stock(BertForSequenceClassification.from_pretrained(minilm_dir, num_labels=2),
                         AutoTokenizer.from_pretrained(minilm_dir), tmp_path / "teacher")
    out = tmp_path / "student"
    code, stdout, stderr = run_cli(["distill", "task", "--teacher", teacher, "--task", "glue/sst2", "--data-dir",
                                    shared_data / "glue/SST-2", "--max_train_samples", 32, "--max_seq_length", 32,
                                    "--student", tinybert_general_student, "--output", out, "--max_steps", 2,
                                    "--per_device_train_batch_size", 8, "--disable_tqdm", "true", "--report_to",
                                    "none"], capsys)
    assert code == 0, stderr[-3000:]
    assert "student (" in stdout and "teacher (" in stdout
    saved = json.loads((out / "config.json").read_text())
    assert (saved["model_type"], saved["num_hidden_layers"], saved["architectures"]) == \
        ("bert", 4, ["BertForSequenceClassification"]) and "auto_map" not in saved
    batch = padded_batch(AutoTokenizer.from_pretrained(minilm_dir))
    outputs, printed = outputs_without_package(out, "BertForSequenceClassification", batch, ["logits"], tmp_path)
    assert printed == "BertForSequenceClassification bert None" and outputs["logits"].shape == (2, 2)


def test_k_adapter_on_a_stock_roberta_backbone(stock_roberta_dir, shared_data, tmp_path, capsys):
    """The paper's backbone is RoBERTa: the adapters read its hidden states, it stays frozen, and its positions are
    RoBERTa's own (the backbone runs as transformers' RobertaModel)."""
    from transformers import AutoModelForSequenceClassification, RobertaModel

    code, _, stderr = run_cli(["k-adapter", "new", "--backbone", stock_roberta_dir, "--adapters", "facts",
                               "--output", tmp_path / "new"], capsys)
    assert code == 0, stderr[-2000:]
    code, _, stderr = run_cli(["finetune", "glue", "--task", "sst2", "--model", tmp_path / "new", "--output",
                               tmp_path / "sst2", "--data-dir", shared_data / "glue/SST-2", "--max_steps", 2,
                               "--max_train_samples", 16, "--max_seq_length", 32, "--per_device_train_batch_size", 8,
                               "--disable_tqdm", "true", "--report_to", "none"], capsys)
    assert code == 0, stderr[-2000:]
    model = AutoModelForSequenceClassification.from_pretrained(tmp_path / "sst2").eval()
    backbone = model.k_adapter.backbone if hasattr(model, "k_adapter") else model.backbone
    assert isinstance(backbone, RobertaModel)
    stock = RobertaModel.from_pretrained(stock_roberta_dir).eval()
    batch = padded_batch(AutoTokenizer.from_pretrained(stock_roberta_dir), token_types=False)
    with torch.no_grad():  # frozen through the fine-tuning
        assert torch.equal(backbone(**batch).last_hidden_state, stock(**batch).last_hidden_state)


# --- the published shapes (item 5): each checkpoint's exact config.json fields, random weights -----------------

SHORT_TEXT_LINES = 60
MACBERT_STARTS = [
    pytest.param("bert-base-chinese"),
    pytest.param("hfl/chinese-macbert-base", marks=pytest.mark.slow),  # the same fields as bert-base-chinese
    pytest.param("hfl/chinese-roberta-wwm-ext", marks=pytest.mark.slow),  # `bert`, whatever its name
    pytest.param("roberta-base"),
    pytest.param("hfl/chinese-macbert-large", marks=pytest.mark.slow),
]


@pytest.fixture(scope="module")
def short_text(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "alice-start.txt"
    path.write_text("\n".join(TEXT.read_text().splitlines()[:SHORT_TEXT_LINES]) + "\n")
    return path


@pytest.mark.parametrize("name", MACBERT_STARTS)
def test_a_published_shape_maps_in_trains_exports_and_reloads_without_the_package(name, english_tokenizer_dir,
                                                                                 short_text, tmp_path, capsys):
    config = published_config(name)
    roberta = config.model_type == "roberta"
    tokenizer = roberta_tokenizer(tmp_path / "bpe") if roberta else AutoTokenizer.from_pretrained(english_tokenizer_dir)
    torch.manual_seed(0)
    stock = (stock_roberta(config, tokenizer, tmp_path / "stock") if roberta
             else save_stock(BertForPreTraining(config), tokenizer, tmp_path / "stock"))
    run, exported = tmp_path / "run", tmp_path / "exported"
    code, _, stderr = run_cli(["pretrain", "macbert", "--model", stock, "--corpus", short_text, "--output", run,
                               "--masking", "mask", "--max_seq_length", 32, "--max_eval_samples", 4,
                               "--per_device_eval_batch_size", 4, *AT_LR_0[:4], "--per_device_train_batch_size", 2,
                               *AT_LR_0[6:]], capsys)
    assert code == 0, stderr[-3000:]
    assert AutoConfig.from_pretrained(run).stock_model_type == config.model_type
    code, _, stderr = run_cli(["export", "bert", run, exported], capsys)
    assert code == 0, stderr[-2000:]
    stock_class, names = ((RobertaForMaskedLM, ["logits"]) if roberta
                          else (BertForPreTraining, ["prediction_logits", "seq_relationship_logits"]))
    batch = padded_batch(tokenizer, token_types=not roberta)
    outputs, printed = outputs_without_package(exported, stock_class.__name__, batch, names, tmp_path)
    assert printed == f"{stock_class.__name__} {config.model_type} None"
    assert_same_outputs(outputs, original_outputs(stock_class, stock, batch, names))
    saved = AutoConfig.from_pretrained(exported)
    for field in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                  "max_position_embeddings", "type_vocab_size", "pad_token_id", "layer_norm_eps"):
        assert getattr(saved, field) == getattr(config, field), field


@pytest.mark.parametrize("size", ["small", pytest.param("base", marks=pytest.mark.slow),
                                  pytest.param("large", marks=pytest.mark.slow)])
def test_a_published_electra_pair_continues_and_exports_at_its_shape(size, english_tokenizer_dir, short_text,
                                                                     tmp_path, capsys):
    tokenizer = AutoTokenizer.from_pretrained(english_tokenizer_dir)
    torch.manual_seed(0)
    discriminator = ElectraForPreTraining(published_config(f"google/electra-{size}-discriminator"))
    generator = ElectraForMaskedLM(published_config(f"google/electra-{size}-generator"))
    generator.electra.embeddings.load_state_dict(discriminator.electra.embeddings.state_dict())  # as released
    pair = {half: save_stock(model, tokenizer, tmp_path / "google" / half)
            for half, model in (("generator", generator), ("discriminator", discriminator))}
    run, exported = tmp_path / "run", tmp_path / "exported"
    code, _, stderr = run_cli(["pretrain", "electra", "--generator", pair["generator"], "--discriminator",
                               pair["discriminator"], "--corpus", short_text, "--output", run, "--max_seq_length", 32,
                               "--max_eval_samples", 4, *AT_LR_0], capsys)
    assert code == 0, stderr[-3000:]
    code, _, stderr = run_cli(["export", "electra", run, exported], capsys)
    assert code == 0, stderr[-2000:]
    batch = padded_batch(tokenizer)
    for half, stock_class in (("discriminator", ElectraForPreTraining), ("generator", ElectraForMaskedLM)):
        outputs, printed = outputs_without_package(exported / half, stock_class.__name__, batch, ["logits"],
                                                   tmp_path)
        assert printed == f"{stock_class.__name__} electra None"
        assert_same_outputs(outputs, original_outputs(stock_class, pair[half], batch, ["logits"]))


@pytest.mark.parametrize("model_type", ["xlm-roberta", "camembert"])
def test_the_other_roberta_types_map_in_and_back_weight_for_weight(model_type, tmp_path):
    from transformers import AutoModelForMaskedLM

    from hf_plm_ext.convert.bert import as_stock, macbert_from_stock
    from hf_plm_ext.modeling.macbert import MacBertForPreTraining

    torch.manual_seed(0)
    config = AutoConfig.for_model(model_type, vocab_size=120, max_position_embeddings=40, type_vocab_size=1,
                                  pad_token_id=1, **TINY)
    stock = AutoModelForMaskedLM.from_config(config).eval()
    stock.save_pretrained(tmp_path / "stock")
    carried = macbert_from_stock(MacBertForPreTraining, tmp_path / "stock", config).eval()
    assert carried.config.stock_model_type == model_type
    ids = torch.tensor([[0, 5, 6, 7, 2, 1, 1], [0, 8, 9, 10, 11, 12, 2]])
    with torch.no_grad():
        original = stock(ids, attention_mask=(ids != 1).long()).logits
        assert torch.equal(carried(ids, attention_mask=(ids != 1).long()).prediction_logits, original)
        back, left_out = as_stock(carried)
        assert type(back) is type(stock) and left_out
        assert torch.equal(back.eval()(ids, attention_mask=(ids != 1).long()).logits, original)


def test_random_words_of_a_bpe_or_wordpiece_vocabulary_are_word_starts(stock_roberta_dir, english_tokenizer_dir):
    from hf_plm_ext.data.correction_masking import DataCollatorForCorrectionMasking

    for folder, is_word_start in ((stock_roberta_dir, lambda token: token.startswith("Ġ")),
                                  (english_tokenizer_dir, lambda token: not token.startswith("##"))):
        tokenizer = AutoTokenizer.from_pretrained(folder)
        collator = DataCollatorForCorrectionMasking(tokenizer, None, mode="mask")
        pool = tokenizer.convert_ids_to_tokens(collator._random_pool.tolist())
        assert pool and all(map(is_word_start, pool)), folder
        assert not set(collator._random_pool.tolist()) & set(tokenizer.all_special_ids)


def test_a_stock_roberta_continues_from_a_token_store_with_its_own_pairs(stock_roberta_dir, tmp_path, capsys):
    """The corpus-scale path with a published checkpoint: `corpus prepare` with the checkpoint's own tokenizer
    (byte-level BPE), then `pretrain macbert --data`: the store's pairs are framed as RoBERTa frames them."""
    from types import SimpleNamespace

    from hf_plm_ext.data.token_store.datasets import sentence_pairs
    from hf_plm_ext.data.token_store.prepare import prepare_corpus

    store = tmp_path / "store"
    prepare_corpus(SimpleNamespace(corpus=[str(TEXT)], tokenizer=str(stock_roberta_dir), output=str(store), workers=1,
                                   executor="local", documents="lines", text_field="text", sentences=True,
                                   words=True, segmenter=None, piece_megabytes=None, slurm_partition=None,
                                   slurm_time=None), progress=lambda line: None)
    tokenizer = AutoTokenizer.from_pretrained(stock_roberta_dir)
    pairs = sentence_pairs(store, tokenizer, str(stock_roberta_dir), 64, 0.1, 0, 0.05)["train"]
    example = pairs[0]
    separators = [i for i, t in enumerate(example["input_ids"]) if t == tokenizer.sep_token_id]
    assert example["input_ids"][0] == tokenizer.cls_token_id and len(example["input_ids"]) <= 64
    assert len(separators) == 3 and separators[1] == separators[0] + 1 and set(example["token_type_ids"]) == {0}
    code, _, stderr = run_cli(["pretrain", "macbert", "--model", stock_roberta_dir, "--data", store, "--output",
                               tmp_path / "run", "--masking", "mask", "--max_seq_length", 64, "--max_eval_samples", 8,
                               *AT_LR_0], capsys)
    assert code == 0, stderr[-3000:]
    assert AutoConfig.from_pretrained(tmp_path / "run").stock_model_type == "roberta"
