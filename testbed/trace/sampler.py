"""The one periodic sampler thread: every trace that polls the kernel (tcp_info, qdisc statistics,
the machine's CPU) is a :class:`PeriodicSampler` that only says how to open, sample and close.

One drift rule for all of them (docs/traces.md, "Sampling"): ticks on the grid ``t0 + k *
period`` of the monotonic clock, overrun ticks skipped and counted in ``missed_ticks`` (never a
burst of catch-up samples), and a thread that never raises (an exception becomes a message in
``errors``). ``sample_seconds`` holds each sample's thread CPU time: the cost of tracing. The grid
and the waits are on an injectable :class:`~testbed.core.clock.Clock` (the machine's by default).
"""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Self

from testbed.core.clock import SYSTEM, Clock


class PeriodicSampler:
    """Calls :meth:`sample` every ``period`` seconds in one daemon thread (see the module's
    drift rule). Subclasses override :meth:`open` (before the thread starts; may raise, then
    :meth:`close` runs and the error propagates), :meth:`sample` and :meth:`close` (after the
    thread ended). Use as a context manager, or ``start()`` / ``stop()``. ``clock`` keeps the
    grid's time and the waits between samples."""

    thread_name = "sampler"
    immediate = True  # the first sample at the start (False: one period after it)

    def __init__(self, period: float, *, clock: Clock = SYSTEM) -> None:
        if period <= 0:
            raise ValueError(f"period must be > 0 seconds, got {period}")
        self.period = period
        self.clock = clock
        self.errors: list[str] = []
        self.missed_ticks = 0
        self.sample_seconds: list[float] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None

    # -- what a sampler does ---------------------------------------------------------------
    def open(self) -> None:
        """Acquire what sampling needs (sockets, a baseline); runs in the caller's thread."""

    def sample(self) -> None:
        """Take one sample; runs in the sampler thread."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what :meth:`open` acquired; runs after the thread ended."""

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"{type(self).__name__} already started")
        try:
            self.open()
        except BaseException:
            self.close()
            raise
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, 2 * self.period))
            if self._thread.is_alive():
                self.error("sampler thread did not stop within its timeout")
                return  # what it samples is still in use: leave it to the daemon thread
        self.close()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def error(self, message: str) -> None:
        if message not in self.errors:
            self.errors.append(message)

    # -- the thread ------------------------------------------------------------------------
    def _wait(self, seconds: float) -> bool:
        """Wait ``seconds`` on the clock; whether :meth:`stop` ended the wait."""
        with self._cond:
            return self.clock.wait_for(self._cond, lambda: self._stopping, seconds)

    def _run(self) -> None:
        tick = self.clock.now()
        if not self.immediate:
            tick += self.period
            if self._wait(self.period):
                return
        while True:
            t0 = time.thread_time()
            try:
                self.sample()
            except Exception as exc:  # the thread must survive anything and keep its period
                self.error(f"sampler: {type(exc).__name__}: {exc}")
            self.sample_seconds.append(time.thread_time() - t0)
            now = self.clock.now()
            tick, missed = next_tick(tick, now, self.period)
            self.missed_ticks += missed
            if self._wait(tick - now):
                return


def next_tick(tick: float, now: float, period: float) -> tuple[float, int]:
    """The drift rule: after a sample due at ``tick`` that ended at ``now``, the next grid point
    still ahead of ``now`` and how many grid points were skipped on the way."""
    following = tick + period
    if now < following:
        return following, 0
    # overran: stay on the grid, skip (and count) what was missed; never a catch-up burst
    missed = int((now - following) // period) + 1
    return following + missed * period, missed
