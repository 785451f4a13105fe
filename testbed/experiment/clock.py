"""The clock origin of a run's dynamics (:class:`OriginClock`): the receiving end of the ranks'
announcements (traffic.announce: rank 0 sends "iteration K start UNIX MONO" on a UNIX datagram
socket in a private temporary directory). The origin is the first measured iteration's start
(``clock: workload``), or the moment the runner sets it (``clock: wall``: the run's start;
traffic without a workload: the traffic's start). It knows when the workload has ended, so no
wait lasts forever. The event runner (testbed.experiment.events) and the flows wait on it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from traffic.announce import parse

WAKE = 0.25  # s: longest sleep between two looks at the clock (an announcement wakes it sooner)
READ_POLL = 0.1  # s: the announcement reader's receive timeout (how fast close() is noticed)


@dataclass(frozen=True)
class Instant:
    unix: float
    mono: float

    @classmethod
    def now(cls) -> Instant:
        return cls(time.time(), time.monotonic())


class OriginClock:
    """The receiving end of the ranks' iteration announcements, and the clock origin.

    ``path`` is the socket the ranks' spec names (``events_socket``). With
    ``from_iterations`` (``clock: workload`` with a workload), the first announcement is the
    origin; otherwise the runner calls :meth:`set_origin`. :meth:`end` says the workload is over
    (the ranks' "end" announcement does too): waits return None from then on."""

    def __init__(self, from_iterations: bool = True) -> None:
        self.from_iterations = from_iterations
        # A private directory: a short path (sun_path holds 108 bytes; run directories can be
        # longer), reachable from every network namespace, removed by close().
        self.dir = tempfile.mkdtemp(prefix="testbed-events-")
        self.path = os.path.join(self.dir, "sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(READ_POLL)
        self.cond = threading.Condition()
        self.origin: Instant | None = None
        self.iterations: dict[int, Instant] = {}
        self.ended = False
        self._closed = False
        self._reader = threading.Thread(target=self._read, name="origin-clock", daemon=True)
        self._reader.start()

    def __enter__(self) -> OriginClock:
        return self

    def wake(self) -> None:
        """Wake every thread waiting on this clock (to see that it should stop)."""
        with self.cond:
            self.cond.notify_all()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self) -> None:
        while not self._closed:
            try:
                data = self.sock.recv(256)
            except TimeoutError:
                continue
            except OSError:  # closed under us
                return
            got = parse(data)
            if got is None:
                continue
            with self.cond:
                at = Instant(got.unix, got.mono)
                if got.kind == "end":
                    self.ended = True
                elif got.iteration is not None:
                    self.iterations.setdefault(got.iteration, at)
                    if self.origin is None and self.from_iterations:
                        self.origin = at
                self.cond.notify_all()

    def set_origin(self, at: Instant | None = None) -> Instant:
        """The origin is ``at`` (now by default) unless one is set already; the origin."""
        with self.cond:
            if self.origin is None:
                self.origin = at or Instant.now()
            self.cond.notify_all()
            return self.origin

    def end(self) -> None:
        """The workload is over: nothing more will be announced."""
        with self.cond:
            self.ended = True
            self.cond.notify_all()

    def _wait_for(self, get: Callable[[], Instant | None], timeout: float | None) -> Instant | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            while True:
                got = get()
                if got is not None or self.ended:
                    return got
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self.cond.wait(WAKE if left is None else min(left, WAKE))

    def wait_origin(self, timeout: float | None = None) -> Instant | None:
        """The origin; None when the workload ended without one or ``timeout`` passed."""
        return self._wait_for(lambda: self.origin, timeout)

    def wait_iteration(self, k: int, timeout: float | None = None) -> Instant | None:
        """When iteration ``k`` started; None when the workload ended before it or ``timeout``
        passed."""
        return self._wait_for(lambda: self.iterations.get(k), timeout)

    def wait_change(self, timeout: float) -> None:
        """Sleep up to ``timeout``; an announcement, a new origin or the end wake it sooner."""
        with self.cond:
            self.cond.wait(timeout)

    def close(self) -> None:
        self._closed = True
        self.end()
        with contextlib.suppress(OSError):
            self.sock.close()
        self._reader.join(timeout=2 * READ_POLL)
        shutil.rmtree(self.dir, ignore_errors=True)
