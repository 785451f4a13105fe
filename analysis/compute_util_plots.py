"""The figure of Streaming DiLoCo's Table 4 measured: compute utilisation against the real WAN
bandwidth, one colour per method, the paper model's CU dashed and the schedule model's
(analysis.schedule_cu) dotted beside each measured point, and the paper's needed bandwidths (its
Table 4) as crosses at their CU. PURE: draws a points table
(analysis.compute_util.table4_points); same style as :mod:`analysis.plots`.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from analysis.compute_util import PAPER_TABLE4_1B, TABLE4_TARGETS
from analysis.plots.style import _colours, _figure, _legend, _plain_log, _style


def cu_vs_bandwidth(points: pd.DataFrame, paper: bool = True) -> Figure | None:
    """``points``: columns method, bandwidth (real Gbit/s), compute_utilisation and optionally
    cu_paper_model and cu_schedule_model. None without points."""
    if points.empty:
        return None
    methods = list(dict.fromkeys(points["method"]))
    colours = _colours(methods)
    with _style():
        fig, axes = _figure(1, 1, width=6.4, height=4.2)
        ax = axes[0]
        for m in methods:
            g = points[points["method"] == m].sort_values("bandwidth")
            c = colours[m]
            ax.plot(g["bandwidth"], g["compute_utilisation"], "o-", color=c, label=f"{m} measured")
            if "cu_paper_model" in g and g["cu_paper_model"].notna().any():
                ax.plot(g["bandwidth"], g["cu_paper_model"], "--", color=c, lw=0.9, alpha=0.8)
            if "cu_schedule_model" in g and g["cu_schedule_model"].notna().any():
                ax.plot(g["bandwidth"], g["cu_schedule_model"], ":", color=c, lw=1.1, alpha=0.9)
            if paper and m in PAPER_TABLE4_1B:
                ax.plot(PAPER_TABLE4_1B[m], TABLE4_TARGETS, "x", color=c, ms=6)
        ax.set_xscale("log")
        _plain_log(ax.xaxis)
        ax.set_xlabel("WAN bandwidth, real units (Gbit/s)")
        ax.set_ylabel("compute utilisation")
        ax.set_ylim(0, 1.02)
        ax.set_title(
            "CU vs bandwidth: measured (o), paper model (--), schedule model (:), "
            "paper Table 4 (x)",
            fontsize=8,
        )
        _legend(ax, fontsize=7)
    return fig
