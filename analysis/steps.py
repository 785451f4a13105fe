"""What each timed collective iteration met on the WAN, and how long its phases took. PURE.

This module owns lining up a run's tables to give the α-β model (analysis.model) its measured
inputs and to check its terms one by one (docs/model.md, "Terms and their measured inputs", which
lists the columns): :func:`wan_step_starts` (per timed iteration x WAN connection: the window it
started with, its idle time before, RTTs, bytes and retransmissions, from the tcp_info samples)
and :func:`measured_topology` (the model's topology with those windows), and
:func:`phase_medians` (per point, the median slowest rank and, per phase, the median slowest
*leader*: a non-leader's phase timers include waiting for the leaders, so they are not that
phase's cost).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import replace
from typing import cast

import pandas as pd

from analysis.model import Topology
from analysis.tcp import LOSS_BETA, window_at_step_start

_KEYS = ("run_id", "collective", "algorithm", "size", "iteration")


def _cluster(host: pd.Series) -> pd.Series:
    return host.astype(str).str.rsplit("-h", n=1).str[0]


def _sweep_columns(collectives: pd.DataFrame) -> list[str]:
    return [c for c in collectives.columns if "[" in c or "." in c]


def wan_step_starts(
    tcp: pd.DataFrame, collectives: pd.DataFrame, min_bytes: float = 65536
) -> pd.DataFrame:
    """See the module docstring. Empty (with the columns) when nothing matches."""
    sweep = _sweep_columns(collectives)
    keys = [k for k in _KEYS if k in collectives.columns or k != "collective"]
    columns = [*sweep, *keys, "host", "peer_host", "cwnd_start", "ssthresh_start", "cwnd_max",
               "idle_before", "congestion",
               "srtt_ms", "min_rtt_ms", "sent_bytes", "retransmits"]  # fmt: skip
    if tcp.empty or collectives.empty:
        return pd.DataFrame(columns=columns)
    steps = (
        collectives.groupby([*sweep, *keys], dropna=False)
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
                    **dict(zip([*sweep, *keys], step[: len(sweep) + len(keys)], strict=True)),
                    "host": host,
                    "peer_host": s["peer_host"].iloc[0],
                    "cwnd_start": float(before["cwnd"] * before["mss"]),
                    "ssthresh_start": None
                    if pd.isna(before.get("ssthresh"))
                    else float(before["ssthresh"] * before["mss"]),
                    "cwnd_max": float((inside["cwnd"] * inside["mss"]).max()),
                    "idle_before": float(start - earlier["time"].max()) if len(earlier) else None,
                    "congestion": before.get("algorithm"),
                    # the mean, not the median: a window-limited connection's rate runs on
                    # it (docs/model.md, "Terms and their measured inputs")
                    "srtt_ms": float(inside["srtt_ms"].mean()),
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


def measured_topology(
    topo: Topology, steps: pd.DataFrame, host_bw: float | None = None
) -> Topology:
    """``topo`` with, per WAN direction, the median over ``steps`` (rows of
    :func:`wan_step_starts`, one point's timed iterations) of the window and ssthresh each step
    started with (:func:`analysis.tcp.window_at_step_start`: the idle restart applied when the
    idle time exceeded the RTO) and of the connections' srtt (each step's mean); where most
    steps retransmitted, the median peak window of those steps as the window a loss came at
    (cut by the congestion control's beta; none for one without a loss cut, e.g. bbr);
    ``host_bw`` the copy rate if given. A direction no step crossed keeps its unlimited window.
    tcp_info reports the initial "infinite" ssthresh as missing: a connection still in its first
    slow start slow-starts on."""
    links = []
    for lk in topo.links:
        mine = steps[(_cluster(steps["host"]) == lk.src) & (_cluster(steps["peer_host"]) == lk.dst)]
        if mine.empty:
            links.append(lk)
            continue
        srtt = float(mine["srtt_ms"].median()) / 1e3
        starts = [
            window_at_step_start(c, None if pd.isna(th) else th, 0.0 if pd.isna(i) else i, srtt)
            for c, th, i in zip(
                mine["cwnd_start"], mine["ssthresh_start"], mine["idle_before"], strict=True
            )
        ]
        cwnd = statistics.median(c for c, _ in starts)
        known = [th for _, th in starts if th is not None]
        ssthresh = statistics.median(known) if len(known) * 2 > len(starts) else 1e12
        # most steps lost a burst: their peak window is where the loss came
        lost = mine[mine["retransmits"] > 0]
        loss_at = float(lost["cwnd_max"].median()) if len(lost) * 2 > len(mine) else None
        cc = mine["congestion"].dropna()
        beta = LOSS_BETA.get(str(cc.iloc[0]) if len(cc) else "cubic")
        links.append(
            replace(
                lk,
                cwnd_start_bytes=cwnd,
                ssthresh_bytes=ssthresh,
                srtt_s=srtt,
                cwnd_loss_bytes=loss_at if beta else None,
                loss_beta=beta or LOSS_BETA["cubic"],
            )
        )
    out = replace(topo, links=tuple(links))
    return out if host_bw is None else replace(out, host_bw_bps=host_bw)
