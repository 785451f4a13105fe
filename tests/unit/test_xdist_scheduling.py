"""The suite's two pytest-xdist workers keep each group on one worker (tests/conftest.py): run
two small files of this tier in two workers and read which worker ran each test. pytest-xdist's
own loadgroup silently stopped grouping under pytest 9 (the same file ran on both workers at
once), so this runs the installed versions, as `make test` does."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
FILES = ["unit/test_pathpin.py", "unit/test_wall_offset.py"]


def test_each_group_runs_on_one_worker() -> None:
    pytest.importorskip("xdist")
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v",
         "-p", "no:cacheprovider", *(f"tests/{f}" for f in FILES)],
        cwd=TESTS.parent, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:]
    workers: dict[str, set[str]] = {}
    for worker, nodeid in re.findall(r"\[(gw\d+)\].*?PASSED (tests/\S+)", out.stdout):
        workers.setdefault(nodeid.split("::")[0], set()).add(worker)
    assert sorted(workers) == [f"tests/{f}" for f in FILES], out.stdout[-2000:]
    assert all(len(w) == 1 for w in workers.values()), workers
