"""Every Python block of README.md and docs/*.md runs as written, and so do the public API's docstring examples.

A document's blocks run in order, each in its own process, in one folder per document: a block may use what an
earlier block of its document saved (the README's tours load the ``my-macbert`` its first block makes). A comment
on the line before a block says how it runs: ``<!-- test: slow -->`` (it trains: ``make test-slow``) or
``<!-- test: torchrun -->`` (two processes under ``torchrun``; slow too)."""

import doctest
import importlib
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCK = re.compile(r"(?:^<!-- test: (?P<how>[a-z]+) -->\n)?^(?P<indent> *)```python\n(?P<code>.*?)^(?P=indent)```",
                   re.M | re.S)


def python_blocks(document: Path) -> list[tuple[str, str]]:
    """``[(how, code)]``: each Python block of ``document``, dedented, and how it runs (``""``: plainly)."""
    return [(match["how"] or "", textwrap.dedent(match["code"]))
            for match in BLOCK.finditer(document.read_text(encoding="utf-8"))]


def block_cases():
    for document in DOCUMENTS:
        for index, (how, code) in enumerate(python_blocks(document)):
            marks = [pytest.mark.slow] if how in ("slow", "torchrun") else []
            yield pytest.param(document, index, how, code, marks=marks,
                               id=f"{document.relative_to(REPO)}:{index + 1}")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """One working folder per document, shared by its blocks."""
    made = {}

    def folder(document):
        if document not in made:
            made[document] = tmp_path_factory.mktemp(document.stem)
        return made[document]

    return folder


def test_the_documents_have_python_blocks_and_the_markers_are_known():
    counts = {document.name: len(python_blocks(document)) for document in DOCUMENTS}
    assert counts["README.md"] >= 7 and sum(counts.values()) >= 13, counts
    text = "\n".join(document.read_text(encoding="utf-8") for document in DOCUMENTS)
    assert set(re.findall(r"<!-- test: ([a-z]+) -->", text)) <= {"slow", "torchrun"}


@pytest.mark.parametrize("document, index, how, code", list(block_cases()))
def test_a_documented_python_block_runs(document, index, how, code, folders):
    script = folders(document) / f"block_{index + 1}.py"
    script.write_text(code, encoding="utf-8")
    command = ([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", script.name]
               if how == "torchrun" else [sys.executable, script.name])
    run = subprocess.run(command, cwd=script.parent, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"{document.name} block {index + 1}:\n{code}\n{run.stderr[-4000:]}"


# the public API's modules whose docstrings hold examples (``>>>``); a test below keeps the list complete
DOCTEST_MODULES = sorted({
    ".".join(("hf_plm_ext.modeling" if path.is_relative_to(REPO / "modeling") else "hf_plm_ext",
              *path.relative_to(REPO / ("modeling" if path.is_relative_to(REPO / "modeling") else "hf_plm_ext"))
              .with_suffix("").parts))
    for root in ("hf_plm_ext", "modeling") for path in (REPO / root).rglob("*.py")
    if ">>> " in path.read_text(encoding="utf-8")})


def test_there_are_docstring_examples_to_run():
    assert len(DOCTEST_MODULES) >= 3, DOCTEST_MODULES


@pytest.mark.parametrize("module_name", DOCTEST_MODULES)
def test_the_docstring_examples_run(module_name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    module = importlib.import_module(module_name.removesuffix(".__init__"))
    results = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert results.attempted > 0 and results.failed == 0, results


def test_the_readme_is_a_guide_and_its_links_resolve():
    """At most 350 lines, with measurements in benchmarks/README.md and guides in docs/; every relative link of the
    README and the guides names a file that exists."""
    readme = REPO / "README.md"
    assert len(readme.read_text(encoding="utf-8").splitlines()) <= 350
    for document in DOCUMENTS:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", document.read_text(encoding="utf-8")):
            assert (document.parent / target).exists(), (document.name, target)
