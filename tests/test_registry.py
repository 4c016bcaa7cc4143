import json
from pathlib import Path

import pytest
from huggingface_hub.errors import StrictDataclassError
import torch
from transformers import AutoModel, AutoModelForMaskedLM, BertModel

import hf_plm_ext
from hf_plm_ext import MacBertConfig, MacBertForMaskedLM, MacBertModel
from hf_plm_ext.registry import FAMILIES

from conftest import tiny_macbert_config

def test_save_pretrained_writes_code_and_complete_auto_map(tmp_path):
    model = MacBertForMaskedLM(tiny_macbert_config())
    model.save_pretrained(tmp_path)
    names = {p.name for p in tmp_path.iterdir()}
    assert {"configuration_macbert.py", "modeling_macbert.py", "model.safetensors", "config.json"} <= names
    assert not any(n.endswith((".bin", ".pt", ".pth", ".pkl")) for n in names)
    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    assert set(auto_map) == {"AutoConfig", *FAMILIES[MacBertConfig]}
    # each entry names a file written beside the weights and a class that file defines (what trust_remote_code reads)
    for auto_name, reference in auto_map.items():
        module, class_name = reference.split(".")
        assert f"\nclass {class_name}(" in (tmp_path / f"{module}.py").read_text(), reference
    assert auto_map["AutoModelForMaskedLM"] == "modeling_macbert.MacBertForMaskedLM"
    assert auto_map["AutoConfig"] == "configuration_macbert.MacBertConfig"


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
    # each name is the object it says: a class or function of that name, or one of the two tables
    assert [name for name in hf_plm_ext.__all__ if getattr(getattr(hf_plm_ext, name), "__name__", None) != name
            and name not in ("FAMILIES", "OBJECTIVES")] == []
    from hf_plm_ext.training.objectives import OBJECTIVES as objective_table

    assert hf_plm_ext.FAMILIES is FAMILIES and hf_plm_ext.OBJECTIVES is objective_table


README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_lists_every_family_s_auto_classes():
    readme = README.read_text()
    table = readme[readme.index("| `model_type` | Auto class | model class |"):]
    rows = [line for line in table.split("\n\n", 1)[0].splitlines()[2:]]
    assert rows == [f"| `{config.model_type}` | `{auto}` | `{model.__name__}` |"
                    for config, models in FAMILIES.items() for auto, model in models.items()]


def test_the_readme_use_it_snippets_run_and_the_folder_loads_without_hf_plm_ext(tmp_path):
    import subprocess
    import sys

    from conftest import fresh_python

    section = README.read_text().split("## Use it", 1)[1]
    make, load = [block.split("\n", 1)[1] for block in section.split("```python")[1:3]]
    load = load.split("```", 1)[0]
    made = subprocess.run([sys.executable, "-c", make.split("```", 1)[0]], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert made.returncode == 0, made.stderr[-3000:]
    loaded = fresh_python(load + "\nprint('LOADED', type(model).__name__, len(tokenizer))", cwd=tmp_path)
    assert loaded.returncode == 0, loaded.stderr[-3000:]  # was: the folder had no tokenizer
    assert "LOADED MacBertModel" in loaded.stdout
