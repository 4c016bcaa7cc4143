import json
from pathlib import Path

import pytest
from huggingface_hub.errors import StrictDataclassError
import torch
import transformers
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, BertModel

import hf_plm_ext
from hf_plm_ext import MacBertConfig, MacBertForMaskedLM, MacBertModel
from hf_plm_ext.registry import FAMILIES, family_auto_map

from conftest import fresh_python, tiny_macbert_config

FAMILY_ROWS = [(config_class, auto_name, model_class)
               for config_class, models in FAMILIES.items() for auto_name, model_class in models.items()]


@pytest.mark.parametrize("config_class,auto_name,model_class", FAMILY_ROWS,
                         ids=[f"{c.model_type}-{a}" for c, a, _ in FAMILY_ROWS])
def test_auto_classes_resolve_every_registered_class(config_class, auto_name, model_class):
    assert type(AutoConfig.for_model(config_class.model_type)) is config_class
    config = tiny_macbert_config() if config_class is MacBertConfig else config_class()
    model = getattr(transformers, auto_name).from_config(config)
    assert type(model) is model_class
    assert model_class._auto_class == auto_name


def test_save_pretrained_writes_code_and_complete_auto_map(tmp_path):
    model = MacBertForMaskedLM(tiny_macbert_config())
    model.save_pretrained(tmp_path)
    names = {p.name for p in tmp_path.iterdir()}
    assert {"configuration_macbert.py", "modeling_macbert.py", "model.safetensors", "config.json"} <= names
    assert not any(n.endswith((".bin", ".pt", ".pth", ".pkl")) for n in names)
    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    assert auto_map == family_auto_map(MacBertConfig)
    assert set(auto_map) == {"AutoConfig", *FAMILIES[MacBertConfig]}


RELOAD = """
import json, sys, torch
from transformers import AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification
path, ids = sys.argv[1], torch.tensor(json.loads(sys.argv[2]))
out = {}
for auto in (AutoModel, AutoModelForMaskedLM):
    model = auto.from_pretrained(path, trust_remote_code=True).eval()
    assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
    with torch.no_grad():
        result = model(input_ids=ids)
    out[auto.__name__] = (result.last_hidden_state if auto is AutoModel else result.logits).tolist()
classifier = AutoModelForSequenceClassification.from_pretrained(path, trust_remote_code=True)
out["classifier_class"] = type(classifier).__name__
print("RESULT " + json.dumps(out))
"""


def test_remote_code_loads_in_a_process_without_the_package(tmp_path):
    torch.manual_seed(0)
    model = MacBertForMaskedLM(tiny_macbert_config()).eval()
    model.save_pretrained(tmp_path / "ckpt")
    ids = torch.randint(5, 1500, (2, 9))
    with torch.no_grad():
        logits = model(input_ids=ids).logits
        hidden = model.bert(input_ids=ids).last_hidden_state

    proc = fresh_python("import hf_plm_ext\n", cwd=tmp_path)
    assert proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr  # the package really is unavailable

    proc = fresh_python(RELOAD, tmp_path / "ckpt", json.dumps(ids.tolist()), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert torch.equal(torch.tensor(result["AutoModelForMaskedLM"]), logits)
    assert torch.equal(torch.tensor(result["AutoModel"]), hidden)
    assert result["classifier_class"] == "MacBertForSequenceClassification"


def test_in_process_load_needs_no_trust_remote_code(tmp_path):
    model = MacBertForMaskedLM(tiny_macbert_config()).eval()
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert type(reloaded) is MacBertForMaskedLM  # the installed class, not a copy of the code
    assert reloaded.cls.predictions.decoder.weight is reloaded.bert.embeddings.word_embeddings.weight
    ids = torch.randint(5, 1500, (2, 7))
    with torch.no_grad():
        assert torch.equal(reloaded(input_ids=ids).logits, model(input_ids=ids).logits)
    assert type(AutoModel.from_pretrained(tmp_path)) is MacBertModel


@pytest.mark.parametrize("bad,field", [
    (dict(hidden_size=30, num_attention_heads=4), "hidden_size"),
    (dict(num_hidden_layers=0), "num_hidden_layers"),
    (dict(hidden_dropout_prob=1.0), "hidden_dropout_prob"),
    (dict(pad_token_id=5000), "pad_token_id"),
])
def test_config_rejects_bad_fields_by_name(bad, field):
    with pytest.raises(StrictDataclassError, match=field):  # what transformers' own configs raise
        tiny_macbert_config(**bad)


def test_bert_weights_load_into_macbert_unchanged(minilm_dir):
    bert = BertModel.from_pretrained(minilm_dir).eval()
    macbert = MacBertModel.from_pretrained(minilm_dir).eval()
    ids = torch.randint(1000, 20000, (2, 12))
    with torch.no_grad():
        assert torch.equal(bert(input_ids=ids).last_hidden_state, macbert(input_ids=ids).last_hidden_state)


def test_package_exports_families():
    assert hf_plm_ext.MacBertConfig.model_type in [c.model_type for c in FAMILIES]


def test_the_public_api_is_at_the_top_level_and_in_the_readme():
    from hf_plm_ext import DataCollatorForCorrectionMasking, OBJECTIVES, SegmentMemoryTrainer, build_sop_pairs
    from hf_plm_ext.data.correction_masking import DataCollatorForCorrectionMasking as collator
    from hf_plm_ext.training.segment_memory import SegmentMemoryTrainer as trainer

    assert DataCollatorForCorrectionMasking is collator and SegmentMemoryTrainer is trainer
    assert callable(build_sop_pairs) and {"mlm", "macbert", "electra", "transfo-xl"} <= set(OBJECTIVES)
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    api = readme[readme.index("## Python API"):]
    missing = [name for name in hf_plm_ext.__all__ if f"`{name}`" not in api]
    assert missing == [], f"public names the README's Python API section does not list: {missing}"
    assert all(getattr(hf_plm_ext, name) is not None for name in hf_plm_ext.__all__)
