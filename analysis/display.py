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
    algbw/busbw, the α-β prediction and measured/predicted, flags (CPU-saturated, WRONG)."""
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
                "WAN/step": "-" if _none(wan) else format_size(round(float(wan))),
                "comm/step": _duration(s.get("comm_per_step")),
                "predicted": _duration(s.get("predicted_comm_per_step")),
                "meas/pred": num(s.get("comm_measured_over_predicted"), ".2f"),
                "compute": num(s.get("compute_utilisation"), ".0%"),
                "flags": "CPU-saturated" if _flag(s.get("cpu_saturated")) else "",
            }
        )
    return pd.DataFrame(out, columns=[*params, *TRAINING_COLUMNS])
