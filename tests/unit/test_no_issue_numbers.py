"""No user-facing text cites the project's issues ("issue 13", "(issue", "the issue asks"): a
reader has no tracker to look them up in, so the text says the reason itself. Scanned: README.md,
docs/, benchmarks/RESULTS.md, scenarios/*.yaml and every text file of testbed/ (its messages,
help, docstrings and comments). Upstream references such as ``gloo#520`` are not the project's and
stay."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CITES = re.compile(
    r"\bissues?\s*#?\d+"  # issue 13, issues 4 and 5, issue #7
    r"|\(issue\b"  # (issue 13), (issue: ...)
    r"|\bthe\s+issue\b"  # "the issue asks ...", also across a line break
    r"|\b(?:ticket|task|bug|PR)\s*#\d+"  # ticket #3
    r"|(?<![\w/&])#\d+\b",  # a bare #12 (not gloo#520, not &#39;)
    re.IGNORECASE,
)
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".txt", ".toml", ".cfg"}


def _files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "benchmarks" / "RESULTS.md"]
    files += sorted((ROOT / "docs").rglob("*.md"))
    files += sorted((ROOT / "scenarios").glob("*.yaml"))
    files += sorted(p for p in (ROOT / "testbed").rglob("*") if p.suffix in TEXT_SUFFIXES)
    return [p for p in files if p.is_file()]


def test_no_text_cites_an_issue_number():
    files = _files()
    assert len(files) > 50, "too few files: the layout moved"
    hits = []
    for path in files:
        text = path.read_text(errors="replace")
        for m in CITES.finditer(text):  # the whole text: a citation may wrap
            lineno = text.count("\n", 0, m.start()) + 1
            hits.append(f"{path.relative_to(ROOT)}:{lineno}: {' '.join(m[0].split())!r}")
    assert not hits, "texts citing an issue instead of saying the reason:\n" + "\n".join(hits)


def test_the_pattern_catches_citations_and_spares_the_rest():
    cited = ("see issue 13", "(issue 13: the buffer)", "Issues 4 and 5", "as the\nissue asks")
    for text in cited:
        assert CITES.search(text), text
    spared = ("issues its verdict", "gloo#520's lazy connect", "an all-reduce issued", "# 1..64")
    for text in spared:
        assert not CITES.search(text), text
