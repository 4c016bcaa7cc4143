"""CONTRIBUTING.md's "Adding a model family", done as a newcomer would: a toy family's folder, its README rows and
its row in the tester's table, in a copy of the checkout, then the family tester and the README check on it.

The copy: the library's rooms are links to this checkout's, ``modeling/`` holds links to the families and the new
folder, and the test files are copied (they find the README beside them). Nothing else is edited, so the test also
proves the count CONTRIBUTING.md gives: two existing files."""

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

TOY_CONFIGURATION = '''
from huggingface_hub.dataclasses import strict
from transformers import BertConfig


@strict
class ToyConfig(BertConfig):
    model_type = "toy-walkthrough"

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        family_auto_map = getattr(type(self), "_family_auto_map", None)
        if family_auto_map and getattr(self, "auto_map", None) is None:
            self.auto_map = dict(family_auto_map)
'''

TOY_MODELING = '''
import inspect

from transformers import BertForMaskedLM, BertForSequenceClassification, BertModel, BertPreTrainedModel

from .configuration_toy_walkthrough import ToyConfig


def refuse_unknown_keywords(model, args, kwargs):
    known = set(inspect.signature(type(model).forward).parameters) | set(model.passed_on_keywords)
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise TypeError(f"{type(model).__name__}.forward() got unexpected arguments {unknown}")


class ToyPreTrainedModel(BertPreTrainedModel):
    config_class = ToyConfig
    accepts_loss_kwargs = False
    passed_on_keywords = ("output_attentions", "output_hidden_states", "return_dict", "past_key_values", "cache",
                          "use_cache")

    def post_init(self):
        super().post_init()
        self.register_forward_pre_hook(refuse_unknown_keywords, with_kwargs=True)


class ToyModel(ToyPreTrainedModel, BertModel):
    config_class = ToyConfig


class ToyForMaskedLM(ToyPreTrainedModel, BertForMaskedLM):
    config_class = ToyConfig


class ToyForSequenceClassification(ToyPreTrainedModel, BertForSequenceClassification):
    config_class = ToyConfig
'''

TOY_INIT = '''
from .configuration_toy_walkthrough import ToyConfig
from .modeling_toy_walkthrough import ToyForMaskedLM, ToyForSequenceClassification, ToyModel

AUTO_CLASSES = {
    "AutoConfig": ToyConfig,
    "AutoModel": ToyModel,
    "AutoModelForMaskedLM": ToyForMaskedLM,
    "AutoModelForSequenceClassification": ToyForSequenceClassification,
}
PEFT_TARGETS = "bert"
BOTTLENECK_TARGETS = "bert"
'''

TESTER_FACTORY = '''def tiny_toy_walkthrough(**overrides):
    from hf_plm_ext.modeling.toy_walkthrough import ToyConfig

    return ToyConfig(**{**dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                               intermediate_size=37, max_position_embeddings=64), **overrides})


'''
TESTER_ROW = '''    "toy-walkthrough": Tiny(tiny_toy_walkthrough),
'''

README_ROWS = ["| `toy-walkthrough` | `AutoModel` | `ToyModel` |",
               "| `toy-walkthrough` | `AutoModelForMaskedLM` | `ToyForMaskedLM` |",
               "| `toy-walkthrough` | `AutoModelForSequenceClassification` | `ToyForSequenceClassification` |"]


def link_checkout(root: Path) -> None:
    """The library as it is installed (``modeling/`` and ``hub_cards/`` inside it), its rooms linked, the family
    folders linked one by one so that a new one can sit beside them."""
    library = root / "hf_plm_ext"
    library.mkdir()
    for entry in (REPO / "hf_plm_ext").iterdir():
        if entry.name != "__pycache__":
            (library / entry.name).symlink_to(entry)
    (library / "hub_cards").symlink_to(REPO / "hub_cards")
    (library / "modeling").mkdir()
    for entry in (REPO / "modeling").iterdir():
        if entry.name != "__pycache__":
            (library / "modeling" / entry.name).symlink_to(entry)
    (root / "tests").mkdir()
    for entry in (REPO / "tests").glob("*.py"):
        shutil.copy(entry, root / "tests" / entry.name)
    (root / "tests" / "fixtures").symlink_to(REPO / "tests" / "fixtures")
    shutil.copy(REPO / "README.md", root / "README.md")
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")


def add_the_toy_family(root: Path) -> list[str]:
    """The walkthrough's steps; returns the existing files it edited."""
    folder = root / "hf_plm_ext" / "modeling" / "toy_walkthrough"
    folder.mkdir()
    (folder / "configuration_toy_walkthrough.py").write_text(TOY_CONFIGURATION)
    (folder / "modeling_toy_walkthrough.py").write_text(TOY_MODELING)
    (folder / "__init__.py").write_text(TOY_INIT)
    readme = root / "README.md"
    table_head = "| `model_type` | Auto class | model class |\n|---|---|---|\n"
    text = readme.read_text()
    table_end = text.index("\n\n", text.index(table_head))
    readme.write_text(text[:table_end] + "\n" + "\n".join(README_ROWS) + text[table_end:])
    tester_table = root / "tests" / "family_common.py"
    text = tester_table.read_text()
    factories_end = text.index("def text_hidden_size")
    text = text[:factories_end] + TESTER_FACTORY + text[factories_end:]
    table_start = text.index("TINY_CONFIGS = {\n") + len("TINY_CONFIGS = {\n")
    tester_table.write_text(text[:table_start] + TESTER_ROW + text[table_start:])
    return ["README.md", "tests/family_common.py"]


def test_a_new_family_needs_its_folder_and_two_edits_and_passes_the_family_tester(tmp_path):
    link_checkout(tmp_path)
    edited = add_the_toy_family(tmp_path)
    assert len(edited) <= 2
    env = {**os.environ, "PYTHONPATH": str(tmp_path),
           "HF_PLM_EXT_SHARED_DATA": os.environ.get("HF_PLM_EXT_SHARED_DATA", str(REPO.parent / "shared" / "data"))}
    probe = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import hf_plm_ext
        from transformers import AutoConfig, AutoModelForMaskedLM
        from peft import LoraConfig, get_peft_model
        from hf_plm_ext import BottleneckConfig, ToyConfig, ToyForMaskedLM
        assert hf_plm_ext.__file__.startswith(%r), hf_plm_ext.__file__
        config = AutoConfig.for_model("toy-walkthrough", vocab_size=50, hidden_size=16, num_hidden_layers=2,
                                      num_attention_heads=2, intermediate_size=20)
        model = AutoModelForMaskedLM.from_config(config)
        assert type(model) is ToyForMaskedLM
        assert set(config.auto_map) == {"AutoConfig", *hf_plm_ext.FAMILIES[ToyConfig]}, config.auto_map
        get_peft_model(model, LoraConfig())  # PEFT's defaults from PEFT_TARGETS
        get_peft_model(AutoModelForMaskedLM.from_config(config), BottleneckConfig.from_preset("houlsby"))
        print("ok")
        """ % str(tmp_path))], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert probe.returncode == 0 and probe.stdout.strip() == "ok", probe.stderr[-3000:]
    tester = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:warnings",
                             "tests/test_family_common.py", "-k", "toy-walkthrough",
                             "tests/test_registry.py::test_the_readme_lists_every_family_s_auto_classes",
                             "tests/test_upstream_transformers.py::test_every_family_row_has_a_common_test_case"],
                            cwd=tmp_path, env=env, capture_output=True, text=True)
    summary = tester.stdout.strip().splitlines()[-1]
    assert tester.returncode == 0 and "failed" not in summary, tester.stdout[-5000:]
    assert int(summary.split(" passed")[0].split()[-1]) >= 40, summary  # the whole tester ran on the toy
