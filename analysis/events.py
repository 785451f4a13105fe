"""The event algebra of a changing WAN: which events happened, each fault's window and dark
intervals, and how late the events were applied. PURE (pandas over events.parquet).

``events`` has one row per event (``event``, ``source``, ``fault``, ``action``, ``link``,
``scheduled_unix``, ``applied_unix``, ``late_s``, ``error``, ``status``, ...); a ``set`` event
that changes several directions has one row per direction (:func:`per_direction` spreads a row
that lists them). A fault is the events sharing its ``fault`` index; its dark intervals are the
(on, off) pairs of :data:`OUTAGES` in time order. docs/faults.md ("Results and report") defines
each column; the fault verdicts, the trace replay and the routing failover read them from here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, SupportsInt, cast

import pandas as pd

from testbed.core.events import CLOSING, OUTAGES
from testbed.core.stats import quantile
from testbed.core.vocab import LATE_S


def applied_times(events: pd.DataFrame) -> pd.Series:
    applied = events.get("applied_unix", None)
    scheduled = events.get("scheduled_unix", None)
    if applied is None:
        assert scheduled is not None  # a column every events table has (testbed.core.results)
        return scheduled.astype(float)
    return applied.astype(float).fillna(scheduled) if scheduled is not None else applied


def directions_of(value: Any) -> list[str]:
    """An events row's ``directions``: a list, an array, or comma-joined text."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return []
    if isinstance(value, str):
        return [d.strip() for d in value.split(",") if d.strip()]
    return [str(d) for d in cast(Iterable[Any], value)]  # a list or an array


def applied_events(events: pd.DataFrame) -> pd.DataFrame:
    """One row per event action that happened: ``skipped`` rows (the workload ended first) and
    rows without a time go; a ``set`` written per direction counts once; an ``undone`` row (the
    runner ended a fault still in force when the run ended) is kept: it has its fault's event
    index but the closing action."""
    if events.empty:
        return events
    ev = events if "results" in events else events.assign(results="")
    if "status" in ev:
        ev = ev[ev["status"] != "skipped"]
    ev = ev[applied_times(ev).notna()]
    if "event" in ev:
        ev = ev.drop_duplicates(["results", "run_id", "event", "action"])
    return ev


def fault_windows(events: pd.DataFrame, specs: dict[int, Any] | None = None) -> pd.DataFrame:
    """One row per run and fault: ``start``, ``end`` (NaN: never ended), ``kind``, ``link``,
    ``intervals`` (dark intervals as (start, end or None, icmp) in unix time) and ``planned``.

    ``specs``: fault index -> the scenario's entry (a dict with ``kind``, ``duration``, ...) or
    just its kind; without one the kind is inferred from the actions. A fault whose closing
    event was never applied (the run ended first) ends, where its spec has a ``duration``, at
    start + duration (``planned`` True): the outage lasted at least that long. ``undone``: its
    end is the runner's undo when the run ended (the fault was still in force)."""
    cols = ["results", "run_id", "fault", "kind", "link", "start", "end", "intervals", "planned"]
    cols += ["undone"]
    if events.empty or "fault" not in events:
        return pd.DataFrame(columns=cols)
    ev = applied_events(events)
    ev = ev[ev["fault"].notna()].assign(_t=lambda d: applied_times(d))
    rows = []
    for key, g in ev.sort_values("_t", kind="stable").groupby(
        ["results", "run_id", "fault"], sort=False
    ):
        results, run_id, fault = cast(tuple[str, str, SupportsInt], key)
        spec = (specs or {}).get(int(fault))
        spec = spec if isinstance(spec, dict) else {"kind": spec} if spec else {}
        actions = list(g["action"])
        start = float(g["_t"].min())
        closes = actions[-1] in CLOSING or (
            set(actions) == {"set"} and g["_t"].nunique() > 1  # burst_loss: set, set back
        )
        end = float(g["_t"].max()) if closes else math.nan
        undone = bool(closes and "status" in g and g["status"].iloc[-1] == "undone")
        planned = False
        if math.isnan(end) and isinstance(spec.get("duration"), int | float):
            end, planned = start + float(spec["duration"]), True
        intervals = pair_outages(actions, g["_t"], None if math.isnan(end) else end)
        links = [x for x in dict.fromkeys(g.get("link", pd.Series(dtype=object))) if x]
        cluster = g["cluster"].dropna() if "cluster" in g else pd.Series(dtype=object)
        rows.append(
            {
                "results": results,
                "run_id": run_id,
                "fault": int(fault),
                "kind": spec.get("kind") or _infer_kind(actions, g),
                "link": ", ".join(str(x) for x in links)
                or (str(cluster.iloc[0]) if len(cluster) else None),
                "start": start,
                "end": end,
                "intervals": intervals,
                "planned": planned,
                "undone": undone,
            }
        )
    return pd.DataFrame(rows, columns=cols)


def pair_outages(
    actions: Iterable[str], times: Iterable[float], end: float | None = None
) -> list[tuple[float, float | None, bool]]:
    """(start, end, icmp) of each outage in a time-ordered run of actions: blackhole ..
    unblackhole, link_down .. link_up, gateway_down .. gateway_up; one still open ends at
    ``end`` (None: never)."""
    out: list[tuple[float, float | None, bool]] = []
    open_: dict[str, float] = {}
    for action, t in zip(actions, times, strict=True):
        if action in OUTAGES:
            open_.setdefault(action, float(t))
        for on, (off, icmp) in OUTAGES.items():
            if action == off and on in open_:
                out.append((open_.pop(on), float(t), icmp))
    out += [(t, end, OUTAGES[on][1]) for on, t in open_.items()]
    return sorted(out, key=lambda x: x[0])


def _infer_kind(actions: list[str], g: pd.DataFrame) -> str:
    if "link_down" in actions:
        return "flap" if actions.count("link_down") > 1 else "link_down"
    if "blackhole" in actions:
        links = g["link"].nunique() if "link" in g else 1
        return "partition" if links > 1 else "blackhole"
    if "reset" in actions:
        return "reset"
    if "gateway_down" in actions:
        return "gateway_crash"
    return "burst_loss" if "set" in actions else actions[0]


def per_direction(events: pd.DataFrame) -> pd.DataFrame:
    """``set`` rows one per direction: a row without ``direction`` whose ``directions`` lists
    several is repeated for each (the same settings for each; a runner writing one row per event
    then reads like one writing a row per direction). Other rows are kept as they are."""
    if events.empty or "directions" not in events:
        return events
    if "direction" not in events:
        events = events.assign(direction=None)
    todo = (events["action"] == "set") & events["direction"].isna()
    todo &= events["directions"].map(lambda d: bool(directions_of(d)))
    if not todo.any():
        return events
    spread = events[todo].assign(direction=events.loc[todo, "directions"].map(directions_of))
    spread = spread.explode("direction")
    return pd.concat([events[~todo], spread]).sort_index(kind="stable").reset_index(drop=True)


def by_run(events: pd.DataFrame) -> list[tuple[tuple[str, str], pd.DataFrame]]:
    if events.empty:
        return []
    if "results" not in events:
        events = events.assign(results="")
    return cast(
        list[tuple[tuple[str, str], pd.DataFrame]],
        list(events.groupby(["results", "run_id"], sort=False)),
    )


def run_rows(df: pd.DataFrame | None, results: str, run_id: str) -> pd.DataFrame:
    if df is None or df.empty:
        return pd.DataFrame()
    mine = df[df["run_id"] == run_id]
    return mine[mine["results"] == results] if "results" in mine and results else mine


def lateness_table(events: pd.DataFrame) -> pd.DataFrame:
    """Per run: ``events`` applied (the runner's undo rows at the end of a run aside), ``late``
    (applied more than 20 ms after schedule), ``late_p50_s``, ``late_p99_s``, ``late_max_s``,
    ``errors`` (events whose operation failed), ``skipped`` (never came: the workload ended)."""
    cols = ["results", "run_id", "events", "late", "late_p50_s", "late_p99_s", "late_max_s",
            "errors", "skipped"]  # fmt: skip
    if events.empty or "late_s" not in events:
        return pd.DataFrame(columns=cols)
    ev = applied_events(events)
    if "status" in ev:  # the runner's undo at the end of a run has no schedule
        ev = ev[ev["status"] != "undone"]
    skipped = _count_status(events, "skipped")
    rows = []
    for key, g in ev.groupby(["results", "run_id"], sort=False):
        results, run_id = cast(tuple[str, str], key)
        late = g["late_s"].dropna().astype(float).tolist()
        errors = g["error"].fillna("").astype(str).str.len().gt(0).sum() if "error" in g else 0
        rows.append(
            (
                results,
                run_id,
                len(g),
                sum(x > LATE_S for x in late),
                quantile(late, 0.5) if late else None,
                quantile(late, 0.99) if late else None,
                max(late) if late else None,
                int(errors),
                skipped.get((results, run_id), 0),
            )
        )
    return pd.DataFrame(rows, columns=cols)


def _count_status(events: pd.DataFrame, status: str) -> dict[tuple[str, str], int]:
    if "status" not in events:
        return {}
    ev = events if "results" in events else events.assign(results="")
    mine = ev[ev["status"] == status]
    if "event" in mine:
        mine = mine.drop_duplicates(["results", "run_id", "event"])
    return cast(dict[tuple[str, str], int], mine.groupby(["results", "run_id"]).size().to_dict())
