"""Tables as a reader sees them: values with units, "-" where there is none. PURE.

``testbed run`` prints these in the terminal and ``testbed report`` shows the same frames in its
HTML and Markdown (its CSVs keep the raw SI values), so the two never disagree.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from testbed.core.units import format_duration, format_rate, format_size

SELFCHECK_COLUMNS = [
    "direction", "RTT conf", "RTT p50", "RTT p99", "floor", "capacity", "goodput conf",
    "goodput", "ratio", "cc", "status",
]  # fmt: skip


def _none(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def _flag(value: Any) -> bool:
    return not _none(value) and bool(value)


def _duration(value: Any) -> str:
    return "-" if _none(value) else format_duration(float(value))


def _share(value: Any) -> str:
    return "-" if _none(value) else f"{float(value):.1%}"


def selfcheck_display(links: pd.DataFrame | list[dict[str, Any]]) -> pd.DataFrame:
    """The link self-check (links.parquet rows), a row per run x direction: configured and
    measured RTT, the floor taken off at bring-up ("-": not compensated, or an older file),
    capacity and goodput against the configured ceiling, the congestion control, and ``ok`` or
    what is wrong."""
    frame = pd.DataFrame(links)
    out = []
    for r in frame.to_dict("records"):
        good = r.get("goodput_bps")
        out.append(
            {
                "direction": r["direction"],
                "RTT conf": _duration(r.get("rtt_configured_s")),
                "RTT p50": _duration(r.get("rtt_median_s")),
                "RTT p99": _duration(r.get("rtt_p99_s")),
                "floor": _duration(r.get("floor_s")),
                "capacity": _share(r.get("capacity_ratio")),
                "goodput conf": format_rate(float(r["goodput_configured_bps"])),
                "goodput": "-" if _none(good) or not good else format_rate(float(good)),
                "ratio": "-" if not r.get("goodput_ratio") else _share(r["goodput_ratio"]),
                "cc": r.get("congestion"),
                "status": "ok" if r.get("ok") else str(r.get("problem") or "off"),
            }
        )
    return pd.DataFrame(out, columns=SELFCHECK_COLUMNS)


COLLECTIVES_COLUMNS = [
    "collective", "algorithm", "size", "n", "p50", "p95", "algbw", "busbw", "predicted",
    "meas/pred", "flags",
]  # fmt: skip


def collectives_display(
    summary: pd.DataFrame | list[dict[str, Any]], params: list[str]
) -> pd.DataFrame:
    """The collectives summary (nccl-tests conventions: time = the slowest rank per iteration),
    a row per run x collective x algorithm x size, the sweep ``params`` in front: p50/p95,
    algbw/busbw, the α-β prediction and measured/predicted, flags (CPU-saturated, WRONG,
    loss-unpriced: the WAN retransmitted where the model priced no loss)."""
    frame = pd.DataFrame(summary)
    out = []
    for s in frame.to_dict("records"):
        if _none(s.get("collective")):  # a run whose every operation failed: faults only
            continue
        flags = []
        if _flag(s.get("cpu_saturated")):
            flags.append("CPU-saturated")
        if not _none(s.get("correct")) and not s.get("correct"):
            flags.append("WRONG")
        if not _none(s.get("wan_retransmits")) and s["wan_retransmits"] and not s.get("model_loss"):
            # the WAN lost segments the model priced no loss for (a slow-start overshoot, a
            # loss in a minority of the steps): the prediction is a floor
            flags.append("loss-unpriced")
        pred, ratio = s.get("predicted"), s.get("measured_over_predicted")
        out.append(
            {
                **{p: "" if _none(s.get(p)) else str(s.get(p)) for p in params},
                "collective": str(s["collective"]),
                "algorithm": str(s["algorithm"]),
                "size": format_size(float(s["size"])),
                "n": str(int(s["ranks"])),
                "p50": format_duration(float(s["time_p50"])),
                "p95": format_duration(float(s["time_p95"])),
                "algbw": f"{float(s['algbw']) / 1e6:.1f} MB/s",
                "busbw": f"{float(s['busbw']) / 1e6:.1f} MB/s",
                "predicted": "-" if _none(pred) or not pred else format_duration(float(pred)),
                "meas/pred": "-" if _none(ratio) or not ratio else f"{float(ratio):.2f}",
                "flags": " ".join(flags),
            }
        )
    return pd.DataFrame(out, columns=[*params, *COLLECTIVES_COLUMNS])


TRAINING_COLUMNS = [
    "algorithm", "steps", "final loss", "target", "time to loss", "step p50", "step p95",
    "WAN/step", "comm/step", "predicted", "meas/pred", "compute", "flags",
]  # fmt: skip


def training_display(
    summary: pd.DataFrame | list[dict[str, Any]], params: list[str]
) -> pd.DataFrame:
    """The training summary, a row per run (step time = the slowest rank's; WAN bytes = both
    directions' counters), the sweep ``params`` in front (``workload.algorithm`` is the
    ``algorithm`` column)."""
    frame = pd.DataFrame(summary)
    params = [p for p in params if p != "workload.algorithm"]

    def num(v: Any, fmt: str) -> str:
        return "-" if _none(v) else format(float(v), fmt)

    out = []
    for s in frame.to_dict("records"):
        if "final_loss" not in s:  # a run whose every operation failed: faults only
            continue
        target = num(s.get("target_loss"), ".3f")
        if s.get("target_from") == "ddp":
            target += " (ddp)"
        wan = s.get("wan_bytes_per_step")
        out.append(
            {
                **{p: "-" if _none(s.get(p)) else str(s.get(p)) for p in params},
                "algorithm": str(s.get("algorithm")),
                "steps": str(s.get("steps") if _none(s.get("steps")) else int(s["steps"])),
                "final loss": num(s.get("final_loss"), ".3f"),
                "target": target,
                "time to loss": "-"
                if _none(s.get("target_loss"))
                else _duration(s.get("time_to_loss")),
                "step p50": _duration(s.get("step_time_p50")),
                "step p95": _duration(s.get("step_time_p95")),
                "WAN/step": _value(wan, lambda v: format_size(round(float(v)))),
                "comm/step": _duration(s.get("comm_per_step")),
                "predicted": _duration(s.get("predicted_comm_per_step")),
                "meas/pred": num(s.get("comm_measured_over_predicted"), ".2f"),
                "compute": num(s.get("compute_utilisation"), ".0%"),
                "flags": "CPU-saturated" if _flag(s.get("cpu_saturated")) else "",
            }
        )
    return pd.DataFrame(out, columns=[*params, *TRAINING_COLUMNS])


def _value(v: Any, fmt: Any) -> str:
    return "-" if _none(v) else fmt(v)


def dynamics_display(
    runs: dict[str, dict[str, Any]], summary: list[dict[str, Any]], params: list[str]
) -> pd.DataFrame:
    """Per run with a changing WAN (manifest ``runs``, in order): its events applied, late and
    failed, and the worst of its faults (the summary's ``fault_*`` metrics)."""
    worst = {s["run_id"]: s for s in summary if "fault_detect" in s}
    columns = [*params, "events", "late", "failed", "detect", "stall", "stall/pred", "recover"]
    columns += ["survived", "trace corr"]
    out = []
    for run_id, info in runs.items():
        ev = info.get("events") or {}
        if not ev:
            continue
        s = worst.get(run_id, {})
        stall = s.get("fault_stall")
        survived = s.get("fault_survived")
        given = info.get("params") or {}
        out.append(
            [
                *(str(given.get(p, "")) for p in params),
                str(ev.get("applied", 0)),
                str(ev.get("late", 0)),
                str(ev.get("failed", 0)),
                _duration(s.get("fault_detect")),
                _duration(stall if stall is not None else s.get("fault_flow_stall")),
                _value(s.get("fault_stall_over_predicted"), lambda v: f"{v:.2f}"),
                _duration(s.get("fault_recover")),
                "-" if survived is None else ("yes" if survived else "no"),
                _value(s.get("trace_correlation"), lambda v: f"{v:.3f}"),
            ]
        )
    return pd.DataFrame(out, columns=columns)


def dcqcn_display(summary: list[dict[str, Any]], params: list[str]) -> pd.DataFrame:
    """Per run with DCQCN flows: measured over the settled half, each beside DCQCN's fluid
    model (dilated units); the queue and the cuts also beside the model of discrete marks
    (``discrete``: analysis.dcqcn_marks)."""
    columns = [*params, "flows", "rate", "Jain", "util", "model", "queue mean", "model"]
    columns += ["discrete", "cut every", "model", "discrete", "cut by", "model", "discrete"]
    columns += ["converge", "model", "lost"]
    out = []
    for s in summary:
        if "dcqcn_flows" not in s:
            continue
        lost = s.get("dcqcn_lost") or 0
        out.append(
            [
                *(str(s.get(p, "")) for p in params),
                f"{s['dcqcn_flows']:.0f}",
                _value(s.get("dcqcn_rate_mean_bps"), format_rate),
                _value(s.get("dcqcn_jain"), lambda v: f"{v:.3f}"),
                _value(s.get("dcqcn_utilisation"), lambda v: f"{v:.1%}"),
                _value(s.get("dcqcn_pred_utilisation"), lambda v: f"{v:.1%}"),
                _value(s.get("dcqcn_queue_mean_bytes"), format_size),
                _value(s.get("dcqcn_pred_queue_mean_bytes"), format_size),
                _value(s.get("dcqcn_pred_discrete_queue_mean_bytes"), format_size),
                _duration(s.get("dcqcn_cut_interval_s")),
                _duration(s.get("dcqcn_pred_cut_interval_s")),
                _duration(s.get("dcqcn_pred_discrete_cut_interval_s")),
                _value(s.get("dcqcn_cut_depth_bps"), format_rate),
                _value(s.get("dcqcn_pred_cut_depth_bps"), format_rate),
                _value(s.get("dcqcn_pred_discrete_cut_depth_bps"), format_rate),
                _duration(s.get("dcqcn_convergence_s")),
                _duration(s.get("dcqcn_pred_convergence_s")),
                f"{lost:.0f} LOSSY" if s.get("dcqcn_lossy") else "0",
            ]
        )
    return pd.DataFrame(out, columns=columns)
