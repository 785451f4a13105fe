"""A run's network as the analysis sees it: the rows of network.parquet (one per WAN direction,
as built) and the one direction that stands for the run in single-number columns (``rtt_s``,
``wan_rate_bps``, ...). PURE. The runner's summary and the report both take the run's reference
direction from here, so the two cannot price a fault or a transfer on different links."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from testbed.core.aqm import marking_point

NETWORK_COLUMNS = [
    "wan_rate_bps", "wan_goodput_bps", "wan_delay_s", "rtt_s", "wan_loss", "aqm", "aqm_profile",
    "aqm_at", "buffer",
]  # fmt: skip


def reference(rows: pd.DataFrame | list[dict], backend: str | None = None) -> dict[str, Any]:
    """The run's reference direction (the first in plan order: the first link's forward
    direction, its first path on a multipath link) as the run's network columns."""
    frame = pd.DataFrame(rows) if isinstance(rows, list) else rows
    if frame.empty:
        return {}
    first = frame.iloc[0]
    aqm = json.loads(first["aqm"]) if isinstance(first.get("aqm"), str) else None
    out: dict[str, Any] = {
        "wan_rate_bps": _num(first.get("rate_bps")),
        "wan_goodput_bps": _num(first.get("goodput_bps")),
        "wan_delay_s": _num(first.get("delay_s")),
        "rtt_s": _num(first.get("rtt_s")),
        "wan_loss": _num(first.get("loss")),
        "aqm": (aqm or {}).get("kind") or "droptail",
        "aqm_profile": aqm_label(aqm),
        "buffer": first.get("buffer"),
    }
    if aqm and aqm.get("kind") in ("red", "step") and backend:
        out["aqm_at"] = marking_point(aqm.get("at"), backend)
    return out


def aqm_label(aqm: dict[str, Any] | None) -> str:
    """'droptail', 'red 20-200KB p1%', 'step 30KB' (the profile as a short legend label)."""
    if not aqm or aqm.get("kind") == "droptail":
        return "droptail"
    kind = aqm["kind"]
    if kind == "red":
        pmax = aqm.get("pmax") or 0
        # with TCP senders: DCQCN's switch profile, not DCQCN (docs/congestion.md)
        return f"red {aqm['kmin'] / 1e3:g}-{aqm['kmax'] / 1e3:g}KB p{pmax * 100:g}%"
    if kind == "step":
        return f"step {aqm['k'] / 1e3:g}KB"
    return str(kind)


def _num(value: Any) -> float | None:
    return None if value is None or value != value else float(value)
