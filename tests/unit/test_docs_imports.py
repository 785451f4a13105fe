"""Every ``import X`` / ``from X import Y`` in a code block of README.md or docs/*.md imports for
real: a reader who copies an example gets no ImportError. The example user project
(examples/wan-allreduce, whose package is ``mycomms``) is on the path, as its own pytest
settings put it. A line whose optional extra is not installed here (torch: the ``ranks`` extra;
mininet: Debian's package) is skipped, so the test runs on a laptop install too."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
EXAMPLE_PROJECT = ROOT / "examples" / "wan-allreduce"
IMPORT = re.compile(r"^\s*(?:from\s+[\w.]+\s+import\s+\S|import\s+[\w.]+)")
OPTIONAL = ("torch", "mininet")


def _imports() -> list[tuple[str, str]]:
    """(where, statement) of every import line in the docs' fenced code blocks."""
    found = []
    for path in DOCS:
        lines = path.read_text().splitlines()
        fenced, i = False, 0
        while i < len(lines):
            line = lines[i]
            if line.lstrip().startswith("```"):
                fenced = not fenced
            elif fenced and IMPORT.match(line):
                where, statement = f"{path.relative_to(ROOT)}:{i + 1}", line.split("#")[0].strip()
                while statement.count("(") > statement.count(")"):  # from x import (\n a,\n)
                    i += 1
                    statement += " " + lines[i].split("#")[0].strip()
                found.append((where, statement))
            i += 1
    return found


def test_docs_code_blocks_import_what_exists(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE_PROJECT))
    statements = _imports()
    assert any("testbed.api" in s for _, s in statements), "no imports found: the docs moved?"
    failures = []
    for where, statement in statements:
        try:
            exec(compile(statement, where, "exec"), {})
        except ModuleNotFoundError as e:
            top = (e.name or "").split(".")[0]
            if top in OPTIONAL and importlib.util.find_spec(top) is None:
                continue  # an optional extra this install lacks
            failures.append(f"{where}: {statement}: {type(e).__name__}: {e}")
        except Exception as e:
            failures.append(f"{where}: {statement}: {type(e).__name__}: {e}")
    assert not failures, "imports in the docs that fail:\n" + "\n".join(failures)
