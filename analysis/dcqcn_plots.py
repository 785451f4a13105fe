"""The report's DCQCN figures: per run, each flow's receive rate over time with the
fluid model's RC beside it, and the bottleneck queue with Kmin and Kmax; and, across a sweep,
queue amplitude and utilisation against the RTT. PURE (matplotlib on the loaded results; the
model is integrated again from what each run recorded it ran with, ``manifest.runs[*].dcqcn``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import dcqcn as D
from analysis.loader import Results
from analysis.plots import style as P
from testbed.core.dcqcn import DcqcnParams
from testbed.core.units import format_size

MAX_RUNS = 6  # runs drawn (the first ones): a sweep's table has them all


def rows(res: Results) -> pd.DataFrame:
    """One row per run with DCQCN metrics: a traffic-alone run's row, or the first summary row
    of a run whose DCQCN flows ran beside collectives or training (each row repeats them)."""
    parts = [
        s[s["dcqcn_flows"].notna()]
        for s in (res.traffic_summary, res.summary, res.training_summary)
        if not s.empty and "dcqcn_flows" in s
    ]
    if not parts:
        return pd.DataFrame()
    return pd.concat(parts).drop_duplicates(["results", "run_id"]).reset_index(drop=True)


def _setups(res: Results, results: str, run_id: str) -> dict[str, dict]:
    run = res.manifests.get(results, {}).get("runs", {}).get(run_id, {})
    return run.get("dcqcn") or {}


def _model(setups: dict[str, dict], starts: list[float], duration: float, size: int):
    first = setups[min(setups, key=int)]
    if not first.get("aqm") or first["aqm"].get("kind") not in ("red", "step"):
        return None
    return D.predict(
        DcqcnParams(**first["params"]),
        line_rate_bps=first["line_rate_bps"],
        bottleneck_bps=first["bottleneck_bps"],
        rtt_s=first["rtt_s"],
        aqm=first["aqm"],
        size=size,
        starts_s=starts,
        duration_s=duration,
        buffer_bytes=first["buffer_bytes"],
    )


def plot_rates_and_queue(res: Results) -> P.Plot | None:
    """Per run (up to MAX_RUNS): flows' receive rate (0.5 s mean) and the model's RC; the
    bottleneck queue with Kmin / Kmax and the model's queue."""
    ev, rx = res.dcqcn, res.dcqcn_rx
    if ev.empty or rx.empty:
        return None
    runs = list(rx[["results", "run_id"]].drop_duplicates().itertuples(index=False))[:MAX_RUNS]
    with P._style():
        fig, axes = P._figure(2 * len(runs), 2, width=5.6, height=3.0)
        for k, (results, run_id) in enumerate(runs):
            e = ev[(ev["results"] == results) & (ev["run_id"] == run_id)]
            r = rx[(rx["results"] == results) & (rx["run_id"] == run_id)]
            starts = e[e["kind"] == "start"].set_index("flow")["t"]
            origin = float(starts.min())
            rates = D.flow_rates(r, origin).rolling(5, min_periods=1).mean()
            rate_ax, queue_ax = axes[2 * k], axes[2 * k + 1]
            for f in rates.columns:
                rate_ax.plot(rates.index, rates[f] / 1e6, label=f"flow {f}")
            setups = _setups(res, results, run_id)
            duration = float(rates.index.max())
            model = None
            if setups:
                flows = sorted(int(f) for f in setups)
                model = _model(
                    setups, [float(starts.get(f, origin) - origin) for f in flows], duration, 1400
                )
            if model is not None:
                for i in range(model.n_flows):
                    rate_ax.plot(model.t_s, model.rc_bps[i] / 1e6, "k--", lw=0.8,
                                 label="fluid model" if i == 0 else None)  # fmt: skip
            rate_ax.set(title=f"{run_id}: receive rate", xlabel="s", ylabel="Mbit/s")
            rate_ax.legend(fontsize="small")
            q = res.queues
            first = setups[min(setups, key=int)] if setups else {}
            if not q.empty and first.get("direction"):
                q = q[(q["results"] == results) & (q["run_id"] == run_id)]
                q = q[q["direction"] == first["direction"]]
                queue_ax.plot(q["time"] - origin, q["backlog_bytes"] / 1e3, lw=0.8, label="queue")
            if model is not None:
                queue_ax.plot(model.t_s, D.wire_queue(model) / 1e3, "k--", lw=0.8, label="model")
            aqm = first.get("aqm") or {}
            for key, style in (("kmin", ":"), ("kmax", "-.")):
                if aqm.get(key) is not None:
                    queue_ax.axhline(aqm[key] / 1e3, color="tab:red", ls=style, lw=0.8,
                                     label=f"{key} {format_size(aqm[key])}")  # fmt: skip
            queue_ax.set(title=f"{run_id}: bottleneck queue", xlabel="s", ylabel="kB")
            queue_ax.legend(fontsize="small")
    return P.Plot(
        "dcqcn_rates",
        "DCQCN: rates and queue over time",
        "Left: each flow's receive rate (payload, 0.5 s mean) and the fluid model's RC for the "
        "same parameters, bottleneck and feedback delay (dashed). Right: the bottleneck's queue "
        "samples with the marking thresholds and the model's queue. Times in the testbed's "
        "(dilated) units.",
        fig,
    )


def plot_versus_rtt(res: Results) -> P.Plot | None:
    """Across runs: queue amplitude and utilisation against the RTT (a delay sweep)."""
    s = rows(res)
    need = ("dcqcn_queue_amplitude_bytes", "dcqcn_utilisation")
    if s.empty or any(c not in s for c in need) or "rtt_s" not in res.runs:
        return None
    m = s.merge(res.runs[["results", "run_id", "rtt_s"]], on=["results", "run_id"])
    m = m.dropna(subset=["rtt_s", *need])
    if m["rtt_s"].nunique() < 2:
        return None
    m = m.sort_values("rtt_s")
    with P._style():
        fig, (amp, util) = P._figure(2, 2, width=5.0, height=3.2)
        x = m["rtt_s"] * 1e3
        amp.plot(x, m["dcqcn_queue_amplitude_bytes"] / 1e3, "o-", label="measured")
        if "dcqcn_pred_queue_amplitude_bytes" in m:
            amp.plot(x, m["dcqcn_pred_queue_amplitude_bytes"] / 1e3, "k--", label="fluid model")
        amp.set(title="Queue amplitude (p95 - p5)", xlabel="RTT (ms)", ylabel="kB")
        amp.legend(fontsize="small")
        util.plot(x, m["dcqcn_utilisation"] * 100, "o-", label="measured")
        if "dcqcn_pred_utilisation" in m:
            util.plot(x, m["dcqcn_pred_utilisation"] * 100, "k--", label="fluid model")
        util.set(title="Utilisation", xlabel="RTT (ms)", ylabel="%", ylim=(0, 105))
        util.legend(fontsize="small")
    return P.Plot(
        "dcqcn_vs_rtt",
        "DCQCN: queue amplitude and utilisation vs RTT",
        "Per run of a delay sweep: the settled half's queue amplitude (p95 − p5) and the "
        "flows' receive rate over the bottleneck's, measured and from the fluid model.",
        fig,
    )


SHOWN = [
    "dcqcn_flows", "dcqcn_rate_mean_bps", "dcqcn_jain", "dcqcn_utilisation",
    "dcqcn_pred_utilisation", "dcqcn_convergence_s", "dcqcn_pred_convergence_s",
    "dcqcn_cut_interval_s", "dcqcn_pred_cut_interval_s", "dcqcn_pred_discrete_cut_interval_s",
    "dcqcn_cut_depth_bps", "dcqcn_pred_cut_depth_bps", "dcqcn_pred_discrete_cut_depth_bps",
    "dcqcn_queue_mean_bytes", "dcqcn_pred_queue_mean_bytes",
    "dcqcn_pred_discrete_queue_mean_bytes", "dcqcn_queue_amplitude_bytes",
    "dcqcn_pred_queue_amplitude_bytes", "dcqcn_pred_discrete_queue_amplitude_bytes", "dcqcn_cuts",
    "dcqcn_cnps", "dcqcn_lost", "dcqcn_lossy",
]  # fmt: skip


def table(res: Results) -> pd.DataFrame:
    """Per run: the measured and predicted DCQCN metrics (SI units)."""
    s = rows(res)
    if s.empty:
        return pd.DataFrame()
    cols = ["results", "run_id", *[p for p in res.params if p in s], *[c for c in SHOWN if c in s]]
    out = s[cols].copy()
    if "dcqcn_lossy" in out:
        out["dcqcn_lossy"] = np.where(out["dcqcn_lossy"] > 0, "LOSSY", "lossless")
    return out
