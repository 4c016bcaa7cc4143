"""The arrows point one way (DESIGN.md): no two rooms of ``hf_plm_ext`` import each other, directly or round a loop,
counting the imports inside functions; ``checkpoints`` imports no wing; ``modeling`` imports nothing of the library;
nothing of the library imports the console package."""

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
    """``hf_plm_ext.eval.runner`` -> ``eval``: the sub-package or top-level module of the library it is in."""
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
    assert {"checkpoints", "data", "training", "eval", "hub", "convert", "adapters", "distill", "csc"} <= set(graph)
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
