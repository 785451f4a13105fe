"""Report figures with matplotlib. PURE: draws loaded results, never imports ``testbed``.

This module owns what each figure of a report shows. Every ``plot_*`` function takes a
:class:`analysis.loader.Results` (and the tables of :mod:`analysis.tables` it needs) and returns a
:class:`Plot` holding a ``matplotlib.figure.Figure``, or None when the data for it does not
exist (one message size, no rate sweep, no traces, ...). Figures are made without pyplot (no
global state, no display needed: PNGs are rendered by Agg) under :data:`STYLE`: titles, units on
every axis, legends, grids, log scales where values span decades.

Traces are drawn against the time since the run's first timed iteration began (tcp_info and
queue sampling starts a moment before the ranks, so early samples are negative).
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogFormatterSciNotation

from analysis.loader import Results, short_value
from analysis.tables import data_sockets, point_label, point_params
from testbed.core.units import format_duration, format_size

STYLE = {
    "figure.dpi": 100,
    "savefig.dpi": 100,
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "legend.fontsize": 7,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINESTYLES = ("-", "--", ":", "-.")
PLOT_NAMES = ("time_vs_size", "busbw_vs_rate", "speedup", "congestion", "throughput_delay")
PLOT_NAMES += ("queues", "tcp")
MAX_PANELS = 12  # beyond this a figure is unreadable; the caption says what was left out


@dataclass
class Plot:
    """One figure: ``name`` (file stem), ``title``, ``caption`` (what it shows, how to read it)."""

    name: str
    title: str
    caption: str
    figure: Figure

    def png(self) -> bytes:
        with mpl.rc_context(STYLE):
            buf = io.BytesIO()
            self.figure.savefig(buf, format="png")
        return buf.getvalue()


@contextmanager
def _style() -> Iterator[None]:
    with mpl.rc_context(STYLE):
        yield


def _figure(panels: int, ncols: int, width: float = 4.6, height: float = 3.4) -> tuple[Figure, Any]:
    ncols = max(1, min(ncols, panels))
    nrows = math.ceil(panels / ncols)
    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in axes[panels:]:
        ax.set_visible(False)
    return fig, axes


def _colours(keys: list[Any]) -> dict[Any, Any]:
    cmap = mpl.colormaps["tab10"]
    return {k: cmap(i % 10) for i, k in enumerate(keys)}


def _size_text(n: float, _pos: Any = None) -> str:
    return format_size(n, "g")


def _time_text(seconds: float, _pos: Any = None) -> str:
    return format_duration(seconds, "g")


class _PlainLogFormatter(LogFormatterSciNotation):
    """Log-axis labels as plain text ('60 ms', '6') instead of 6×10^-2, on exactly the ticks
    matplotlib's own log formatter would label (it decides which minor ticks get one)."""

    def __init__(self, fmt: Any) -> None:
        super().__init__(labelOnlyBase=False)
        self._fmt = fmt

    def __call__(self, x: float, pos: Any = None) -> str:
        return self._fmt(x) if super().__call__(x, pos) else ""


def _plain_log(axis: Any, fmt: Any = None) -> None:
    fmt = fmt or (lambda v, _p=None: f"{v:g}")
    axis.set_major_formatter(_PlainLogFormatter(fmt))
    axis.set_minor_formatter(_PlainLogFormatter(fmt))


def mark_event(ax: Any, x: float, text: str, colour: str, y: float = 1.0) -> None:
    """A vertical line at ``x`` labelled ``text`` along it (a schedule step, a fault)."""
    ax.axvline(x, color=colour, ls="--", lw=0.8, alpha=0.7)
    ax.annotate(
        text,
        (x, y),
        xycoords=("data", "axes fraction"),
        rotation=90,
        va="top",
        ha="right",
        fontsize=6,
        color=colour,
    )


def _legend(ax: Any, **kw: Any) -> None:
    """A legend inside the axes while it is short, beside them once it would hide the data."""
    handles, _ = ax.get_legend_handles_labels()
    count = len(kw.get("handles") or handles)
    if count > 6:
        kw.update(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    ax.legend(**kw)


def _combos(df: pd.DataFrame, limit: int = 4) -> list[tuple[Any, ...]]:
    """(collective, algorithm, size) groups with the most runs first: where the sweep is."""
    sizes = df.groupby(["collective", "algorithm", "size"]).size()
    return list(sizes.sort_values(ascending=False, kind="stable").index[:limit])


def _spans_decade(values: pd.Series | list[float]) -> bool:
    vals = [v for v in values if v is not None and not pd.isna(v) and v > 0]
    return bool(vals) and max(vals) / min(vals) >= 10


def _ok_summary(res: Results) -> pd.DataFrame:
    """Summary rows of runs that finished ok, repeats folded (median), with a point label."""
    s = res.summary
    if s.empty:
        return s
    s = s[s["status"] == "ok"] if "status" in s else s
    if s.empty:
        return s
    params = [p for p in point_params(res) if p in s]
    s = s.merge(
        res.runs[["results", "run_id", "wan_rate_bps", "wan_goodput_bps"]],
        on=["results", "run_id"],
        how="left",
    )
    keys = ["results", *params, "collective", "algorithm", "size"]
    agg = s.groupby(keys, as_index=False, dropna=False, sort=False).agg(
        time_p50=("time_p50", "median"),
        time_p95=("time_p95", "median"),
        busbw=("busbw", "median"),
        predicted=("predicted", "median"),
        wan_rate_bps=("wan_rate_bps", "first"),
        wan_goodput_bps=("wan_goodput_bps", "first"),
    )
    agg["point"] = [point_label(r, params) for _, r in agg.iterrows()]
    if agg["results"].nunique() > 1:
        agg["point"] = agg["results"] + ": " + agg["point"]
    return agg


def _points_in_order(res: Results, df: pd.DataFrame) -> list[str]:
    from analysis.tables import sort_by_params

    return list(dict.fromkeys(sort_by_params(df, res)["point"]))


# -- collectives -------------------------------------------------------------------------------
def plot_time_vs_size(res: Results) -> Plot | None:
    """Time vs message size (log-log) per algorithm, one panel per collective x sweep point; the
    α-β model's prediction as a dashed line of the same colour."""
    s = _ok_summary(res)
    if s.empty:
        return None
    counts = s.groupby(["point", "collective", "algorithm"])["size"].nunique()
    if counts.max() < 2:
        return None
    points = _points_in_order(res, s)
    panels = [(c, p) for c in sorted(s["collective"].unique()) for p in points]
    panels = [(c, p) for c, p in panels if ((s["collective"] == c) & (s["point"] == p)).any()]
    dropped = max(0, len(panels) - MAX_PANELS)
    panels = panels[:MAX_PANELS]
    colours = _colours(sorted(s["algorithm"].unique()))
    with _style():
        fig, axes = _figure(len(panels), min(len(points), 3))
        for ax, (coll, point) in zip(axes, panels, strict=False):
            sub = s[(s["collective"] == coll) & (s["point"] == point)]
            for algo, g in sub.groupby("algorithm"):
                g = g.sort_values("size")
                c = colours[algo]
                ax.errorbar(
                    g["size"],
                    g["time_p50"],
                    yerr=[np.zeros(len(g)), (g["time_p95"] - g["time_p50"]).clip(lower=0)],
                    marker="o",
                    color=c,
                    capsize=3,
                    label=f"{algo} (p50, bar to p95)",
                )
                pred = g.dropna(subset=["predicted"])
                if len(pred) >= 2:
                    # The α-β time is affine in size for a fixed algorithm and topology, so
                    # interpolating linearly (in bytes) between the predicted points is the
                    # model's own line; on log-log axes it curves where latency gives way to
                    # bandwidth.
                    grid = np.geomspace(pred["size"].min(), pred["size"].max(), 64)
                    line = np.interp(grid, pred["size"], pred["predicted"].astype(float))
                    ax.plot(grid, line, "--", color=c, alpha=0.8, label=f"{algo} α-β model")
                elif len(pred) == 1:
                    ax.plot(pred["size"], pred["predicted"], "x", color=c, label=f"{algo} model")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.xaxis.set_major_formatter(FuncFormatter(_size_text))
            _plain_log(ax.yaxis, _time_text)
            ax.set_xlabel("message size (nccl-tests semantics)")
            ax.set_ylabel("time, slowest rank")
            ax.set_title(f"{coll} — {point}")
            _legend(ax)
        fig.suptitle("Collective time vs message size")
    caption = (
        "Markers: median over iterations of the slowest rank's time (bar up to p95); dashed: the "
        "α-β model's prediction (docs/model.md) for the same algorithm and network."
    )
    if dropped:
        caption += f" {dropped} more panel(s) left out; see the table and summary.csv."
    return Plot("time_vs_size", "Time vs message size", caption, fig)


def plot_busbw_vs_rate(res: Results) -> Plot | None:
    """Bus bandwidth vs WAN rate per algorithm and size, with the WAN's goodput ceiling."""
    s = _ok_summary(res)
    if s.empty or s["wan_rate_bps"].nunique() < 2:
        return None
    rate_params = [p for p in point_params(res) if p.endswith(".rate") and p.startswith("wan")]
    others = [p for p in point_params(res) if p in s and p not in rate_params]
    series = s["algorithm"] + " " + s["size"].map(_size_text)
    if others:
        labels = [point_label(r, others) for _, r in s.iterrows()]
        extra = ["" if x == "(no sweep)" else f", {x}" for x in labels]
        series = series + pd.Series(extra, index=s.index)
    if s["results"].nunique() > 1:
        series = s["results"] + ": " + series
    s = s.assign(series=series)
    # Only series measured at two rates or more make a line.
    s = s[s.groupby("series")["wan_rate_bps"].transform("nunique") > 1]
    if s.empty:
        return None
    collectives = sorted(s["collective"].unique())[:MAX_PANELS]
    colours = _colours(sorted(s["algorithm"].unique()))
    sizes = sorted(s["size"].unique())
    with _style():
        fig, axes = _figure(len(collectives), 2, width=5.2)
        for ax, coll in zip(axes, collectives, strict=False):
            sub = s[s["collective"] == coll]
            for i, (series, g) in enumerate(sub.groupby("series", sort=True)):
                g = g.sort_values("wan_rate_bps")
                ax.plot(
                    g["wan_rate_bps"] / 1e6,
                    g["busbw"] / 1e6,
                    marker=MARKERS[sizes.index(g["size"].iloc[0]) % len(MARKERS)],
                    linestyle=LINESTYLES[i // 10 % len(LINESTYLES)],
                    color=colours[g["algorithm"].iloc[0]],
                    label=series,
                )
            ceiling = sub.drop_duplicates("wan_rate_bps").sort_values("wan_rate_bps")
            ax.plot(
                ceiling["wan_rate_bps"] / 1e6,
                ceiling["wan_goodput_bps"] / 8e6,
                ":",
                color="grey",
                label="WAN goodput ceiling",
            )
            if _spans_decade(sub["wan_rate_bps"]):
                ax.set_xscale("log")
                _plain_log(ax.xaxis)
            if _spans_decade(sub["busbw"]):
                ax.set_yscale("log")
                _plain_log(ax.yaxis)
            ax.set_xlabel("WAN rate (Mbit/s)")
            ax.set_ylabel("busbw (MB/s)")
            ax.set_title(coll)
            _legend(ax)
        fig.suptitle("Bus bandwidth vs WAN rate")
    caption = (
        "busbw = algbw × the collective's bus factor (nccl-tests), at the median time. The grey "
        "line is the WAN's TCP goodput ceiling (rate × 1448/1514) in MB/s."
    )
    return Plot("busbw_vs_rate", "Bus bandwidth vs WAN rate", caption, fig)


def plot_speedup(res: Results, speedup: pd.DataFrame) -> Plot | None:
    """Heatmap of flat time / hierarchical time per sweep point (rows) and size (columns)."""
    if speedup.empty:
        return None
    groups = list(speedup.groupby(["collective", "algorithm"], sort=True))[:MAX_PANELS]
    values = speedup["speedup"].astype(float)
    # Symmetric in ratio: 2x faster and 2x slower get equally strong colours.
    span = max(values.max(), 1 / values.min(), 1.05)
    norm = TwoSlopeNorm(vmin=1 / span, vcenter=1.0, vmax=span)
    with _style():
        points = list(dict.fromkeys(speedup["point"]))
        fig, axes = _figure(len(groups), 2, width=5.2, height=1.6 + 0.45 * len(points))
        image = None
        for ax, ((coll, algo), g) in zip(axes, groups, strict=False):
            sizes = sorted(g["size"].unique())
            rows = [p for p in points if p in set(g["point"])]
            grid = np.full((len(rows), len(sizes)), np.nan)
            for r in g.itertuples():
                grid[rows.index(r.point), sizes.index(r.size)] = r.speedup
            image = ax.imshow(grid, cmap="RdBu", norm=norm, aspect="auto")
            for (i, j), v in np.ndenumerate(grid):
                if not np.isnan(v):
                    strong = abs(norm(v) - 0.5) > 0.3  # dark cell: white text
                    colour = "white" if strong else "black"
                    ax.text(j, i, f"{v:.2f}×", ha="center", va="center", fontsize=8, color=colour)
            ax.set_xticks(range(len(sizes)), [_size_text(x) for x in sizes])
            ax.set_yticks(range(len(rows)), rows)
            ax.set_xlabel("message size")
            ax.set_ylabel("sweep point")
            ax.set_title(f"{coll}: flat / {algo}")
            ax.grid(False)
        if image is not None:
            fig.colorbar(image, ax=list(axes[: len(groups)]), label="speed-up (>1: faster)")
        fig.suptitle("Hierarchical speed-up over flat (time ratio)")
    caption = (
        "Each cell: flat all-algorithm median time divided by the hierarchical one at the same "
        "sweep point and size; blue (> 1) means the WAN-aware algorithm was faster."
    )
    return Plot("speedup", "Flat vs hierarchical speed-up", caption, fig)


# -- congestion --------------------------------------------------------------------------------
def _varying(df: pd.DataFrame, cols: list[str]) -> list[str]:
    return [c for c in cols if c in df and df[c].astype(str).nunique() > 1]


def _describe(col: str, value: Any) -> str:
    if pd.isna(value):
        return f"{col} -"
    if col == "wan_loss":
        return f"loss {value * 100:g}%"
    if col == "rtt_s":
        return f"RTT {value * 1e3:g} ms"
    if col == "ecn":
        return "ECN" if value else "no ECN"
    if col == "wan_rate_bps":
        return f"WAN {value / 1e6:g} Mbit/s"
    return short_value(value)


def _combo(size: Any, collective: str, algorithm: str) -> str:
    return f"{collective} {algorithm} {_size_text(size)}"


def plot_congestion(res: Results, cong: pd.DataFrame) -> Plot | None:
    """Goodput and collective time per congestion control across loss (or RTT), one line per
    congestion control x the other varying settings (RTT, marking profile, ECN)."""
    if cong.empty:
        return None
    dims = ["wan_loss", "rtt_s", "aqm_profile", "ecn", "wan_rate_bps"]
    varying = _varying(cong, dims)
    if not varying and cong["congestion"].nunique() < 2:
        return None
    x_col = next((c for c in ("wan_loss", "rtt_s") if c in varying), None)
    x_col = x_col or (varying[0] if varying else "congestion")
    rest = [c for c in varying if c != x_col]
    combos = _combos(cong)
    xs = sorted(cong[x_col].dropna().unique(), key=lambda v: (str(type(v)), v))
    ccs = sorted(cong["congestion"].dropna().unique())
    colours = _colours(ccs)
    with _style():
        fig, axes = _figure(2 * len(combos), 2, width=5.2)
        for k, (coll, algo, size) in enumerate(combos):
            sub = cong[
                (cong["collective"] == coll) & (cong["algorithm"] == algo) & (cong["size"] == size)
            ]
            sub = sub.groupby(["congestion", x_col, *rest], as_index=False, dropna=False).agg(
                goodput_bps=("goodput_bps", "median"),
                time_p50=("time_p50", "median"),
                wan_goodput_bps=("wan_goodput_bps", "first"),
            )
            styles = list(dict.fromkeys(tuple(r) for r in sub[rest].itertuples(index=False)))
            ax_g, ax_t = axes[2 * k], axes[2 * k + 1]
            for (cc, *other), g in sub.groupby(["congestion", *rest], dropna=False):
                g = g.assign(x=g[x_col].map(xs.index)).sort_values("x")
                i = styles.index(tuple(other)) if rest else 0
                label = ", ".join(
                    [cc, *(_describe(c, v) for c, v in zip(rest, other, strict=True))]
                )
                kw = {
                    "color": colours[cc],
                    "marker": MARKERS[i % len(MARKERS)],
                    "linestyle": LINESTYLES[i % len(LINESTYLES)],
                    "label": label,
                }
                ax_g.plot(g["x"], g["goodput_bps"] / 1e6, **kw)
                ax_t.plot(g["x"], g["time_p50"], **kw)
            ceiling = sub["wan_goodput_bps"].max()
            if ceiling and not pd.isna(ceiling):
                ax_g.axhline(ceiling / 1e6, color="grey", linestyle=":", label="WAN ceiling")
            for ax in (ax_g, ax_t):
                ax.set_xticks(range(len(xs)), [_describe(x_col, x) for x in xs])
                ax.set_xlabel({"wan_loss": "random loss", "rtt_s": "RTT"}.get(x_col, x_col))
            ax_g.set_ylabel("goodput = busbw × 8 (Mbit/s)")
            ax_t.set_ylabel("time p50, slowest rank")
            if _spans_decade(sub["time_p50"]):
                ax_t.set_yscale("log")
                _plain_log(ax_t.yaxis, _time_text)
            else:
                ax_t.yaxis.set_major_formatter(FuncFormatter(_time_text))
            ax_g.set_title(f"goodput — {_combo(size, coll, algo)}")
            ax_t.set_title(f"time — {_combo(size, coll, algo)}")
            _legend(ax_g)
            _legend(ax_t)
        fig.suptitle("Goodput and collective time per congestion control")
    caption = (
        "Goodput is the collective's bus bandwidth in bit/s (for the flat ring across one WAN "
        "direction: the payload rate that direction carried), at the median iteration time; the "
        "grey line is the WAN's goodput ceiling."
    )
    return Plot("congestion", "Goodput and time per congestion control", caption, fig)


def plot_throughput_delay(res: Results, cong: pd.DataFrame) -> Plot | None:
    """Pantheon-style: goodput vs the WAN flows' p95 smoothed RTT, one point per run."""
    if cong.empty or cong["srtt_p95_ms"].isna().all():
        return None
    df = cong.dropna(subset=["srtt_p95_ms", "goodput_bps"])
    combos = _combos(df)
    ccs = sorted(df["congestion"].dropna().unique())
    colours = _colours(ccs)
    profiles = list(dict.fromkeys(df["aqm_profile"].fillna("droptail")))
    with _style():
        fig, axes = _figure(len(combos), 2, width=5.6, height=4.2)
        for ax, (coll, algo, size) in zip(axes, combos, strict=False):
            sub = df[(df["collective"] == coll) & (df["algorithm"] == algo) & (df["size"] == size)]
            seen: set[str] = set()
            for r in sub.itertuples():
                profile = r.aqm_profile if isinstance(r.aqm_profile, str) else "droptail"
                label = f"{r.congestion}, {profile}"
                ax.scatter(
                    r.srtt_p95_ms,
                    r.goodput_bps / 1e6,
                    color=colours[r.congestion],
                    marker=MARKERS[profiles.index(profile) % len(MARKERS)],
                    s=50,
                    label=None if label in seen else label,
                )
                seen.add(label)
                ax.annotate(
                    _describe("wan_loss", r.wan_loss),
                    (r.srtt_p95_ms, r.goodput_bps / 1e6),
                    textcoords="offset points",
                    xytext=(4, 4),
                    fontsize=7,
                )
            if _spans_decade(sub["srtt_p95_ms"]):
                ax.set_xscale("log")
                _plain_log(ax.xaxis)
            ax.invert_xaxis()  # Pantheon's convention: better (lower delay) to the right
            ax.set_xlabel("p95 smoothed RTT of the WAN flows (ms, tcp_info; lower is right)")
            ax.set_ylabel("goodput = busbw × 8 (Mbit/s)")
            ax.set_title(f"throughput vs delay — {_combo(size, coll, algo)}")
            _legend(ax)
        fig.suptitle("Throughput vs delay per congestion control (Pantheon-style)")
    caption = (
        "One point per run: x = 95th percentile of srtt over the tcp_info samples of the WAN data "
        "sockets (the connection of each host pair that sent the most), y = goodput; labels give "
        "the random loss. Up and to the right is better."
    )
    return Plot("throughput_delay", "Throughput vs delay", caption, fig)


def _run_t0(res: Results) -> dict[tuple[str, str], float]:
    """(results, run_id) -> unix time of the run's first timed iteration."""
    if res.iterations.empty:
        return {}
    first = res.iterations.groupby(["results", "run_id"])["start"].min()
    return {k: float(v) for k, v in first.items()}


def _relative_time(df: pd.DataFrame, res: Results) -> pd.Series:
    t0 = _run_t0(res)
    fallback = df.groupby(["results", "run_id"])["time"].transform("min")
    base = [
        t0.get((s, r), f) for s, r, f in zip(df["results"], df["run_id"], fallback, strict=True)
    ]
    return df["time"] - base


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
    styles = {d: LINESTYLES[i % len(LINESTYLES)] for i, d in enumerate(directions)}
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
                name = f"{labels.get((source, run_id), run_id)} {host}→{peer}"
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
