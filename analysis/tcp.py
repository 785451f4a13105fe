"""Linux TCP as the analysis models it. PURE: the retransmission timer (RTO, the tail loss probe,
the RTO series over an outage, tcp_retries2's give-up), the congestion window (idle restart, a
fluid window that slow-starts, a burst's drop-tail overflow) and a run's timers from tcp_info.

One home for the kernel's TCP arithmetic: the collective model (analysis.model) prices a WAN
connection's window with it, the fault analysis (analysis.faults) predicts a stall with it.
docs/faults.md ("The RTO-series prediction") and docs/model.md give the reasoning and the
measurements behind each rule.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from testbed.core.frames import MSS

INITIAL_CWND_SEGMENTS = 10  # Linux TCP_INIT_CWND
RTO_MIN_S = 0.2  # Linux TCP_RTO_MIN
RTO_MAX_S = 120.0  # Linux TCP_RTO_MAX


# -- the congestion window ---------------------------------------------------------------------
def linux_rto(srtt_s: float, rttvar_s: float, rto_min_s: float = RTO_MIN_S) -> float:
    """The retransmission timeout Linux keeps for a connection: srtt + max(4·rttvar, rto_min)
    (tcp_set_rto; the variance term is floored at TCP_RTO_MIN), at most 120 s."""
    return min(120.0, srtt_s + max(4 * rttvar_s, rto_min_s))


def window_at_step_start(
    cwnd_bytes: float, ssthresh_bytes: float | None, idle_s: float, srtt_s: float
) -> tuple[float, float | None]:
    """(cwnd, ssthresh) a connection sends a step with, from what the tcp_info tracer saw just
    before the step's first bytes (the kernel applies the idle restart only when it sends, so the
    sample still shows the window before it) and the idle time before the step: the restart of
    tcp_slow_start_after_idle when the idle time exceeds the RTO (:func:`linux_rto` with no
    variance term: srtt + 200 ms), else unchanged."""
    rto = linux_rto(srtt_s, 0.0)
    if idle_s <= rto:
        return cwnd_bytes, ssthresh_bytes
    return cwnd_after_idle(cwnd_bytes, idle_s, rto), ssthresh_after_idle(cwnd_bytes, ssthresh_bytes)


def ssthresh_after_idle(cwnd_bytes: float, ssthresh_bytes: float | None) -> float | None:
    """Linux's tcp_cwnd_restart keeps ssthresh at max(ssthresh, 3/4 cwnd) when it restarts the
    window, so the connection slow-starts back to three quarters of where it was (None: still
    the initial "infinite" ssthresh)."""
    return None if ssthresh_bytes is None else max(ssthresh_bytes, 0.75 * cwnd_bytes)


def cwnd_after_idle(
    cwnd_bytes: float,
    idle_s: float,
    rto_s: float,
    initial_bytes: float = INITIAL_CWND_SEGMENTS * MSS,
) -> float:
    """Congestion window after ``idle_s`` without sending, as Linux's tcp_cwnd_restart does it
    with net.ipv4.tcp_slow_start_after_idle=1: nothing changes unless the idle time exceeds the
    RTO; then the window halves once per RTO elapsed, never below min(initial window, cwnd)."""
    if idle_s <= rto_s:
        return cwnd_bytes
    restart = min(initial_bytes, cwnd_bytes)
    cwnd, delta = cwnd_bytes, idle_s - rto_s
    while delta > 0 and cwnd > restart:
        cwnd /= 2
        delta -= rto_s
    return max(cwnd, restart)


def burst_overflow_bytes(
    burst_bytes: float,
    cwnd_bytes: float,
    buffer_bytes: float,
    rate_bps: float,
    arrival_bps: float,
) -> float:
    """Bytes a burst cannot queue at a drop-tail bottleneck (0 = no loss). A sender with window
    ``cwnd_bytes`` writes min(burst, cwnd) at ``arrival_bps`` (its host's copy rate) into a queue
    of ``buffer_bytes`` drained at ``rate_bps``, so the queue peaks at
    min(burst, cwnd) × (1 − rate/arrival). gloo's burst is its two segments in flight
    (2 × :func:`analysis.model.gloo_ring_segments`' segment) at the start of a phase."""
    if arrival_bps <= rate_bps:
        return 0.0
    peak = min(burst_bytes, cwnd_bytes) * (1 - rate_bps / arrival_bps)
    return max(0.0, peak - buffer_bytes)


# the window a loss leaves (multiplicative decrease): Linux's CUBIC (beta 717/1024) and Reno
LOSS_BETA = {"cubic": 0.7, "reno": 0.5}


class TcpWindow:
    """One connection's congestion window, as a fluid: bytes leave at the bottleneck's rate while
    fewer than ``cwnd`` are unacknowledged, and a chunk is acknowledged one round trip after it
    left. Each acknowledged byte grows the window by one byte below ``ssthresh`` (slow start) and
    by mss/cwnd above it (congestion avoidance), as Linux's Reno/CUBIC growth does to first order.
    A loss is priced only where it is given: once the window grows past ``loss_at`` (the window
    a burst overflowed the bottleneck's queue at), it is cut to ``beta`` x that and ssthresh with
    it (fast recovery's cost beyond the smaller window is not modelled)."""

    def __init__(
        self,
        cwnd_bytes: float,
        ssthresh_bytes: float | None = None,
        loss_at: float | None = None,
        beta: float = LOSS_BETA["cubic"],
    ) -> None:
        if cwnd_bytes <= 0:
            raise ValueError(f"cwnd must be > 0, got {cwnd_bytes}")
        self.cwnd = float(cwnd_bytes)
        self.ssthresh = float(cwnd_bytes if ssthresh_bytes is None else ssthresh_bytes)
        self.loss_at, self.beta = loss_at, beta
        self._unacked: list[tuple[float, float]] = []  # (acknowledged at, bytes)

    def _ack_until(self, t: float) -> float:
        """Apply the acknowledgements due by ``t``; returns the bytes still unacknowledged."""
        due = sorted(x for x in self._unacked if x[0] <= t)
        self._unacked = [x for x in self._unacked if x[0] > t]
        for _, nbytes in due:
            if self.cwnd < self.ssthresh:
                self.cwnd += nbytes
            else:
                self.cwnd += MSS * nbytes / self.cwnd
            if self.loss_at is not None and self.cwnd > self.loss_at:
                self.cwnd = self.ssthresh = self.beta * self.loss_at
        return sum(b for _, b in self._unacked)

    def send(self, t: float, nbytes: float, rate_bps: float, rtt_s: float) -> float:
        """Time the last of ``nbytes`` written at ``t`` leaves the bottleneck."""
        left = float(nbytes)
        while left > 0:
            room = self.cwnd - self._ack_until(t)
            if room <= 0:
                t = min(a for a, _ in self._unacked)  # wait for the next acknowledgement
                continue
            # ACKs come back as a stream, not one per burst: sending in 1/16-window chunks
            # keeps a window that covers the BDP from ever stalling (error < RTT/16)
            chunk = min(room, left, max(self.cwnd / 16, MSS))
            t += 8 * chunk / rate_bps
            self._unacked.append((t + rtt_s, chunk))
            left -= chunk
        return t


# -- the retransmission timer -------------------------------------------------------------------
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


# -- a run's timers ---------------------------------------------------------------------------
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
    # the WAN data sockets' tcp_info rows (None: not traced): which ones an outage stalled
    sockets: pd.DataFrame | None = field(default=None, compare=False, repr=False)

    def outage_rtt(self, start: float, end: float) -> float:
        """The round trip of the slow start after an outage from ``start`` to ``end``: the
        slowest data connection it stalled (the largest min RTT among the sockets whose
        retransmissions rose during it: the operation ends when that one has caught up; a ring's
        connection may cross two WAN links), else the configured one."""
        t = self.sockets
        if t is None or t.empty or not {"time", "retransmits", "min_rtt_ms"} <= set(t):
            return self.rtt_s
        during = t[(t["time"] >= start) & (t["time"] <= end)]
        stalled = during[during["retransmits"] > 0]
        if stalled.empty or stalled["min_rtt_ms"].isna().all():
            return self.rtt_s
        return max(self.rtt_s, float(stalled["min_rtt_ms"].max()) / 1e3)


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
    return RunContext(rto0, retries2, timeout, tlp_timeout(srtt, rto0), rate_bps, rtt_s, tcp)


def slow_start_loss(remaining_s: float, rate_bps: float, rtt_s: float) -> float:
    """Seconds a retransmission timeout adds after the flow resumes: it left a window of one
    segment, so the ``remaining_s`` of transfer at the full ``rate_bps`` goes out in slow start
    over the emptied queue's ``rtt_s`` (:class:`TcpWindow`), up to the BDP. The
    fewest rounds: congestion avoidance below the BDP (ssthresh 0.7 x a window that was under
    1.43 BDP) is not modelled. With lots left it costs about (log2(BDP in segments) - 2) round
    trips; even a little data costs ~log2 of its segments."""
    if remaining_s <= 0 or rate_bps <= 0 or rtt_s <= 0:
        return 0.0
    bdp = max(rate_bps * rtt_s / 8, 2 * MSS)
    window = TcpWindow(MSS, bdp)
    return max(0.0, window.send(0.0, remaining_s * rate_bps / 8, rate_bps, rtt_s) - remaining_s)
