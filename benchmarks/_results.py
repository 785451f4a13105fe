"""Shared by the benchmarks: replace one script's section of benchmarks/RESULTS.md, and print a
table as it is measured while keeping a copy for it (``Tee``; ``section`` does both)."""

from __future__ import annotations

import contextlib
import io
import math
import os
import platform
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

RESULTS = Path(__file__).with_name("RESULTS.md")
HEADER = (
    "# Benchmark results\n\n"
    "Each section is the latest output of the named script (`--write` replaces its section), run\n"
    "on the development VM (2 cores, 24 GiB, kernel without netem).\n"
)


def write_section(script: str, text: str) -> None:
    body = RESULTS.read_text() if RESULTS.exists() else HEADER
    begin, end = f"<!-- BEGIN {script} -->", f"<!-- END {script} -->"
    block = f"{begin}\n`benchmarks/{script}`:\n\n{text.rstrip()}\n{end}"
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.DOTALL)
    body = pattern.sub(lambda _: block, body) if pattern.search(body) else f"{body}\n{block}\n"
    RESULTS.write_text(body)


class Tee(io.TextIOBase):
    """Print as we go and keep a copy for RESULTS.md."""

    def __init__(self, *streams) -> None:
        self.streams = streams

    def write(self, text: str) -> int:
        for s in self.streams:
            s.write(text)
            s.flush()
        return len(text)


def heading(title: str, note: str = "") -> None:
    """A section's first lines: ``## title (kernel, date)`` and the load average before it ran,
    the core count and ``note``."""
    load = os.getloadavg()
    print(f"## {title} ({platform.release()}, {time.strftime('%Y-%m-%d')})\n")
    print(
        f"Load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} "
        f"cores). {note}".rstrip()
        + "\n"
    )


@contextlib.contextmanager
def section(script: str, write: bool, title: str, note: str = "") -> Iterator[None]:
    """Inside: what is printed goes to the terminal as it is measured, after the section's
    :func:`heading`; on leaving, with ``write``, it becomes ``script``'s section of RESULTS.md
    (not when the body raised: a broken run replaces nothing)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(Tee(sys.stdout, buf)):
        heading(title, note)
        yield
    if write:
        write_section(script, buf.getvalue())


def cell(summary: dict, key: str, fmt) -> str:
    """A summary value formatted for a table, "-" when missing or NaN."""
    v = summary.get(key)
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt(v)
