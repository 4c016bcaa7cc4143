"""The console script itself: help that answers without the library, and help text without noise (issue 20)."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hf_plm_ext_cli import main as cli_main
from hf_plm_ext_cli import tokenizer as cli_tokenizer

LIGHT_HELP = [["--help"], ["tokenizer", "train", "--help"], ["eval", "lm", "--help"], ["export", "electra", "--help"],
              ["push", "--help"], ["demo", "--help"], ["no-such-command"], ["tokenizer", "train"]]

PROBE = """
import json, sys
from hf_plm_ext_cli.main import main
try:
    main(json.loads(sys.argv[1]))
except SystemExit:
    pass
heavy = sorted(name for name in ("torch", "transformers", "hf_plm_ext") if name in sys.modules)
print("HEAVY " + json.dumps(heavy))
"""


@pytest.mark.parametrize("argv", LIGHT_HELP, ids=[" ".join(a) for a in LIGHT_HELP])
def test_help_and_usage_errors_do_not_import_the_library_torch_or_transformers(argv):
    completed = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argv)], capture_output=True, text=True,
                               timeout=120)
    heavy = json.loads(completed.stdout.rsplit("HEAVY ", 1)[1])
    assert heavy == []


def test_the_tokenizer_kinds_of_the_command_are_the_library_s():
    from hf_plm_ext.data.tokenizer_training import KINDS

    assert cli_tokenizer.KINDS == KINDS


def _help_of(argv, capsys) -> str:
    with pytest.raises(SystemExit):
        cli_main.main([*argv, "--help"])
    return capsys.readouterr().out


def _training_commands():
    from hf_plm_ext.eval.tasks import TASKS
    from hf_plm_ext.training.objectives import OBJECTIVES

    return [["pretrain", name] for name in OBJECTIVES] + [["finetune", name] for name in TASKS]


def test_training_help_names_each_flag_once_and_no_default_twice_or_none(capsys):
    for argv in _training_commands():
        text = _help_of(argv, capsys)
        options = re.findall(r"^  (--\S+(?:, --\S+)*)", text, flags=re.MULTILINE)
        for line in options:
            names = [part.split()[0] for part in line.split(", ")]
            assert len(names) == len(set(names)), (argv, line)  # was "--tgt_len, --tgt-len, --tgt-len"
        flat = " ".join(text.split())
        assert "(default: None)" not in flat, argv
        assert not re.search(r"\(default: [^)]*\) \(default:", flat), argv  # "(default: plain softmax) (default: None)"


def test_the_top_level_help_reads_as_text_not_a_docstring(capsys):
    text = _help_of([], capsys)
    assert "``" not in text and "hf-plm-ext" in text
    for command in cli_main.COMMANDS:
        assert command.NAME in text


def test_a_sub_command_names_its_objective_no_flag_switches_it(capsys):
    with pytest.raises(SystemExit) as stopped:
        cli_main.main(["pretrain", "mlm", "--objective", "macbert", "--corpus", "x", "--tokenizer", "y",
                       "--output", "z"])
    assert stopped.value.code == 2 and "--objective" in capsys.readouterr().err


def test_setuptools_finds_every_package_folder_for_the_wheel():
    """setup.py's discovery (modeling/ installs as hf_plm_ext.modeling): an editable install finds any package, a
    wheel only those setuptools was given (adapters and distill were once missing from a hand-written list)."""
    import json
    import subprocess
    import sys

    from conftest import REPO

    given = subprocess.run([sys.executable, "-c", "import json, runpy, setuptools; setuptools.setup = lambda **kw: "
                            "print(json.dumps(sorted(kw['packages']))); runpy.run_path('setup.py')"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout
    found = set()
    for root, prefix in (("hf_plm_ext", "hf_plm_ext"), ("modeling", "hf_plm_ext.modeling"),
                         ("hf_plm_ext_cli", "hf_plm_ext_cli"), ("hub_cards", "hf_plm_ext.hub_cards")):
        for init in (REPO / root).rglob("__init__.py"):
            parts = init.parent.relative_to(REPO / root).parts
            found.add(".".join((prefix, *parts)))
    assert json.loads(given) == sorted(found)


CHECKOUT = Path(cli_main.__file__).resolve().parents[1]
DOCUMENTS = [CHECKOUT / "README.md", *sorted((CHECKOUT / "docs").glob("*.md"))]


def readme_command_lines() -> list[str]:
    """Every whole ``hf-plm-ext`` line of the code blocks of the README and the guides in docs/ (continuations
    joined)."""
    import shlex

    lines = []
    text = "\n".join(document.read_text(encoding="utf-8") for document in DOCUMENTS)
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            words = shlex.split(line.strip(), comments=True)
            if words[:1] == ["hf-plm-ext"] and "..." not in words:  # (a line with "..." is a fragment)
                lines.append(" ".join(shlex.quote(word) for word in words[1:]))
    return lines


def split_line(argv):
    """``(command words, positionals, fixed-arity options, variable-arity options)`` of a parsed command line, by
    the innermost command parser's actions."""
    import argparse

    parser, rest = cli_main.build_parser(argv), list(argv)
    command = []
    while True:
        commands = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if commands is None:
            break
        command.append(rest[0])
        parser, rest = commands.choices[rest[0]], rest[1:]
    options = {flag: action for action in parser._actions for flag in action.option_strings}
    positionals, fixed, variable, index = [], [], [], 0
    while index < len(rest):
        word = rest[index]
        action = options.get(word.split("=", 1)[0])
        if action is None:
            positionals.append(word)
            index += 1
            continue
        taken = [word]
        index += 1
        if "=" not in word and action.nargs != 0:
            while index < len(rest) and not (rest[index].startswith("--") and rest[index].split("=")[0] in options):
                taken.append(rest[index])
                index += 1
                if action.nargs in (None, "?"):
                    break
        (variable if action.nargs in ("+", "*") else fixed).append(taken)
    return command, positionals, fixed, variable


README_LINES = readme_command_lines()


def test_the_readme_has_command_lines_for_every_command():
    documented = {line.split()[0] for line in README_LINES}
    assert documented >= {"tokenizer", "pretrain", "finetune", "benchmark", "distill", "eval", "correct", "convert",
                          "export", "k-adapter", "push"}, documented


@pytest.mark.parametrize("line", README_LINES)
def test_every_readme_command_line_parses_with_its_options_anywhere(line):
    """Each documented line parses as written; then with its options after its positionals, and with those of
    fixed arity before them: the same arguments (``correct MODEL --json TEXT`` was an argparse error)."""
    import shlex

    argv = shlex.split(line)

    def parsed(words):
        args, unrecognized = cli_main.parse(cli_main.build_parser(words), words)
        assert unrecognized == [], (words, unrecognized)
        return {name: value for name, value in vars(args).items() if name != "handler"}

    expected = parsed(argv)
    command, positionals, fixed, variable = split_line(argv)
    flat = lambda groups: [word for group in groups for word in group]  # noqa: E731
    assert parsed(command + positionals + flat(fixed) + flat(variable)) == expected
    assert parsed(command + flat(fixed) + positionals + flat(variable)) == expected


def test_correct_takes_options_between_its_texts_and_a_double_dash_ends_them():
    def parsed(words):
        args, unrecognized = cli_main.parse(cli_main.build_parser(words), words)
        return args, unrecognized

    args, unrecognized = parsed(["correct", "model", "--json", "text one", "text two"])
    assert (args.model, args.texts, args.json, unrecognized) == ("model", ["text one", "text two"], True, [])
    args, _ = parsed(["correct", "--batch-size", "4", "model", "one", "--json", "two"])
    assert (args.texts, args.batch_size, args.json) == (["one", "two"], 4, True)
    args, _ = parsed(["correct", "model", "--json", "--", "-starts with a dash", "--json"])
    assert (args.texts, args.json) == (["-starts with a dash", "--json"], True)
