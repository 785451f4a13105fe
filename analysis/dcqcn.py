"""What a run's DCQCN flows measured, beside what DCQCN's fluid model predicts for the same
scenario. PURE: pandas, numpy, the model (analysis.dcqcn_model) and the scenario's
own resolution of the parameters.

:func:`measure` reads the ``dcqcn`` rows (the RP's start, cuts and increases, the NP's CNPs),
the ``dcqcn_rx`` rows (what each receiver got per 100 ms) and the bottleneck's queue samples;
:func:`predict` integrates the fluid model for the scenario (dilated units, the RTT as the
feedback delay, the WAN rate as the bottleneck, the datagram's wire size as the packet);
:func:`predict_discrete` runs the model of discrete marks (analysis.dcqcn_marks) on the same
inputs, a second prediction beside the fluid one for marking rates too low for a mean field;
:func:`predicted`, :func:`predicted_discrete` and :func:`ratios` give them as flat ``dcqcn_*``
metrics for the run's summary row (docs/results.md "DCQCN").

The *settled* window, where means are taken: the second half between the last flow's start and
the first flow's end, as :func:`analysis.dcqcn_model.summary` does on the model's trajectory.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from analysis import dcqcn_marks, dcqcn_model
from testbed.core.dcqcn import DcqcnParams

# UDP 8 + IPv4 20 + Ethernet 14: what the bottleneck counts of a datagram's payload
WIRE_OVERHEAD = 42
SMOOTH_S = 0.5  # receive rates are averaged over this for fairness over time
RX_WINDOW = 0.1  # s: a receiver's counting window (traffic.dcqcn.flow INTERVAL)


def _jain(x: np.ndarray) -> float:
    return dcqcn_model.jain(x)


def settled_window(starts: list[float], ends: list[float]) -> tuple[float, float]:
    """(from, to), seconds after the origin: the second half of the span all flows share."""
    first_end = min(ends)
    last_start = max(starts)
    return last_start + (first_end - last_start) / 2, first_end


def flow_rates(rx: pd.DataFrame, origin: float) -> pd.DataFrame:
    """Per flow and 100 ms window: ``t`` (s after ``origin``, window end) and ``rate_bps`` of
    payload received, as a wide frame (one column per flow). Each receiver's windows have
    their own phase: a window counts in the 100 ms bin of the common grid its end falls in
    (else the flows' rows would interleave with zeros)."""
    if rx.empty:
        return pd.DataFrame()
    rel = rx["t"] - origin
    # a receiver's windows are spaced exactly: count them from its first one (rounding each
    # unix time alone would be at the mercy of its float precision, ~0.2 µs)
    first = rel.groupby(rx["flow"]).transform("min")
    k = ((rel - first) / RX_WINDOW).round()
    grid = (np.ceil(first / RX_WINDOW - 1e-3) + k) * RX_WINDOW
    rx = rx.assign(t=grid.round(3))
    wide = rx.pivot_table(index="t", columns="flow", values="rate_bps", aggfunc="mean")
    return wide.fillna(0.0)


def convergence(
    rates: pd.DataFrame, since: float, until: float = math.inf, threshold: float = 0.95
) -> float:
    """Seconds from ``since`` until Jain's index of the flows' rates (smoothed over SMOOTH_S)
    reaches ``threshold`` and stays there up to ``until`` (the first flow's end); NaN if it
    never does."""
    if rates.shape[1] < 2:
        return math.nan
    window = max(1, round(SMOOTH_S / RX_WINDOW))
    smooth = rates.rolling(window, min_periods=window).mean().dropna()
    smooth = smooth[(smooth.index >= since) & (smooth.index <= until)]
    if smooth.empty:
        return math.nan
    ok = np.array([_jain(row) >= threshold for row in smooth.to_numpy()])
    if not ok[-1]:
        return math.nan
    bad = np.flatnonzero(~ok)
    at = smooth.index[int(bad[-1]) + 1] if bad.size else smooth.index[0]
    return float(at - since)


def cut_depth(events: pd.DataFrame, cuts: pd.Index) -> float:
    """The mean rate a cut takes away (bit/s): RC after the flow's previous event (the state
    each row records) minus RC after the cut; NaN without cuts. The RP logs a CNP, its cut and
    the α update at one instant, in that order: the sort keeps the log's order on a tie, else
    the α row (RC already cut) could read as the cut's previous event and its depth as 0."""
    rp = events[events["rc"].notna()] if "rc" in events else events.iloc[:0]
    if rp.empty or cuts.empty:
        return math.nan
    before = rp.sort_values("t", kind="stable").groupby("flow")["rc"].shift()
    depth = (before - rp["rc"]).reindex(cuts).dropna()
    return float(depth.mean()) if not depth.empty else math.nan


def payload_capacity(bottleneck_bps: float, size: int) -> float:
    """The bottleneck's rate in payload bit/s of ``size``-byte datagrams: the RP paces payload
    (its RC counts ``size`` bytes a datagram), the bottleneck serves wire bytes."""
    return bottleneck_bps * size / (size + WIRE_OVERHEAD)


def flow_metrics(
    rates: pd.DataFrame,
    window: tuple[float, float],
    last_start: float,
    queues: pd.DataFrame,
    direction: str,
    origin: float,
    capacity_bps: float,
    prefix: str,
) -> dict[str, float]:
    """What any set of flows through one bottleneck measured over the settled half: rate per
    flow, Jain's index, utilisation (received over ``capacity_bps``), convergence after the
    last start and the bottleneck's queue, named ``{prefix}*``. ``rates``: :func:`flow_rates`;
    ``window``: :func:`settled_window`; it and ``last_start`` in seconds after ``origin``
    (unix)."""
    lo, hi = window
    steady = rates[(rates.index > lo) & (rates.index <= hi)]
    per_flow = steady.mean() if not steady.empty else rates.mean()
    out: dict[str, float] = {
        f"{prefix}flows": float(rates.shape[1]),
        f"{prefix}rate_mean_bps": float(per_flow.mean()),
        f"{prefix}jain": _jain(per_flow.to_numpy()),
        f"{prefix}utilisation": float(steady.sum(axis=1).mean() / capacity_bps)
        if not steady.empty
        else math.nan,
        f"{prefix}convergence_s": convergence(rates, last_start, hi),
    }
    q = queues[queues["direction"] == direction] if not queues.empty else queues
    if not q.empty:
        q = q.assign(t=q["time"] - origin)
        q = q[(q["t"] > lo) & (q["t"] <= hi)]
    if not q.empty:
        b = q["backlog_bytes"].to_numpy(dtype=float)
        p5, p95 = np.percentile(b, [5, 95])
        out |= {
            f"{prefix}queue_mean_bytes": float(b.mean()),
            f"{prefix}queue_p5_bytes": float(p5),
            f"{prefix}queue_p95_bytes": float(p95),
            f"{prefix}queue_amplitude_bytes": float(p95 - p5),
        }
    return out


def _dropped(queues: pd.DataFrame, direction: str) -> float:
    if queues.empty or "dropped" not in queues:
        return 0.0
    d = queues[queues["direction"] == direction]["dropped"]
    return float(d.max() - d.min()) if not d.empty else 0.0


def measure(
    events: pd.DataFrame,
    rx: pd.DataFrame,
    queues: pd.DataFrame,
    direction: str,
    capacity_bps: float,
    sent: dict[int, int] | None = None,
) -> dict[str, float]:
    """The measured ``dcqcn_*`` metrics of one run (times relative to the first flow's start);
    utilisation is the payload received over ``capacity_bps`` (:func:`payload_capacity`).

    ``sent``: datagrams each flow's sender sent (its final line), for the loss count; the run is
    ``lossy`` when fewer arrived or the bottleneck dropped any (RoCE assumes a lossless fabric:
    no PFC exists here, the buffer must hold the queue)."""
    starts = events[events["kind"] == "start"].set_index("flow")["t"]
    if starts.empty:
        return {}
    origin = float(starts.min())
    rates = flow_rates(rx, origin)
    if rates.empty:
        return {}
    rel_starts = [float(starts[f] - origin) for f in rates.columns]
    # a receiver writes empty windows until it has been idle for 2 s: a flow ends at its last
    # window with data
    last_rx = rx[rx["datagrams"] > 0].groupby("flow")["t"].max() - origin
    ends = [float(last_rx[f]) for f in rates.columns]
    lo, hi = settled_window(rel_starts, ends)
    out = flow_metrics(
        rates, (lo, hi), max(rel_starts), queues, direction, origin, capacity_bps, "dcqcn_"
    )
    cuts = events[events["kind"] == "cut"]
    out["dcqcn_cuts"] = float(len(cuts))
    out["dcqcn_cnps"] = float((events["kind"] == "cnp_sent").sum())
    settled_cuts = cuts[(cuts["t"] - origin > lo) & (cuts["t"] - origin <= hi)]
    gaps = settled_cuts.sort_values("t").groupby("flow")["t"].diff().dropna()
    out["dcqcn_cut_interval_s"] = float(gaps.mean()) if not gaps.empty else math.nan
    out["dcqcn_cut_depth_bps"] = cut_depth(events, settled_cuts.index)
    received = rx.groupby("flow")["datagrams"].sum()
    lost = sum(max(0, n - int(received.get(f, 0))) for f, n in (sent or {}).items())
    out["dcqcn_lost"] = float(lost)
    out["dcqcn_lossy"] = float(lost > 0 or _dropped(queues, direction) > 0)
    return out


def measure_bulk(
    goodput: pd.DataFrame, queues: pd.DataFrame, direction: str, capacity_bps: float
) -> dict[str, float]:
    """The same flow metrics for bulk TCP flows (``flows_goodput`` rows, one direction's
    flows), named ``bulk_*``: what a DCQCN run is compared with (DCTCP through the same
    marking switch). Utilisation is goodput over ``capacity_bps`` (:func:`tcp_capacity`);
    ``bulk_dropped`` is what the bottleneck dropped."""
    if goodput.empty:
        return {}
    rx = goodput.rename(columns={"goodput_bps": "rate_bps"})
    # a flow starts a window before its first sample
    first = rx.groupby("flow")["t"].min() - rx.groupby("flow")["seconds"].first()
    origin = float(first.min())
    rates = flow_rates(rx, origin)
    last = rx[rx["bytes"] > 0].groupby("flow")["t"].max() - origin
    starts = [float(first[f] - origin) for f in rates.columns]
    out = flow_metrics(
        rates,
        settled_window(starts, [float(last[f]) for f in rates.columns]),
        max(starts),
        queues,
        direction,
        origin,
        capacity_bps,
        "bulk_",
    )
    out["bulk_dropped"] = _dropped(queues, direction)
    return out


def tcp_capacity(bottleneck_bps: float, mtu: int = 1500) -> float:
    """The bottleneck's rate in TCP payload bit/s: MSS (MTU − 52: IPv4, TCP, timestamps) of
    every MTU + 14 (Ethernet) bytes."""
    return bottleneck_bps * (mtu - 52) / (mtu + 14)


def _model_inputs(
    *,
    bottleneck_bps: float,
    aqm: dict[str, Any],
    size: int,
    buffer_bytes: float | None,
) -> dict[str, Any]:
    """The bottleneck's thresholds, buffer and rate in the models' payload terms: the queue is
    wire bytes at the bottleneck, payload bytes in the models (as the RP counts)."""
    if aqm.get("kind") == "step":
        kmin = kmax = float(aqm["k"])
        pmax = 1.0
    else:
        kmin, kmax, pmax = float(aqm["kmin"]), float(aqm["kmax"]), float(aqm["pmax"])
    to_payload = size / (size + WIRE_OVERHEAD)
    return {
        "kmin_bytes": kmin * to_payload,
        "kmax_bytes": kmax * to_payload,
        "pmax": pmax,
        "packet_bytes": size,
        "bottleneck_bps": payload_capacity(bottleneck_bps, size),
        "buffer_bytes": None if buffer_bytes is None else buffer_bytes * to_payload,
    }


def predict(
    params: DcqcnParams,
    *,
    line_rate_bps: float,
    bottleneck_bps: float,
    rtt_s: float,
    aqm: dict[str, Any],
    size: int,
    starts_s: list[float],
    duration_s: float,
    buffer_bytes: float | None,
) -> dcqcn_model.FluidResult:
    """The fluid model of the run's flows through its bottleneck (dilated units), in payload
    terms as the RP counts: the bottleneck's rate is :func:`payload_capacity`."""
    return dcqcn_model.integrate(
        params,
        line_rate_bps=line_rate_bps,
        feedback_delay_s=rtt_s,
        duration_s=duration_s,
        starts_s=starts_s,
        **_model_inputs(
            bottleneck_bps=bottleneck_bps, aqm=aqm, size=size, buffer_bytes=buffer_bytes
        ),
    )


# the discrete model's seeds: its prediction is the mean over these runs (one run's cut
# interval varies by about ±10 % with the seed at one mark per ~10 RTTs)
DISCRETE_SEEDS = (0, 1, 2, 3)


def predict_discrete(
    params: DcqcnParams,
    *,
    line_rate_bps: float,
    bottleneck_bps: float,
    rtt_s: float,
    aqm: dict[str, Any],
    size: int,
    starts_s: list[float],
    duration_s: float,
    buffer_bytes: float | None,
    seeds: tuple[int, ...] = DISCRETE_SEEDS,
) -> list[dcqcn_marks.MarksResult]:
    """The model of discrete marks for the same inputs as :func:`predict`, one run per seed
    (the same RP, the bottleneck marking each datagram at its departure, the RTT as the
    feedback delay)."""
    inputs = _model_inputs(
        bottleneck_bps=bottleneck_bps, aqm=aqm, size=size, buffer_bytes=buffer_bytes
    )
    if inputs["kmax_bytes"] <= inputs["kmin_bytes"]:  # a step: p jumps to 1 at K
        inputs["kmax_bytes"] = inputs["kmin_bytes"] + 1e-9
    return [
        dcqcn_marks.simulate(
            params,
            line_rate_bps=line_rate_bps,
            feedback_delay_s=rtt_s,
            duration_s=duration_s,
            starts_s=starts_s,
            seed=seed,
            **inputs,
        )
        for seed in seeds
    ]


def wire_queue(res: dcqcn_model.FluidResult) -> np.ndarray:
    """The model's queue (payload bytes) as the bottleneck counts it (wire bytes)."""
    return res.queue_bytes * (res.packet_bytes + WIRE_OVERHEAD) / res.packet_bytes


def predicted(res: dcqcn_model.FluidResult) -> dict[str, float]:
    """The model's numbers under the measured ones' names (``dcqcn_pred_*``; queues in wire
    bytes, as measured)."""
    s = dcqcn_model.summary(res)
    wire = (res.packet_bytes + WIRE_OVERHEAD) / res.packet_bytes
    rates = res.rc_bps[:, dcqcn_model.settled(res, None)].mean(axis=1)
    return {
        "dcqcn_pred_rate_mean_bps": float(rates.mean()),
        "dcqcn_pred_jain": _jain(rates),
        "dcqcn_pred_utilisation": s["utilisation"],
        "dcqcn_pred_convergence_s": s["convergence_s"],
        "dcqcn_pred_cut_interval_s": s["cut_interval_s"],
        "dcqcn_pred_cut_depth_bps": s["cut_depth_bps"],
        "dcqcn_pred_queue_mean_bytes": s["queue_mean_bytes"] * wire,
        "dcqcn_pred_queue_amplitude_bytes": (s["queue_p95_bytes"] - s["queue_p5_bytes"]) * wire,
    }


def predicted_discrete(runs: list[dcqcn_marks.MarksResult]) -> dict[str, float]:
    """The discrete model's numbers (the mean over its seeds) under the fluid ones' names with
    ``dcqcn_pred_discrete_``; queues in wire bytes, as measured. Empty without runs."""
    if not runs:
        return {}
    got: dict[str, list[float]] = {}
    for res in runs:
        s = dcqcn_marks.summary(res)
        traj = res.trajectory
        wire = (traj.packet_bytes + WIRE_OVERHEAD) / traj.packet_bytes
        rates = traj.rc_bps[:, dcqcn_model.settled(traj, None)].mean(axis=1)
        one = {
            "rate_mean_bps": float(rates.mean()),
            "jain": _jain(rates),
            "utilisation": s["utilisation"],
            "convergence_s": s["convergence_s"],
            "cut_interval_s": s["cut_interval_s"],
            "cut_depth_bps": s["cut_depth_bps"],
            "queue_mean_bytes": s["queue_mean_bytes"] * wire,
            "queue_amplitude_bytes": (s["queue_p95_bytes"] - s["queue_p5_bytes"]) * wire,
        }
        for k, v in one.items():
            got.setdefault(k, []).append(v)
    out = {f"dcqcn_pred_discrete_{k}": float(np.mean(v)) for k, v in got.items()}
    out["dcqcn_pred_discrete_runs"] = float(len(runs))
    return out


def ratios(out: dict[str, float]) -> dict[str, float]:
    """measured / predicted for the readings an expectation compares: against the fluid model
    (``dcqcn_*_over_predicted``) and, where present, the model of discrete marks
    (``dcqcn_*_over_predicted_discrete``)."""
    got = {}
    names = ("queue_mean_bytes", "cut_interval_s", "cut_depth_bps", "convergence_s", "utilisation")
    for pred, suffix in (("dcqcn_pred_", ""), ("dcqcn_pred_discrete_", "_discrete")):
        for name in names:
            m, p = out.get(f"dcqcn_{name}"), out.get(f"{pred}{name}")
            if m is not None and p is not None and p and not (math.isnan(m) or math.isnan(p)):
                short = name.removesuffix("_bytes").removesuffix("_bps").removesuffix("_s")
                got[f"dcqcn_{short}_over_predicted{suffix}"] = m / p
    return got
