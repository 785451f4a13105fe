"""The congestion-control figures: goodput and collective time per congestion control across
loss or RTT, and Pantheon's throughput against delay. PURE (draws loaded results).

Both take the congestion table of :mod:`analysis.tables` (one row per run and collective point)
and draw the few (collective, algorithm, size) groups with the most runs, where the sweep is.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from matplotlib.ticker import FuncFormatter

from analysis.loader import Results, short_value
from analysis.plots.style import (
    LINESTYLES,
    MARKERS,
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

PLOT_NAMES = ("congestion", "throughput_delay")


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


def _combos(df: pd.DataFrame, limit: int = 4) -> list[tuple[Any, ...]]:
    """(collective, algorithm, size) groups with the most runs first: where the sweep is."""
    sizes = df.groupby(["collective", "algorithm", "size"]).size()
    return list(sizes.sort_values(ascending=False, kind="stable").index[:limit])


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
