"""The end of ``testbed run``: where the results are and, on its own line, the command that makes
their report (``make demo`` ends there, so a new user learns the next step)."""

from __future__ import annotations

import shlex
from pathlib import Path

from testbed.cli import build_parser
from testbed.cli.run import print_ending


def test_run_ends_with_the_results_and_the_report_command(capsys):
    results = Path("results/quickstart-20250101-120000")
    print_ending(results)
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"results: {results}", f"report:  testbed report {results}"]
    argv = shlex.split(lines[-1].split(":", 1)[1])  # the command as printed parses as a command
    args = build_parser().parse_args(argv[1:])
    assert args.verb == "report" and args.results == [str(results)]


def test_a_path_with_a_space_is_quoted_and_markup_is_printed_as_written(capsys):
    results = Path("/tmp/my runs/[flat]-20250101")
    print_ending(results)
    last = capsys.readouterr().out.splitlines()[-1]
    assert shlex.split(last.split(":", 1)[1]) == ["testbed", "report", str(results)]
