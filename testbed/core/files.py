"""Files that are never seen half-written, and the one exclusive lock (``flock``).

Standard library only: the delay line (its stats file), the registry, results and the guest's
kernel cache use these.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path


def atomic_write(path: str | Path, write: Callable[[Path], object]) -> None:
    """Let ``write`` fill a temporary file beside ``path``, then rename it over ``path``: readers
    see the old content or the new, never a part (the rename is atomic within a filesystem).
    The temporary file is the writing thread's own: two threads of one process writing ``path``
    at once (a run records the processes its flows and its workload start) each rename theirs,
    the last one wins."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write(path, lambda p: p.write_text(text, encoding="utf-8"))


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    atomic_write(path, lambda p: p.write_bytes(data))


@contextlib.contextmanager
def locked(path: str | Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created, with its directory, if missing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
