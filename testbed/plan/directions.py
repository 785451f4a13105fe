"""A WAN link's direction names, and which directions change while a run goes on. PURE.

A direction's name is ``testbed.core.direction.Direction``'s text (``east->west``,
``east->west/1`` for a path of a multipath link). The plan flags the directions a schedule, a
trace or a fault changes (their emulation must exist from bring-up) and the timeline names the
directions each event acts on with ``link_directions``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from testbed.core.direction import Direction

if TYPE_CHECKING:
    from testbed.config.scenario import Scenario


def link_directions(
    between: tuple[str, str], which: str, path: int | None = None
) -> tuple[str, ...]:
    """A WAN link's direction names for ``forward`` (between[0] -> between[1]), ``reverse`` or
    ``both``; a path of a multipath link has its index after a slash (``east->west/1``)."""
    forward = Direction(between[0], between[1], path)
    return {
        "forward": (str(forward),),
        "reverse": (str(forward.reverse()),),
        "both": (str(forward), str(forward.reverse())),
    }[which]


PROPAGATION = ("delay", "jitter", "loss", "reorder")


def changing_directions(scenario: Scenario) -> set[str]:
    """WAN directions whose propagation (delay, jitter, loss, reorder, burst loss) a schedule, a
    trace or a fault changes while the workload runs (``WanDirection.changes_later``): their
    emulation must exist from bring-up. Rate changes and blackholes need none (HTB, iptables).
    A csv trace may carry delay and loss: the plan does not read files, so it counts."""
    out: set[str] = set()
    for link in scenario.wan_paths:
        for step in link.schedule:
            if any(getattr(step, f) is not None for f in PROPAGATION):
                out.update(link_directions(link.between, step.direction, link.path))
        if link.trace is not None and link.trace.format == "csv":
            out.update(link_directions(link.between, link.trace.direction, link.path))
    for f in scenario.faults:
        if f.kind == "burst_loss":
            for p in scenario.links_named(f.link):
                out.update(link_directions(p.between, f.direction, p.path))
    return out


def traced_directions(scenario: Scenario) -> set[str]:
    """WAN directions a trace replays on (``WanDirection.traced``)."""
    return {
        d
        for link in scenario.wan_paths
        if link.trace is not None
        for d in link_directions(link.between, link.trace.direction, link.path)
    }


def loss_later(scenario: Scenario) -> bool:
    """Whether a schedule step, a csv trace (it may carry loss) or a burst loss brings loss to a
    link while it runs: the hosts must then send wire-sized packets from bring-up (render.py)."""
    steps = any(s.loss for link in scenario.wan_paths for s in link.schedule)
    traces = any(
        link.trace is not None and link.trace.format == "csv" for link in scenario.wan_paths
    )
    return steps or traces or any(f.kind == "burst_loss" for f in scenario.faults)
