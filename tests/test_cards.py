import json

import pytest
from huggingface_hub import ModelCard

from hf_plm_ext.errors import UserInputError
from hf_plm_ext.hub.cards import render_card

from conftest import run_cli


def test_card_of_a_fine_tuned_checkpoint_carries_its_results(tmp_path, tiny_classifier_dir, shared_data, capsys):
    out = tmp_path / "mrpc"
    code, _, stderr = run_cli(["finetune", "glue", "--task", "mrpc", "--model", tiny_classifier_dir, "--output", out,
                               "--data-dir", shared_data / "glue/MRPC", "--max_steps", 2, "--max_train_samples", 32,
                               "--max_seq_length", 32, "--disable_tqdm", "true", "--report_to", "none"], capsys)
    assert code == 0, stderr
    card = render_card(out, repo_id="someone/tiny-macbert-mrpc", language="en", license="apache-2.0",
                       datasets=["nyu-mll/glue"])

    reparsed = ModelCard(str(card))  # the metadata block parses back, model-index included
    metadata = reparsed.data.to_dict()
    assert metadata["library_name"] == "transformers" and metadata["pipeline_tag"] == "text-classification"
    assert {"hf-plm-ext", "macbert", "custom_code"} <= set(metadata["tags"])
    assert metadata["language"] == "en" and metadata["license"] == "apache-2.0"
    measured = json.loads((out / "eval_results.json").read_text())["results"][0]["metrics"]
    carded = {r.metric_type: r.metric_value for r in reparsed.data.eval_results}
    assert carded == {name: round(value, 4) for name, value in measured.items()}
    assert all(r.dataset_type == "glue" and r.dataset_config == "mrpc" and r.dataset_split == "dev"
               for r in reparsed.data.eval_results)
    body = reparsed.text
    assert 'AutoModelForSequenceClassification.from_pretrained("someone/tiny-macbert-mrpc", trust_remote_code=True)' \
        in body
    assert "| layers / hidden size / heads | 2 / 32 / 2 |" in body
    assert "| max_steps | 2 |" in body and "Cui, Yiming" in body


def test_card_of_a_folder_that_is_no_checkpoint_is_refused_and_any_model_type_gets_a_card(tmp_path):
    with pytest.raises(UserInputError, match="not a checkpoint folder"):
        render_card(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "macbert",\n "hidden_size": }')
    with pytest.raises(UserInputError, match=r"config.json:2: not valid JSON"):
        render_card(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "gpt9", "architectures": ["Gpt9ForCausalLM"]}')
    card = render_card(tmp_path, repo_id="someone/gpt9")  # no family template: the generic card
    assert "A `gpt9` checkpoint (`Gpt9ForCausalLM`)" in card.text and card.data.pipeline_tag == "text-generation"
    assert 'AutoModelForCausalLM.from_pretrained("someone/gpt9")' in card.text
