"""The one time source of the threads that keep time (the periodic sampler, the event runner and
its origin clock, the readiness handshake, the ranks' announcements): :class:`Clock`.

Code that waits takes a ``Clock`` (default :data:`SYSTEM`: the monotonic and unix clocks, real
waits), so a test can hand it a :class:`ManualClock` instead: time that moves only when the test
says, which makes every grid point, deadline and lateness exact and independent of how busy the
machine is. Every wait names what ends it early (a predicate, a readable descriptor), so a manual
clock can tell a thread that waits for time from one that is about to run.
"""

from __future__ import annotations

import math
import select
import threading
import time
from collections.abc import Callable
from typing import Protocol

Ready = Callable[[], bool]


class Clock(Protocol):
    """Monotonic seconds, unix seconds, and waits measured on them."""

    def now(self) -> float:
        """Monotonic seconds (``CLOCK_MONOTONIC``: comparable across the machine's processes)."""
        ...

    def wall(self) -> float:
        """Unix seconds."""
        ...

    def wait_for(self, cond: threading.Condition, ready: Ready, timeout: float | None) -> bool:
        """With ``cond``'s lock held: wait until ``ready()`` (checked when ``cond`` is notified)
        or ``timeout`` seconds passed (None: no limit); ``ready()`` at the end."""
        ...

    def readable(self, fd: int, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for ``fd`` to be readable; whether it is."""
        ...

    def sleep(self, seconds: float) -> None: ...

    def spin_until(self, t: float) -> None:
        """Return at monotonic time ``t``, not before, as precisely as this clock can."""
        ...


class SystemClock:
    """The machine's clocks and real waits."""

    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def wait_for(self, cond: threading.Condition, ready: Ready, timeout: float | None) -> bool:
        return cond.wait_for(ready, timeout)

    def readable(self, fd: int, timeout: float) -> bool:
        return bool(select.select([fd], [], [], max(0.0, timeout))[0])

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    def spin_until(self, t: float) -> None:
        while time.monotonic() < t:  # a sleep alone wakes up late on a busy machine
            pass


SYSTEM: Clock = SystemClock()


def wall_offset(clock: Clock = SYSTEM, tries: int = 3) -> float:
    """``wall - now`` (unix minus monotonic seconds), never larger than the true offset, so a
    unix time stamp converted with it (``stamp - offset``) is never earlier than it was.

    Each try brackets one unix reading between two monotonic ones and keeps the later one: a
    preemption between the readings then errs late by its length, never early (the naive
    ``wall() - now()`` errs early by it, which made a delay line release a packet early on a busy
    host). The tightest of ``tries`` brackets is kept.
    """
    best_gap, offset = math.inf, 0.0
    for _ in range(max(1, tries)):
        before = clock.now()
        wall = clock.wall()
        after = clock.now()
        if after - before < best_gap:
            best_gap, offset = after - before, wall - after
    return offset


POLL_REAL = 0.001  # s of real time between two looks of a manual clock's waiter at its wake-up
SETTLE_REAL = 60.0  # s of real time ManualClock.run_to waits for its threads before it gives up


class ManualClock:
    """Time that moves only when told: :meth:`advance` / :meth:`run_to` from the test's thread,
    or (``autojump``) each wait of a single-threaded caller at once to its own deadline.

    A thread that waits on it registers its deadline and what would wake it sooner, and looks at
    both every :data:`POLL_REAL` seconds of real time; :meth:`run_to` moves time from one waiting
    thread's deadline to the next, each time once every thread it drives waits with nothing but
    time to wake it. The machine's speed changes how long that takes, never what happens."""

    def __init__(
        self, start: float = 1000.0, *, unix_offset: float = 1.7e9, autojump: bool = False
    ):
        self._now = start
        self.unix_offset = unix_offset
        self.autojump = autojump
        self._lock = threading.Condition()
        self._waiters: dict[threading.Thread, tuple[float, Ready]] = {}
        self._seen: set[threading.Thread] = set()  # every thread that waited on this clock

    # -- the Clock protocol ------------------------------------------------------------------
    def now(self) -> float:
        return self._now

    def wall(self) -> float:
        return self._now + self.unix_offset

    def wait_for(self, cond: threading.Condition, ready: Ready, timeout: float | None) -> bool:
        return self._wait(ready, self._deadline(timeout), cond.wait)

    def readable(self, fd: int, timeout: float) -> bool:
        def ready() -> bool:
            return bool(select.select([fd], [], [], 0)[0])

        return self._wait(
            ready, self._deadline(timeout), lambda s: bool(select.select([fd], [], [], s)[0])
        )

    def sleep(self, seconds: float) -> None:
        self._wait(lambda: False, self._deadline(max(0.0, seconds)), time.sleep)

    def spin_until(self, t: float) -> None:
        self._wait(lambda: False, t, time.sleep)  # wakes at t exactly

    # -- the test's side ---------------------------------------------------------------------
    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` at once (waiters whose deadline passed wake up)."""
        with self._lock:
            self._now += seconds
            self._lock.notify_all()

    def run_to(self, t: float, threads: int = 1) -> None:
        """Let time run to ``t``: wait until every other thread that waited on this clock (at
        least ``threads`` of them, to let a new thread get to its first wait) waits with nothing
        to wake it but time or has ended, move to the earliest of their deadlines, and again,
        until the next deadline is past ``t``; then the clock reads ``t``."""
        while True:
            due = self._settled(threads)
            with self._lock:
                if due > t:
                    self._now = max(self._now, t)
                    return
                self._now = max(self._now, due)
                self._lock.notify_all()

    def waiting(self) -> int:
        """How many threads wait on this clock now."""
        with self._lock:
            return len(self._waiters)

    # -- the mechanism -----------------------------------------------------------------------
    def _settled(self, threads: int) -> float:
        """Once ``threads`` other threads waited here and every one still alive waits with
        nothing but time to wake it: the earliest deadline (infinity when none waits)."""
        me = threading.current_thread()
        give_up = time.monotonic() + SETTLE_REAL
        with self._lock:
            while True:
                others = self._seen - {me}
                waiters = [w for th, w in self._waiters.items() if th is not me]
                alive = sum(1 for th in others if th.is_alive())
                if (
                    len(others) >= threads
                    and len(waiters) == alive
                    and all(d > self._now and not ready() for d, ready in waiters)
                ):
                    return min((d for d, _ in waiters), default=math.inf)
                if time.monotonic() > give_up:
                    raise TimeoutError(
                        f"ManualClock: {len(waiters)} of {alive} threads waiting at "
                        f"{self._now} after {SETTLE_REAL:g} s of real time"
                    )
                self._lock.wait(POLL_REAL)

    def _deadline(self, timeout: float | None) -> float:
        return math.inf if timeout is None else self._now + timeout

    def _wait(self, ready: Ready, deadline: float, block: Callable[[float], object]) -> bool:
        """Wait until ``ready()`` or the clock reads ``deadline``; ``block(s)`` waits up to ``s``
        real seconds for what makes ``ready()`` true."""
        if ready():
            return True
        if self.autojump and deadline < math.inf:
            block(0)  # a wake-up already there counts
            if not ready():
                with self._lock:
                    self._now = max(self._now, deadline)
            return ready()
        me = threading.current_thread()
        with self._lock:
            self._seen.add(me)
            self._waiters[me] = (deadline, ready)
            self._lock.notify_all()
        try:
            while not ready():
                if self._now >= deadline:
                    return False
                block(POLL_REAL)
            return True
        finally:
            with self._lock:
                del self._waiters[me]
                self._lock.notify_all()
