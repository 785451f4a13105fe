"""Older results directories, read as the current format: the one place that knows what each
earlier ``format_version`` lacked (testbed.core.results has the history). PURE.

Version 1 (no ``format_version``): the summary rows get their ``kind`` (told apart by their
columns, as version 1's readers did), and network.parquet is derived from each run's resolved
scenario (every direction's configured settings; no buffer bytes, no floor taken off).
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from testbed.core.frames import MTU, goodput_factor
from testbed.core.results import FORMAT_VERSION
from testbed.core.units import format_buffer


class FormatError(ValueError):
    """A manifest of a format this version cannot read (written by a newer testbed)."""


def version_of(manifest: dict[str, Any]) -> int:
    return int(manifest.get("format_version") or 1)


def upgrade(
    manifest: dict[str, Any], tables: dict[str, pd.DataFrame]
) -> tuple[dict[str, Any], dict[str, pd.DataFrame]]:
    """``manifest`` and the directory's ``tables`` as the current format has them."""
    version = version_of(manifest)
    if version > FORMAT_VERSION:
        raise FormatError(
            f"format_version {version}: written by a newer testbed (this one reads up to "
            f"{FORMAT_VERSION}); upgrade the testbed to read it"
        )
    if version < 2:
        manifest = {**manifest, "summary": [_with_kind(s) for s in manifest.get("summary") or []]}
        runs = manifest.get("runs") or {}
        manifest["runs"] = {
            run_id: run if run.get("tcp") else {**run, "tcp": tcp_from_resolved(run)}
            for run_id, run in runs.items()
        }
        if tables.get("network") is None or tables["network"].empty:
            rows = [
                {"run_id": run_id, **row}
                for run_id, run in (manifest.get("runs") or {}).items()
                for row in network_from_resolved(
                    run.get("resolved") or {}, run.get("interface_mtu") or MTU
                )
            ]
            tables = {**tables, "network": pd.DataFrame(rows)}
    return {**manifest, "format_version": FORMAT_VERSION}, tables


def tcp_from_resolved(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A version-1 run's TCP settings per cluster: the scenario's, each cluster's override
    applied."""
    resolved = run.get("resolved") or {}
    tcp = resolved.get("tcp") or {}
    out = {}
    for name, cluster in (resolved.get("clusters") or {}).items():
        override = {k: v for k, v in ((cluster or {}).get("tcp") or {}).items() if v is not None}
        out[name] = {**tcp, **override}
    return out or {"": tcp}


def _with_kind(row: dict[str, Any]) -> dict[str, Any]:
    if row.get("kind"):
        return row
    if "final_loss" in row:
        kind = "training"
    elif row.get("collective") is not None:
        kind = "collectives"
    else:
        kind = "traffic"  # a run without ranks: its fault, trace-replay and DCQCN metrics
    return {**row, "kind": kind}


def network_from_resolved(resolved: dict[str, Any], mtu: int) -> list[dict[str, Any]]:
    """network.parquet's rows of a version-1 run: every WAN direction (each path of a multipath
    link) as configured, in the plan's order (per link and path: forward, then reverse)."""
    factor = goodput_factor(mtu)
    out = []
    for link in resolved.get("wan") or []:
        a, b = link["between"]
        paths = link.get("paths") or [None]
        for j, path in enumerate(paths):
            settings = path if path is not None else link
            suffix = f"/{j}" if path is not None else ""
            fwd = _settings(settings, False)
            rev = _settings(settings, True)
            for (src, dst), mine, other in (((a, b), fwd, rev), ((b, a), rev, fwd)):
                buffer = mine.get("buffer")
                rate = mine.get("rate")
                out.append(
                    {
                        "direction": f"{src}->{dst}{suffix}",
                        "link": "-".join(sorted((a, b))) + suffix,
                        "path": j if path is not None else None,
                        "src": src,
                        "dst": dst,
                        "rate_bps": rate,
                        "goodput_factor": factor,
                        "goodput_bps": rate * factor if rate else None,
                        "delay_s": mine.get("delay"),
                        "jitter_s": mine.get("jitter"),
                        "loss": mine.get("loss"),
                        "reorder": mine.get("reorder"),
                        "buffer_bytes": None,
                        "bdp_bytes": None,
                        "buffer": _buffer(buffer),
                        "aqm": _json(mine.get("aqm")),
                        "mtu": mtu,
                        "rtt_s": (mine.get("delay") or 0.0) + (other.get("delay") or 0.0),
                    }
                )
    return out


def _settings(link: dict[str, Any], reverse: bool) -> dict[str, Any]:
    fields = ("rate", "delay", "jitter", "loss", "reorder", "buffer", "aqm")
    out = {f: link.get(f) for f in fields}
    if reverse and link.get("reverse"):
        out.update({f: v for f, v in link["reverse"].items() if f in fields and v is not None})
    return out


def _buffer(spec: Any) -> str | None:
    """A resolved buffer (``["bdp", 1.0]``, ``["bytes", 250000.0]``) as the scenario wrote it."""
    if isinstance(spec, list | tuple) and len(spec) == 2:
        return format_buffer(spec[0], spec[1])
    return None


def _json(value: Any) -> str | None:
    return json.dumps(value) if value else None
