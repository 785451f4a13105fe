"""README.md's Commands table is one markdown table (a blank line inside ends it, and the rows
after it render as text) and lists exactly the verbs of the real parser."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from testbed.cli import build_parser

README = Path(__file__).resolve().parents[2] / "README.md"
VERB = re.compile(r"^\|\s*`testbed ([a-z][a-z-]*)")


def _section(title: str) -> list[str]:
    lines = README.read_text().splitlines()
    start = lines.index(f"## {title}") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def _table(lines: list[str]) -> list[str]:
    """The section's table rows; fails when table lines come after the first table ends."""
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    last = first
    while last < len(lines) and lines[last].startswith("|"):
        last += 1
    stray = [line[:60] for line in lines[last:] if line.startswith("|")]
    assert not stray, f"the Commands table is broken (a blank line inside?) before: {stray}"
    return lines[first:last]


def test_commands_table_is_one_table_listing_every_verb():
    rows = _table(_section("Commands"))
    assert rows[0].startswith("| command |") and set(rows[1]) <= set("|-: ")
    listed = [m[1] for row in rows[2:] if (m := VERB.match(row))]
    assert len(listed) == len(rows) - 2, "a row that does not start with `testbed VERB`"
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    verbs = set(sub.choices)
    assert not verbs - set(listed), f"verbs missing from README's Commands: {verbs - set(listed)}"
    assert not set(listed) - verbs, f"README lists verbs that do not exist: {set(listed) - verbs}"
    assert len(listed) == len(set(listed)), "a verb listed twice"
