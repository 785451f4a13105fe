"""Tables as a reader sees them: values with units, "-" where there is none. PURE.

``testbed run`` prints these in the terminal and ``testbed report`` shows the same frames in its
HTML and Markdown (its CSVs keep the raw SI values), so the two never disagree.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from testbed.core.units import format_duration, format_rate

SELFCHECK_COLUMNS = [
    "direction", "RTT conf", "RTT p50", "RTT p99", "floor", "capacity", "goodput conf",
    "goodput", "ratio", "cc", "status",
]  # fmt: skip


def _none(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


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
