"""What each timed collective iteration met on the WAN, and how long its phases took. PURE.

This module owns lining up a run's tables to give the α-β model (analysis.model) its measured
inputs and to check its terms one by one (docs/model.md, "Terms and their measured inputs", which
lists the columns): :func:`wan_step_starts` (per timed iteration x WAN connection: the window it
started with, its idle time before, RTTs, bytes and retransmissions, from the tcp_info samples)
and :func:`phase_medians` (per point, the median slowest rank and, per phase, the median slowest
*leader*: a non-leader's phase timers include waiting for the leaders, so they are not that
phase's cost).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import pandas as pd

_KEYS = ("run_id", "algorithm", "size", "iteration")


def _cluster(host: pd.Series) -> pd.Series:
    return host.astype(str).str.rsplit("-h", n=1).str[0]


def _sweep_columns(collectives: pd.DataFrame) -> list[str]:
    return [c for c in collectives.columns if "[" in c or "." in c]


def wan_step_starts(
    tcp: pd.DataFrame, collectives: pd.DataFrame, min_bytes: float = 65536
) -> pd.DataFrame:
    """See the module docstring. Empty (with the columns) when nothing matches."""
    sweep = _sweep_columns(collectives)
    columns = [*sweep, *_KEYS, "host", "peer_host", "cwnd_start", "ssthresh_start", "cwnd_max",
               "idle_before",
               "srtt_ms", "min_rtt_ms", "sent_bytes", "retransmits"]  # fmt: skip
    if tcp.empty or collectives.empty:
        return pd.DataFrame(columns=columns)
    steps = (
        collectives.groupby([*sweep, *_KEYS], dropna=False)
        .agg(start=("start", "min"), seconds=("seconds", "max"))
        .reset_index()
    )
    wan = tcp[_cluster(tcp["host"]) != _cluster(tcp["peer_host"])]
    out = []
    for (run_id, host, _local, _peer), s in wan.sort_values("time").groupby(
        ["run_id", "host", "local", "peer"]
    ):
        s = s.reset_index(drop=True)
        grew = s["bytes_sent"].diff().fillna(0) > 0
        for step in steps[steps["run_id"] == run_id].itertuples(index=False):
            start = cast(float, step.start)  # itertuples: the row's values, untyped
            end = start + cast(float, step.seconds)
            inside = s[(s["time"] >= start) & (s["time"] <= end)]
            moving = inside[grew[inside.index]]
            if moving.empty:
                continue
            first = moving.index[0]
            before = s.loc[first - 1] if first > 0 else s.loc[first]
            if inside["bytes_sent"].iloc[-1] - before["bytes_sent"] < min_bytes:
                continue
            earlier = s[(s["time"] < start) & grew]
            out.append(
                {
                    **dict(zip([*sweep, *_KEYS], step[: len(sweep) + len(_KEYS)], strict=True)),
                    "host": host,
                    "peer_host": s["peer_host"].iloc[0],
                    "cwnd_start": float(before["cwnd"] * before["mss"]),
                    "ssthresh_start": None
                    if pd.isna(before.get("ssthresh"))
                    else float(before["ssthresh"] * before["mss"]),
                    "cwnd_max": float((inside["cwnd"] * inside["mss"]).max()),
                    "idle_before": float(start - earlier["time"].max()) if len(earlier) else None,
                    "srtt_ms": float(inside["srtt_ms"].median()),
                    "min_rtt_ms": float(inside["min_rtt_ms"].min()),
                    "sent_bytes": float(inside["bytes_sent"].iloc[-1] - before["bytes_sent"]),
                    "retransmits": float(inside["retransmits"].max() - before["retransmits"]),
                }
            )
    return pd.DataFrame(out, columns=columns)


def phase_medians(collectives: pd.DataFrame, leaders: Iterable[int]) -> pd.DataFrame:
    """See the module docstring."""
    sweep = _sweep_columns(collectives)
    keys = [*sweep, "algorithm", "size", "iteration"]
    phases = [c for c in collectives.columns if c.startswith("phases_")]
    slowest = collectives.groupby(keys, dropna=False)["seconds"].max()
    lead = collectives[collectives["rank"].isin(list(leaders))]
    per_iteration = pd.concat([slowest, lead.groupby(keys, dropna=False)[phases].max()], axis=1)
    return per_iteration.groupby(keys[:-1], dropna=False).median().reset_index()
