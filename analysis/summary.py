"""The nccl-tests style summary of measured collectives. PURE: this is its one home.

The runner (``testbed.experiment.sweep``) calls it after every run to write ``manifest.json``'s
``summary``; the loader calls it for results whose manifest has none. Both therefore give the same
numbers for the same rows (the columns: docs/results.md, "Summary").

* an iteration's time is the *slowest* rank's seconds (nccl-tests' convention): a collective is
  done when the last rank is done; it is ``correct`` only when every rank's result was;
* ``time_p50`` / ``time_p95`` use :func:`testbed.core.stats.quantile`, the project's one quantile;
* ``algbw`` and ``busbw`` are taken at p50 (:mod:`analysis.metrics`); a collective without a bus
  factor (unknown name, no ranks) gets NaN, not an error;
* ``predicted`` is the α-β model's seconds when the caller can give a prediction, and
  ``measured_over_predicted`` = p50 / predicted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import pandas as pd

from analysis.metrics import bus_factor
from testbed.core.stats import quantile

POINT = ["collective", "algorithm", "size"]  # one summary row per point (and per ``by`` group)
SUMMARY_COLUMNS = [
    "collective",
    "algorithm",
    "size",
    "ranks",
    "iterations",
    "time_p50",
    "time_p95",
    "algbw",
    "busbw",
    "predicted",
    "measured_over_predicted",
    "correct",
]

# (collective, algorithm, size in bytes, ranks) -> predicted seconds, or None when unknown
Predictor = Callable[[str, str, int, int], float | None]


def iteration_times(rows: pd.DataFrame, by: Sequence[str] = (), sort: bool = True) -> pd.DataFrame:
    """One row per (``by``..., collective, algorithm, size, iteration) from one row per rank and
    iteration: ``seconds`` of the slowest rank, ``correct`` if every rank was, ``ranks`` that
    reported it, and ``start`` (earliest) when the rows have one."""
    keys = [*by, *POINT, "iteration"]
    aggs = {
        "seconds": ("seconds", "max"),
        "correct": ("correct", "all"),
        "start": ("start", "min"),
        "ranks": ("rank", "nunique"),
    }
    if "start" not in rows.columns:
        del aggs["start"]
    return rows.groupby(keys, as_index=False, sort=sort).agg(**aggs)


def summarize(
    iterations: pd.DataFrame,
    by: Sequence[str] = (),
    *,
    ranks: int | None = None,
    predict: Predictor | None = None,
    sort: bool = True,
) -> pd.DataFrame:
    """One row per (``by``..., collective, algorithm, size) of :func:`iteration_times` output,
    with the columns in :data:`SUMMARY_COLUMNS` after ``by``.

    ``ranks`` is the world size when the caller knows it (a rank that reported nothing still
    counts in the bus factor); otherwise the most ranks seen in one iteration."""
    keys = [*by, *POINT]
    if iterations.empty:
        return pd.DataFrame(columns=[*by, *SUMMARY_COLUMNS])
    out = iterations.groupby(keys, as_index=False, sort=sort).agg(
        ranks=("ranks", "max"),
        iterations=("iteration", "count"),
        time_p50=("seconds", lambda s: _quantile(s, 0.5)),
        time_p95=("seconds", lambda s: _quantile(s, 0.95)),
        correct=("correct", "all"),
    )
    if ranks is not None:
        out["ranks"] = ranks
    out["size"] = out["size"].astype(int)
    out["ranks"] = out["ranks"].astype(int)
    out["correct"] = out["correct"].astype(bool)
    out["algbw"] = [_algbw(size, t) for size, t in zip(out["size"], out["time_p50"], strict=True)]
    factors = [_bus_factor(c, n) for c, n in zip(out["collective"], out["ranks"], strict=True)]
    out["busbw"] = out["algbw"] * factors
    points = zip(out["collective"], out["algorithm"], out["size"], out["ranks"], strict=True)
    predicted = [_predict(predict, c, a, s, n) for c, a, s, n in points]
    out["predicted"] = pd.Series(predicted, index=out.index, dtype=object)
    out["measured_over_predicted"] = pd.Series(
        [p50 / p if p else None for p50, p in zip(out["time_p50"], predicted, strict=True)],
        index=out.index,
        dtype=object,
    )
    return out[[*by, *SUMMARY_COLUMNS]]


def summary_rows(
    rows: list[dict], *, ranks: int | None = None, predict: Predictor | None = None
) -> list[dict]:
    """:func:`summarize` of one run's rank-iteration rows, as plain dicts (for a manifest)."""
    if not rows:
        return []
    table = summarize(iteration_times(pd.DataFrame(rows)), ranks=ranks, predict=predict)
    return [{k: _plain(v) for k, v in record.items()} for record in table.to_dict(orient="records")]


def _quantile(seconds: pd.Series, q: float) -> float:
    values = seconds.dropna()  # as pandas: a missing time is not a zero
    return quantile(values, q) if len(values) else math.nan


def _algbw(size: int, seconds: float) -> float:
    return size / seconds if seconds > 0 else math.nan


def _bus_factor(collective: str, n: int) -> float:
    try:
        return bus_factor(collective, int(n))
    except ValueError:
        return math.nan


def _predict(predict: Predictor | None, coll: str, algo: str, size: int, n: int) -> float | None:
    if predict is None:
        return None
    try:
        return predict(coll, algo, int(size), int(n))
    except ValueError:  # the model has no formula for this combination
        return None


def _plain(value: object) -> object:
    """numpy scalars as Python numbers, so a manifest serializes them as before."""
    item = getattr(value, "item", None)
    return item() if callable(item) else value
