"""Every dotted name the README and docs/*.md mention (``testbed.api.Network``,
``analysis.faults``, ``traffic.rank.RankContext``) exists: the longest prefix that is a module is
imported and the rest is looked up as attributes. A module that moved or a class that was renamed
fails here instead of leaving a reader with an ImportError.

``testbed.run_ranks(...)`` and ``testbed.links`` in the docs' examples are the pytest fixture
named ``testbed`` (a :class:`testbed.testing.ranktest.RankTestbed`), not the package: a name whose
first attribute is not in the package is looked up on that class instead.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# a package's name and at least one attribute; not part of a path or of a longer dotted name
NAME = re.compile(r"(?<![\w./-])(?:testbed|analysis|traffic)(?:\.[A-Za-z_]\w*)+")
FILE_SUFFIXES = {"py", "md", "yaml", "yml", "json", "csv", "html", "png", "txt", "toml"}


def _mentions() -> dict[str, list[str]]:
    """Each dotted name -> where it is mentioned (``docs/plugin.md:85``)."""
    found: dict[str, list[str]] = {}
    for path in DOCS:
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            for name in NAME.findall(line):
                if name.rsplit(".", 1)[1] in FILE_SUFFIXES:
                    continue
                found.setdefault(name, []).append(f"{path.relative_to(ROOT)}:{lineno}")
    return found


def _import_longest(parts: list[str]) -> tuple[object, list[str]]:
    """The longest importable module prefix of ``parts`` and the attribute names after it."""
    for n in range(len(parts), 0, -1):
        try:
            return importlib.import_module(".".join(parts[:n])), parts[n:]
        except ModuleNotFoundError as e:
            if e.name is None or not ".".join(parts[:n]).startswith(e.name):
                raise  # the module exists but imports something missing: a real failure
    raise ModuleNotFoundError(parts[0])


def _fixture_has(attr: str) -> bool:
    from testbed.testing.ranktest import RankTestbed

    return hasattr(RankTestbed, attr) or f"self.{attr}:" in inspect.getsource(RankTestbed)


def _resolves(name: str) -> str | None:
    """None when ``name`` resolves, else why not."""
    parts = name.split(".")
    try:
        obj, rest = _import_longest(parts)
    except Exception as e:
        return f"import failed: {type(e).__name__}: {e}"
    if parts[0] == "testbed" and len(rest) == len(parts) - 1 and not hasattr(obj, rest[0]):
        return None if len(rest) == 1 and _fixture_has(rest[0]) else f"no module {name}"
    for i, attr in enumerate(rest):
        if not hasattr(obj, attr):
            where = ".".join(parts[: len(parts) - len(rest) + i])
            return f"{where} has no attribute {attr!r}"
        obj = getattr(obj, attr)
    return None


def test_docs_mention_names_that_exist():
    mentions = _mentions()
    assert mentions, "no dotted names found: the pattern or the docs moved"
    failures = []
    for name, where in sorted(mentions.items()):
        why = _resolves(name)
        if why is not None:
            failures.append(f"{name} ({', '.join(where)}): {why}")
    assert not failures, "stale names in the docs:\n" + "\n".join(failures)


PATH = re.compile(r"(?<![\w./-])(?:testbed|analysis|traffic)/[\w/]+\.py\b")


def test_docs_mention_source_files_that_exist():
    missing = [
        f"{path.relative_to(ROOT)}:{lineno}: {p}"
        for path in DOCS
        for lineno, line in enumerate(path.read_text().splitlines(), 1)
        for p in PATH.findall(line)
        if not (ROOT / p).is_file()
    ]
    assert not missing, "the docs name source files that do not exist:\n" + "\n".join(missing)
