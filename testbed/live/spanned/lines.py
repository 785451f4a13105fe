"""A process's stdout read line by line on another machine, for a launcher that reads it here
(the command kind's metric lines).

On the process's machine the agent reads its stdout (:class:`LineReader`): each line goes to the
process's log there, as a launcher on one machine writes it, and is kept until the driver takes
it. On the driver, :class:`RemoteLines` is the pipe the launcher reads: its ``readline`` gives
the lines the agent kept, fetched through the process's proxy, and ``b""`` once the agent's
reader saw the pipe's end. Its lines are in the log already (the log comes back with the
process's other files), so the launcher must not write them there again (``logged``).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

POLL = 0.05  # s between two fetches while no line is waiting


class LineReader:
    """Every line of ``pipe`` appended to ``log`` and kept with the time it was read (this
    machine's clock), until :meth:`take`; a daemon thread, until the pipe's end."""

    def __init__(self, pipe: IO[bytes], log: Path) -> None:
        self.pipe, self.log = pipe, log
        self.kept: list[tuple[float, bytes]] = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        with self.pipe, open(self.log, "ab", buffering=0) as out:
            for line in iter(self.pipe.readline, b""):
                out.write(line)
                with self.lock:
                    self.kept.append((time.time(), line))

    def take(self) -> tuple[list[tuple[float, bytes]], bool]:
        """The lines read since the last call, and whether the pipe has ended (then no line
        comes after these)."""
        ended = not self.thread.is_alive()  # first: a line read before the end is kept by now
        with self.lock:
            got, self.kept = self.kept, []
        return got, ended


class RemoteLines:
    """The driver's side: a pipe-like object of the lines an agent's :class:`LineReader` kept.
    ``fetch`` brings what the agent has (the proxy's sync: it calls :meth:`add`)."""

    logged = True  # the agent wrote these lines into the process's log already

    def __init__(self, fetch: Callable[[], None]) -> None:
        self.fetch = fetch
        self.waiting: collections.deque[bytes] = collections.deque()
        self.ended = False

    def add(self, lines: list[tuple[float, bytes]], ended: bool) -> None:
        self.waiting.extend(line for _, line in lines)
        self.ended = self.ended or ended

    def readline(self) -> bytes:
        while not self.waiting:
            if self.ended:
                return b""
            try:
                self.fetch()
            except Exception:  # the agent is gone (the testbed was torn down): no more lines
                self.ended = True
            if not self.waiting and not self.ended:
                time.sleep(POLL)
        return self.waiting.popleft()

    def close(self) -> None:
        self.ended = True

    def __enter__(self) -> RemoteLines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
