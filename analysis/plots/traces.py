"""The trace figures: the WAN bottleneck queues (backlog, drops, CE marks) and the TCP state of
the WAN flows (cwnd, srtt, delivery rate) over time. PURE (draws loaded results).

Traces are drawn against the time since the run's first timed iteration began (tcp_info and
queue sampling starts a moment before the ranks, so early samples are negative), zoomed to where
the queue was busy.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.typing import LineStyleType

from analysis.loader import Results
from analysis.plots.congestion import _describe, _varying
from analysis.plots.style import (
    LINESTYLES,
    MAX_PANELS,
    Plot,
    _colours,
    _figure,
    _legend,
    _spans_decade,
    _style,
)
from analysis.tables import data_sockets

PLOT_NAMES = ("queues", "tcp")


def _run_t0(res: Results) -> dict[tuple[str, str], float]:
    """(results, run_id) -> unix time of the run's first timed iteration."""
    if res.iterations.empty:
        return {}
    first = res.iterations.groupby(["results", "run_id"])["start"].min()
    return {cast(tuple[str, str], k): float(v) for k, v in first.items()}


def _relative_time(df: pd.DataFrame, res: Results) -> pd.Series:
    t0 = _run_t0(res)
    fallback = df.groupby(["results", "run_id"])["time"].transform("min")
    base = [
        t0.get((s, r), f) for s, r, f in zip(df["results"], df["run_id"], fallback, strict=True)
    ]
    return df["time"] - np.asarray(base, dtype=float)


def _run_labels(res: Results, keep: list[str]) -> dict[tuple[str, str], str]:
    """A short legend label per run from the settings that vary among ``keep``."""
    runs = res.runs
    vary = _varying(runs[runs["status"] == "ok"], keep) if not runs.empty else []
    out = {}
    for r in runs.itertuples():
        parts = [_describe(c, getattr(r, c)) for c in vary]
        out[(r.results, r.run_id)] = ", ".join(parts) or r.run_id
    return out


def _active_window(df: pd.DataFrame, busy: pd.Series, margin: float = 0.3) -> tuple[float, float]:
    """The span of relative times ``t`` where ``busy`` holds, widened by ``margin`` seconds (a
    trace runs from before the ranks start until they exit: mostly idle)."""
    t = df.loc[busy, "t"] if busy.any() else df["t"]
    return float(t.min()) - margin, float(t.max()) + margin


def plot_queues(res: Results) -> Plot | None:
    """Bottleneck backlog and cumulative drops/marks over time, one row per marking profile."""
    if not res.has("queues"):
        return None
    q = res.queues.merge(res.runs[["results", "run_id", "aqm_profile"]], on=["results", "run_id"])
    if q.empty:
        return None
    q = q.assign(t=_relative_time(q, res)).sort_values("time")
    group = q.groupby(["results", "run_id", "direction"])
    q["drops"] = q["dropped"] - group["dropped"].transform("first")
    q["marks"] = q["marked"].astype(float) - group["marked"].transform("first").astype(float)
    changed = group[["drops", "marks"]].diff().fillna(0).abs().sum(axis=1) > 0
    window = _active_window(q, (q["backlog_bytes"] > 0) | changed)
    profiles = list(dict.fromkeys(q["aqm_profile"].fillna("droptail")))[:MAX_PANELS]
    labels = _run_labels(res, ["congestion", "wan_loss", "rtt_s", "ecn", "results"])
    directions = list(dict.fromkeys(q["direction"]))
    styles: dict[str, LineStyleType] = {
        d: LINESTYLES[i % len(LINESTYLES)] for i, d in enumerate(directions)
    }
    with _style():
        fig, axes = _figure(2 * len(profiles), 2, width=5.6)
        for k, profile in enumerate(profiles):
            sub = q[q["aqm_profile"].fillna("droptail") == profile]
            ax_b, ax_c = axes[2 * k], axes[2 * k + 1]
            runs = list(dict.fromkeys(zip(sub["results"], sub["run_id"], strict=True)))
            colours = _colours(runs)
            for (source, run_id, direction), g in sub.groupby(
                ["results", "run_id", "direction"], sort=False
            ):
                c, ls = colours[(source, run_id)], styles[direction]
                ax_b.plot(g["t"], g["backlog_bytes"] / 1e3, ls, color=c, lw=1)
                ax_c.plot(g["t"], g["drops"], ls, color=c, lw=1)
                if g["marks"].notna().any():
                    ax_c.plot(g["t"], g["marks"], ls, color=c, marker=".", markevery=0.1, lw=1.5)
            # Legends from proxies: one entry per run (colour), per direction (line style) and
            # per counter, instead of one per drawn line.
            run_handles = [
                Line2D([], [], color=colours[r], label=labels.get(r, r[1])) for r in runs
            ]
            dir_handles = [
                Line2D([], [], color="black", linestyle=styles[d], label=d) for d in directions
            ]
            counter_handles = [
                Line2D([], [], color="grey", label="drops"),
                Line2D([], [], color="grey", marker=".", lw=1.5, label="CE marks"),
            ]
            _legend(ax_b, handles=run_handles + dir_handles)
            _legend(ax_c, handles=counter_handles + dir_handles)
            ax_b.set_ylabel("backlog (KB)")
            ax_c.set_ylabel("count since first sample (packets)")
            ax_b.set_title(f"queue occupancy — {profile}")
            ax_c.set_title(f"drops and CE marks — {profile}")
            for ax in (ax_b, ax_c):
                ax.set_xlim(*window)
                ax.set_xlabel("time since the first timed iteration (s)")
        fig.suptitle("WAN bottleneck queue per marking profile")
    caption = (
        "queues.parquet: backlog of each WAN direction's bottleneck queue (colour per run, line "
        "style per direction) and its drops (overflow, AQM; the delay line adds random loss) and "
        "CE marks counted from the first sample; zoomed to where the queue was busy."
    )
    return Plot("queues", "Queue occupancy, drops and marks", caption, fig)


def plot_tcp(res: Results) -> Plot | None:
    """cwnd, srtt and delivery rate of the WAN data sockets over time, a column per congestion
    control."""
    data = data_sockets(res)
    if data.empty:
        return None
    data = data.merge(res.runs[["results", "run_id", "congestion"]], on=["results", "run_id"])
    data = data.assign(t=_relative_time(data, res)).sort_values("time")
    ccs = list(dict.fromkeys(sorted(data["congestion"].dropna().unique())))[:4]
    labels = _run_labels(res, ["wan_loss", "rtt_s", "aqm_profile", "ecn", "results"])
    metrics = [
        ("cwnd", 1.0, "cwnd (segments)"),
        ("srtt_ms", 1.0, "smoothed RTT (ms)"),
        ("delivery_rate_bps", 1e6, "delivery rate (Mbit/s)"),
    ]
    with _style():
        fig = Figure(figsize=(5.2 * len(ccs), 2.8 * len(metrics)), layout="constrained")
        axes = fig.subplots(len(metrics), len(ccs), squeeze=False)
        for j, cc in enumerate(ccs):
            sub = data[data["congestion"] == cc]
            keys = list(dict.fromkeys(zip(sub["results"], sub["run_id"], strict=True)))
            colours = _colours(keys)
            hosts = list(dict.fromkeys(sub["host"]))
            for (source, run_id, host, peer), g in sub.groupby(
                ["results", "run_id", "host", "peer_host"], sort=False
            ):
                ls = LINESTYLES[hosts.index(host) % len(LINESTYLES)]
                name = f"{labels.get((source, run_id), run_id)} {host}->{peer}"
                for i, (col, scale, _) in enumerate(metrics):
                    axes[i][j].plot(
                        g["t"], g[col] / scale, ls, color=colours[(source, run_id)], label=name
                    )
            for i, (col, _, ylabel) in enumerate(metrics):
                ax = axes[i][j]
                ax.set_ylabel(ylabel)
                ax.set_title(f"{cc}: {col}")
                if col != "srtt_ms" and _spans_decade(sub[col]) and (sub[col] > 0).all():
                    ax.set_yscale("log")
            axes[-1][j].set_xlabel("time since the first timed iteration (s)")
            _legend(axes[0][j])
        fig.suptitle("TCP state of the WAN flows (tcp_info)")
    caption = (
        "tcp.parquet, for each run and host pair across the WAN the socket that sent the most "
        "(gloo's data connection): congestion window, smoothed RTT and the kernel's delivery "
        "rate estimate; colour per run, line style per sending host."
    )
    return Plot("tcp", "cwnd, srtt and delivery rate of the WAN flows", caption, fig)
