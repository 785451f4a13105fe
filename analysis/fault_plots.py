"""Report figures of a changing WAN (schedules, traces, faults; docs/faults.md). PURE: draws loaded
results.

This module owns the timeline figure: per run and WAN link, the configured rate of each
direction over time (steps from the events' new settings, starting from the resolved scenario)
with the achieved throughput (the bottleneck's byte counter, else the flows' goodput), the
configured delay and loss below it, the operations as bars coloured by outcome, the faults'
outages shaded and events as vertical lines. Same conventions as :mod:`analysis.plots` (its
style and panels; None when the data does not exist). Times are seconds since the run's first
operation's start (else its first event: analysis.faults.clock_origins).
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from analysis.events import applied_events, pair_outages, per_direction
from analysis.faults import FaultResults, clock_origins
from analysis.loader import Results
from analysis.plots import style as P
from analysis.trace_replay import goodput_by_direction

PLOT_NAMES = ("wan_timeline",)
MAX_TIMELINES = 4  # run × link timelines in one figure (3 rows each)
OUTCOME_COLOURS = {"ok": "tab:green", "error": "tab:orange", "timeout": "tab:red"}
SETTINGS = ("rate_bps", "delay_s", "loss")


def base_settings(resolved: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per WAN link name (``east-west``): its directions' configured ``rate_bps``, ``delay_s``,
    ``loss`` as the resolved scenario has them (``reverse`` overrides the b->a direction)."""
    out: dict[str, dict[str, Any]] = {}
    for wan in resolved.get("wan") or []:
        a, b = wan["between"]
        fwd = {"rate_bps": wan.get("rate"), "delay_s": wan.get("delay"), "loss": wan.get("loss")}
        rev = dict(fwd)
        for key, name in (("rate", "rate_bps"), ("delay", "delay_s"), ("loss", "loss")):
            value = (wan.get("reverse") or {}).get(key)
            if value is not None:
                rev[name] = value
        out[f"{a}-{b}"] = {f"{a}->{b}": fwd, f"{b}->{a}": rev}
    return out


def configured_steps(
    base: dict[str, Any], events: pd.DataFrame, direction: str, origin: float
) -> pd.DataFrame:
    """``t`` (s since origin) and each setting from the base on, changed by the ``set`` rows of
    ``direction`` (a NaN setting in a row keeps the previous value)."""
    rows = [{"t": -np.inf, **{k: base.get(k) for k in SETTINGS}}]
    events = per_direction(events)
    if not events.empty and "direction" in events:
        sets = events[(events["action"] == "set") & (events["direction"] == direction)]
        sets = sets.assign(_t=sets["applied_unix"].fillna(sets["scheduled_unix"]) - origin)
        sets = sets.dropna(subset=["_t"])  # skipped: never applied
        sets = sets.sort_values("_t", kind="stable")  # a trace's and a schedule's rows interleave
        t = sets["_t"]
        for when, (_, e) in zip(t, sets.iterrows(), strict=True):
            row = dict(rows[-1], t=float(when))
            for k in SETTINGS:
                if k in e and pd.notna(e[k]):
                    row[k] = float(e[k])
            rows.append(row)
    return pd.DataFrame(rows)


def _achieved(res: Results, results: str, run_id: str, direction: str, origin: float):
    q = res.queues
    if not q.empty:
        q = q[(q["results"] == results) & (q["run_id"] == run_id) & (q["direction"] == direction)]
        q = q.sort_values("time")
        if len(q) > 1:
            dt = np.diff(q["time"].to_numpy(float))
            rate = 8 * np.diff(q["bytes"].to_numpy(float)) / np.where(dt > 0, dt, np.nan)
            return q["time"].to_numpy(float)[1:] - origin, rate, "bottleneck counter"
    g = goodput_by_direction(res.flows_goodput)
    if not g.empty:
        g = g[(g["results"] == results) & (g["run_id"] == run_id)]
        if "direction" in g:
            g = g[g["direction"] == direction]
        if not g.empty:
            per_t = g.groupby("t")["goodput_bps"].sum()
            return per_t.index.to_numpy(float) - origin, per_t.to_numpy(float), "flows' goodput"
    return None


def plot_timeline(res: Results, fr: FaultResults) -> P.Plot | None:
    ev = res.events
    if ev.empty:
        return None
    panels: list[tuple[str, str, str, dict[str, Any]]] = []
    for key, _ in ev.groupby(["results", "run_id"], sort=False):
        results, run_id = cast(tuple[str, str], key)
        run = ((res.manifests.get(results) or {}).get("runs") or {}).get(run_id) or {}
        for link, dirs in base_settings(run.get("resolved") or {}).items():
            panels.append((results, run_id, link, dirs))
    if not panels:
        return None
    shown = panels[:MAX_TIMELINES]
    with P._style():
        fig = Figure(figsize=(11, 5.6 * len(shown)), layout="constrained")
        grid = fig.add_gridspec(3 * len(shown), 1, height_ratios=[3, 2, 1] * len(shown))
        for i, (results, run_id, link, dirs) in enumerate(shown):
            _timeline(fig, grid, i, res, fr, results, run_id, link, dirs)
    more = (
        f" {len(panels) - len(shown)} more run/link timeline(s) left out."
        if len(panels) > len(shown)
        else ""
    )
    return P.Plot(
        "wan_timeline",
        "WAN timeline: configured vs achieved, operations, faults",
        "Per run and WAN link, seconds since the first operation started. Top: configured rate "
        "per direction (steps from events.parquet) and the achieved wire rate (the bottleneck's "
        "byte counter per sample, else the bulk flows' goodput). Middle: configured one-way "
        "delay and loss. Bottom: each operation as a bar from its start to its end, coloured by "
        "outcome. Shaded: fault outages (blackhole, link down, gateway down); dashed lines: "
        "schedule steps and fault events." + more,
        fig,
    )


def _timeline(
    fig: Figure,
    grid: Any,
    i: int,
    res: Results,
    fr: FaultResults,
    results: str,
    run_id: str,
    link: str,
    dirs: dict[str, dict[str, Any]],
) -> None:
    ev = res.events[(res.events["results"] == results) & (res.events["run_id"] == run_id)]
    ops = fr.operations
    ops = ops[(ops["results"] == results) & (ops["run_id"] == run_id)] if not ops.empty else ops
    origin = clock_origins(ops, ev)[(results, run_id)]
    rate_ax = fig.add_subplot(grid[3 * i])
    delay_ax = fig.add_subplot(grid[3 * i + 1], sharex=rate_ax)
    ops_ax = fig.add_subplot(grid[3 * i + 2], sharex=rate_ax)
    end = float(ev["scheduled_unix"].max() - origin)
    if not ops.empty:
        end = max(end, float(ops["end"].max() - origin))
    colours = P._colours(list(dirs))
    loss_ax = delay_ax.twinx()
    for d, base in dirs.items():
        steps = configured_steps(base, ev, d, origin)
        t = np.clip(steps["t"].to_numpy(float), -1.0, None)
        t = np.append(t, end + 1.0)
        c = colours[d]
        for ax, col, scale, style in (
            (rate_ax, "rate_bps", 1e6, "-"),
            (delay_ax, "delay_s", 1e-3, "-"),
            (loss_ax, "loss", 1e-2, ":"),
        ):
            values = steps[col].astype(float).to_numpy() / scale
            ax.step(
                t,
                np.append(values, values[-1]),
                where="post",
                color=c,
                ls=style,
                label=f"{d} configured" if ax is rate_ax else d,
            )
        got = _achieved(res, results, run_id, d, origin)
        if got is not None:
            rate_ax.plot(
                got[0], got[1] / 1e6, color=c, alpha=0.45, lw=0.8, label=f"{d} achieved ({got[2]})"
            )
    _outages(ev, link, origin, end, (rate_ax, delay_ax, ops_ax))
    shown = applied_events(ev)
    for e in shown[shown["source"].isin(["schedule", "fault"])].itertuples(index=False):
        event_link = cast(str | float | None, e.link)  # NaN where the row names none
        if event_link not in (None, link) and not pd.isna(event_link):
            continue
        applied, scheduled = cast(float, e.applied_unix), cast(float, e.scheduled_unix)
        x = (applied if pd.notna(applied) else scheduled) - origin
        colour = "tab:red" if e.source == "fault" else "0.4"
        for ax in (delay_ax, ops_ax):
            ax.axvline(x, color=colour, ls="--", lw=0.8, alpha=0.7)
        P.mark_event(rate_ax, x, str(e.what), colour)
    for op in ops.itertuples(index=False):
        ops_ax.barh(
            0,
            cast(float, op.duration),
            left=cast(float, op.start) - origin,
            height=0.6,
            color=OUTCOME_COLOURS.get(cast(str, op.outcome), "0.5"),
            edgecolor="white",
            lw=0.5,
        )
    run_label = run_id if res.runs["results"].nunique() < 2 else f"{results} {run_id}"
    rate_ax.set(title=f"{run_label}: {link}", ylabel="Mbit/s")
    rate_ax.set_ylim(bottom=0)
    P._legend(rate_ax)
    delay_ax.set_ylabel("delay (ms)")
    loss_ax.set_ylabel("loss (%, dotted)")
    loss_ax.set_ylim(0, max(1.0, loss_ax.get_ylim()[1]))  # 0..1 % unless more
    delay_ax.set_ylim(bottom=0)
    delay_ax.legend(fontsize=6, loc="upper left")
    ops_ax.set_yticks([])
    ops_ax.set_xlabel("seconds since the first operation started")
    ops_ax.legend(
        handles=[Patch(color=c, label=o) for o, c in OUTCOME_COLOURS.items()],
        ncols=3,
        fontsize=6,
        loc="upper right",
    )
    ops_ax.set_xlim(-1.0, end + 1.0)


def _outages(ev: pd.DataFrame, link: str, origin: float, end: float, axes: tuple) -> None:
    """Shade each outage of this link (or its clusters' gateways), a fault's or a zero-rate
    trace bin's, from on to off (or the end of the plot)."""
    clusters = set(link.split("-"))
    cluster = ev["cluster"] if "cluster" in ev else pd.Series(None, index=ev.index)
    mine = applied_events(ev[(ev["link"] == link) | cluster.isin(clusters)])
    mine = mine.assign(_t=mine["applied_unix"].fillna(mine["scheduled_unix"]) - origin)
    mine = mine.sort_values("_t", kind="stable")
    for _, g in mine.groupby([mine["source"], mine["fault"].fillna(-1)], sort=False):
        for s, e, _icmp in pair_outages(g["action"], g["_t"], end + 1.0):
            for ax in axes:
                ax.axvspan(s, e, color="tab:red", alpha=0.12, lw=0)
