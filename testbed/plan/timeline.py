"""The timeline of a changing WAN: a PURE function from a scenario and its plan to every change of
every WAN direction and every fault action, at its time (``build_timeline``). It reads the link
traces the scenario names (testbed.config.linktrace), nothing else.

An ``Event`` is one thing the event runner (testbed.run.events) does: a ``set`` carries the
complete new state of each direction it changes (``Change``), the other actions name the link,
directions or cluster they act on. Times are seconds after the clock origin (the first measured
iteration, or the run's start with ``clock: wall``); an event with ``after_iteration`` counts
from the start of that iteration instead.

Expansion (docs/faults.md, "## Scenario keys"): schedule steps and trace bins become ``set``s
(only what a step names changes; ``restore`` returns to the configured settings; a
``buffer: Nbdp`` is re-evaluated at every rate or delay change, with the plan's own
``resolve_buffer``); a trace bin of rate 0 is a ``set`` of rate 0: the bottleneck holds its queue
for that bin (nothing leaves, arrivals wait up to the buffer), as Mahimahi does; faults become
their start and end actions. Overlaps that contradict each other (two blackholes or two downs on
one link, a burst loss across a step that sets loss, a link brought down while its gateway is
crashed) are a ``ScenarioError`` naming both.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.config.linktrace import TraceBins, read_trace
from testbed.core.errors import ScenarioError
from testbed.core.units import format_duration, format_percent, format_rate, format_size
from testbed.plan.topology import bdp_bytes, link_directions, resolve_buffer

if TYPE_CHECKING:
    from testbed.config.scenario import Scenario, WanLink
    from testbed.plan.topology import NetworkPlan

ACTIONS = (
    "set",
    "blackhole",
    "unblackhole",
    "reset",
    "unreset",
    "link_down",
    "link_up",
    "gateway_down",
    "gateway_up",
)


@dataclass(frozen=True)
class Change:
    """The complete new state of one WAN direction's emulation after an event."""

    direction: str  # "east->west"
    rate: int  # bit/s; 0: held (a trace's zero-rate bin: the bottleneck serves nothing)
    buffer: int  # bytes (a `buffer: Nbdp` re-evaluated at the new rate and delay)
    delay: float
    jitter: float
    loss: float
    reorder: float
    ge_p: float = 0.0  # Gilbert-Elliott burst loss: good -> bad per packet (0, 0 = off)
    ge_r: float = 0.0  # bad -> good


@dataclass(frozen=True)
class Event:
    at: float  # s after the clock origin; with after_iteration, after that iteration starts
    after_iteration: int | None
    action: str  # one of ACTIONS
    source: str  # "schedule" | "trace" | "fault"
    fault: int | None  # index in scenario.faults (a fault's start and end events share it)
    link: str | None  # "east-west", for actions on a link
    cluster: str | None  # gateway_* actions
    directions: tuple[str, ...]  # WAN directions affected
    changes: tuple[Change, ...]  # for "set": the new state of each changed direction
    what: str  # for tables and plots: "rate 300 Mbit/s", "blackhole on (2 s)"


@dataclass(frozen=True)
class Timeline:
    events: tuple[Event, ...]  # absolute ones sorted by `at`, then anchored ones in order
    clock: str  # "workload" | "wall"
    horizon: float | None  # how far a looping trace was expanded (s); None if nothing loops


# Order of events at the same time: what ends first (a blackhole lifted at 12 s and another one
# starting at 12 s do not overlap), then the new settings, then what starts.
_ENDS, _SETS, _AFTER_SETS, _STARTS = 0, 1, 2, 3
FOREVER = math.inf
DEFAULT_HORIZON = 60.0  # s: what `testbed plan` expands a looping trace to at least
MAX_TRACE_EVENTS = 2_000_000  # a looping trace's bins up to the horizon (55 h of 100 ms bins)


@dataclass
class _State:
    """One direction's settings at some moment (buffer still a setting: resolved per change)."""

    rate: int
    delay: float
    jitter: float
    loss: float
    reorder: float
    buffer: tuple[str, float]
    ge_p: float = 0.0
    ge_r: float = 0.0
    held: bool = False  # a trace's zero-rate bin: nothing leaves; ``rate`` is the one before

    def copy(self) -> _State:
        return _State(**self.__dict__)


@dataclass(frozen=True)
class _Interval:
    """A span something holds (for the overlap checks); ``anchor``: the iteration it counts from."""

    scope: tuple[str, str]  # ("blackhole", direction) | ("port", link) | ...
    start: float
    end: float
    anchor: int | None
    field: str  # faults[2], wan[0].trace
    label: str  # "blackhole 12..14 s"


@dataclass
class _Op:
    """A change of a link's settings, applied in time order to get each ``set``'s full state."""

    at: float
    prio: int
    seq: int
    apply: Any  # (states) -> (directions named, what, source, fault, field)


@dataclass
class _Builder:
    scenario: Scenario
    plan: NetworkPlan
    base_dir: Path
    horizon: float
    source: str
    events: list[tuple[tuple[Any, ...], Event]] = field(default_factory=list)
    intervals: list[_Interval] = field(default_factory=list)
    seq: int = 0
    loops: bool = False

    def error(self, where: str, message: str) -> ScenarioError:
        return ScenarioError(f"{self.source}: {where}: {message}")

    def add(self, at: float, anchor: int | None, prio: int, event: Event) -> None:
        self.seq += 1
        key = (0, 0, at, prio, self.seq) if anchor is None else (1, anchor, at, prio, self.seq)
        self.events.append((key, event))


def build_timeline(
    scenario: Scenario,
    plan: NetworkPlan,
    base_dir: Path,
    horizon: float,
    *,
    source: str = "<scenario>",
) -> Timeline:
    """Every event of ``scenario``'s schedules, traces and faults, in order. Trace files are
    relative to ``base_dir`` (the scenario file's directory); looping traces are expanded up to
    ``horizon`` s. ``source`` (the scenario file) names the file in errors."""
    b = _Builder(scenario, plan, Path(base_dir), horizon, source)
    for i, link in enumerate(scenario.wan):
        for path in link.paths_of():
            _link_settings(b, i, path)
    for j, fault in enumerate(scenario.faults):
        _fault(b, j, fault)
    _check_overlaps(b)
    ordered = tuple(e for _, e in sorted(b.events, key=lambda ke: ke[0]))
    return Timeline(ordered, scenario.clock, horizon if b.loops else None)


def default_horizon(scenario: Scenario) -> float:
    """How far `testbed plan` expands looping traces: the last time the scenario names (a flow's
    end, a fault's end, a schedule step), at least ``DEFAULT_HORIZON``. A run passes its own."""
    times = [DEFAULT_HORIZON]
    times += [flow.start + flow.duration for flow in scenario.flows]
    times += [step.at for link in scenario.wan for step in link.schedule]
    for f in scenario.faults:
        if f.at is not None:
            times.append(f.at + _fault_length(f))
    return max(t for t in times if math.isfinite(t))


# -- a link's settings: schedule, trace, burst loss ----------------------------------------------


def _configured(plan: NetworkPlan, link: WanLink) -> dict[str, _State]:
    out = {}
    names = link_directions(link.between, "both", link.path)
    for name, reverse in zip(names, (False, True), strict=True):
        d = next(w for w in plan.wan if w.name == name)
        buffer = link.direction(reverse)["buffer"]
        out[name] = _State(d.rate, d.delay, d.jitter, d.loss, d.reorder, buffer)
    return out


def _changes(states: dict[str, _State]) -> dict[str, Change]:
    """Each direction's complete state: the buffer resolved at its rate and the link's RTT."""
    rtt = sum(s.delay for s in states.values())
    out = {}
    for name, s in states.items():
        buffer = resolve_buffer(s.buffer, bdp_bytes(s.rate, rtt))
        rate = 0 if s.held else s.rate
        out[name] = Change(name, rate, buffer, s.delay, s.jitter, s.loss, s.reorder, s.ge_p, s.ge_r)
    return out


def read_link_trace(link: WanLink, i: int, base_dir: Path, source: str = "<scenario>") -> TraceBins:
    """Link ``i``'s trace file read and binned (errors name ``wan[i].trace.file``)."""
    assert link.trace is not None
    path = Path(base_dir) / link.trace.file
    return read_trace(
        path,
        link.trace.format,
        link.trace.bin,
        link.trace.scale,
        source=source,
        field=f"wan[{i}].trace.file",
    )


def _link_settings(b: _Builder, i: int, link: WanLink) -> None:
    """The ``set`` events of link ``i`` (schedule, trace, absolute burst losses), each with the
    full state of the directions it changes (rate 0: held)."""
    configured = _configured(b.plan, link)
    ops: list[_Op] = []
    for k, step in enumerate(link.schedule):
        ops.append(_Op(step.at, _SETS, len(ops), _schedule_op(link, i, k, configured)))
        if step.loss is not None:
            for d in link_directions(link.between, step.direction):
                b.intervals.append(
                    _Interval(
                        ("loss", d),
                        step.at,
                        step.at,
                        None,
                        f"wan[{i}].schedule[{k}]",
                        f"sets loss at {step.at:g} s",
                    )
                )
    if link.trace is not None:
        ops += _trace_ops(b, i, link, len(ops))
    for j, f in enumerate(b.scenario.faults):
        if f.kind == "burst_loss" and link.name in {p.name for p in b.scenario.links_named(f.link)}:
            if f.at is None:
                continue  # anchored: _fault builds it from the configured state
            dirs = link_directions(link.between, f.direction, link.path)
            ops.append(_Op(f.at, _STARTS, len(ops), _burst_op(j, dirs, f.p, f.r, f.duration)))
            ops.append(_Op(f.at + f.duration, _ENDS, len(ops), _burst_op(j, dirs, 0.0, 0.0)))
    ops.sort(key=lambda o: (o.at, o.prio, o.seq))
    states = {k: v.copy() for k, v in configured.items()}
    before = _changes(states)
    for op in ops:
        result = op.apply(states)
        if result is None:
            continue
        named, what, source, fault, where = result
        after = _changes(states)
        dirs = [d for d in after if d in named or after[d] != before[d]]
        _check_aqm(b, link, after, dirs, where, op.at)
        b.add(
            op.at,
            None,
            op.prio,
            Event(
                op.at,
                None,
                "set",
                source,
                fault,
                link.name,
                None,
                tuple(dirs),
                tuple(after[d] for d in dirs),
                what,
            ),
        )
        before = after


def _check_aqm(
    b: _Builder, link: WanLink, after: dict[str, Change], dirs: list[str], where: str, at: float
) -> None:
    for name in dirs:
        aqm = next(w.aqm for w in b.plan.wan if w.name == name)
        if aqm is not None and aqm.threshold >= after[name].buffer:
            raise b.error(
                where,
                f"at {at:g} s the buffer of {name} becomes {after[name].buffer} B, not above its "
                f"aqm threshold ({aqm.threshold} B); use a larger `buffer` or lower thresholds",
            )


def _settings_text(step: Any) -> str:
    parts = []
    if step.rate is not None:
        parts.append(f"rate {format_rate(step.rate)}")
    for f in ("delay", "jitter"):
        if getattr(step, f) is not None:
            parts.append(f"{f} {format_duration(getattr(step, f))}")
    for f in ("loss", "reorder"):
        if getattr(step, f) is not None:
            parts.append(f"{f} {format_percent(getattr(step, f))}")
    if step.buffer is not None:
        kind, amount = step.buffer
        parts.append(f"buffer {amount:g} BDP" if kind == "bdp" else f"buffer {format_size(amount)}")
    return ", ".join(parts)


def _schedule_op(link: WanLink, i: int, k: int, configured: dict[str, _State]) -> Any:
    step = link.schedule[k]
    dirs = link_directions(link.between, step.direction)

    def apply(states: dict[str, _State]) -> tuple[Any, ...]:
        for d in dirs:
            s = states[d]
            if step.restore:
                # faults are not configuration: a burst loss in progress stays on
                states[d] = _State(**{**configured[d].__dict__, "ge_p": s.ge_p, "ge_r": s.ge_r})
                continue
            for f in ("rate", "delay", "jitter", "loss", "reorder", "buffer"):
                if getattr(step, f) is not None:
                    setattr(s, f, getattr(step, f))
        what = "restore the configured settings" if step.restore else _settings_text(step)
        if step.direction != "both":
            what += f" ({dirs[0]})"
        return dirs, what, "schedule", None, f"wan[{i}].schedule[{k}]"

    return apply


def _burst_op(j: int, dirs: tuple[str, ...], p: float, r: float, duration: float = 0.0) -> Any:
    def apply(states: dict[str, _State]) -> tuple[Any, ...]:
        for d in dirs:
            states[d].ge_p, states[d].ge_r = p, r
        if p or r:
            what = (
                f"burst loss on: p {format_percent(p)}, r {format_percent(r)} "
                f"({format_duration(duration)})"
            )
        else:
            what = "burst loss off"
        return dirs, what, "fault", j, f"faults[{j}]"

    return apply


def _trace_ops(b: _Builder, i: int, link: WanLink, seq0: int) -> list[_Op]:
    """One op per bin (per period when it loops, up to the horizon)."""
    trace = link.trace
    assert trace is not None
    bins = read_link_trace(link, i, b.base_dir, b.source)
    dirs = link_directions(link.between, trace.direction)
    where = f"wan[{i}].trace"
    period = bins.period
    expanded: list[tuple[float, Any]] = []
    if trace.loop:
        b.loops = True
        if b.horizon / trace.bin > MAX_TRACE_EVENTS:
            raise b.error(
                f"wan[{i}].trace.bin",
                f"looping {format_duration(trace.bin)} bins up to {b.horizon:g} s would be "
                f"{b.horizon / trace.bin:.0f} shaper changes (at most {MAX_TRACE_EVENTS}); use "
                "a larger bin",
            )
        k = 0
        while k * period < b.horizon:
            for x in bins.bins:
                at = round(k * period + x.t, 9)
                if at >= b.horizon:
                    break
                expanded.append((at, x))
            k += 1
    else:
        expanded = [(x.t, x) for x in bins.bins]
        final = bins.last
        held = bins.bins[-1]
        if (final.rate, final.delay, final.loss) != (held.rate, held.delay, held.loss):
            expanded.append((period, final))
    ops: list[_Op] = []
    for at, x in expanded:
        label = f"trace bin {round(x.t / bins.width)}" if x is not bins.last else "trace end, held"
        ops.append(_Op(at, _SETS, seq0 + len(ops), _trace_op(i, dirs, x, label)))
    if bins.bins[0].loss is not None:
        end = b.horizon if trace.loop else period
        for d in dirs:
            b.intervals.append(
                _Interval(("loss", d), 0.0, end, None, where, f"sets loss from 0 to {end:g} s")
            )
    return ops


def _trace_op(i: int, dirs: tuple[str, ...], x: Any, label: str) -> Any:
    """A bin's settings; a zero-rate bin holds the queue (Mahimahi: packets wait for the next
    delivery opportunity) and keeps the buffer of the rate before it."""

    def apply(states: dict[str, _State]) -> tuple[Any, ...]:
        for d in dirs:
            states[d].held = x.rate == 0
            if x.rate:
                states[d].rate = x.rate
            if x.delay is not None:
                states[d].delay = x.delay
            if x.loss is not None:
                states[d].loss = x.loss
        what = f"{label}: " + (
            f"rate {format_rate(x.rate)}" if x.rate else "rate 0, held (nothing leaves)"
        )
        if x.delay is not None:
            what += f", delay {format_duration(x.delay)}"
        if x.loss is not None:
            what += f", loss {format_percent(x.loss)}"
        return dirs, what, "trace", None, f"wan[{i}].trace"

    return apply


# -- faults --------------------------------------------------------------------------------------


def _fault_length(f: Any) -> float:
    """How long a fault holds, from its start (inf: a gateway never restored)."""
    if f.kind == "flap":
        return f.count * (f.down + f.up) - f.up
    if f.kind == "gateway_crash":
        return FOREVER if f.restore_after is None else f.restore_after
    return f.duration


def _span(f: Any, length: float) -> str:
    """'12..14 s' or 'iteration 3 + 0.05..2.05 s' (for overlap messages)."""
    end = "never" if not math.isfinite(length) else f"{_fault_start(f) + length:g} s"
    if f.after is not None:
        return f"iteration {f.after.iteration} + {f.after.offset:g} s .. {end}"
    return f"{f.at:g} s .. {end}"


def _fault_start(f: Any) -> float:
    """A fault's start: its ``at``, or its offset after its iteration."""
    return f.at if f.at is not None else f.after.offset


def _fault(b: _Builder, j: int, f: Any) -> None:
    """The events of fault ``j``. A fault naming a multipath link (``east-west``) acts on every
    path of it, one naming a path (``east-west/1``) on that path (``Scenario.links_named``)."""
    paths = b.scenario.links_named(f.link) if getattr(f, "link", None) else []
    start = _fault_start(f)
    anchor = None if f.after is None else f.after.iteration
    length = _fault_length(f)
    end = start + length
    where = f"faults[{j}]"
    label = f"{f.kind} {_span(f, length)}"

    def event(
        at: float,
        prio: int,
        action: str,
        link: str | None,
        dirs: Iterable[str],
        what: str,
        cluster: str | None = None,
        changes: tuple[Change, ...] = (),
    ) -> None:
        b.add(
            at,
            anchor,
            prio,
            Event(at, anchor, action, "fault", j, link, cluster, tuple(dirs), changes, what),
        )

    def hold(scope: tuple[str, str]) -> None:
        b.intervals.append(_Interval(scope, start, end, anchor, where, label))

    if f.kind in ("blackhole", "partition"):
        if f.kind == "blackhole":
            cut = [(p, f.direction) for p in paths]
        else:
            group = {c: g for g, members in enumerate(f.groups) for c in members}
            cut = [
                (link, "both")
                for link in b.scenario.wan_paths
                if all(c in group for c in link.between)
                and group[link.between[0]] != group[link.between[1]]
            ]
            if not cut:
                raise b.error(
                    f"{where}.groups",
                    "no WAN link joins two of these groups: the partition would cut nothing; "
                    "links are: " + ", ".join(link.name for link in b.scenario.wan),
                )
        groups = (
            " | ".join("[" + ", ".join(g) + "]" for g in f.groups) if f.kind == "partition" else ""
        )
        for link, which in cut:
            dirs = link_directions(link.between, which, link.path)
            side = "" if which == "both" else f" ({dirs[0]})"
            why = f"partition {groups}: " if groups else ""
            event(
                start,
                _STARTS,
                "blackhole",
                link.name,
                dirs,
                f"{why}blackhole on ({format_duration(f.duration)}){side}",
            )
            event(end, _ENDS, "unblackhole", link.name, dirs, f"{why}blackhole off{side}")
            for d in dirs:
                hold(("blackhole", d))
    elif f.kind in ("link_down", "flap"):
        for link in paths:
            _down_up(b, f, link, start, end, anchor, where, label, event, hold)
    elif f.kind == "reset":
        for link in paths:
            dirs = link_directions(link.between, "both", link.path)
            event(
                start,
                _STARTS,
                "reset",
                link.name,
                dirs,
                f"reset TCP crossing the link ({format_duration(f.duration)})",
            )
            event(end, _ENDS, "unreset", link.name, dirs, "reset off")
            hold(("reset", link.name))
    elif f.kind == "burst_loss":
        i = next(n for n, w in enumerate(b.scenario.wan) if set(w.between) == set(paths[0].between))
        for link in paths:
            dirs = link_directions(link.between, f.direction, link.path)
            for d in dirs:
                hold(("burst", d))
            if anchor is not None:
                _anchored_burst(b, i, link, j, f, dirs, event)
    elif f.kind == "gateway_crash":
        dirs = tuple(d.name for d in b.plan.wan if f.cluster in (d.src, d.dst))
        restore = (
            f"gateway {f.cluster} down (restored after {format_duration(f.restore_after)})"
            if f.restore_after is not None
            else f"gateway {f.cluster} down (never restored)"
        )
        event(start, _STARTS, "gateway_down", None, dirs, restore, cluster=f.cluster)
        if f.restore_after is not None:
            event(
                end,
                _ENDS,
                "gateway_up",
                None,
                dirs,
                f"gateway {f.cluster} up (routes re-installed)",
                cluster=f.cluster,
            )
        hold(("gateway", f.cluster))


def _down_up(b: _Builder, f: Any, link: WanLink, start, end, anchor, where, label, event, hold):
    """A link_down or flap of one link (or path): its ports down and up again."""
    dirs = link_directions(link.between, "both", link.path)
    if f.kind == "link_down":
        downs = [(start, f.duration, "")]
    else:
        downs = [
            (start + n * (f.down + f.up), f.down, f"flap {n + 1}/{f.count}: ")
            for n in range(f.count)
        ]
    for t, down, prefix in downs:
        event(t, _STARTS, "link_down", link.name, dirs,
              f"{prefix}link down ({format_duration(down)})")  # fmt: skip
        event(t + down, _ENDS, "link_up", link.name, dirs,
              f"{prefix}link up (routes re-installed)")  # fmt: skip
    hold(("port", link.name))
    for c in link.between:
        b.intervals.append(
            _Interval(("port-of", c), start, end, anchor, where, f"{label} on {link.name}")
        )


def _anchored_burst(b: _Builder, i: int, link: WanLink, j: int, f: Any, dirs, event) -> None:
    """A burst loss `after` an iteration: its time relative to the link's schedule or trace is
    unknown before the run, so it cannot carry their state; alone it starts from the
    configured one."""
    if link.schedule or link.trace is not None:
        raise b.error(
            f"faults[{j}].after",
            f"a burst_loss `after` an iteration cannot share link {link.name} with its "
            f"{'schedule' if link.schedule else 'trace'} (wan[{i}]): which comes first is "
            "unknown until the run; give it an `at` time",
        )
    configured = _configured(b.plan, link)
    on = {k: v.copy() for k, v in configured.items()}
    for d in dirs:
        on[d].ge_p, on[d].ge_r = f.p, f.r
    changes_on = _changes(on)
    changes_off = _changes(configured)
    start = f.after.offset
    event(
        start,
        _STARTS,
        "set",
        link.name,
        dirs,
        f"burst loss on: p {format_percent(f.p)}, r {format_percent(f.r)} "
        f"({format_duration(f.duration)})",
        changes=tuple(changes_on[d] for d in dirs),
    )
    event(
        start + f.duration,
        _ENDS,
        "set",
        link.name,
        dirs,
        "burst loss off",
        changes=tuple(changes_off[d] for d in dirs),
    )


# -- overlaps -------------------------------------------------------------------------------------

_WHY = {
    "blackhole": "the first to end would lift the other's blackhole early",
    "port": "the first link_up would bring the link back inside the other's down time",
    "reset": "the first to end would stop the other's resets early",
    "burst": "one Gilbert-Elliott loss model per direction at a time",
    "gateway": "the first gateway_up would restore the gateway inside the other crash",
}


def _overlap(a: _Interval, c: _Interval) -> bool:
    if a.anchor != c.anchor:
        return False  # iteration starts are known only at run time
    if a.start == a.end or c.start == c.end:  # a point (a step setting loss)
        p, span = (a, c) if a.start == a.end else (c, a)
        return span.start <= p.start < span.end
    return a.start < c.end and c.start < a.end


def _first_overlap(ivs: list[_Interval]) -> tuple[_Interval, _Interval] | None:
    """Two overlapping intervals of one scope, if any: a sweep in start order per origin (a
    looping trace's rate-0 bins make thousands of intervals; all pairs would be slow)."""
    by_anchor: dict[int | None, list[_Interval]] = {}
    for iv in ivs:
        by_anchor.setdefault(iv.anchor, []).append(iv)
    for group in by_anchor.values():
        group.sort(key=lambda iv: (iv.start, iv.end))
        longest = group[0]  # the interval reaching furthest so far
        for iv in group[1:]:
            if iv.start < longest.end:
                return longest, iv
            if iv.end > longest.end:
                longest = iv
    return None


def _check_overlaps(b: _Builder) -> None:
    by_scope: dict[tuple[str, str], list[_Interval]] = {}
    for iv in b.intervals:
        by_scope.setdefault(iv.scope, []).append(iv)
    pairs: list[tuple[_Interval, _Interval, str]] = []
    for scope, ivs in by_scope.items():
        kind, what = scope
        if kind in _WHY:
            clash = _first_overlap(ivs)
            if clash is not None:
                pairs.append((*clash, f"on {what}: {_WHY[kind]}"))
        if kind == "burst":
            for c in by_scope.get(("loss", what), []):
                for a in ivs:
                    pairs.append(
                        (
                            c,
                            a,
                            f"on {what}: netem has one loss model at a time (burst or iid); "
                            "move the step or the burst",
                        )
                    )
        if kind == "port-of":
            for a in ivs:
                for c in by_scope.get(("gateway", what), []):
                    pairs.append(
                        (
                            c,
                            a,
                            f"the link's gateway {what} is crashed: its ports are down "
                            "already, and the link_up would bring one back",
                        )
                    )
    for a, c, why in pairs:
        if _overlap(a, c):
            first, second = sorted((a, c), key=lambda iv: (iv.start, iv.field))
            raise ScenarioError(
                f"{b.source}: {second.field}: {second.label} overlaps {first.field} "
                f"({first.label}) {why}"
            )
