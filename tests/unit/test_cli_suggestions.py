"""Every ``testbed VERB ... --option`` the project tells a user to type exists: in the messages
and docstrings of testbed/ (backticked, as messages quote commands), and in README.md's and
docs/*.md's text and shell blocks. A suggested option the verb lacks sends the user to an
argparse error instead of the fix."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from testbed.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
QUOTED = re.compile(r"`(?:sudo )?testbed ([a-z][a-z-]*)([^`]*)`")
# a command line in a shell block: "$ ", "node-a$ ", "sudo ", ".venv/bin/" before it
SHELL = re.compile(r"^\s*(?:[\w.-]*\$ )?(?:sudo )?(?:\.venv/bin/)?testbed ([a-z][a-z-]*)(.*)$")
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


def _options() -> dict[str, set[str]]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    top = {o for a in parser._actions for o in a.option_strings}
    return {
        verb: top | {o for a in p._actions for o in a.option_strings}
        for verb, p in sub.choices.items()
    }


def _commands() -> list[tuple[str, str, str]]:
    """(where, verb, the rest of the command line up to its ``--``) of every suggested command."""
    found = []
    for path in sorted((ROOT / "testbed").rglob("*.py")):
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            for verb, rest in QUOTED.findall(line):
                found.append((f"{path.relative_to(ROOT)}:{lineno}", verb, rest))
    for path in DOCS:
        fenced = False
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            where = f"{path.relative_to(ROOT)}:{lineno}"
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            if fenced and (m := SHELL.match(line)):
                found.append((where, m[1], m[2].split("#")[0]))
            elif not fenced:
                found.extend((where, verb, rest) for verb, rest in QUOTED.findall(line))
    return [(where, verb, rest.split(" -- ")[0]) for where, verb, rest in found]


def test_suggested_commands_use_verbs_and_options_that_exist():
    options = _options()
    commands = _commands()
    assert len(commands) > 20, "no suggested commands found: the patterns or the docs moved"
    wrong = []
    for where, verb, rest in commands:
        if verb not in options:
            wrong.append(f"{where}: testbed {verb}: no such verb")
            continue
        wrong += [
            f"{where}: testbed {verb} has no {o}"
            for o in OPTION.findall(rest)
            if o not in options[verb]
        ]
    assert not wrong, "commands that do not exist as written:\n" + "\n".join(wrong)
