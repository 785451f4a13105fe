"""Shared by the benchmarks: replace one script's section of benchmarks/RESULTS.md, and print a
table as it is measured while keeping a copy for it (``Tee``)."""

from __future__ import annotations

import io
import re
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
