"""The arrows point one way (CONTRIBUTING.md, "Design rules"): no two rooms of ``hf_plm_ext`` import each other,
directly or round a loop, counting the imports inside functions; ``checkpoints`` imports no wing; ``modeling``
imports nothing of the library; nothing of the library imports the console package."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "hf_plm_ext"
MODELING = PACKAGE.parent / "modeling"


def imported_modules(path: Path) -> set[str]:
    """Every absolute module an import statement in ``path`` names, at any depth (inside functions too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def room_of(module: str) -> str | None:
    """``hf_plm_ext.eval.readers`` -> ``eval``: the sub-package or top-level module of the library it is in."""
    parts = module.split(".")
    return parts[1] if parts[0] == "hf_plm_ext" and len(parts) > 1 else None


def room_graph() -> dict[str, set[str]]:
    graph = {}
    for path in PACKAGE.rglob("*.py"):
        if path == PACKAGE / "__init__.py":  # the public API imports every room
            continue
        room = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        graph.setdefault(room, set()).update(
            other for other in map(room_of, imported_modules(path)) if other not in (None, room))
    return graph


def loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The rooms that reach themselves through others (strongly connected groups of more than one room)."""
    found = []
    for start in sorted(graph):
        stack, seen = [[start]], set()
        while stack:
            path = stack.pop()
            for other in sorted(graph.get(path[-1], ())):
                if other == start:
                    found.append(path)
                elif other not in seen:
                    seen.add(other)
                    stack.append(path + [other])
    return found


def test_no_two_rooms_import_each_other_even_round_a_loop():
    graph = room_graph()
    assert {"checkpoints", "data", "training", "eval", "finetuning", "hub", "convert", "adapters", "distill",
            "csc"} <= set(graph)
    assert "finetuning" not in graph["eval"]  # eval scores; fine-tuning uses it, not the other way
    assert loops(graph) == []


def test_the_ground_floor_imports_no_wing():
    assert room_graph()["checkpoints"] <= {"errors", "files"}


def test_the_family_folders_import_nothing_of_the_library_and_the_library_nothing_of_the_console():
    for path in MODELING.rglob("*.py"):
        assert not {m for m in imported_modules(path) if m.split(".")[0] in ("hf_plm_ext", "hf_plm_ext_cli")}, path
    for path in PACKAGE.rglob("*.py"):
        assert not {m for m in imported_modules(path) if m.split(".")[0] == "hf_plm_ext_cli"}, path


def test_the_loop_finder_finds_a_loop():
    assert loops({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"], ["b", "c", "a"],
                                                                           ["c", "a", "b"]]


def test_spelling_correction_is_one_room():
    """CSC's data, corrector, metrics and recipe are defined in ``hf_plm_ext/csc`` alone (its model class and
    pipeline are the macbert family's)."""
    names = {"SpellingCorrector", "SpellingErrorGenerator", "ConfusionSet", "csc_scores", "finetune_csc",
             "evaluate_csc", "read_spelling_pairs"}
    rooms = {path.relative_to(PACKAGE).parts[0] for path in PACKAGE.rglob("*.py")
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names}
    assert rooms == {"csc"}


def test_pyproject_s_lower_bounds_are_the_floors_the_suite_is_proven_on():
    """Every dependency's lower bound in pyproject.toml is its pin in floors.txt (what `make test-floor` installs and
    tests), and every pin bounds a dependency: a floor is stated only where it was run."""
    import tomllib

    from packaging.requirements import Requirement

    root = Path(__file__).parents[1]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    requirements = [Requirement(line) for line in
                    [*project["dependencies"], *(r for extra in project["optional-dependencies"].values()
                                                 for r in extra)]]
    floors = {Requirement(line).name.lower().replace("_", "-"): str(next(iter(Requirement(line).specifier)).version)
              for line in (root / "floors.txt").read_text().splitlines() if line and not line.startswith("#")}
    lower = {}
    for requirement in requirements:
        bounds = [spec.version for spec in requirement.specifier if spec.operator == ">="]
        if bounds:
            lower[requirement.name.lower().replace("_", "-")] = bounds[0]
    assert lower == floors


def test_the_top_level_names_its_api_explicitly_and_the_type_checkers_see_the_same_names():
    """``IMPORT_STRUCTURE`` (what ``hf_plm_ext.__getattr__`` loads on first use) and the ``TYPE_CHECKING`` block
    (what editors and type checkers read) name the same objects from the same modules."""
    import hf_plm_ext

    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    guarded = next(node for node in tree.body if isinstance(node, ast.If) and getattr(node.test, "id", "") ==
                   "TYPE_CHECKING")
    seen = {(node.module, alias.name) for node in guarded.body for alias in node.names}
    named = {(module, name) for module, names in hf_plm_ext.IMPORT_STRUCTURE.items() for name in names}
    assert {pair for pair in seen if pair[1] != "*"} == named
    star = {module.rsplit(".", 1)[1] for module, name in seen if name == "*"}
    assert star == {folder.__name__.rsplit(".", 1)[1] for folder in hf_plm_ext.family_folders()}
    for module, name in named:
        assert getattr(hf_plm_ext, name) is getattr(__import__(module, fromlist=[name]), name)


def test_a_family_s_config_from_the_top_level_loads_no_other_room(tmp_path):
    """``from hf_plm_ext import MacBertConfig`` registers the families and PEFT's methods and imports nothing else of
    the library: not distillation, spelling correction, fine-tuning or the Trainer."""
    import subprocess
    import sys

    probe = ("import sys; from hf_plm_ext import MacBertConfig; import transformers; "
             "from transformers import AutoConfig; assert AutoConfig.for_model('macbert').__class__ is MacBertConfig; "
             "from peft.utils import PeftType; assert hasattr(PeftType, 'BOTTLENECK'); "
             "print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('hf_plm_ext.')}), "
             "'transformers.trainer' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    rooms, trainer_loaded = " ".join(out[:-1]), out[-1]
    assert rooms == "['adapters', 'modeling', 'registry']" and trainer_loaded == "False", out


def test_the_old_fine_tuning_paths_work_with_a_deprecation_warning():
    import warnings

    from hf_plm_ext.finetuning import finetune
    from hf_plm_ext.finetuning.steps import build_classifier

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from hf_plm_ext.eval.runner import build_classifier as old_build_classifier, finetune as old_finetune
    assert (old_finetune, old_build_classifier) == (finetune, build_classifier)
    assert [w.category for w in caught] == [DeprecationWarning] * 2
    assert "hf_plm_ext.finetuning.recipe.finetune" in str(caught[1].message) or \
        "hf_plm_ext.finetuning.recipe.finetune" in str(caught[0].message)
