"""The overlap checks: spans of one scope that contradict each other are a ``ScenarioError``
naming both (two blackholes or two downs on one link or direction, two resets, two burst losses
or a burst loss across a step that sets loss, two crashes of one gateway, a link brought down
while its gateway is crashed). PURE. Spans anchored to different iterations never overlap: an
iteration's start is known only at run time.
"""

from __future__ import annotations

from testbed.core.errors import ScenarioError
from testbed.plan.timeline.model import Builder, Interval

_WHY = {
    "blackhole": "the first to end would lift the other's blackhole early",
    "port": "the first link_up would bring the link back inside the other's down time",
    "reset": "the first to end would stop the other's resets early",
    "burst": "one Gilbert-Elliott loss model per direction at a time",
    "gateway": "the first gateway_up would restore the gateway inside the other crash",
}


def _overlap(a: Interval, c: Interval) -> bool:
    if a.anchor != c.anchor:
        return False  # iteration starts are known only at run time
    if a.start == a.end or c.start == c.end:  # a point (a step setting loss)
        p, span = (a, c) if a.start == a.end else (c, a)
        return span.start <= p.start < span.end
    return a.start < c.end and c.start < a.end


def _first_overlap(ivs: list[Interval]) -> tuple[Interval, Interval] | None:
    """Two overlapping intervals of one scope, if any: a sweep in start order per origin (a
    looping trace's rate-0 bins make thousands of intervals; all pairs would be slow)."""
    by_anchor: dict[int | None, list[Interval]] = {}
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


def check_overlaps(b: Builder) -> None:
    by_scope: dict[tuple[str, str], list[Interval]] = {}
    for iv in b.intervals:
        by_scope.setdefault(iv.scope, []).append(iv)
    pairs: list[tuple[Interval, Interval, str]] = []
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
