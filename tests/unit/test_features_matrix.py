"""docs/features.md stays true: it is what scripts/features_matrix.py generates from the schema
and the tests, every refusal the schema's source can give sits in a cell, every refused cell is
refused by one of them (not by a slip of the probe scenario), and every test a cell links is a
test pytest collects."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


fm = _load(ROOT / "scripts" / "features_matrix.py", "features_matrix")
CITES = _load(Path(__file__).with_name("test_no_issue_numbers.py"), "_no_issue_numbers").CITES


@pytest.fixture(scope="module")
def cells() -> list:
    return fm.cells()


def test_the_page_is_what_the_generator_writes(cells) -> None:
    assert fm.DOC.read_text() == fm.render(cells), (
        "docs/features.md is out of date: run .venv/bin/python scripts/features_matrix.py"
    )


def test_every_refusal_in_the_schema_sits_in_the_matrix(cells) -> None:
    sites = fm.refusal_sites()
    given = [r.site for c in cells for r in c.refusals]
    missing = [s for s in sites if not any(s.covers(g) for g in given)]
    assert not missing, (
        "refusals no cell of the matrix gives (add a row or a column to "
        "scripts/features_matrix.py that reaches them):\n"
        + "\n".join(f"{s.file}:{s.first}: {s.text}" for s in missing)
    )


def test_every_refused_cell_is_refused_by_a_refusal_of_the_schema(cells) -> None:
    sites = fm.refusal_sites()
    slips = [
        f"{c.row.name} / {c.col.title}: {[(r.field, r.text) for r in c.refusals]}"
        for c in cells
        if c.refusals and not any(s.covers(r.site) for r in c.refusals for s in sites)
    ]
    assert not slips, "cells refused for a bad probe scenario, not a combination:\n" + "\n".join(
        slips
    )


def test_every_refusal_says_its_reason_and_cites_no_issue(cells) -> None:
    texts = {r.text for c in cells for r in c.refusals}
    assert texts
    for text in texts:
        assert not CITES.search(text), text
        assert len(text.split()) >= 5, f"too short to name a reason: {text!r}"


def test_each_linked_test_is_for_an_accepted_cell_of_the_matrix(cells) -> None:
    by = {(c.row.name, c.col.engine, c.col.machines, c.col.link): c for c in cells}
    for key, node in fm.TESTS.items():
        assert key in by, f"{key}: no such row and column"
        assert not by[key].refusals and not by[key].na, f"{node} is linked from a refused cell"
        assert node.startswith(("tests/live/", "tests/acceptance/")), node


def test_each_linked_test_is_collected() -> None:
    nodes = sorted(set(fm.TESTS.values()))
    files = sorted({n.partition("::")[0] for n in nodes})  # a missing node would stop it all
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    collected = {line.split("[")[0] for line in out.stdout.splitlines() if "::" in line}
    missing = [n for n in nodes if n not in collected]
    assert not missing, f"linked tests pytest does not collect: {missing}\n{out.stderr[-2000:]}"


def test_the_scan_finds_a_refusal_whose_reason_is_in_a_name(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "LATER = 'not across machines yet'\n"
        "def check(self):\n"
        "    why = f'is {LATER}'\n"
        "    if self.bad:\n"
        "        raise FieldError('faults', f'faults {why}')\n"
        "    raise FieldError('x', 'a timeout must be positive')\n"
    )
    sites = fm.refusal_sites(tmp_path)
    assert [(s.first, "not across machines yet" in s.text) for s in sites] == [(5, True)]
