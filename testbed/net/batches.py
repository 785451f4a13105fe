"""Running iproute2 batches (``ip -batch -``, ``tc -batch -``): several at once, each one's
failure reported with the line that failed."""

from __future__ import annotations

import contextlib
import subprocess

from testbed.core.errors import NetError


def _batch_error(tool: list[str], lines: list[str], stderr: str) -> NetError:
    detail = stderr.strip().splitlines()
    failed = ""
    for text in detail:
        if "Command failed -:" in text:
            with contextlib.suppress(ValueError, IndexError):
                failed = lines[int(text.rsplit(":", 1)[1]) - 1]
    where = f" at `{failed}`" if failed else ""
    return NetError(f"{' '.join(tool)} failed{where}: {' / '.join(detail[:3])}")


Batches = list[tuple[subprocess.Popen, list[str], list[str]]]


def run_batches(jobs: list[tuple[list[str], list[str]]]) -> None:
    """Run iproute2 batch jobs (argv, lines) in parallel; raise NetError on the first failure."""
    wait_batches(start_batches(jobs))


def start_batches(jobs: list[tuple[list[str], list[str]]]) -> Batches:
    """Start iproute2 batch jobs (argv, lines), all at once; :func:`wait_batches` finishes them."""
    procs = []
    for argv, lines in jobs:
        p = subprocess.Popen(
            [*argv, "-batch", "-"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        # Batches are a few KiB: they fit in the pipe buffer, so this never blocks.
        assert p.stdin is not None
        p.stdin.write("\n".join(lines) + "\n")
        p.stdin.close()
        procs.append((p, argv, lines))
    return procs


def wait_batches(procs: Batches) -> None:
    """Wait for started batches; raise NetError on the first failure."""
    errors = []
    for p, argv, lines in procs:
        assert p.stderr is not None
        stderr = p.stderr.read()
        if p.wait() != 0:
            errors.append(_batch_error(argv, lines, stderr))
    if errors:
        raise errors[0]
