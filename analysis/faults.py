"""What a changing WAN did to a run: fault verdicts, the RTO-series prediction of a stall, trace
replay accuracy and event lateness. PURE (pandas over results tables; imports only testbed.core
and analysis): the report and the runner's summary call it, the loader re-derives nothing.

Inputs are the results tables (docs/results.md, "events.parquet" and "Faults"):

* ``events``: one row per event (``event``, ``source``, ``fault``, ``action``, ``link``,
  ``scheduled_unix``, ``applied_unix``, ``late_s``, ``error``, ``status``, ...); a ``set`` event
  that changes several directions has one row per direction (``direction`` and the new
  ``rate_bps``, ``delay_s``, ``loss``, ...; :func:`per_direction` spreads a row that lists
  them). :func:`applied_events` keeps what happened: no ``skipped`` rows, each event action
  once, the runner's end-of-run ``undone`` row (its fault's event index, the closing action);
* operations: one row per rank and operation with ``start``, ``end`` (or ``seconds``),
  ``outcome`` (ok | error | timeout), ``error_type``, ``error`` (:func:`operations` builds them
  from collectives.parquet or training.parquet);
* ``queues`` (cumulative bottleneck ``bytes`` per direction) or ``flows_goodput`` for the
  achieved rate of a trace replay.

Definitions (per run and per fault; a fault's events share its ``fault`` index):

* fault start / end: the earliest / latest ``applied_unix`` of its applied events, the end
  only from a closing event (an undo at the end of the run counts: ``undone``); without one, start
  + the scenario's ``duration`` (``planned``), else no end (a gateway crash never restored).
  Its *dark intervals* are the (on, off) pairs of blackhole/unblackhole, link_down/link_up,
  gateway_down/gateway_up in time order (a flap has ``count`` of them).
* operation: all ranks' rows of one iteration (collective, algorithm, size) or training step;
  it starts at the earliest rank's start, ends at the latest rank's end, and its outcome is
  ``timeout`` if a rank timed out, else ``error`` if a rank failed, else ``ok``.
* baseline: the median duration of the ok operations of the same run and arm (collective,
  algorithm, size; or the training run) that overlap no fault's [start, end].
* affected operations: those whose [start, end] overlaps [fault start, fault end]; if none does
  (the fault fell between operations), the first one that starts after the fault started.
* time to detect: fault start → the end of the first non-ok rank row that ends after the fault
  started (before the next fault starts); None when nothing failed.
* stall: Σ over the affected ok operations of (duration − baseline).
* predicted stall: :func:`predict_stall` for the dark intervals, starting when the first
  affected operation is running (see below); None for faults that are not outages (reset,
  burst_loss, a schedule change).
* time to recover: the end of the first ok operation that ends after the fault's end, minus the
  fault's end: an operation that rode through the fault counts (its tail is the recovery), as
  does one run on a rebuilt process group. None when no operation succeeded after the fault.
* survived: an ok operation ended after the fault's end and no operation failed in between (the
  process group lived through it; a group rebuilt after an error has *recovered*, not survived);
  None when no operation met the fault (traffic only).
* flow stall (:func:`flow_stalls`): how long the bulk flows crossing the fault stopped, against
  the RTO series from the fault's start (a bulk flow always has data in flight).

The RTO series (Linux TCP; docs/faults.md has the measurement): with data in flight when a
silent outage starts, Linux sends a tail loss probe (RFC 8985) PTO = 2·srtt + 2 ms after the last
ACK (:func:`tlp_timeout`), then retransmits at PTO + RTO0·(2^k − 1) (k = 1, 2, ...; each RTO
doubling, capped at 120 s), RTO0 = srtt + max(4·rttvar, 200 ms) (:func:`analysis.model.linux_rto`).
The flow resumes at the first probe after the outage ends: on an 80 ms RTT path the probes go at
0.162, 0.442, 1.002, 2.122, 4.362 s, so a 2 s blackhole stalls it ≈ 2.1 s (without the TLP the
series would be 0.28, 0.84, 1.96, 4.20 s: ≈ 4.2 s; measured on this project's testbed, the TLP
series picks the right probe every time, the other one often not). With ICMP unreachable for
every probe RFC 6069 would revert each backoff (probes every ≈ RTO0: :func:`predict_stall`'s
``icmp`` intervals), but a Linux gateway sends at most about one per second to a host
(net.ipv4.icmp_ratelimit): a link down measured here backed off as a silent outage does, so it is
predicted as one. The kernel gives up after
``tcp_retries2`` retransmissions (:func:`tcp_give_up`: 924.6 s for 15). After a resume by a
retransmission timeout (not the TLP) the window is one segment: the rest of the operation goes out
in slow start (:func:`slow_start_loss`, the ``predicted_slowstart_s`` part of the predicted
stall; ~0.6 s at 100 Mbit/s and 80 ms RTT).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis.model import MSS_BYTES, RTO_MIN_S, TcpWindow, linux_rto
from testbed.core.frames import GOODPUT_FACTOR
from testbed.core.stats import quantile

RTO_MAX_S = 120.0  # Linux TCP_RTO_MAX
LATE_S = 0.020  # an event applied more than this after its schedule is late (issue 15)
OUTCOMES = ("ok", "error", "timeout")
OP_COLUMNS = ["results", "run_id", "arm", "op", "rank", "start", "end", "outcome", "error_type"]
OP_COLUMNS += ["error"]
# (on, off) actions of a dark interval, and whether the sender gets ICMP unreachable meanwhile
OUTAGES = {
    "blackhole": ("unblackhole", False),
    # the gateway answers ICMP net unreachable, rate-limited to ~1/s per host: too rarely to
    # revert the backoff (measured: retransmissions 0.60, 0.94, 1.66, 3.06 s into a link down)
    "link_down": ("link_up", False),
    "gateway_down": ("gateway_up", False),
}
FAULT_COLUMNS = [
    "results", "run_id", "fault", "kind", "link", "start", "end", "planned", "undone", "duration",
    "detect_s",
    "affected_ops", "op_outcome", "baseline_s", "stall_s", "predicted_stall_s",
    "predicted_slowstart_s",
    "stall_over_predicted", "predicted_outcome", "recover_s", "survived", "error_type",
    "error", "verdict",
]  # fmt: skip


# -- the RTO series ----------------------------------------------------------------------------
def retransmit_times(rto0_s: float, until_s: float, rto_max_s: float = RTO_MAX_S) -> list[float]:
    """Times after the first lost transmission at which a silent outage's retransmissions go:
    RTO0·(2^k − 1) while the RTO doubles, then every ``rto_max_s``; up to the first at or after
    ``until_s``."""
    if rto0_s <= 0:
        raise ValueError(f"RTO0 must be positive, got {rto0_s}")
    out: list[float] = []
    t, rto = 0.0, rto0_s
    while not out or out[-1] < until_s:
        t += rto
        out.append(t)
        rto = min(2 * rto, rto_max_s)
    return out


def tcp_give_up(retries2: int = 15, rto_min_s: float = RTO_MIN_S) -> float:
    """Seconds after which Linux times out a connection whose data stays unacknowledged
    (retransmits_timed_out with tcp_retries2): 924.6 s for 15, 102.2 s for 8, 12.6 s for 5."""
    thresh = int(math.log2(RTO_MAX_S / rto_min_s))  # ilog2(TCP_RTO_MAX / TCP_RTO_MIN) = 9
    if retries2 <= thresh:
        return ((2 << retries2) - 1) * rto_min_s
    return ((2 << thresh) - 1) * rto_min_s + (retries2 - thresh) * RTO_MAX_S


@dataclass(frozen=True)
class StallPrediction:
    """When a flow with data in flight at ``t = 0`` moves again after its outages."""

    resume_s: float | None  # first delivered retransmission (None: never / the kernel gave up)
    stall_s: float | None  # Σ of each outage's stall (resume − the outage's start)
    probes: tuple[float, ...]  # retransmission times (s after t = 0)
    gave_up: bool  # the kernel's tcp_retries2 limit came first (ETIMEDOUT)


def tlp_timeout(srtt_s: float, rto0_s: float) -> float:
    """Linux's tail loss probe timeout (tcp_schedule_loss_probe, RFC 8985): 2·srtt + 2 ms
    (TCP_TIMEOUT_MIN), at most the RTO. (With one packet in flight Linux adds 200 ms for a
    delayed ACK; a stalled bulk or collective transfer has more.)"""
    return min(2 * srtt_s + 0.002, rto0_s)


def predict_stall(
    intervals: Iterable[tuple[float, float | None, bool]],
    rto0_s: float,
    retries2: int = 15,
    rto_max_s: float = RTO_MAX_S,
    pto_s: float | None = None,
) -> StallPrediction:
    """Replay the retransmission timer over dark ``intervals`` (start, end or None = never,
    icmp), times relative to when the flow has data in flight (an interval starting before 0
    counts from 0). With ``pto_s`` (:func:`tlp_timeout`) the first probe is Linux's tail loss
    probe, ``pto_s`` after the last ACK, and the RTO timer starts again from it (a full RTO0);
    without, the first probe is the RTO at RTO0. Silent: the RTO doubles after every lost
    probe; ICMP: RFC 6069 reverts it, so probes go every RTO0. A probe outside every interval
    is delivered: the flow resumes, and the next interval starts a new series. Give-up:
    ``tcp_give_up(retries2)`` after the first lost transmission."""
    spans = sorted((max(0.0, s), e, icmp) for s, e, icmp in intervals if e is None or e > 0)
    give_up = tcp_give_up(retries2)
    probes: list[float] = []
    stall, resume = 0.0, None
    i = 0
    while i < len(spans):
        start = spans[i][0]
        if resume is not None and start < resume:  # began while still stalled: same stall
            i += 1
            continue
        t, rto = start, rto0_s
        tlp = pto_s is not None
        while True:
            t += pto_s if tlp and pto_s is not None else rto
            dark = [sp for sp in spans if sp[0] <= t and (sp[1] is None or t < sp[1])]
            if t - start > give_up:
                return StallPrediction(None, None, tuple(probes), True)
            probes.append(t)
            if not dark:
                break
            if tlp:  # the TLP does not back off: the RTO timer then runs a full RTO0
                tlp = False
            else:
                rto = rto0_s if any(icmp for *_, icmp in dark) else min(2 * rto, rto_max_s)
            if all(sp[1] is None for sp in dark) and not any(icmp for *_, icmp in dark):
                # never repaired and silent: the kernel's give-up decides
                return StallPrediction(None, None, tuple(probes), True)
            if len(probes) > 100_000:  # a never-ending ICMP outage
                return StallPrediction(None, None, tuple(probes), False)
        stall += t - start
        resume = t
        i += 1
    return StallPrediction(resume, stall if spans else 0.0, tuple(probes), False)


# -- operations --------------------------------------------------------------------------------
def operations(res: Any) -> pd.DataFrame:
    """One row per rank and operation (``results``, ``run_id``, ``arm``, ``op``, ``rank``,
    ``start``, ``end``, ``outcome``, ``error_type``, ``error``) from a loaded
    :class:`analysis.loader.Results` (collectives, else training rows)."""
    return rank_operations(res.collectives, res.training)


def rank_operations(c: pd.DataFrame, t: pd.DataFrame | None = None) -> pd.DataFrame:
    """:func:`operations` from collectives.parquet rows ``c`` and training.parquet rows ``t``."""
    t = pd.DataFrame() if t is None else t
    parts = []
    if not c.empty and "start" in c:
        arm = c["collective"].astype(str) + "/" + c["algorithm"].astype(str) + "/"
        arm = arm + c["size"].astype(str)
        parts.append(c.assign(arm=arm, op=c["iteration"]))
    if not t.empty and "start" in t:
        parts.append(t.assign(arm=t.get("algorithm", "training"), op=t["step"]))
    if not parts:
        return pd.DataFrame(columns=OP_COLUMNS)
    return pd.concat([_op_rows(p) for p in parts], ignore_index=True)


def _op_rows(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    if "end" not in df:
        df["end"] = df["start"] + df["seconds"]
    elif "seconds" in df:
        df["end"] = df["end"].fillna(df["start"] + df["seconds"])
    if "outcome" not in df:
        df["outcome"] = "ok"
    df["outcome"] = df["outcome"].fillna("ok")
    for col in ("error_type", "error"):
        if col not in df:
            df[col] = None
    if "results" not in df:
        df["results"] = ""
    return df[OP_COLUMNS]


def operation_table(ops: pd.DataFrame) -> pd.DataFrame:
    """All ranks' rows of an operation folded: earliest start, latest end, worst outcome, the
    first failing rank's error; ``duration`` = end − start."""
    if ops.empty:
        return pd.DataFrame(columns=[*OP_COLUMNS, "duration"]).drop(columns="rank")
    rank = {o: i for i, o in enumerate(OUTCOMES)}
    ops = ops.assign(_rank=ops["outcome"].map(rank).fillna(1))
    keys = ["results", "run_id", "arm", "op"]
    g = ops.groupby(keys, sort=False)
    out = g.agg(start=("start", "min"), end=("end", "max"), _rank=("_rank", "max")).reset_index()
    out["outcome"] = [OUTCOMES[int(r)] for r in out["_rank"]]
    failed = ops[ops["outcome"] != "ok"].sort_values("end")
    first = failed.groupby(keys, sort=False)[["error_type", "error"]].first()
    out = out.drop(columns="_rank").merge(first.reset_index(), on=keys, how="left")
    out["duration"] = out["end"] - out["start"]
    return out.sort_values(["results", "run_id", "start"], kind="stable").reset_index(drop=True)


# -- faults ------------------------------------------------------------------------------------
def _applied(events: pd.DataFrame) -> pd.Series:
    applied = events.get("applied_unix", None)
    scheduled = events.get("scheduled_unix", None)
    if applied is None:
        return scheduled.astype(float)
    return applied.astype(float).fillna(scheduled) if scheduled is not None else applied


CLOSING = ("unblackhole", "link_up", "gateway_up", "unreset")


def directions_of(value: Any) -> list[str]:
    """An events row's ``directions``: a list, an array, or comma-joined text."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return []
    if isinstance(value, str):
        return [d.strip() for d in value.split(",") if d.strip()]
    return [str(d) for d in value]


def applied_events(events: pd.DataFrame) -> pd.DataFrame:
    """One row per event action that happened: ``skipped`` rows (the workload ended first) and
    rows without a time go; a ``set`` written per direction counts once; an ``undone`` row (the
    runner ended a fault still in force when the run ended) is kept: it has its fault's event
    index but the closing action."""
    if events.empty:
        return events
    ev = events if "results" in events else events.assign(results="")
    if "status" in ev:
        ev = ev[ev["status"] != "skipped"]
    ev = ev[_applied(ev).notna()]
    if "event" in ev:
        ev = ev.drop_duplicates(["results", "run_id", "event", "action"])
    return ev


def fault_windows(events: pd.DataFrame, specs: dict[int, Any] | None = None) -> pd.DataFrame:
    """One row per run and fault: ``start``, ``end`` (NaN: never ended), ``kind``, ``link``,
    ``intervals`` (dark intervals as (start, end or None, icmp) in unix time) and ``planned``.

    ``specs``: fault index -> the scenario's entry (a dict with ``kind``, ``duration``, ...) or
    just its kind; without one the kind is inferred from the actions. A fault whose closing
    event was never applied (the run ended first) ends, where its spec has a ``duration``, at
    start + duration (``planned`` True): the outage lasted at least that long. ``undone``: its
    end is the runner's undo when the run ended (the fault was still in force)."""
    cols = ["results", "run_id", "fault", "kind", "link", "start", "end", "intervals", "planned"]
    cols += ["undone"]
    if events.empty or "fault" not in events:
        return pd.DataFrame(columns=cols)
    ev = applied_events(events)
    ev = ev[ev["fault"].notna()].assign(_t=lambda d: _applied(d))
    rows = []
    for (results, run_id, fault), g in ev.sort_values("_t", kind="stable").groupby(
        ["results", "run_id", "fault"], sort=False
    ):
        spec = (specs or {}).get(int(fault))
        spec = spec if isinstance(spec, dict) else {"kind": spec} if spec else {}
        actions = list(g["action"])
        start = float(g["_t"].min())
        closes = actions[-1] in CLOSING or (
            set(actions) == {"set"} and g["_t"].nunique() > 1  # burst_loss: set, set back
        )
        end = float(g["_t"].max()) if closes else math.nan
        undone = bool(closes and "status" in g and g["status"].iloc[-1] == "undone")
        planned = False
        if math.isnan(end) and isinstance(spec.get("duration"), int | float):
            end, planned = start + float(spec["duration"]), True
        intervals = pair_outages(actions, g["_t"], None if math.isnan(end) else end)
        links = [x for x in dict.fromkeys(g.get("link", pd.Series(dtype=object))) if x]
        cluster = g["cluster"].dropna() if "cluster" in g else pd.Series(dtype=object)
        rows.append(
            {
                "results": results,
                "run_id": run_id,
                "fault": int(fault),
                "kind": spec.get("kind") or _infer_kind(actions, g),
                "link": ", ".join(str(x) for x in links)
                or (str(cluster.iloc[0]) if len(cluster) else None),
                "start": start,
                "end": end,
                "intervals": intervals,
                "planned": planned,
                "undone": undone,
            }
        )
    return pd.DataFrame(rows, columns=cols)


def pair_outages(
    actions: Iterable[str], times: Iterable[float], end: float | None = None
) -> list[tuple[float, float | None, bool]]:
    """(start, end, icmp) of each outage in a time-ordered run of actions: blackhole ..
    unblackhole, link_down .. link_up, gateway_down .. gateway_up; one still open ends at
    ``end`` (None: never)."""
    out: list[tuple[float, float | None, bool]] = []
    open_: dict[str, float] = {}
    for action, t in zip(actions, times, strict=True):
        if action in OUTAGES:
            open_.setdefault(action, float(t))
        for on, (off, icmp) in OUTAGES.items():
            if action == off and on in open_:
                out.append((open_.pop(on), float(t), icmp))
    out += [(t, end, OUTAGES[on][1]) for on, t in open_.items()]
    return sorted(out, key=lambda x: x[0])


def _infer_kind(actions: list[str], g: pd.DataFrame) -> str:
    if "link_down" in actions:
        return "flap" if actions.count("link_down") > 1 else "link_down"
    if "blackhole" in actions:
        links = g["link"].nunique() if "link" in g else 1
        return "partition" if links > 1 else "blackhole"
    if "reset" in actions:
        return "reset"
    if "gateway_down" in actions:
        return "gateway_crash"
    return "burst_loss" if "set" in actions else actions[0]


@dataclass(frozen=True)
class RunContext:
    """What the prediction needs of a run: RTO0 (from tcp_info or the configured RTT), the
    kernel's tcp_retries2 and the workload's operation timeout (None = unknown)."""

    rto0_s: float
    retries2: int = 15
    op_timeout_s: float | None = None
    pto_s: float | None = None  # Linux's tail loss probe timeout (tlp_timeout); None: no TLP
    rate_bps: float | None = None  # the WAN bottleneck's rate (None: no slow-start term)
    rtt_s: float = 0.0  # the configured round trip (propagation only: an RTO empties the queue)


def tcp_timers(
    rtt_s: float, tcp: pd.DataFrame | None = None, before: float | None = None
) -> tuple[float, float]:
    """(RTO0, srtt) of the WAN connections just before ``before``: tcp_info's ``rto_ms`` where
    sampled, else linux_rto(srtt, rttvar) of the samples; without samples the configured RTT
    (rttvar 0). The samples' srtt includes the queueing a loaded link adds."""
    if tcp is not None and not tcp.empty and "time" in tcp:
        window = tcp[tcp["time"] <= before] if before is not None else tcp
        window = (
            window[window["time"] >= window["time"].max() - 1.0] if not window.empty else window
        )
        if {"srtt_ms", "rttvar_ms"} <= set(window) and window["srtt_ms"].notna().any():
            srtt = float(window["srtt_ms"].median()) / 1e3
            if "rto_ms" in window and window["rto_ms"].notna().any():
                return float(window["rto_ms"].median()) / 1e3, srtt
            return linux_rto(srtt, float(window["rttvar_ms"].median()) / 1e3), srtt
    return linux_rto(rtt_s, 0.0), rtt_s


def run_timers(
    rtt_s: float,
    tcp: pd.DataFrame | None,
    before: float | None,
    retries2: int,
    timeout: Any,
    rate_bps: float | None = None,
) -> RunContext:
    """The RunContext of a run: its TCP timers (:func:`tcp_timers`, with Linux's TLP), its
    tcp_retries2, its operation timeout and, for the slow start after an outage, the WAN rate."""
    rto0, srtt = tcp_timers(rtt_s, tcp, before)
    return RunContext(rto0, retries2, timeout, tlp_timeout(srtt, rto0), rate_bps, rtt_s)


def slow_start_loss(remaining_s: float, rate_bps: float, rtt_s: float) -> float:
    """Seconds a retransmission timeout adds after the flow resumes: it left a window of one
    segment, so the ``remaining_s`` of transfer at the full ``rate_bps`` goes out in slow start
    over the emptied queue's ``rtt_s`` (:class:`analysis.model.TcpWindow`), up to the BDP. The
    fewest rounds: congestion avoidance below the BDP (ssthresh 0.7 x a window that was under
    1.43 BDP) is not modelled. With lots left it costs about (log2(BDP in segments) - 2) round
    trips; even a little data costs ~log2 of its segments."""
    if remaining_s <= 0 or rate_bps <= 0 or rtt_s <= 0:
        return 0.0
    bdp = max(rate_bps * rtt_s / 8, 2 * MSS_BYTES)
    window = TcpWindow(MSS_BYTES, bdp)
    return max(0.0, window.send(0.0, remaining_s * rate_bps / 8, rate_bps, rtt_s) - remaining_s)


def fault_table(
    events: pd.DataFrame,
    ops: pd.DataFrame,
    context: dict[tuple[str, str], RunContext],
    specs: dict[tuple[str, str], dict[int, Any]] | None = None,
) -> pd.DataFrame:
    """One row per run and fault (columns :data:`FAULT_COLUMNS`; definitions in the module
    docstring). ``ops``: per-rank operation rows (:func:`operations`); ``context``: per
    (results, run_id)."""
    windows = pd.concat(
        [fault_windows(g, (specs or {}).get(key)) for key, g in _by_run(events)]
        or [fault_windows(pd.DataFrame())],
        ignore_index=True,
    )
    if windows.empty:
        return pd.DataFrame(columns=FAULT_COLUMNS)
    if "results" not in ops:
        ops = ops.assign(results="")
    table = operation_table(ops)
    rows = []
    for key, faults in windows.groupby(["results", "run_id"], sort=False):
        run_ops = table[(table["results"] == key[0]) & (table["run_id"] == key[1])]
        rank_rows = ops[(ops["results"] == key[0]) & (ops["run_id"] == key[1])]
        ctx = context.get(key)
        faults = faults.sort_values("start")
        next_start = [*list(faults["start"].iloc[1:]), math.inf]
        spans = [
            (s, math.inf if pd.isna(e) else e)
            for s, e in zip(faults["start"], faults["end"], strict=True)
        ]
        for (_, f), nxt in zip(faults.iterrows(), next_start, strict=True):
            rows.append(_one_fault(f, nxt, run_ops, rank_rows, spans, ctx))
    return pd.DataFrame(rows, columns=FAULT_COLUMNS)


def _by_run(events: pd.DataFrame) -> list[tuple[tuple[str, str], pd.DataFrame]]:
    if events.empty:
        return []
    if "results" not in events:
        events = events.assign(results="")
    return list(events.groupby(["results", "run_id"], sort=False))


def _baseline(run_ops: pd.DataFrame, spans: list[tuple[float, float]]) -> dict[str, float]:
    ok = run_ops[run_ops["outcome"] == "ok"]
    clear = [
        not any(s <= end and start <= e for s, e in spans)
        for start, end in zip(ok["start"], ok["end"], strict=True)
    ]
    return ok[np.array(clear, dtype=bool)].groupby("arm")["duration"].median().to_dict()


def _one_fault(
    f: pd.Series,
    next_start: float,
    run_ops: pd.DataFrame,
    rank_rows: pd.DataFrame,
    spans: list[tuple[float, float]],
    ctx: RunContext | None,
) -> dict[str, Any]:
    start, end = float(f["start"]), float(f["end"])
    ended = not math.isnan(end)
    stop = end if ended else math.inf
    keys = ("results", "run_id", "fault", "kind", "link", "planned", "undone")
    row: dict[str, Any] = {c: f.get(c) for c in keys}
    row.update(start=start, end=end if ended else None, duration=stop - start if ended else None)
    # detect: the first failing rank row that ends after the fault started
    failed = rank_rows[(rank_rows["outcome"] != "ok") & (rank_rows["end"] >= start)]
    failed = failed[failed["end"] < next_start].sort_values("end")
    if not failed.empty:
        first = failed.iloc[0]
        row.update(
            detect_s=float(first["end"] - start),
            error_type=first["error_type"],
            error=first["error"],
        )
    affected = run_ops[(run_ops["start"] <= stop) & (run_ops["end"] >= start)]
    if affected.empty:
        later = run_ops[run_ops["start"] >= start]
        affected = later.iloc[:1]
    row["affected_ops"] = len(affected)
    if not affected.empty:
        row["op_outcome"] = OUTCOMES[max(OUTCOMES.index(o) for o in affected["outcome"])]
    base = _baseline(run_ops, spans)
    ok = affected[affected["outcome"] == "ok"]
    if not ok.empty and all(a in base for a in ok["arm"]):
        row["baseline_s"] = float(np.median([base[a] for a in ok["arm"]]))
        row["stall_s"] = float(
            sum(d - base[a] for d, a in zip(ok["duration"], ok["arm"], strict=True))
        )
    # prediction: the outages replayed from when the first affected operation was running
    if ctx is not None and f["intervals"] and not affected.empty:
        t0 = max(start, float(affected["start"].iloc[0]))
        rel = [(s - t0, None if e is None else e - t0, icmp) for s, e, icmp in f["intervals"]]
        pred = predict_stall(rel, ctx.rto0_s, ctx.retries2, pto_s=ctx.pto_s)
        stall = pred.stall_s
        # resumed by a retransmission timeout (not the TLP): the window starts again from one
        # segment, and the rest of the operation goes out in slow start
        if stall is not None and ctx.rate_bps and row.get("baseline_s") is not None:
            by_rto = len(pred.probes) > (1 if ctx.pto_s is not None else 0)
            done = t0 - float(affected["start"].iloc[0])
            ss = (
                slow_start_loss(row["baseline_s"] - done, ctx.rate_bps, ctx.rtt_s)
                if by_rto
                else 0.0
            )
            row["predicted_slowstart_s"] = ss
            stall += ss
        row["predicted_stall_s"] = stall
        row["predicted_outcome"] = _predicted_outcome(pred, ctx, row.get("baseline_s"))
        if stall and row.get("stall_s") is not None:
            row["stall_over_predicted"] = row["stall_s"] / stall
    after = (
        run_ops[(run_ops["end"] > stop) & (run_ops["outcome"] == "ok")]
        if ended
        else run_ops.iloc[0:0]
    )
    if not after.empty:
        first_ok = after.sort_values("end").iloc[0]
        row["recover_s"] = float(first_ok["end"] - stop)
        between = run_ops[(run_ops["end"] >= start) & (run_ops["end"] <= first_ok["end"])]
        row["survived"] = bool((between["outcome"] == "ok").all())
    else:
        row["survived"] = False if not affected.empty else None
    row["verdict"] = _verdict(row)
    return row


TCP_AROUND = {  # tcp.parquet column -> (fault table column, how to fold the window's samples)
    "retransmits": ("tcp_retransmits", "delta"),
    "rto_ms": ("tcp_rto_max_ms", "max"),
    "backoff": ("tcp_backoff_max", "max"),
    "ca_state": ("tcp_ca_states", "set"),
}


def tcp_around_faults(
    faults: pd.DataFrame, sockets: pd.DataFrame, before_s: float = 1.0, after_s: float = 5.0
) -> pd.DataFrame:
    """``faults`` + what the WAN data sockets' tcp_info showed from ``before_s`` before each
    fault to ``after_s`` after its end (or its start, if it has none): retransmitted segments
    (the counter's increase, summed over sockets), the largest RTO and backoff, the congestion
    states seen. Only the columns tcp.parquet has."""
    if faults.empty or sockets.empty or "time" not in sockets:
        return faults
    have = {c: v for c, v in TCP_AROUND.items() if c in sockets}
    out = faults.copy()
    for col, _ in have.values():
        out[col] = None
    sock = [c for c in ("host", "local", "peer") if c in sockets]
    for i, f in out.iterrows():
        stop = f["end"] if f["end"] is not None and not pd.isna(f["end"]) else f["start"]
        mine = sockets[
            (sockets["run_id"] == f["run_id"])
            & (sockets["time"] >= f["start"] - before_s)
            & (sockets["time"] <= stop + after_s)
        ]
        if "results" in mine and f["results"]:
            mine = mine[mine["results"] == f["results"]]
        if mine.empty:
            continue
        for source, (col, how) in have.items():
            values = mine[source].dropna()
            if values.empty:
                continue
            if how == "delta":
                per = mine.groupby(sock)[source] if sock else [(None, values)]
                out.at[i, col] = float(sum(v.max() - v.min() for _, v in per))
            elif how == "max":
                out.at[i, col] = float(values.max())
            else:
                out.at[i, col] = ", ".join(str(v) for v in dict.fromkeys(values))
    return out


def _predicted_outcome(pred: StallPrediction, ctx: RunContext, baseline: float | None) -> str:
    """Which timer ends the stall first: none (the flow resumes), the operation timeout (gloo's
    only timer) or the kernel's tcp_retries2 give-up (ETIMEDOUT on the connection)."""
    stall = math.inf if pred.stall_s is None else pred.stall_s
    kernel = tcp_give_up(ctx.retries2) if pred.gave_up else math.inf
    timeout = math.inf if ctx.op_timeout_s is None else ctx.op_timeout_s
    if stall + (baseline or 0.0) > timeout and timeout < kernel:
        return "timeout (the operation timeout comes first)"
    if pred.gave_up:
        return "error (the kernel times the connection out first)"
    if pred.stall_s is None:
        return "never resumes"
    return "completes late"


def _verdict(row: dict[str, Any]) -> str:
    def s(v: Any) -> str:
        return f"{v:.2f} s"

    pred = row.get("predicted_stall_s")
    if not row.get("affected_ops"):
        return "no operation ran during or after the fault"
    if row.get("detect_s") is None:
        text = (
            "survived" if row.get("survived") else "no error, but no operation succeeded after it"
        )
        if row.get("stall_s") is not None:
            text += f": stalled {s(row['stall_s'])}"
            if pred:
                text += f" (predicted {s(pred)})"
        if row.get("recover_s") is not None:
            text += f", finished {s(row['recover_s'])} after the fault ended"
        return text
    first_line = str(row.get("error") or "").strip().splitlines()[:1]
    text = (
        f"failed {s(row['detect_s'])} after the fault started ({row.get('error_type') or 'error'}"
    )
    text += f": {first_line[0][:120]})" if first_line else ")"
    if row.get("recover_s") is not None:
        return text + f"; recovered {s(row['recover_s'])} after the fault ended"
    return text + "; did not recover"


# -- trace replay ------------------------------------------------------------------------------
def per_direction(events: pd.DataFrame) -> pd.DataFrame:
    """``set`` rows one per direction: a row without ``direction`` whose ``directions`` lists
    several is repeated for each (the same settings for each; a runner writing one row per event
    then reads like one writing a row per direction). Other rows are kept as they are."""
    if events.empty or "directions" not in events:
        return events
    if "direction" not in events:
        events = events.assign(direction=None)
    todo = (events["action"] == "set") & events["direction"].isna()
    todo &= events["directions"].map(lambda d: bool(directions_of(d)))
    if not todo.any():
        return events
    spread = events[todo].assign(direction=events.loc[todo, "directions"].map(directions_of))
    spread = spread.explode("direction")
    return pd.concat([events[~todo], spread]).sort_index(kind="stable").reset_index(drop=True)


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
    ev = ev.assign(_t=lambda d: _applied(d))
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
    for (results, run_id, d), idx in out.groupby(["results", "run_id", "direction"]).groups.items():
        bins = out.loc[idx]
        q = _run_rows(queues, results, run_id)
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
        g = _run_rows(goodput, results, run_id) if goodput is not None else pd.DataFrame()
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


def _run_rows(df: pd.DataFrame | None, results: str, run_id: str) -> pd.DataFrame:
    if df is None or df.empty:
        return pd.DataFrame()
    mine = df[df["run_id"] == run_id]
    return mine[mine["results"] == results] if "results" in mine and results else mine


def per_second(bins: pd.DataFrame, exclude: Iterable[tuple[float, float]] = ()) -> pd.DataFrame:
    """Target and achieved rates of each whole second since the first bin (time-weighted means
    of the bins overlapping it): ``second``, ``target_bps``, ``achieved_bps``. Seconds that
    overlap an ``exclude`` interval (a fault's outage: the trace's target means nothing while
    the link is dark) are left out."""
    if bins.empty:
        return pd.DataFrame(columns=["second", "target_bps", "achieved_bps"])
    t0 = float(bins["start"].min())
    last = int((float(bins["end"].max()) - t0) // 1)
    spans = list(exclude)
    rows = []
    for k in range(last):
        lo, hi = t0 + k, t0 + k + 1
        if any(s < hi and lo < e for s, e in spans):
            continue
        w = (np.minimum(bins["end"], hi) - np.maximum(bins["start"], lo)).clip(lower=0)
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
    return pd.DataFrame(rows)


def zero_rate_spans(bins: pd.DataFrame) -> list[tuple[float, float]]:
    """(start, end) of each run of consecutive zero-target bins of ``bins`` (one run and
    direction): a trace's outages, to leave out of :func:`per_second` where a comparison
    should see only the seconds the link was lit."""
    spans: list[tuple[float, float]] = []
    for b in bins.sort_values("start").itertuples(index=False):
        if b.target_bps != 0:
            continue
        if spans and abs(spans[-1][1] - b.start) < 1e-6:
            spans[-1] = (spans[-1][0], b.end)
        else:
            spans.append((b.start, b.end))
    return spans


def trace_table(
    bins: pd.DataFrame, exclude: dict[tuple[str, str], list[tuple[float, float]]] | None = None
) -> pd.DataFrame:
    """Per run and direction: ``bins``, ``seconds`` compared, mean target and achieved bit/s,
    their ratio and the Pearson ``correlation`` of the per-second rates (the issue's ≥ 0.9
    check; None with fewer than 3 seconds or a constant series). ``exclude``: per (results,
    run_id), intervals (faults) whose seconds are left out."""
    cols = ["results", "run_id", "direction", "bins", "seconds", "target_mean_bps",
            "achieved_mean_bps", "achieved_over_target", "correlation"]  # fmt: skip
    rows = []
    for (results, run_id, d), g in bins.groupby(["results", "run_id", "direction"], sort=False):
        sec = per_second(g, (exclude or {}).get((results, run_id), ())).dropna()
        corr = None
        if len(sec) >= 3 and sec["target_bps"].std() > 0 and sec["achieved_bps"].std() > 0:
            corr = float(np.corrcoef(sec["target_bps"], sec["achieved_bps"])[0, 1])
        tm, am = sec["target_bps"].mean(), sec["achieved_bps"].mean()
        rows.append((results, run_id, d, len(g), len(sec), tm, am, am / tm if tm else None, corr))
    return pd.DataFrame(rows, columns=cols)


# -- lateness ----------------------------------------------------------------------------------
def lateness_table(events: pd.DataFrame) -> pd.DataFrame:
    """Per run: ``events`` applied (the runner's undo rows at the end of a run aside), ``late``
    (applied more than 20 ms after schedule), ``late_p50_s``, ``late_p99_s``, ``late_max_s``,
    ``errors`` (events whose operation failed), ``skipped`` (never came: the workload ended)."""
    cols = ["results", "run_id", "events", "late", "late_p50_s", "late_p99_s", "late_max_s",
            "errors", "skipped"]  # fmt: skip
    if events.empty or "late_s" not in events:
        return pd.DataFrame(columns=cols)
    ev = applied_events(events)
    if "status" in ev:  # the runner's undo at the end of a run has no schedule
        ev = ev[ev["status"] != "undone"]
    skipped = _count_status(events, "skipped")
    rows = []
    for (results, run_id), g in ev.groupby(["results", "run_id"], sort=False):
        late = g["late_s"].dropna().astype(float).tolist()
        errors = g["error"].fillna("").astype(str).str.len().gt(0).sum() if "error" in g else 0
        rows.append(
            (
                results,
                run_id,
                len(g),
                sum(x > LATE_S for x in late),
                quantile(late, 0.5) if late else None,
                quantile(late, 0.99) if late else None,
                max(late) if late else None,
                int(errors),
                skipped.get((results, run_id), 0),
            )
        )
    return pd.DataFrame(rows, columns=cols)


def _count_status(events: pd.DataFrame, status: str) -> dict[tuple[str, str], int]:
    if "status" not in events:
        return {}
    ev = events if "results" in events else events.assign(results="")
    mine = ev[ev["status"] == status]
    if "event" in mine:
        mine = mine.drop_duplicates(["results", "run_id", "event"])
    return mine.groupby(["results", "run_id"]).size().to_dict()


# -- per-run metrics for expectations ---------------------------------------------------------
def _farthest_from_one(faults: pd.DataFrame) -> float | None:
    """The stall/predicted ratio farthest from 1 (by its log): bounding it on both sides (0.8 and
    1.2) bounds every fault's."""
    if faults.empty or "stall_over_predicted" not in faults:
        return None
    ratios = [float(r) for r in faults["stall_over_predicted"].dropna() if r > 0]
    return max(ratios, key=lambda r: abs(math.log(r))) if ratios else None


def fault_metrics(faults: pd.DataFrame, lateness: pd.DataFrame | None = None) -> dict[str, Any]:
    """One run's fault metrics for its summary rows (testbed.config.expect's fault_* metrics):
    the worst over its faults (max detect, stall, bulk flows' stall and recover; the
    stall/predicted ratio farthest from 1; survived = every fault survived) and
    ``events_late`` (events applied > 20 ms late)."""

    def worst(col: str) -> float | None:
        if faults.empty or col not in faults or faults[col].isna().all():
            return None
        return float(faults[col].max())

    out: dict[str, Any] = {
        "fault_detect": worst("detect_s"),
        "fault_stall": worst("stall_s"),
        "fault_flow_stall": worst("flow_stall_s"),
        "fault_stall_over_predicted": _farthest_from_one(faults),
        "fault_recover": worst("recover_s"),
        "fault_survived": (
            float(faults["survived"].dropna().astype(bool).all())
            if not faults.empty and faults["survived"].notna().any()
            else None  # no operation met a fault (traffic only)
        ),
        "events_late": None,
    }
    if lateness is not None and not lateness.empty:
        out["events_late"] = float(lateness["late"].sum())
    return out


def with_flow_stalls(faults: pd.DataFrame, flows: pd.DataFrame) -> pd.DataFrame:
    """The fault table with its bulk flows' stalls (:func:`flow_stalls`) beside; a fault that
    met no operation gets the flows' stall as its verdict."""
    if flows.empty or faults.empty:
        return faults
    faults = faults.merge(flows, on=["results", "run_id", "fault"], how="left")
    quiet = (faults["affected_ops"] == 0) & faults["flow_stall_s"].notna()
    faults.loc[quiet, "verdict"] = [
        f"no operation ran; the bulk flows stalled {a:.2f} s (predicted {b:.2f} s)"
        for a, b in zip(
            faults.loc[quiet, "flow_stall_s"], faults.loc[quiet, "flow_predicted_s"], strict=True
        )
    ]
    return faults


def summarize_faults(
    events: pd.DataFrame,
    ops: pd.DataFrame,
    resolved: dict[str, Any],
    rtt_s: float,
    tcp: pd.DataFrame | None = None,
    queues: pd.DataFrame | None = None,
    goodput: pd.DataFrame | None = None,
) -> dict[str, Any]:
    """The fault metrics of one run for its summary rows (what the runner adds so that
    expectations can test them): ``events`` and ``ops`` (:func:`rank_operations`) of the run,
    its resolved scenario (tcp.retries2, workload.timeout, faults) and configured RTT; ``tcp``:
    its WAN data sockets' tcp_info samples, if traced; ``queues`` and ``goodput``
    (flows_goodput) for ``trace_correlation``, the lowest per-second correlation of achieved
    and target rate over the traced directions (None without a trace)."""
    if events.empty:
        return {**fault_metrics(pd.DataFrame(columns=FAULT_COLUMNS)), "trace_correlation": None}
    run_id = str(events["run_id"].iloc[0]) if "run_id" in events else ""
    events = events.assign(results="", run_id=run_id)
    ops = ops.assign(results="", run_id=run_id)
    first = None
    if "fault" in events and events["fault"].notna().any():
        first = float(_applied(events[events["fault"].notna()]).min())
    ctx = run_timers(
        rtt_s,
        tcp,
        first,
        int((resolved.get("tcp") or {}).get("retries2") or 15),
        (resolved.get("workload") or {}).get("timeout"),
        ((resolved.get("wan") or [{}])[0] or {}).get("rate"),
    )
    specs = {("", run_id): dict(enumerate(resolved.get("faults") or []))}
    faults = fault_table(events, ops, {("", run_id): ctx}, specs)
    if goodput is not None and not goodput.empty:
        g = goodput.assign(results="", run_id=run_id)
        faults = with_flow_stalls(faults, flow_stalls(events, g, {("", run_id): ctx}, specs))
    out = fault_metrics(faults, lateness_table(events))
    out["trace_correlation"] = None
    bins = trace_targets(events)
    if not bins.empty:
        q = pd.DataFrame() if queues is None else queues.assign(results="", run_id=run_id)
        g = None if goodput is None else goodput.assign(results="", run_id=run_id)
        dark = [
            (f.start, f.end if f.end is not None and not pd.isna(f.end) else math.inf)
            for f in faults.itertuples(index=False)
        ]
        table = trace_table(achieved_rates(bins, q, g), {("", run_id): dark})
        if table["correlation"].notna().any():
            out["trace_correlation"] = float(table["correlation"].min())
    return out


DROP_SHOWN = ["fault_dropped_packets", "fault_reset_packets", "queue_dropped_packets"]


def drop_table(manifests: dict[str, dict[str, Any]], queues: pd.DataFrame) -> pd.DataFrame:
    """Per run and WAN direction: the packets its faults dropped and reset (the fault rules'
    counters, the runs' ``fault_drops`` in the manifest) beside its bottleneck's own drops over
    the run (queues.parquet ``dropped``, last - first sample; None when not traced)."""
    rows = [
        {"results": results, "run_id": run_id, **d}
        for results, m in manifests.items()
        for run_id, info in (m.get("runs") or {}).items()
        for d in (info or {}).get("fault_drops") or []
    ]
    if not rows:
        return pd.DataFrame(columns=["results", "run_id", "direction", *DROP_SHOWN])
    out = pd.DataFrame(rows)
    out["queue_dropped_packets"] = None
    if not queues.empty and {"dropped", "direction"} <= set(queues):
        q = queues.sort_values("time").groupby(["results", "run_id", "direction"])["dropped"]
        spread = (q.last() - q.first()).rename("q").reset_index()
        out = out.merge(spread, on=["results", "run_id", "direction"], how="left")
        out["queue_dropped_packets"] = out.pop("q")
    return out[["results", "run_id", "direction", *DROP_SHOWN]]


def clock_origins(operations: pd.DataFrame, events: pd.DataFrame) -> dict[tuple[str, str], float]:
    """Per (results, run_id): the time report tables and figures count from, the run's first
    operation's start, else (traffic only) its first scheduled event."""
    out: dict[tuple[str, str], float] = {}
    if not events.empty:
        ev = events if "results" in events else events.assign(results="")
        out.update(ev.groupby(["results", "run_id"])["scheduled_unix"].min().to_dict())
    if not operations.empty:
        out.update(operations.groupby(["results", "run_id"])["start"].min().to_dict())
    return out


# -- bulk flows through a fault -----------------------------------------------------------------
STALLED = 0.25  # a goodput sample below this share of the pre-fault level is a stalled flow


def _crosses(direction: str, where: str) -> bool:
    """Whether a flow's ``a->b`` direction crosses the fault's links (``east-west, east-south``)
    or touches its cluster (a gateway crash)."""
    a, _, b = direction.partition("->")
    for part in str(where).split(","):
        x, sep, y = part.strip().partition("-")
        if (sep and {a, b} == {x, y}) or (not sep and x in (a, b)):
            return True
    return False


def flow_stalls(
    events: pd.DataFrame,
    goodput: pd.DataFrame,
    context: dict[tuple[str, str], RunContext],
    specs: dict[tuple[str, str], dict[int, Any]] | None = None,
) -> pd.DataFrame:
    """Per run and fault: how long the bulk flows crossing it stalled, measured and predicted.

    A bulk flow always has data in flight, so it is the cleanest check of the RTO series: its
    goodput (summed over the flows crossing the fault's links, flows_goodput samples) falls below
    25% of its median over the 2 s before the fault, and ``flow_stall_s`` is the fault start to
    the start of the first sample above that again (one sample's resolution, 100 ms);
    ``flow_predicted_s`` is :func:`predict_stall` from the fault's start. Empty without samples
    or outages; a fault the flows did not notice has no stall."""
    cols = ["results", "run_id", "fault", "flow_stall_s", "flow_predicted_s"]
    g = goodput_by_direction(goodput)
    if g.empty or events.empty or "direction" not in g:
        return pd.DataFrame(columns=cols)
    rows = []
    for key, ev in _by_run(events):
        windows = fault_windows(ev, (specs or {}).get(key))
        mine = _run_rows(g, key[0], key[1])
        ctx = context.get(key)
        if mine.empty or ctx is None:
            continue
        for w in windows.itertuples(index=False):
            if not w.intervals:
                continue
            flows = mine[[_crosses(d, w.link) for d in mine["direction"]]]
            per_t = flows.groupby("t")["goodput_bps"].sum().sort_index()
            width = float(flows["seconds"].median()) if "seconds" in flows else 0.0
            before = per_t[(per_t.index >= w.start - 2.0) & (per_t.index < w.start)]
            after = per_t[per_t.index > w.start]
            if before.empty or after.empty or before.median() <= 0:
                continue
            low = after < STALLED * before.median()
            stall = None
            if low.any():
                first_low = low.idxmax()
                back = after[(after.index > first_low) & ~low]
                if not back.empty:
                    stall = float(back.index[0] - width - w.start)
            rel = [(s - w.start, None if e is None else e - w.start, i) for s, e, i in w.intervals]
            rows.append(
                (
                    key[0],
                    key[1],
                    w.fault,
                    stall,
                    predict_stall(rel, ctx.rto0_s, ctx.retries2, pto_s=ctx.pto_s).stall_s,
                )
            )
    return pd.DataFrame(rows, columns=cols)


# -- from loaded results -----------------------------------------------------------------------
@dataclass
class FaultResults:
    """Everything this module derives from a loaded results set (empty frames when absent)."""

    faults: pd.DataFrame  # FAULT_COLUMNS
    trace_bins: pd.DataFrame  # trace_targets + achieved_bps
    traces: pd.DataFrame  # trace_table
    lateness: pd.DataFrame  # lateness_table
    operations: pd.DataFrame  # operation_table
    drops: pd.DataFrame  # drop_table


def _resolved(res: Any, results: str, run_id: str) -> dict[str, Any]:
    runs = (res.manifests.get(results) or {}).get("runs") or {}
    return (runs.get(run_id) or {}).get("resolved") or {}


def run_context(res: Any, results: str, run_id: str) -> RunContext:
    """RTO0 from the run's WAN data sockets before its first fault (else its configured RTT),
    tcp_retries2 and the workload timeout from its resolved scenario."""
    from analysis.tables import data_sockets  # the report's definition of a WAN data socket

    resolved = _resolved(res, results, run_id)
    runs = res.runs
    mine = (
        runs[(runs["results"] == results) & (runs["run_id"] == run_id)] if not runs.empty else runs
    )

    def first_of(col: str) -> float | None:
        if mine.empty or col not in mine or pd.isna(mine[col].iloc[0]):
            return None
        return float(mine[col].iloc[0])

    rtt = first_of("rtt_s") or 0.0
    tcp = None
    if res.has("tcp"):
        sockets = data_sockets(res)
        if not sockets.empty:
            tcp = sockets[(sockets["results"] == results) & (sockets["run_id"] == run_id)]
    first = None
    ev = _run_rows(res.events, results, run_id)
    if not ev.empty and "fault" in ev and ev["fault"].notna().any():
        first = float(_applied(ev[ev["fault"].notna()]).min())
    retries2 = ((resolved.get("tcp") or {}).get("retries2")) or 15
    timeout = (resolved.get("workload") or {}).get("timeout")
    return run_timers(rtt, tcp, first, int(retries2), timeout, first_of("wan_rate_bps"))


def analyse(res: Any) -> FaultResults:
    """Fault verdicts, trace replay and lateness of a loaded :class:`analysis.loader.Results`."""
    events = res.events
    ops = operations(res)
    table = operation_table(ops)
    context: dict[tuple[str, str], RunContext] = {}
    specs: dict[tuple[str, str], dict[int, Any]] = {}
    if not events.empty and "fault" in events:
        for results, run_id in (
            events[["results", "run_id"]].drop_duplicates().itertuples(index=False)
        ):
            context[(results, run_id)] = run_context(res, results, run_id)
            faults = _resolved(res, results, run_id).get("faults") or []
            specs[(results, run_id)] = dict(enumerate(faults))
    faults = fault_table(events, ops, context, specs)
    faults = with_flow_stalls(faults, flow_stalls(events, res.flows_goodput, context, specs))
    if res.has("tcp") and not faults.empty:
        from analysis.tables import data_sockets  # the report's WAN data sockets

        faults = tcp_around_faults(faults, data_sockets(res))
    bins = trace_targets(events)
    if not bins.empty:
        bins = achieved_rates(bins, res.queues, res.flows_goodput)
    dark: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for f in faults.itertuples(index=False):
        stop = f.end if f.end is not None and not pd.isna(f.end) else math.inf
        dark.setdefault((f.results, f.run_id), []).append((f.start, stop))
    return FaultResults(
        faults=faults,
        drops=drop_table(res.manifests, res.queues),
        trace_bins=bins,
        traces=trace_table(bins, dark),
        lateness=lateness_table(events),
        operations=table,
    )
