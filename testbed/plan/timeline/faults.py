"""Faults expanded into their start and end events, and the spans they hold. PURE.

One expansion function per fault kind, registered in ``KINDS`` with how long the kind holds: a
new fault kind is one function and one registry line. Each function gets the fault's
``FaultContext`` (its start, end, anchor and label worked out once) and adds its events with
``event`` and the spans the overlap checks judge with ``hold``. A fault naming a multipath link
(``east-west``) acts on every path of it, one naming a path (``east-west/1``) on that path
(``Scenario.links_named``). A burst loss at a time is a change of the link's settings
(testbed.plan.timeline.settings builds it); one ``after`` an iteration is built here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from testbed.core.syntax import duration_text, percent_text
from testbed.plan.directions import link_directions
from testbed.plan.timeline.model import (
    ENDS,
    FOREVER,
    STARTS,
    Builder,
    Change,
    Event,
    Interval,
    configured_states,
    full_changes,
)

if TYPE_CHECKING:
    from testbed.config.wan import WanLink


def fault_start(f: Any) -> float:
    """A fault's start: its ``at``, or its offset after its iteration."""
    return f.at if f.at is not None else f.after.offset


def fault_length(f: Any) -> float:
    """How long a fault holds, from its start (inf: a gateway never restored)."""
    return KINDS[f.kind].length(f) if f.kind in KINDS else f.duration


def _span(f: Any, length: float) -> str:
    """'12..14 s' or 'iteration 3 + 0.05..2.05 s' (for overlap messages)."""
    end = "never" if not math.isfinite(length) else f"{fault_start(f) + length:g} s"
    if f.after is not None:
        return f"iteration {f.after.iteration} + {f.after.offset:g} s .. {end}"
    return f"{f.at:g} s .. {end}"


@dataclass
class FaultContext:
    """Fault ``j`` being expanded: when it starts and ends, what it acts on, where it is written."""

    b: Builder
    j: int
    f: Any
    paths: list[WanLink]  # the link's paths it names (none for a fault without a link)
    start: float
    end: float
    anchor: int | None  # the iteration it counts from (None: from the clock origin)
    where: str  # faults[j]
    label: str  # "blackhole 12 s .. 14 s"

    def event(
        self,
        at: float,
        prio: int,
        action: str,
        link: str | None,
        dirs: Iterable[str],
        what: str,
        cluster: str | None = None,
        changes: tuple[Change, ...] = (),
    ) -> None:
        event = Event(
            at, self.anchor, action, "fault", self.j, link, cluster, tuple(dirs), changes, what
        )
        self.b.add(at, self.anchor, prio, event)

    def hold(self, scope: tuple[str, str]) -> None:
        """The fault holds ``scope`` from its start to its end (for the overlap checks)."""
        self.b.intervals.append(
            Interval(scope, self.start, self.end, self.anchor, self.where, self.label)
        )


def expand_fault(b: Builder, j: int, f: Any) -> None:
    """The events of fault ``j``, by its kind's expansion."""
    paths = b.scenario.links_named(f.link) if getattr(f, "link", None) else []
    start = fault_start(f)
    length = fault_length(f)
    anchor = None if f.after is None else f.after.iteration
    label = f"{f.kind} {_span(f, length)}"
    ctx = FaultContext(b, j, f, paths, start, start + length, anchor, f"faults[{j}]", label)
    KINDS[f.kind].expand(ctx)


# -- one expansion per fault kind -----------------------------------------------------------------


def _blackhole(ctx: FaultContext) -> None:
    _cut(ctx, [(p, ctx.f.direction) for p in ctx.paths], "")


def _partition(ctx: FaultContext) -> None:
    """A blackhole on every WAN link (or path) joining two of the groups."""
    b, f = ctx.b, ctx.f
    group = {c: g for g, members in enumerate(f.groups) for c in members}
    cut = [
        (link, "both")
        for link in b.scenario.wan_paths
        if all(c in group for c in link.between)
        and group[link.between[0]] != group[link.between[1]]
    ]
    if not cut:
        raise b.error(
            f"{ctx.where}.groups",
            "no WAN link joins two of these groups: the partition would cut nothing; "
            "links are: " + ", ".join(link.name for link in b.scenario.wan),
        )
    _cut(ctx, cut, " | ".join("[" + ", ".join(g) + "]" for g in f.groups))


def _cut(ctx: FaultContext, cut: list[tuple[WanLink, str]], groups: str) -> None:
    """Blackhole on and off on each (link, direction) of ``cut``; ``groups``: a partition's."""
    for link, which in cut:
        dirs = link_directions(link.between, which, link.path)
        side = "" if which == "both" else f" ({dirs[0]})"
        why = f"partition {groups}: " if groups else ""
        ctx.event(
            ctx.start,
            STARTS,
            "blackhole",
            link.name,
            dirs,
            f"{why}blackhole on ({duration_text(ctx.f.duration)}){side}",
        )
        ctx.event(ctx.end, ENDS, "unblackhole", link.name, dirs, f"{why}blackhole off{side}")
        for d in dirs:
            ctx.hold(("blackhole", d))


def _link_down(ctx: FaultContext) -> None:
    _down_up(ctx, [(ctx.start, ctx.f.duration, "")])


def _flap(ctx: FaultContext) -> None:
    f = ctx.f
    every = f.down + f.up
    _down_up(
        ctx, [(ctx.start + n * every, f.down, f"flap {n + 1}/{f.count}: ") for n in range(f.count)]
    )


def _down_up(ctx: FaultContext, downs: list[tuple[float, float, str]]) -> None:
    """Each path's ports down and up again at each (time, down for, text prefix) of ``downs``."""
    for link in ctx.paths:
        dirs = link_directions(link.between, "both", link.path)
        for t, down, prefix in downs:
            ctx.event(t, STARTS, "link_down", link.name, dirs,
                      f"{prefix}link down ({duration_text(down)})")  # fmt: skip
            ctx.event(t + down, ENDS, "link_up", link.name, dirs,
                      f"{prefix}link up (routes re-installed)")  # fmt: skip
        ctx.hold(("port", link.name))
        for c in link.between:
            ctx.b.intervals.append(
                Interval(
                    ("port-of", c),
                    ctx.start,
                    ctx.end,
                    ctx.anchor,
                    ctx.where,
                    f"{ctx.label} on {link.name}",
                )
            )


def _reset(ctx: FaultContext) -> None:
    for link in ctx.paths:
        dirs = link_directions(link.between, "both", link.path)
        ctx.event(
            ctx.start,
            STARTS,
            "reset",
            link.name,
            dirs,
            f"reset TCP crossing the link ({duration_text(ctx.f.duration)})",
        )
        ctx.event(ctx.end, ENDS, "unreset", link.name, dirs, "reset off")
        ctx.hold(("reset", link.name))


def _burst_loss(ctx: FaultContext) -> None:
    """The spans a burst loss holds; its events too when it starts ``after`` an iteration."""
    b, f = ctx.b, ctx.f
    i = next(n for n, w in enumerate(b.scenario.wan) if set(w.between) == set(ctx.paths[0].between))
    for link in ctx.paths:
        dirs = link_directions(link.between, f.direction, link.path)
        for d in dirs:
            ctx.hold(("burst", d))
        if ctx.anchor is not None:
            _anchored_burst(ctx, i, link, dirs)


def _anchored_burst(ctx: FaultContext, i: int, link: WanLink, dirs: tuple[str, ...]) -> None:
    """A burst loss `after` an iteration: its time relative to the link's schedule or trace is
    unknown before the run, so it cannot carry their state; alone it starts from the
    configured one."""
    b, j, f = ctx.b, ctx.j, ctx.f
    if link.schedule or link.trace is not None:
        raise b.error(
            f"faults[{j}].after",
            f"a burst_loss `after` an iteration cannot share link {link.name} with its "
            f"{'schedule' if link.schedule else 'trace'} (wan[{i}]): which comes first is "
            "unknown until the run; give it an `at` time",
        )
    configured = configured_states(b.plan, link)
    on = {k: v.copy() for k, v in configured.items()}
    for d in dirs:
        on[d].ge_p, on[d].ge_r = f.p, f.r
    changes_on = full_changes(on)
    changes_off = full_changes(configured)
    start = f.after.offset
    ctx.event(
        start,
        STARTS,
        "set",
        link.name,
        dirs,
        f"burst loss on: p {percent_text(f.p)}, r {percent_text(f.r)} "
        f"({duration_text(f.duration)})",
        changes=tuple(changes_on[d] for d in dirs),
    )
    ctx.event(
        start + f.duration,
        ENDS,
        "set",
        link.name,
        dirs,
        "burst loss off",
        changes=tuple(changes_off[d] for d in dirs),
    )


def _gateway_crash(ctx: FaultContext) -> None:
    f = ctx.f
    dirs = tuple(d.name for d in ctx.b.plan.wan if f.cluster in (d.src, d.dst))
    restore = (
        f"gateway {f.cluster} down (restored after {duration_text(f.restore_after)})"
        if f.restore_after is not None
        else f"gateway {f.cluster} down (never restored)"
    )
    ctx.event(ctx.start, STARTS, "gateway_down", None, dirs, restore, cluster=f.cluster)
    if f.restore_after is not None:
        ctx.event(
            ctx.end,
            ENDS,
            "gateway_up",
            None,
            dirs,
            f"gateway {f.cluster} up (routes re-installed)",
            cluster=f.cluster,
        )
    ctx.hold(("gateway", f.cluster))


def _duration(f: Any) -> float:
    return f.duration


def _flap_length(f: Any) -> float:
    return f.count * (f.down + f.up) - f.up


def _crash_length(f: Any) -> float:
    return FOREVER if f.restore_after is None else f.restore_after


class FaultKind(NamedTuple):
    expand: Callable[[FaultContext], None]  # adds the fault's events and held spans
    length: Callable[[Any], float] = _duration  # how long it holds, from its start


# fault kind (the schema's ``kind``) -> its expansion
KINDS: dict[str, FaultKind] = {
    "blackhole": FaultKind(_blackhole),
    "link_down": FaultKind(_link_down),
    "reset": FaultKind(_reset),
    "flap": FaultKind(_flap, _flap_length),
    "burst_loss": FaultKind(_burst_loss),
    "partition": FaultKind(_partition),
    "gateway_crash": FaultKind(_gateway_crash, _crash_length),
}
