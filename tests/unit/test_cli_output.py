"""CLI output off a terminal (CI logs, pipes): full-width tables and data printed as written."""

from __future__ import annotations

import subprocess
import sys

from rich.table import Table

from testbed.cli import DESCRIPTION
from testbed.cli.console import OFF_TERMINAL_WIDTH, escape, make_console


def test_tables_keep_their_natural_width_when_stdout_is_not_a_terminal(monkeypatch, capsys):
    monkeypatch.delenv("COLUMNS", raising=False)
    console = make_console()  # capsys: stdout is not a terminal
    assert console.width == OFF_TERMINAL_WIDTH
    t = Table()
    for name in ("workload.algorithms", "collective", "algorithm", "p50", "p95", "predicted"):
        t.add_column(name)
    cells = ("[hierarchical]", "all_reduce", "hierarchical", "1.234 s", "1.456 s", "1.111 s")
    t.add_row(*(escape(c) for c in cells))
    console.print(t)
    text = capsys.readouterr().out
    assert "…" not in text
    for c in cells:
        assert c in text


def test_interpolated_values_are_printed_literally(capsys):
    console = make_console()
    label = "workload.algorithms=[hierarchical]"
    console.print(f"[green]ok[/] p000-r0 {escape(label)}")
    console.print(f"[red]failed[/] {escape('see [/tmp/x] and [c10d]')}")  # was a MarkupError
    out = capsys.readouterr().out
    assert label in out and "[/tmp/x]" in out and "[c10d]" in out


def test_help_says_what_the_tool_does_in_one_line():
    r = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "--help"], capture_output=True, text=True, check=True
    )
    assert DESCRIPTION.split()[0] in r.stdout
    assert "one small function per verb" not in r.stdout
