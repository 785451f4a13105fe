"""What a new user reads first: ``testbed --version``, and ``--help`` of every verb: each
positional says what it is, ``exec`` explains its ``--``, and options whose default matters show
it. The parser is walked as built, so a verb added later is held to the same rules."""

from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
import sys

import pytest

from testbed.cli import build_parser

# Defaults that need no mention: the option is off, empty or unset unless given.
SILENT_DEFAULTS = (None, False, True, [], ())


def _verbs() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert len(subs) == 1
    return dict(subs[0].choices)


def _help(verb: str) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "testbed.cli", verb, "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )
    return r.stdout


def test_version_prints_the_package_version_and_exits_0():
    r = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "--version"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    version = importlib.metadata.version("multicluster-testbed")
    assert r.stdout.strip() == f"testbed {version}"


def test_every_positional_of_every_verb_has_help():
    verbs = _verbs()
    assert {"run", "exec", "report", "compare", "vm"} <= set(verbs)
    missing = [
        f"testbed {verb} {action.dest}"
        for verb, parser in verbs.items()
        for action in parser._actions
        if not action.option_strings and not action.help
    ]
    assert not missing, "positionals without help: " + ", ".join(missing)


def test_exec_help_explains_the_separator():
    text = " ".join(_help("exec").split())
    assert "testbed exec NAME HOST -- ARGV..." in text
    assert "--" in text.split("ARGV...", 1)[1]  # and says what it is for


def test_selfcheck_help_shows_its_default():
    action = next(a for a in _verbs()["run"]._actions if "--selfcheck" in a.option_strings)
    assert action.default == 1.0
    assert "(default: 1.0)" in " ".join(_help("run").split())


def test_every_option_with_a_default_that_matters_shows_it():
    missing = []
    for verb, parser in _verbs().items():
        for action in parser._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction):
                continue
            if any(action.default is d or action.default == d for d in SILENT_DEFAULTS):
                continue
            if "default" not in (action.help or ""):
                missing.append(f"testbed {verb} {action.option_strings[0]} ({action.default!r})")
    assert not missing, "options whose default --help does not show: " + ", ".join(missing)


@pytest.mark.parametrize("verb", ["run", "exec", "vm", "report", "compare", "up"])
def test_help_of_each_verb_renders(verb: str):
    assert f"usage: testbed {verb}" in _help(verb)
