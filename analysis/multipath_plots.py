"""Report figure of multipath WAN links (docs/multipath.md). PURE: draws loaded results.

This module owns the per-path throughput timeline: per run and link direction (``east->west``)
one panel with a line per path (the path's shaper counter, wire Mbit/s), the rate a path's own
schedule or trace set it to as a dashed step line in its colour, the collectives' windows as
bands, fault and schedule events as dashed lines, and the moves of flows seen in
flowpaths.parquet as ticks on the x axis, the sending gateway's routing events (route changes,
sessions down: routing.parquet) as purple lines. Same conventions as :mod:`analysis.plots`.
"""

from __future__ import annotations

from typing import Any, cast

import pandas as pd
from matplotlib.figure import Figure

from analysis.events import applied_events
from analysis.loader import Results
from analysis.multipath import flow_paths, operation_windows, path_set_rates, path_throughput
from analysis.plots import style as P
from testbed.core.direction import Direction

PLOT_NAMES = ("path_timeline",)
MAX_PANELS = 8


def _routing_marks(
    ax: object, routing: pd.DataFrame, results: str, run_id: str, base: str, origin: float
) -> None:
    """The routing events of the direction's sending gateway: its route's path set changing
    (dotted, labelled with the paths it then had) and BFD/BGP sessions going down."""
    if routing.empty:
        return
    r = routing[(routing["results"] == results) & (routing["run_id"] == run_id)]
    gateway = Direction.parse(base).src + "-gw"
    r = r[r["gateway"] == gateway]
    for e in r.itertuples(index=False):
        if e.source == "fib":
            paths = ",".join(p.rsplit("/", 1)[-1] for p in str(e.paths or "").split(",") if p)
            label = f"route: paths {paths or 'none'}"
        elif e.event == "down":
            label = f"{e.source} down {e.link}"
        else:
            continue
        P.mark_event(ax, cast(float, e.time) - origin, label, "tab:purple", y=0.6)


def _set_rate_steps(
    ax: Any,
    set_rates: pd.DataFrame,
    key: tuple[str, str, str, int],
    span: tuple[float, float],
    colour: Any,
) -> None:
    """The rate path ``key`` was set to (its schedule steps, its trace bins), held from each
    set to the next and to the panel's last sample, as a dashed step line."""
    results, run_id, base, path = key
    r = set_rates[
        (set_rates["results"] == results)
        & (set_rates["run_id"] == run_id)
        & (set_rates["base"] == base)
        & (set_rates["path"] == path)
    ]
    if r.empty:
        return
    origin, end = span
    t = [*(r["time"] - origin), max(end, float(r["time"].max())) - origin]
    y = [*(r["rate_bps"] / 1e6), float(r["rate_bps"].iloc[-1]) / 1e6]
    ax.step(t, y, where="post", color=colour, lw=0.8, ls="--", label=f"path {path} set to")


def plot_path_timeline(res: Results) -> P.Plot | None:
    tp = path_throughput(res.queues)
    if tp.empty:
        return None
    panels = cast(
        list[tuple[tuple[str, str, str], pd.DataFrame]],
        list(tp.groupby(["results", "run_id", "base"], sort=False)),
    )
    shown = panels[:MAX_PANELS]
    windows = operation_windows(res.collectives)
    ev = applied_events(res.events) if not res.events.empty else res.events
    moves = flow_paths(res.flowpaths)
    set_rates = path_set_rates(res.events)
    with P._style():
        fig = Figure(figsize=(11, 2.8 * len(shown)), layout="constrained")
        axes = fig.subplots(len(shown), 1, squeeze=False).ravel()
        for ax, ((results, run_id, base), g) in zip(axes, shown, strict=True):
            origin = float(g["time"].min())
            span = (origin, float(g["time"].max()))
            paths = sorted(g["path"].dropna().unique())
            colours = P._colours(paths)
            for path in paths:
                s = g[g["path"] == path]
                ax.plot(
                    s["time"] - origin,
                    s["bps"] / 1e6,
                    color=colours[path],
                    lw=0.9,
                    label=f"path {path}",
                )
                _set_rate_steps(ax, set_rates, (results, run_id, base, path), span, colours[path])
            w = windows[(windows["results"] == results) & (windows["run_id"] == run_id)]
            for i, row in enumerate(w.itertuples(index=False)):
                start, end = cast(float, row.start), cast(float, row.end)
                ax.axvspan(start - origin, end - origin, color="0.85", alpha=0.5, lw=0)
                ax.annotate(
                    f"{row.algorithm}",
                    (start - origin, 1.0 - 0.08 * (i % 2)),
                    xycoords=("data", "axes fraction"),
                    va="top",
                    fontsize=6,
                    color="0.3",
                )
            if not ev.empty:
                mine = ev[(ev["results"] == results) & (ev["run_id"] == run_id)]
                mine = mine[mine["source"].isin(["schedule", "fault"])]
                for e in mine.itertuples(index=False):
                    applied, scheduled = cast(float, e.applied_unix), cast(float, e.scheduled_unix)
                    t = applied if pd.notna(applied) else scheduled
                    colour = "tab:red" if e.source == "fault" else "0.4"
                    P.mark_event(ax, t - origin, str(e.what), colour, y=0.98)
            if not moves.empty:
                m = moves[
                    (moves["results"] == results)
                    & (moves["run_id"] == run_id)
                    & (moves["base"] == base)
                ]
                ts = [t - origin for at in m["moved_at"] for t in at]
                if ts:
                    ax.plot(ts, [0] * len(ts), "|", color="k", ms=10, label="a flow moved")
            _routing_marks(ax, res.routing, results, run_id, base, origin)
            run_label = run_id if res.runs["results"].nunique() < 2 else f"{results} {run_id}"
            ax.set(title=f"{run_label}: {base}", ylabel="Mbit/s (wire)")
            ax.set_ylim(bottom=0)
            P._legend(ax)
        axes[-1].set_xlabel("seconds since the first counter sample")
    more = (
        f" {len(panels) - len(shown)} more panel(s) left out." if len(panels) > len(shown) else ""
    )
    return P.Plot(
        "path_timeline",
        "Multipath links: throughput per path",
        "Per run and link direction: the wire rate each path's shaper sent (queues.parquet "
        "counters, per sample interval); dashed in a path's colour: the rate its own schedule "
        "or trace set it to (events.parquet). Grey bands: the collectives' timed iterations; "
        "dashed "
        "lines: schedule steps and faults (red), the sending gateway's routing events (purple: "
        "its route's paths changing, a BFD or BGP session down; routing.parquet); ticks on "
        "the axis: a flow moved to another path (flowpaths.parquet)." + more,
        fig,
    )
