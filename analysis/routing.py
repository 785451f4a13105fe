"""Failover of multipath WAN links: when the routing noticed a path's fault and moved off it.

From ``events.parquet`` (the faults as applied) and ``routing.parquet`` (the gateways' FIB, BFD
and BGP events, :mod:`testbed.trace.routing`), one row per fault on one or more paths of a
multipath link: what detected it, when the routes moved off the path and when they had it back
(the columns: docs/multipath.md, "Routing events and failover").

The stall of the operation running through the fault is the fault table's (``stall_s``,
:mod:`analysis.faults`); the failover table sits beside it. Times are the run's clock (unix
seconds) on both sides: FRR's logs and ``ip -ts monitor`` stamp with the wall clock.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from analysis.events import fault_windows
from testbed.core.direction import Direction

FAILOVER_COLUMNS = [
    "results", "run_id", "fault", "kind", "link", "start", "end",
    "detected_by", "detect_s", "moved_s", "restored_s",
]  # fmt: skip


ROUTING_COLUMNS = ["results", "run_id", "time", "gateway", "source", "event", "link", "paths"]
# A BGP session goes down by itself only when its hold timer expires (seconds); one that BFD
# takes down sends its notification within a millisecond of BFD's "control-expired", and the two
# daemons stamp their own logs: bgpd's line came 66 us before bfdd's in a run. A BFD down this
# close after the first down detected the fault.
BFD_CAUSE_S = 0.1


def path_directions(link: str) -> set[str]:
    """``east-west/1`` -> {``east->west/1``, ``west->east/1``}; a link without a path: empty."""
    base, _, path = link.partition("/")
    if not path or "-" not in base:
        return set()
    a, b = base.split("-", 1)
    d = Direction(a, b, int(path))
    return {str(d), str(d.reverse())}


def _uses(paths: Any, dirs: set[str]) -> bool:
    return bool(isinstance(paths, str) and dirs & set(filter(None, paths.split(","))))


def _fib_times(fib: pd.DataFrame, dirs: set[str], t0: float, using: bool) -> float | None:
    """The time from ``t0`` until every gateway whose route before ``t0`` (did not) use
    ``dirs`` had a route that does (not), when ``using`` is False (True); None if some never."""
    latest = None
    for _, g in fib.groupby("gateway", sort=False):
        g = g.sort_values("time")
        before = g[g["time"] < t0]
        was = _uses(before["paths"].iloc[-1], dirs) if not before.empty else not using
        if was == using:
            continue  # this gateway's route was already that way
        after = g[(g["time"] >= t0) & (g["paths"].map(lambda p: _uses(p, dirs)) == using)]
        if after.empty:
            return None
        t = float(after["time"].iloc[0]) - t0
        latest = t if latest is None else max(latest, t)
    return latest


def failover_table(events: pd.DataFrame, routing: pd.DataFrame) -> pd.DataFrame:
    """One row per run and path fault (columns :data:`FAULT_COLUMNS`, module docstring)."""
    windows = fault_windows(events.assign(results=events.get("results", "")))
    rows = []
    if "results" not in routing:
        routing = routing.assign(results="")
    routing = routing.reindex(columns=list(dict.fromkeys([*routing.columns, *ROUTING_COLUMNS])))
    for _, f in windows.iterrows():
        links = [x.strip() for x in str(f["link"] or "").split(",")]
        dirs = set().union(*(path_directions(x) for x in links)) if links else set()
        if not dirs:
            continue
        r = routing[(routing["results"] == f["results"]) & (routing["run_id"] == f["run_id"])]
        start, end = float(f["start"]), float(f["end"])
        row = {c: f.get(c) for c in ("results", "run_id", "fault", "kind", "link", "start")}
        row["end"] = None if math.isnan(end) else end
        down = r[
            r["source"].isin(["bfd", "bgp"])
            & (r["event"] == "down")
            & r["link"].isin(links)
            & (r["time"] >= start)
        ].sort_values("time")
        if not down.empty:
            first = float(down["time"].iloc[0])
            bfd = down[(down["source"] == "bfd") & (down["time"] <= first + BFD_CAUSE_S)]
            row["detected_by"] = "bfd" if not bfd.empty else down["source"].iloc[0]
            row["detect_s"] = first - start
        fib = r[r["source"] == "fib"]
        if not fib.empty:
            moved = _fib_times(fib, dirs, start, using=False)
            if moved is not None and (math.isnan(end) or start + moved <= end):
                row["moved_s"] = moved
            if not math.isnan(end):
                row["restored_s"] = _fib_times(fib, dirs, end, using=True)
        rows.append(row)
    return pd.DataFrame(rows, columns=FAILOVER_COLUMNS)


def failover_metrics(events: pd.DataFrame, routing: pd.DataFrame) -> dict[str, Any]:
    """The first path fault's failover for a run's summary row (``failover_detect_s``,
    ``failover_moved_s``, ``failover_restored_s``); empty without a path fault."""
    table = failover_table(events, routing)
    if table.empty:
        return {}
    first = table.sort_values("start").iloc[0]
    return {
        f"failover_{c}": (None if pd.isna(first[c]) else float(first[c]))
        for c in ("detect_s", "moved_s", "restored_s")
    }
