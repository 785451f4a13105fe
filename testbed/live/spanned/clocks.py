"""One clock across machines: each machine's clock offset to the driver's, and its bound.

An NTP-style exchange through the machine's agent: the driver reads its unix clock (t0), asks the
agent for its own (t_agent), reads its clock again when the answer is back (t3). The agent read
its clock somewhere in [t0, t3] of the driver's, so ``offset = t_agent - (t0 + t3) / 2`` is off
by at most ``bound = (t3 - t0) / 2``, whatever the two legs of the exchange took. Of several
exchanges the tightest counts (:func:`offset_of`). :class:`ClockSync` measures each machine at
bring-up and then every ``PERIOD`` s while the testbed is up (rows of the ``clock_offsets``
table) and puts an agent's unix time on the driver's timeline (:meth:`ClockSync.to_driver`)
with the bound of the latest measurement.

The exchange rides Ray's actor calls (over the machines' network), in a concurrency group of
its own (``CLOCK_GROUP``), so it never waits behind a long call of the agent.
"""

from __future__ import annotations

import dataclasses
import statistics
import threading
import time
from collections.abc import Sequence
from typing import Any

EXCHANGES = 8  # per measurement: the tightest of them counts
PERIOD = 2.0  # s between two measurements while the testbed is up
CLOCK_GROUP = "clock"  # the agent's concurrency group of its clock reads
EVENTS_GROUP = "events"  # ... of the WAN's changes and faults (testbed.live.spanned.changes)
CONCURRENCY_GROUPS = {CLOCK_GROUP: 1, EVENTS_GROUP: 1}


@dataclasses.dataclass(frozen=True)
class Offset:
    """A machine's clock against the driver's: ``agent unix = driver unix + offset_s``, within
    ``bound_s``; measured at the driver's unix time ``at_unix``."""

    machine: str
    offset_s: float
    bound_s: float
    at_unix: float
    phase: str  # "bring-up" or "run"

    def row(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def offset_of(exchanges: Sequence[tuple[float, float, float]]) -> tuple[float, float]:
    """(offset, bound) of the tightest exchange of ``exchanges``: (driver's t0, agent's time,
    driver's t3) each. PURE."""
    if not exchanges:
        raise ValueError("no clock exchange to measure an offset from")
    t0, agent, t3 = min(exchanges, key=lambda e: e[2] - e[0])
    return agent - (t0 + t3) / 2, (t3 - t0) / 2


class ClockSync:
    """Each machine's offset to the driver, measured through its agent (``now`` of
    :class:`~testbed.live.spanned.agent.MachineAgent`): :meth:`measure` once, :meth:`start` a
    thread that measures every ``period`` s until :meth:`stop`. ``rows``: every measurement."""

    def __init__(self, ray: Any, agents: dict[str, Any], period: float = PERIOD) -> None:
        self.ray = ray
        self.agents = dict(agents)
        self.period = period
        self.rows: list[dict[str, Any]] = []
        self.latest: dict[str, Offset] = {}
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def exchange(self, agent: Any) -> tuple[float, float, float]:
        t0 = time.time()
        theirs = self.ray.get(agent.now.options(concurrency_group=CLOCK_GROUP).remote())
        return t0, theirs, time.time()

    def measure(self, phase: str = "run") -> dict[str, Offset]:
        """Every machine's offset now (EXCHANGES exchanges each, one at a time)."""
        got = {}
        for machine, agent in self.agents.items():
            ex = [self.exchange(agent) for _ in range(EXCHANGES)]
            offset, bound = offset_of(ex)
            t0, _, t3 = min(ex, key=lambda e: e[2] - e[0])
            got[machine] = Offset(machine, offset, bound, (t0 + t3) / 2, phase)
        with self._lock:
            self.latest.update(got)
            self.rows += [o.row() for o in got.values()]
        return got

    def start(self) -> ClockSync:
        self._thread = threading.Thread(target=self._run, name="clock-sync", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            try:
                self.measure("run")
            except Exception as exc:  # an agent gone mid-run: said, the last offset stands
                self.errors.append(f"clock offset: {type(exc).__name__}: {exc}")
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def offset(self, machine: str) -> Offset:
        with self._lock:
            return self.latest[machine]

    def to_driver(self, machine: str, agent_unix: float) -> tuple[float, float]:
        """``agent_unix`` (``machine``'s unix time) on the driver's timeline, and its bound."""
        o = self.offset(machine)
        return agent_unix - o.offset_s, o.bound_s

    def from_driver(self, machine: str, driver_unix: float) -> float:
        """The driver's unix time ``driver_unix`` on ``machine``'s clock."""
        return driver_unix + self.offset(machine).offset_s

    def bring_up(self) -> dict[str, dict[str, float]]:
        """Per machine, the first measurement (what the run's info records)."""
        first: dict[str, dict[str, float]] = {}
        for r in self.rows:
            if r["phase"] == "bring-up":
                first.setdefault(r["machine"], {"offset_s": r["offset_s"], "bound_s": r["bound_s"]})
        return first


def one_way_delay(
    raw: Sequence[float], sender: Offset, receiver: Offset, split: Sequence[float]
) -> dict[str, float]:
    """A direction's one-way delay from probes stamped by the sender's clock and received on
    the receiver's (``raw``: receive minus send stamp, s), on one clock: less the receiver's
    offset to the sender's; within the two offsets' bounds summed. Beside it, the median of the
    round-trip split (``split``: what the compensation assumes, half the excess each way).
    PURE."""
    if not raw:
        raise ValueError("no probe came through to measure a one-way delay")
    skew = receiver.offset_s - sender.offset_s
    return {
        "one_way_s": statistics.median(raw) - skew,
        "bound_s": sender.bound_s + receiver.bound_s,
        "round_trip_split_s": statistics.median(split) if split else float("nan"),
    }
