"""Training results: the ranks' per-step rows joined with the WAN counters, and the summary of a
training run. PURE (pandas only): the runner calls it after every run, the loader may re-derive.

Definitions:

* a step's ``wall`` is the slowest rank's ``wall_s`` (the step is done when every rank is);
  ``compute``, ``comm``, ``wait`` are the mean over ranks; ``loss`` and ``val_loss`` the mean over
  ranks (DiLoCo's local models differ between syncs);
* WAN bytes of step k, per direction, are the direction's cumulative bottleneck byte counter
  (``queues`` rows: ``time``, ``direction``, ``bytes``) interpolated linearly at the start of
  step k and at the start of step k+1 (the end of the last step): every byte belongs to one step,
  and a step shorter than the sampling period gets an interpolated share;
* ``time_to_loss``: seconds from the first step's start to the end of the first step whose
  ``val_loss`` is at or below the target (None if never reached);
* ``compute_utilisation``: total compute / total wall, mean over ranks.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd

from testbed.core.stats import quantile

STEP_COLUMNS = ["step", "start", "end", "wall", "compute", "comm", "wait", "loss", "val_loss"]


def step_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per step from one row per rank and step (columns in :data:`STEP_COLUMNS`, plus
    ``payload_bytes`` of rank 0 and ``ranks``)."""
    if rows.empty:
        return pd.DataFrame(columns=[*STEP_COLUMNS, "payload_bytes", "ranks"])
    if "val_loss" not in rows.columns:
        rows = rows.assign(val_loss=np.nan)
    g = rows.groupby("step", sort=True)
    out = g.agg(
        start=("start", "min"),
        end=("end", "max"),
        wall=("wall_s", "max"),
        compute=("compute_s", "mean"),
        comm=("comm_s", "mean"),
        wait=("wait_s", "mean"),
        loss=("loss", "mean"),
        val_loss=("val_loss", "mean"),
        payload_bytes=("payload_bytes", "first"),
        ranks=("rank", "nunique"),
    ).reset_index()
    return out


def wan_bytes(steps: pd.DataFrame, queues: pd.DataFrame) -> pd.DataFrame:
    """Bytes per step and WAN direction (columns ``step``, ``direction``, ``bytes``) from the
    cumulative counters in ``queues``; empty when there are no samples."""
    if steps.empty or queues.empty:
        return pd.DataFrame(columns=["step", "direction", "bytes"])
    edges = np.append(steps["start"].to_numpy(float), float(steps["end"].iloc[-1]))
    parts = []
    for direction, q in queues.sort_values("time").groupby("direction"):
        cumulative = np.interp(edges, q["time"].to_numpy(float), q["bytes"].to_numpy(float))
        parts.append(
            pd.DataFrame(
                {
                    "step": steps["step"].to_numpy(),
                    "direction": direction,
                    "bytes": np.diff(cumulative),
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def time_to_loss(steps: pd.DataFrame, target: float | None) -> float | None:
    if target is None or steps.empty or "val_loss" not in steps:
        return None
    reached = steps[steps["val_loss"] <= target]
    if reached.empty:
        return None
    return float(reached["end"].iloc[0] - steps["start"].iloc[0])


def final_loss(steps: pd.DataFrame) -> float | None:
    evaluated = steps.dropna(subset=["val_loss"]) if "val_loss" in steps else steps.iloc[0:0]
    return None if evaluated.empty else float(evaluated["val_loss"].iloc[-1])


def _ddp_exposed(rows: pd.DataFrame) -> float | None:
    cols = ("ddp_backward_comm_s", "ddp_overlap_s")
    if rows.empty or not all(c in rows.columns for c in cols):
        return None
    last = rows.dropna(subset=list(cols))
    if last.empty:
        return None
    return float((last[cols[0]] - last[cols[1]]).mean())


def predicted_comm(
    syncs: list[tuple[str, str, int]], steps: int, predict: Callable[[str, str, int], float | None]
) -> float | None:
    """Mean predicted communication seconds per step: ``predict(group, collective, payload)`` for
    every sync of the schedule (``group``: world, cluster, leaders), None if any is unknown."""
    total = 0.0
    for group, collective, payload in syncs:
        t = predict(group, collective, payload)
        if t is None or not math.isfinite(t):
            return None
        total += t
    return total / steps if steps else None


def summarize_training(
    rows: pd.DataFrame,
    queues: pd.DataFrame,
    target: float | None = None,
    predicted_comm_per_step: float | None = None,
) -> dict:
    """The run's summary row (without sweep parameters)."""
    steps = step_table(rows)
    per_dir = wan_bytes(steps, queues)
    n = len(steps)
    wan_total = float(per_dir["bytes"].sum()) if not per_dir.empty else None
    walls = steps["wall"].tolist()
    per_rank = rows.groupby("rank")[["compute_s", "wall_s"]].sum() if not rows.empty else None
    comm = float(steps["comm"].mean() + steps["wait"].mean()) if n else None
    return {
        "algorithm": rows["algorithm"].iloc[0] if not rows.empty else None,
        "steps": n,
        "final_loss": final_loss(steps),
        "target_loss": target,
        "time_to_loss": time_to_loss(steps, target),
        "step_time_p50": quantile(walls, 0.5) if walls else None,
        "step_time_p95": quantile(walls, 0.95) if walls else None,
        "wall_time": float(steps["end"].iloc[-1] - steps["start"].iloc[0]) if n else None,
        "wan_bytes_per_step": wan_total / n if wan_total is not None and n else None,
        "payload_bytes_per_step": float(steps["payload_bytes"].mean()) if n else None,
        "compute_utilisation": (
            float((per_rank["compute_s"] / per_rank["wall_s"]).mean())
            if per_rank is not None
            else None
        ),
        "comm_per_step": comm,
        # DDP's own timers (last step's row, mean over ranks): its exposed communication,
        # backward communication minus what overlapped the backward compute
        "ddp_exposed_comm_per_step": _ddp_exposed(rows),
        "predicted_comm_per_step": predicted_comm_per_step,
        "comm_measured_over_predicted": (
            comm / predicted_comm_per_step if comm and predicted_comm_per_step else None
        ),
    }
