import json

import torch
from transformers import AutoModel, AutoModelForPreTraining, BertModel

from hf_plm_ext import MacBertForPreTraining, MacBertModel
from hf_plm_ext.convert import export_as_bert

from conftest import tiny_macbert_config


def test_pretraining_loss_is_correction_mlm_plus_sop():
    torch.manual_seed(0)
    model = MacBertForPreTraining(tiny_macbert_config()).eval()
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    ids = torch.randint(5, 1500, (3, 10))
    labels = torch.full_like(ids, -100)
    labels[:, 4] = ids[:, 4]
    order = torch.tensor([0, 1, 1])
    out = model(input_ids=ids, labels=labels, sentence_order_label=order)
    mlm = torch.nn.functional.cross_entropy(out.prediction_logits[:, 4], ids[:, 4])
    sop = torch.nn.functional.cross_entropy(out.sop_logits, order)
    assert torch.allclose(out.mlm_loss, mlm) and torch.allclose(out.sop_loss, sop)
    assert torch.allclose(out.loss, mlm + sop)
    assert out.sop_logits.shape == (3, 2) and out.prediction_logits.shape == (3, 10, 1500)
    assert model(input_ids=ids).loss is None


def test_bert_checkpoint_initialises_macbert_and_exports_back(tmp_path, minilm_dir):
    bert = BertModel.from_pretrained(minilm_dir).eval()
    macbert = MacBertForPreTraining.from_pretrained(minilm_dir).eval()  # heads fresh, encoder BERT's
    ids = torch.randint(1000, 20000, (2, 12))
    with torch.no_grad():
        expected = bert(input_ids=ids).last_hidden_state
        assert torch.equal(macbert.bert(input_ids=ids).last_hidden_state, expected)
    export_as_bert(macbert, tmp_path / "bert")
    config = json.loads((tmp_path / "bert" / "config.json").read_text())
    assert config["model_type"] == "bert" and "auto_map" not in config
    assert not list((tmp_path / "bert").glob("*.py"))  # a plain checkpoint: no custom code
    exported = AutoModel.from_pretrained(tmp_path / "bert").eval()
    assert type(exported) is BertModel
    with torch.no_grad():
        assert torch.equal(exported(input_ids=ids).last_hidden_state, expected)


def test_pretraining_model_round_trips(tmp_path):
    model = MacBertForPreTraining(tiny_macbert_config()).eval()
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForPreTraining.from_pretrained(tmp_path).eval()
    assert type(reloaded) is MacBertForPreTraining
    ids = torch.randint(5, 1500, (2, 7))
    with torch.no_grad():
        assert torch.equal(reloaded(input_ids=ids).sop_logits, model(input_ids=ids).sop_logits)
    assert type(AutoModel.from_pretrained(tmp_path)) is MacBertModel
