"""The clock origin of a run's dynamics (:class:`OriginClock`): the receiving end of the ranks'
announcements (traffic.announce: rank 0 sends "iteration K start UNIX MONO" on a UNIX datagram
socket in a private temporary directory: testbed.core.inbox). The origin is the first measured
iteration's start (``clock: workload``), or the moment the runner sets it (``clock: wall``: the
run's start; traffic without a workload: the traffic's start). It knows when the workload has
ended, so no wait lasts forever. The event runner (testbed.experiment.events) and the flows wait on
it. Its time and waits are a :class:`~testbed.core.clock.Clock` (``source``: the machine's by
default), so a test can move them by hand; every change is counted, so a wait knows what woke it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from testbed.core.clock import SYSTEM, Clock
from testbed.core.inbox import DatagramInbox
from traffic.announce import Announcement, parse

WAKE = 0.25  # s: longest sleep between two looks at the clock (an announcement wakes it sooner)


@dataclass(frozen=True)
class Instant:
    unix: float
    mono: float

    @classmethod
    def now(cls, clock: Clock = SYSTEM) -> Instant:
        return cls(clock.wall(), clock.now())


class OriginClock:
    """The receiving end of the ranks' iteration announcements, and the clock origin.

    ``path`` is the socket the ranks' spec names (``events_socket``). With
    ``from_iterations`` (``clock: workload`` with a workload), the first announcement is the
    origin; otherwise the runner calls :meth:`set_origin`. :meth:`end` says the workload is over
    (the ranks' "end" announcement does too): waits return None from then on. ``clock`` is the
    time source (``source``) of its waits and of the instants it takes itself."""

    def __init__(self, from_iterations: bool = True, *, clock: Clock = SYSTEM) -> None:
        self.from_iterations = from_iterations
        self.source = clock
        self.changes = 0  # how many times an announcement, the origin, the end or wake() came
        self.cond = threading.Condition()
        self.origin: Instant | None = None
        self.iterations: dict[int, Instant] = {}
        self.ended = False
        self.inbox = DatagramInbox(self._received, prefix="testbed-events-", name="origin-clock")
        self.dir, self.path = self.inbox.dir, self.inbox.path

    def __enter__(self) -> OriginClock:
        return self

    def wake(self) -> None:
        """Wake every thread waiting on this clock (to see that it should stop)."""
        with self.cond:
            self._changed()

    def _changed(self) -> None:
        """With the lock held: count a change and wake every waiter."""
        self.changes += 1
        self.cond.notify_all()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _received(self, data: bytes) -> None:
        got = parse(data)
        if got is not None:
            self.announce(got, Instant(got.unix, got.mono))

    def announce(self, got: Announcement, at: Instant) -> None:
        """Rank 0's announcement ``got``, at ``at`` on this clock (across machines: relayed,
        its times put on the driver's timeline)."""
        with self.cond:
            if got.kind == "end":
                self.ended = True
            elif got.iteration is not None:
                self.iterations.setdefault(got.iteration, at)
                if self.origin is None and self.from_iterations:
                    self.origin = at
            self._changed()

    def set_origin(self, at: Instant | None = None) -> Instant:
        """The origin is ``at`` (now by default) unless one is set already; the origin."""
        with self.cond:
            if self.origin is None:
                self.origin = at or Instant.now(self.source)
            self._changed()
            return self.origin

    def end(self) -> None:
        """The workload is over: nothing more will be announced."""
        with self.cond:
            self.ended = True
            self._changed()

    def _wait_for(self, get: Callable[[], Instant | None], timeout: float | None) -> Instant | None:
        with self.cond:
            self.source.wait_for(self.cond, lambda: get() is not None or self.ended, timeout)
            return get()

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
            seen = self.changes
            self.source.wait_for(self.cond, lambda: self.changes != seen, timeout)

    def close(self) -> None:
        self.end()
        self.inbox.close()
