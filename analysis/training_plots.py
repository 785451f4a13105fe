"""Report figures of training runs (``workload: kind: training``). PURE: draws loaded results.

This module owns what the training section of a report shows: loss against steps and against
wall clock per algorithm (one panel per sweep point), time to the target loss against a swept
WAN parameter, WAN bytes per step (log scale) and the compute share of each run. Same conventions
as :mod:`analysis.plots` (its style, panels, colours; None when the data does not exist).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter, NullFormatter

from analysis.loader import Results, short_value
from analysis.plots import style as P
from analysis.tables import point_label
from testbed.core.units import format_size

PLOT_NAMES = ("training_loss", "training_time_to_loss", "training_wan_bytes")
TRAINING_PARAMS_SKIP = ("workload.algorithm",)


def _point_params(res: Results) -> list[str]:
    """Sweep parameters that make a network point (not the ones that pick the algorithm arm)."""
    return [p for p in res.params if not p.startswith("workload.")]


def _arm(row: pd.Series, res: Results) -> str:
    """The algorithm and the workload parameters that distinguish this run."""
    knobs = [
        f"{p.removeprefix('workload.')}={short_value(row[p])}"
        for p in res.params
        if p.startswith("workload.")
        and p not in TRAINING_PARAMS_SKIP
        and p in row
        and not pd.isna(row[p])
    ]
    return " ".join([str(row.get("algorithm")), *knobs])


def _steps(res: Results) -> pd.DataFrame:
    """Validation points per run: step, wall clock since the run's first step, mean val loss."""
    t = res.training
    if t.empty or "val_loss" not in t:
        return pd.DataFrame()
    per_step = (
        t.groupby(["results", "run_id", "step"], as_index=False)
        .agg(start=("start", "min"), end=("end", "max"), val_loss=("val_loss", "mean"))
        .sort_values(["results", "run_id", "step"])
    )
    first = per_step.groupby(["results", "run_id"])["start"].transform("min")
    per_step["clock"] = per_step["end"] - first
    return per_step.dropna(subset=["val_loss"])


def plot_loss(res: Results) -> P.Plot | None:
    steps = _steps(res)
    s = res.training_summary
    if steps.empty or s.empty:
        return None
    params = _point_params(res)
    s = s.assign(point=[point_label(r, params) for _, r in s.iterrows()])
    s = s.assign(arm=[_arm(r, res) for _, r in s.iterrows()])
    points = list(dict.fromkeys(s["point"]))[: P.MAX_PANELS]
    arms = list(dict.fromkeys(s["arm"]))
    colours = P._colours(arms)
    with P._style():
        fig, axes = P._figure(2 * len(points), 2)
        for i, point in enumerate(points):
            by_steps, by_clock = axes[2 * i], axes[2 * i + 1]
            for _, run in s[s["point"] == point].iterrows():
                mine = steps[
                    (steps["results"] == run["results"]) & (steps["run_id"] == run["run_id"])
                ]
                kw = {"color": colours[run["arm"]], "marker": ".", "label": run["arm"]}
                by_steps.plot(mine["step"] + 1, mine["val_loss"], **kw)
                by_clock.plot(mine["clock"], mine["val_loss"], **kw)
            by_steps.set(title=f"{point}: loss vs steps", xlabel="step", ylabel="validation loss")
            by_clock.set(
                title=f"{point}: loss vs wall clock", xlabel="seconds since the first step"
            )
            by_clock.set_ylabel("validation loss")
            P._legend(by_steps)
    return P.Plot(
        "training_loss",
        "Validation loss against steps and against wall clock",
        "Mean validation loss over ranks at every evaluation. Left: per step (what the "
        "algorithm learns per step); right: per second of wall clock (what the WAN costs).",
        fig,
    )


def plot_time_to_loss(res: Results) -> P.Plot | None:
    s = res.training_summary
    params = _point_params(res)
    if s.empty or "time_to_loss" not in s or not params:
        return None
    x = params[0]
    order = res.param_order.get(x, list(dict.fromkeys(s[x])))
    s = s.assign(arm=[_arm(r, res) for _, r in s.iterrows()])
    arms = list(dict.fromkeys(s["arm"]))
    colours = P._colours(arms)
    with P._style():
        fig, axes = P._figure(1, 1, width=6)
        ax = axes[0]
        for j, arm in enumerate(arms):
            mine = s[s["arm"] == arm]
            ys = [mine[mine[x] == v]["time_to_loss"].median() for v in order]
            ax.plot(
                range(len(order)),
                ys,
                marker=P.MARKERS[j % len(P.MARKERS)],
                color=colours[arm],
                label=arm,
            )
        ax.set_xticks(range(len(order)), [short_value(v) for v in order])
        ax.set(title="Time to the target loss", xlabel=x, ylabel="seconds")
        P._legend(ax)
    return P.Plot(
        "training_time_to_loss",
        f"Time to the target loss against {x}",
        "Seconds of wall clock until the mean validation loss reached the target (the "
        "scenario's, else the DDP run's final loss at the same point); missing = not reached.",
        fig,
    )


def plot_wan_bytes(res: Results) -> P.Plot | None:
    s = res.training_summary
    if s.empty or "wan_bytes_per_step" not in s or s["wan_bytes_per_step"].isna().all():
        return None
    params = _point_params(res)
    labels = [
        " | ".join(x for x in (_arm(r, res), point_label(r, params) if params else "") if x)
        for _, r in s.iterrows()
    ]
    with P._style():
        fig, axes = P._figure(2, 2, width=5.2, height=0.4 * len(s) + 1.5)
        wan, util = axes
        y = np.arange(len(s))
        values = s["wan_bytes_per_step"].astype(float)
        bars = wan.barh(y, values, color="tab:blue")
        wan.set_xscale("log")
        wan.set_xlim(values.min() / 4, values.max() * 4)
        wan.bar_label(bars, [format_size(v, ".3g") for v in values], padding=3)
        wan.xaxis.set_major_formatter(FuncFormatter(lambda v, _p=None: format_size(v, ".3g")))
        wan.xaxis.set_minor_formatter(NullFormatter())
        wan.set_yticks(y, labels)
        wan.set(title="WAN bytes per step (both directions)", xlabel="bytes")
        util.barh(y, s["compute_utilisation"] * 100, color="tab:green")
        util.set_yticks(y, [""] * len(s))
        util.set(title="Compute share of the step", xlabel="%", xlim=(0, 100))
    return P.Plot(
        "training_wan_bytes",
        "WAN bytes per step and compute share",
        "Bytes through the WAN bottlenecks per step, from the links' own counters (log scale); "
        "compute / wall per rank, averaged.",
        fig,
    )
