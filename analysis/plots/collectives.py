"""The collectives' figures: time against message size, bus bandwidth against the WAN rate and
the hierarchical algorithms' speed-up over flat. PURE (draws loaded results).

Each function takes a :class:`analysis.loader.Results` (and the :mod:`analysis.tables` table it
needs) and returns a :class:`~analysis.plots.style.Plot`, or None when the data for it does not
exist (one message size, no rate sweep, ...). Repeats of a sweep point are folded to their median.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.colors import TwoSlopeNorm
from matplotlib.ticker import FuncFormatter

from analysis.loader import Results
from analysis.plots.style import (
    LINESTYLES,
    MARKERS,
    MAX_PANELS,
    Plot,
    _colours,
    _figure,
    _legend,
    _plain_log,
    _size_text,
    _spans_decade,
    _style,
    _time_text,
)
from analysis.tables import point_label, point_params, sort_by_params

PLOT_NAMES = ("time_vs_size", "busbw_vs_rate", "speedup")


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
                    g["busbw"] * 8 / 1e6,
                    marker=MARKERS[sizes.index(g["size"].iloc[0]) % len(MARKERS)],
                    linestyle=LINESTYLES[i // 10 % len(LINESTYLES)],
                    color=colours[g["algorithm"].iloc[0]],
                    label=series,
                )
            ceiling = sub.drop_duplicates("wan_rate_bps").sort_values("wan_rate_bps")
            ax.plot(
                ceiling["wan_rate_bps"] / 1e6,
                ceiling["wan_goodput_bps"] / 1e6,
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
            ax.set_ylabel("busbw × 8 (Mbit/s)")
            ax.set_title(coll)
            _legend(ax)
        fig.suptitle("Bus bandwidth vs WAN rate")
    caption = (
        "busbw = algbw × the collective's bus factor (nccl-tests), at the median time, in bits "
        "to compare with the WAN's rate. The grey "
        "line is the WAN's TCP goodput ceiling (rate × 1448/1514); both axes in Mbit/s."
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
