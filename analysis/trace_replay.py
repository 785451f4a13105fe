"""How well a trace replay followed its trace: the target rate of each trace bin, the rate
the direction achieved in it, and their per-second correlation. PURE (pandas).

The targets are the trace's ``set`` rows (a zero-rate bin is a target of 0); the achieved rate is
the direction's bottleneck byte counter (queues.parquet), else the bulk flows' goodput
(flows_goodput.parquet) turned back into wire bit/s. docs/faults.md ("Trace replay") gives the
rules and what keeps the correlation below 1.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from typing import Any, cast

import numpy as np
import pandas as pd

from analysis.events import applied_times, directions_of, per_direction, run_rows
from testbed.core.frames import GOODPUT_FACTOR


def trace_targets(events: pd.DataFrame) -> pd.DataFrame:
    """Target rate per trace bin and direction: ``results``, ``run_id``, ``direction``,
    ``start``, ``end``, ``target_bps`` (0 for a zero-rate bin: a held ``set``, or a ``blackhole``
    in results recorded before the hold) and the
    direction's one-way ``delay_s`` then (NaN where the events do not say)."""
    cols = ["results", "run_id", "direction", "start", "end", "target_bps", "delay_s"]
    if events.empty or "source" not in events or "rate_bps" not in events:
        return pd.DataFrame(columns=cols)  # the runner recorded no per-direction settings
    ev = per_direction(events[events["source"] == "trace"])
    if "status" in ev:
        ev = ev[ev["status"] != "skipped"]
    ev = ev.assign(_t=lambda d: applied_times(d))
    if "results" not in ev:
        ev = ev.assign(results="")
    rows = []
    for (results, run_id), g in ev.groupby(["results", "run_id"], sort=False):
        g = g.sort_values("_t", kind="stable")
        directions = sorted(
            {d for d in g.get("direction", pd.Series(dtype=object)) if isinstance(d, str)}
        )
        for d in directions:
            steps = []
            delay = math.nan  # a blackhole keeps the delay of the set before it
            for _, e in g.iterrows():
                if e["action"] == "set" and e.get("direction") == d:
                    delay = float(e.get("delay_s", math.nan))
                    steps.append((e["_t"], float(e["rate_bps"]), delay))
                elif e["action"] == "blackhole" and _covers(e, d):
                    steps.append((e["_t"], 0.0, delay))
            for (t, rate, delay), (t_next, _, _) in itertools.pairwise(steps):
                rows.append((results, run_id, d, t, t_next, rate, delay))
    return pd.DataFrame(rows, columns=cols)


def _covers(event: pd.Series, direction: str) -> bool:
    dirs = directions_of(event.get("directions"))
    return not dirs or direction in dirs


def achieved_rates(
    targets: pd.DataFrame, queues: pd.DataFrame, goodput: pd.DataFrame | None = None
) -> pd.DataFrame:
    """``targets`` + ``achieved_bps``: wire bit/s through the direction's bottleneck in each bin
    (queues' cumulative ``bytes`` interpolated at the bin edges), else the flows' goodput
    (:func:`goodput_in_bins`) divided by GOODPUT_FACTOR (payload → wire), so both compare with
    the HTB rate."""
    out = targets.copy()
    out["achieved_bps"] = np.nan
    for key, idx in out.groupby(["results", "run_id", "direction"]).groups.items():
        results, run_id, d = cast(tuple[str, str, str], key)
        bins = out.loc[idx]
        q = run_rows(queues, results, run_id)
        if not q.empty and "direction" in q:
            q = q[q["direction"] == d].sort_values("time")
        if not q.empty:
            t, b = q["time"].to_numpy(float), q["bytes"].to_numpy(float)
            lo = np.interp(bins["start"].to_numpy(float), t, b)
            hi = np.interp(bins["end"].to_numpy(float), t, b)
            dt = (bins["end"] - bins["start"]).to_numpy(float)
            inside = (bins["start"].to_numpy(float) >= t[0]) & (
                bins["end"].to_numpy(float) <= t[-1]
            )
            out.loc[idx, "achieved_bps"] = np.where(inside, 8 * (hi - lo) / dt, np.nan)
            continue
        g = run_rows(goodput, results, run_id) if goodput is not None else pd.DataFrame()
        g = goodput_by_direction(g)
        if g.empty:
            continue
        if "direction" in g:
            g = g[g["direction"] == d]
        out.loc[idx, "achieved_bps"] = goodput_in_bins(bins, g) / GOODPUT_FACTOR
    return out


def goodput_in_bins(bins: pd.DataFrame, goodput: pd.DataFrame) -> np.ndarray:
    """Payload bit/s the flows of ``goodput`` received per bin of ``bins`` (``start``, ``end``,
    optional ``delay_s``), NaN for a bin outside every flow's samples.

    A sample is the bytes read in the window (``t`` − ``seconds``, ``t``] that *ends* at ``t``
    (traffic.bulk ``sink``), spread evenly over it: each flow's cumulative bytes are
    interpolated at the bin edges, so a sample straddling two bins counts in each for its share
    (taking the samples whose ``t`` falls in a bin put, with 100 ms samples and bins, mostly the
    previous bin's bytes in each bin). The receiver reads what left the bottleneck one way
    earlier: the edges move by the bin's one-way ``delay_s``. Without ``seconds`` a sample spans
    the gap since the flow's previous one (the first: the median gap)."""
    starts = bins["start"].to_numpy(float)
    ends = bins["end"].to_numpy(float)
    delay = bins["delay_s"].to_numpy(float) if "delay_s" in bins else np.zeros(len(bins))
    delay = np.nan_to_num(delay, nan=0.0)
    lo_t, hi_t = starts + delay, ends + delay
    received = np.zeros(len(bins))
    covered = np.zeros(len(bins), dtype=bool)
    flows = goodput.groupby("flow", sort=False) if "flow" in goodput else [(None, goodput)]
    for _, f in flows:
        f = f.sort_values("t")
        t = f["t"].to_numpy(float)
        if not len(t):
            continue
        if "seconds" in f and f["seconds"].notna().all():
            span = f["seconds"].to_numpy(float)
        else:
            gaps = np.diff(t)
            first = float(np.median(gaps)) if len(gaps) else 0.1
            span = np.concatenate([[first], gaps])
        if "bytes" in f and f["bytes"].notna().all():
            nbytes = f["bytes"].to_numpy(float)
        else:
            nbytes = f["goodput_bps"].to_numpy(float) * span / 8
        # consecutive windows touch (each starts where the previous ended)
        x = np.concatenate([[t[0] - span[0]], t])
        y = np.concatenate([[0.0], np.cumsum(nbytes)])
        received += np.interp(hi_t, x, y) - np.interp(lo_t, x, y)
        covered |= (hi_t > x[0]) & (lo_t < x[-1])
    return np.where(covered, 8 * received / (ends - starts), np.nan)


def goodput_by_direction(goodput: pd.DataFrame) -> pd.DataFrame:
    """flows_goodput rows with a ``direction``: as written, else from the flow's ``from`` and
    ``to`` hosts (host names are ``<cluster>-h<i>``, so east-h1 -> west-h0 is east->west)."""
    if goodput.empty or "direction" in goodput or not {"from", "to"} <= set(goodput):
        return goodput

    def cluster(host: Any) -> str:
        return str(host).rsplit("-h", 1)[0]

    return goodput.assign(
        direction=[
            f"{cluster(a)}->{cluster(b)}"
            for a, b in zip(goodput["from"], goodput["to"], strict=True)
        ]
    )


def per_second(bins: pd.DataFrame, exclude: Iterable[tuple[float, float]] = ()) -> pd.DataFrame:
    """Target and achieved rates of each whole second since the first bin (time-weighted means
    of the bins overlapping it): ``second``, ``target_bps``, ``achieved_bps``. Seconds that
    overlap an ``exclude`` interval (a fault's outage: the trace's target means nothing while
    the link is dark) are left out."""
    cols = ["second", "target_bps", "achieved_bps"]
    if bins.empty:
        return pd.DataFrame(columns=cols)
    t0 = float(bins["start"].min())
    last = int((float(bins["end"].max()) - t0) // 1)
    spans = list(exclude)
    rows = []
    for k in range(last):
        lo, hi = t0 + k, t0 + k + 1
        if any(s < hi and lo < e for s, e in spans):
            continue
        # a Series (numpy's ufuncs on a Series return one; numpy types them as arrays)
        w = np.minimum(bins["end"], hi) - np.maximum(bins["start"], lo)
        w = cast(pd.Series, w).clip(lower=0)
        if w.sum() <= 0:
            continue
        ach = bins["achieved_bps"]
        ok = ach.notna() & (w > 0)
        rows.append(
            {
                "second": k,
                "target_bps": float((bins["target_bps"] * w).sum() / w.sum()),
                "achieved_bps": float((ach[ok] * w[ok]).sum() / w[ok].sum())
                if ok.any()
                else np.nan,
            }
        )
    return pd.DataFrame(rows, columns=cols)  # no whole second (a short run): no rows, same columns


def zero_rate_spans(bins: pd.DataFrame) -> list[tuple[float, float]]:
    """(start, end) of each run of consecutive zero-target bins of ``bins`` (one run and
    direction): a trace's outages, to leave out of :func:`per_second` where a comparison
    should see only the seconds the link was lit."""
    spans: list[tuple[float, float]] = []
    for b in bins.sort_values("start").itertuples(index=False):
        if b.target_bps != 0:
            continue
        start, end = cast(float, b.start), cast(float, b.end)
        if spans and abs(spans[-1][1] - start) < 1e-6:
            spans[-1] = (spans[-1][0], end)
        else:
            spans.append((start, end))
    return spans


def trace_table(
    bins: pd.DataFrame, exclude: dict[tuple[str, str], list[tuple[float, float]]] | None = None
) -> pd.DataFrame:
    """Per run and direction: ``bins``, ``seconds`` compared, mean target and achieved bit/s,
    their ratio and the Pearson ``correlation`` of the per-second rates (docs/faults.md
    asks for ≥ 0.9; None with fewer than 3 seconds or a constant series). ``exclude``: per (results,
    run_id), intervals (faults) whose seconds are left out."""
    cols = ["results", "run_id", "direction", "bins", "seconds", "target_mean_bps",
            "achieved_mean_bps", "achieved_over_target", "correlation"]  # fmt: skip
    rows = []
    for key, g in bins.groupby(["results", "run_id", "direction"], sort=False):
        results, run_id, d = cast(tuple[str, str, str], key)
        sec = per_second(g, (exclude or {}).get((results, run_id), ())).dropna()
        corr = None
        if len(sec) >= 3 and sec["target_bps"].std() > 0 and sec["achieved_bps"].std() > 0:
            corr = float(np.corrcoef(sec["target_bps"], sec["achieved_bps"])[0, 1])
        tm, am = sec["target_bps"].mean(), sec["achieved_bps"].mean()
        rows.append((results, run_id, d, len(g), len(sec), tm, am, am / tm if tm else None, corr))
    return pd.DataFrame(rows, columns=cols)
