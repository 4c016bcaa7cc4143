"""transformers' and PEFT's own common testers, from the source releases of the installed versions.

The wheels carry no tests; each project's source distribution on the package index carries its common testers
(transformers: ``tests/test_modeling_common.py`` and ``tests/test_configuration_common.py``; PEFT:
``tests/testing_common.py`` and ``tests/testing_utils.py``). ``python tests/upstream.py`` (run by ``make install``)
downloads the two source releases once and unpacks those files into the virtual environment, under
``upstream-tests/``, as the packages ``transformers_tests`` and ``peft_tests``; the tests import them from there and
never download.

transformers' source release lacks three modules its common tester imports: ``tests/generation/test_utils.py``
(``GenerationTesterMixin``), ``tests/exporters/test_export.py`` (``ExportTesterMixin``) and
``tests/utils/test_configuration_utils.py`` (``config_common_kwargs``). The first two are written here as empty
mixins: the generation checks they hold run in ``test_family_common.py``, written against transformers' ``generate``.
The third is written here as a dict of ``PreTrainedConfig``'s common fields, each set away from its default.
PEFT's tester imports ``diffusers`` for its Stable Diffusion tests only, none of which runs here; a module
that says so stands in for it when diffusers is not installed.
"""

import importlib
import importlib.metadata
import importlib.util
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(sys.prefix) / "upstream-tests"
SOURCES = {
    "transformers": ("transformers_tests", ["tests/test_modeling_common.py", "tests/test_configuration_common.py"]),
    "peft": ("peft_tests", ["tests/testing_common.py", "tests/testing_utils.py"]),
}

HEADER = '"""Not in the source release; written by hf-plm-ext\'s tests/upstream.py."""\n\n'
# the modules transformers' tester imports that its source release lacks: {path: text}
MISSING_MODULES = {
    "generation/test_utils.py": HEADER + "\nclass GenerationTesterMixin:\n    pass\n",
    "exporters/test_export.py": HEADER + "\nclass ExportTesterMixin:\n    pass\n",
    # PreTrainedConfig's common fields, each away from its default: ConfigTester checks that every config keeps them
    "utils/test_configuration_utils.py": HEADER + "config_common_kwargs = " + repr({
        "return_dict": False, "output_hidden_states": True, "output_attentions": True, "dtype": "float16",
        "chunk_size_feed_forward": 5, "architectures": ["BertModel"], "id2label": {0: "label"},
        "label2id": {"label": "0"}, "problem_type": "regression", "tokenizer_class": "BertTokenizer",
        "is_encoder_decoder": True, "cross_attention_hidden_size": 128, "add_cross_attention": True}) + "\n",
}


def version_folder(package: str) -> Path:
    return ROOT / f"{package}-{importlib.metadata.version(package)}"


def fetch(package: str) -> Path:
    """Unpack ``package``'s testers (at the installed version) under ``ROOT``; nothing happens if they are there."""
    folder = version_folder(package)
    if folder.is_dir():
        return folder
    module_name, members = SOURCES[package]
    version = folder.name.removeprefix(f"{package}-")
    with tempfile.TemporaryDirectory() as download:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                        f"{package}=={version}", "-d", download], check=True)
        (archive,) = Path(download).glob("*.tar.gz")
        partial = folder.with_name(folder.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        target = partial / module_name
        target.mkdir(parents=True)
        with tarfile.open(archive) as source:
            prefix = source.getnames()[0].split("/")[0]
            for member in members:
                data = source.extractfile(f"{prefix}/{member}").read()
                (target / Path(member).name).write_bytes(data)
    (target / "__init__.py").write_text("")
    if package == "transformers":
        for relative, text in MISSING_MODULES.items():
            path = target / relative
            path.parent.mkdir(exist_ok=True)
            (path.parent / "__init__.py").touch()
            path.write_text(text)
    partial.rename(folder)
    return folder


def load(package: str, module: str):
    """``transformers_tests.<module>`` or ``peft_tests.<module>``, from the unpacked source release."""
    folder = version_folder(package)
    assert folder.is_dir(), (f"{package}'s common testers are not unpacked at {folder}: run `make install` "
                             "(or `python tests/upstream.py`)")
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    if package == "peft" and importlib.util.find_spec("diffusers") is None:
        sys.modules.setdefault("diffusers", _diffusers_stand_in())
    return importlib.import_module(f"{SOURCES[package][0]}.{module}")


def _diffusers_stand_in():
    import types

    def refuse(*args, **kwargs):
        raise RuntimeError("diffusers is not installed: PEFT's Stable Diffusion tests are not run by hf-plm-ext")

    stand_in = types.ModuleType("diffusers")
    stand_in.StableDiffusionPipeline = type("StableDiffusionPipeline", (), {"from_pretrained": staticmethod(refuse)})
    return stand_in


if __name__ == "__main__":
    for name in SOURCES:
        print(f"{name}'s common testers: {fetch(name)}")
