"""The WAN's timeline, live: the thread that applies each event of a ``Timeline``
(testbed.plan.timeline) at its time on the run's clock (testbed.experiment.clock), recording a
row per event (``events.parquet``, docs/results.md).

* :func:`apply_event`: the one place that maps an event's action to the mechanism that does it
  (``LinkBackend.set_rate`` / ``set_impairments`` for "set", ``FaultOps`` for the faults).
* :class:`EventRunner`: waits for each event's time (absolute: origin + ``at``; anchored: the
  start of iteration ``after_iteration`` + ``at``), sleeps until ``SPIN`` before it and spins
  the rest (a sleep alone wakes up late on a busy machine), applies it and records when. A
  failed event is recorded with its error and the rest go on. At the end the events that never
  came are recorded as skipped (a trace's bins only as a count) and the faults still in force
  undone, so teardown and the next point start from a working network. Rows carry unix and
  monotonic times; lateness is measured on the monotonic clock (the ranks announce with it), read
from the run clock's time source (``OriginClock.source``: a test moves it by hand).
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from testbed.core.events import ENDS, UNDO
from testbed.core.vocab import LATE_S
from testbed.experiment.clock import WAKE, Instant, OriginClock
from testbed.net.faults import FaultOps
from testbed.plan.model import Impairment, WanDirection
from testbed.plan.timeline import Change, Event, Timeline

if TYPE_CHECKING:
    from testbed.live.protocol import LiveNetwork

SPIN = 0.002  # s before an event's time: sleep until then, then spin (sub-ms wake-up)


# -- applying one event -------------------------------------------------------------------------
def impairment_for(d: WanDirection, change: Change, compensation_s: float) -> Impairment:
    """The emulator's new settings for direction ``d``: the change's delay minus the direction's
    RTT compensation (what the path adds on its own, testbed.plan.compensation), its jitter,
    loss, reorder and Gilbert-Elliott burst loss."""
    return dataclasses.replace(
        d.impairment,
        delay=max(0.0, change.delay - compensation_s),
        jitter=change.jitter,
        loss=change.loss,
        reorder=change.reorder,
        ge_p=change.ge_p,
        ge_r=change.ge_r,
    )


class Faults(Protocol):
    """The fault actions (:class:`~testbed.net.faults.FaultOps`, or what sends them to the
    machines across machines): each returns the operation as text."""

    def prepare(self) -> str: ...

    def blackhole(self, directions: Sequence[str], on: bool) -> str: ...

    def reset(self, link: str, on: bool) -> str: ...

    def link(self, link: str, up: bool) -> str: ...

    def gateway(self, cluster: str, up: bool) -> str: ...


class EventTarget:
    """What events act on: a one-machine network's link backend (the state of each WAN direction
    as the events left it) and its fault mechanisms (made on first use). Across machines a
    subclass sends each part to the machine that holds it
    (testbed.experiment.spanned_events)."""

    # s before an event's time the runner hands it over (0: at its time); ``due_unix`` is then
    # the time it is due, and ``take_applied`` when it was applied, where that is not here
    lead_s = 0.0

    def __init__(self, tb: LiveNetwork) -> None:
        assert tb.plan is not None and tb.backend is not None, "the testbed is not up"
        self.tb = tb
        self.plan = tb.plan
        self.backend = tb.backend
        self.due_unix: float | None = None
        self._faults: FaultOps | None = None
        self.directions = {d.name: d for d in self.plan.wan}
        # rate, buffer and impairment in force, per direction: the plan's until changed
        self.state = {
            d.name: Change(d.name, d.rate, d.buffer, d.delay, d.jitter, d.loss, d.reorder)
            for d in self.plan.wan
        }

    def faults(self) -> Faults:
        return self.fault_ops()

    def fault_ops(self) -> FaultOps:
        """This machine's fault mechanisms (made on first use)."""
        if self._faults is None:
            self._faults = FaultOps(self.plan)
        return self._faults

    def fault_drops(self) -> list[dict[str, Any]]:
        """Per WAN direction, what its faults dropped or reset (``FaultOps.fault_drops``);
        empty when no fault rules were installed."""
        faults = self._faults
        return faults.fault_drops() if faults is not None and faults.ready else []

    def take_applied(self) -> Applied | None:
        """When the last event was applied, measured elsewhere (None: here, by the runner)."""
        return None

    def set(self, changes: Sequence[Change]) -> str:
        """Apply each direction's new state: the shaper's rate and buffer where they change
        (``set_rate``), the emulator's impairment where it changes (``set_impairments``)."""
        rates: dict[str, tuple[int, int]] = {}
        imps: dict[str, Impairment] = {}
        for c in changes:
            if c.direction not in self.directions:
                raise ValueError(f"no WAN direction {c.direction!r}")
            old = self.state[c.direction]
            if (c.rate, c.buffer) != (old.rate, old.buffer):
                rates[c.direction] = (c.rate, c.buffer)
            if _impairment_of(c) != _impairment_of(old):
                comp = self.tb.compensation_of(c.direction)
                imps[c.direction] = impairment_for(
                    self.directions[c.direction], c, comp.compensation_s if comp else 0.0
                )
        self.send(rates, imps)
        done = []
        if rates:
            done.append(
                "set_rate "
                + ", ".join(f"{n} {r} bit/s buffer {b} B" for n, (r, b) in rates.items())
            )
        if imps:
            done.append(
                "set_impairments "
                + ", ".join(
                    f"{n} delay {i.delay * 1e3:.3f} ms jitter {i.jitter * 1e3:.3f} ms "
                    f"loss {i.loss:g} reorder {i.reorder:g}"
                    + (f" burst loss p {i.ge_p:g} r {i.ge_r:g}" if i.ge_p else "")
                    for n, i in imps.items()
                )
            )
        for c in changes:
            self.state[c.direction] = c
        return "; ".join(done) or "nothing changed"

    def send(self, rates: dict[str, tuple[int, int]], imps: dict[str, Impairment]) -> None:
        """The new rates and buffers, then the new impairments, to the link backend."""
        backend: Any = self.backend
        if rates:
            backend.set_rate(rates)
        if imps:
            backend.set_impairments(imps)


@dataclasses.dataclass(frozen=True)
class Applied:
    """When an event was applied where it acts (unix, on the runner's timeline), within
    ``bound_s``; how long its operation took there."""

    unix: float
    bound_s: float
    apply_s: float


def _impairment_of(c: Change) -> tuple[float, ...]:
    return (c.delay, c.jitter, c.loss, c.reorder, c.ge_p, c.ge_r)


# a fault's start action (testbed.core.events) -> how it is applied (``on``) and undone
FAULT_MECHANISMS: dict[str, Callable[[Event, EventTarget, bool], str]] = {
    "blackhole": lambda e, t, on: t.faults().blackhole(e.directions, on=on),
    "reset": lambda e, t, on: t.faults().reset(_named(e.link, e), on=on),
    "link_down": lambda e, t, on: t.faults().link(_named(e.link, e), up=not on),
    "gateway_down": lambda e, t, on: t.faults().gateway(_named(e.cluster, e), up=not on),
}


def apply_event(event: Event, target: EventTarget) -> str:
    """Apply ``event``; the operation used (text for events.parquet). Raises on failure."""
    a = event.action
    if a == "set":
        return target.set(event.changes)
    start = ENDS.get(a, a)
    if start in FAULT_MECHANISMS:
        return FAULT_MECHANISMS[start](event, target, a == start)
    raise ValueError(f"unknown event action {a!r}")


def _named(value: str | None, event: Event) -> str:
    if value is None:
        raise ValueError(f"a {event.action} event names no link or cluster")
    return value


# -- the runner ---------------------------------------------------------------------------------
class EventRunner:
    """Applies ``timeline``'s events to a live testbed at their times on ``clock``.

    ``start()`` starts the thread; ``stop()`` (the workload ended, or an error) ends it, records
    the events that never came and undoes the faults still in force; ``rows`` are the
    events.parquet rows. ``apply`` replaces :func:`apply_event` on ``target`` (tests of the
    timing alone)."""

    def __init__(
        self,
        timeline: Timeline,
        tb: LiveNetwork | None,
        clock: OriginClock,
        *,
        apply: Callable[[Event], str] | None = None,
        target: EventTarget | None = None,
    ) -> None:
        self.timeline = timeline
        self.clock = clock
        self.target: EventTarget | None = None
        if apply is None:
            assert tb is not None, "an EventRunner without apply needs a testbed"
            target = self.target = target or EventTarget(tb)
            if any(e.action != "set" for e in timeline.events):
                # the rules go in now, before the origin, so no fault pays for them when due
                target.faults().prepare()
            self.apply: Callable[[Event], str] = lambda e: apply_event(e, target)
        else:
            self.apply = apply
        self.backend = tb.backend.name if tb is not None and tb.backend is not None else None
        self.lead = self.target.lead_s if self.target is not None else 0.0
        self.rows: list[dict[str, Any]] = []
        self.skipped_trace = 0  # trace bins that never came (no rows for them)
        # Absolute events in time order (the timeline sorts them; a long trace has thousands,
        # so only the first is looked at), anchored ones (a few faults) all looked at.
        indexed = list(enumerate(timeline.events))
        self.absolute = collections.deque(
            sorted(((i, e) for i, e in indexed if e.after_iteration is None), key=_at)
        )
        self.anchored = [(i, e) for i, e in indexed if e.after_iteration is not None]
        # (action family, link, cluster, directions) -> the event that put it in force
        self.in_force: dict[tuple, tuple[int, Event]] = {}
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="event-runner", daemon=True)
        self.crashed: BaseException | None = None

    @property
    def pending(self) -> list[tuple[int, Event]]:
        return sorted([*self.absolute, *self.anchored], key=lambda p: p[0])

    def start(self) -> EventRunner:
        if self.absolute or self.anchored:
            self._thread.start()
        return self

    def fault_drops(self) -> list[dict[str, Any]]:
        """Per WAN direction, what its faults dropped or reset (``FaultOps.fault_drops``);
        empty when no fault rules were installed. Read before the testbed goes down."""
        if self.target is None:
            return []
        return self.target.fault_drops()

    def stop(self) -> None:
        """End the thread (after the event it is applying), record what never came, undo."""
        self._stopping = True
        self.clock.wake()
        if self._thread.is_alive():
            self._thread.join()
        for i, e in self.pending:
            # A looping trace is expanded far beyond most runs (its horizon): the bins that never
            # came are counted, not tabled.
            if e.source == "trace":
                self.skipped_trace += 1
            else:
                self._append(self._row(i, e, None, status="skipped"), e)
        self.absolute.clear()
        self.anchored.clear()
        for key, (i, e) in list(self.in_force.items()):
            undo = dataclasses.replace(e, action=UNDO[e.action], what=f"{e.what}: undone at end")
            self._apply(i, undo, None, status="undone")
            self.in_force.pop(key, None)
        self.rows.sort(key=lambda r: (r["event"], r["status"] == "undone"))

    # -- the thread --------------------------------------------------------------------------
    def _target(self, e: Event) -> Instant | None:
        """When ``e`` is due, once that is known."""
        base = self.clock.origin if e.after_iteration is None else None
        if e.after_iteration is not None:
            base = self.clock.iterations.get(e.after_iteration)
        if base is None:
            return None
        return Instant(base.unix + e.at, base.mono + e.at)

    def _next(self) -> tuple[Instant, int, tuple[int, Event]] | None:
        """The next event whose time is known: (when, where: -1 = the absolute queue's head,
        else its index among the anchored ones, the event). Ties go to the timeline's order."""
        best: tuple[float, int, int, Instant] | None = None
        if self.absolute and (t := self._target(self.absolute[0][1])) is not None:
            best = (t.mono, self.absolute[0][0], -1, t)
        for n, (i, e) in enumerate(self.anchored):
            if (t := self._target(e)) is not None and (best is None or (t.mono, i) < best[:2]):
                best = (t.mono, i, n, t)
        if best is None:
            return None
        where = best[2]
        return best[3], where, self.absolute[0] if where < 0 else self.anchored[where]

    def _run(self) -> None:
        try:
            while (self.absolute or self.anchored) and not self._stopping:
                got = self._next()
                if got is None:
                    self.clock.wait_change(WAKE)
                    continue
                at, where, (i, e) = got
                left = at.mono - self.lead - self.clock.source.now()
                if left > SPIN:
                    self.clock.wait_change(min(left - SPIN, WAKE))
                    continue
                self.clock.source.spin_until(at.mono - self.lead)
                if where < 0:
                    self.absolute.popleft()
                else:
                    del self.anchored[where]
                self._apply(i, e, at)
        except BaseException as exc:  # recorded; stop() still skips and undoes the rest
            self.crashed = exc

    def _apply(self, i: int, e: Event, at: Instant | None, status: str = "applied") -> None:
        source = self.clock.source
        t0 = source.now()
        operation, error = "", None
        if self.target is not None:
            self.target.due_unix = at.unix if at is not None else None
        try:
            operation = self.apply(e)
        except Exception as exc:  # the run goes on: recorded with its error
            error = f"{type(exc).__name__}: {exc}"
        done = Instant.now(source)
        there = self.target.take_applied() if self.target is not None else None
        if error is None:
            key = _key(e)
            if e.action in UNDO:
                self.in_force[key] = (i, e)
            elif e.action in ENDS:
                self.in_force.pop(key, None)
        row = self._row(i, e, at, status="failed" if error else status)
        row.update(
            applied_unix=done.unix,
            applied_mono=done.mono,
            apply_s=done.mono - t0,
            operation=operation,
            error=error,
        )
        if there is not None:  # applied on other machines: their time on this one's timeline
            row.update(
                applied_unix=there.unix,
                applied_mono=done.mono - (done.unix - there.unix),
                apply_s=there.apply_s,
                clock_bound_s=there.bound_s,
            )
        if at is not None:
            row["late_s"] = row["applied_mono"] - at.mono
            row["late"] = row["late_s"] > LATE_S
        self._append(row, e)

    def _append(self, row: dict[str, Any], e: Event) -> None:
        """One row per changed direction for a ``set`` (its new state as numeric columns, for
        the analysis' timelines and trace replay); one row for the other actions."""
        if not e.changes:
            self.rows.append({**row, "direction": None, **dict.fromkeys(SETTING_COLUMNS)})
            return
        for c in e.changes:
            settings = (c.rate, c.buffer, c.delay, c.jitter, c.loss, c.reorder, c.ge_p, c.ge_r)
            numeric = dict(zip(SETTING_COLUMNS, settings, strict=True))
            self.rows.append({**row, "direction": c.direction, **numeric})

    def _row(self, i: int, e: Event, at: Instant | None, status: str) -> dict[str, Any]:
        return {
            "event": i,
            "source": e.source,
            "fault": e.fault,
            "action": e.action,
            "link": e.link,
            "cluster": e.cluster,
            "directions": ",".join(e.directions),
            "what": e.what,
            "at": e.at,
            "after_iteration": e.after_iteration,
            "scheduled_unix": at.unix if at else None,
            "scheduled_mono": at.mono if at else None,
            "applied_unix": None,
            "applied_mono": None,
            "apply_s": None,
            "late_s": None,
            "late": None,
            "clock_bound_s": None,
            "backend": self.backend,
            "operation": "",
            "error": None,
            "status": status,
        }


SETTING_COLUMNS = (
    "rate_bps",
    "buffer_bytes",
    "delay_s",
    "jitter_s",
    "loss",
    "reorder",
    "ge_p",
    "ge_r",
)


def _at(p: tuple[int, Event]) -> tuple[float, int]:
    return (p[1].at, p[0])


def _key(e: Event) -> tuple:
    family = e.action if e.action in UNDO else ENDS.get(e.action, e.action)
    return (family, e.link, e.cluster, tuple(sorted(e.directions)))
