"""DCQCN with discrete marks: a packet-level model of the flows, the bottleneck and the feedback,
the second prediction a DCQCN run is checked against. PURE: numpy, :mod:`testbed.core.dcqcn` and
the fluid model's result shape and readings (:mod:`analysis.dcqcn_model`).

The fluid model (Zhu et al., SIGCOMM 2015, §5) spreads marks as a continuous rate p(q)·RC and
settles to a fixed point. When a mark comes once per many RTTs (RED's ramp at a low pmax, one
flow), each CNP is a discrete cut after which the queue drains below Kmin, and the run is a
sawtooth the mean field cannot show. :func:`simulate` keeps the marks discrete: each flow's
sender paces packets at RC (as traffic.dcqcn.flow does), the bottleneck is a FIFO drained at its
rate, each packet is marked at its departure with RED's p on the queue it leaves behind (the delay
line's ``at: dequeue``) from a seeded RNG, the receiver sends at most one CNP per flow per N, and a
CNP reaches the sender one feedback delay after the mark. The sender is the RP state machine of
traffic.dcqcn.rp's ``paper`` variant (α on a CNP and on its K grid, the cut RT ← RC,
RC ← RC(1 − α/2), fast recovery, additive and hyper increase on the timer T and the byte counter
B), with each variant's parameters mapped onto it as the fluid model maps them (the reduce
period, the smallest cut, the target clamp; ns3's α-before-cut order). Deterministic for a seed.

Units are the fluid model's: rates and the queue in the bytes the RP counts (payload), so its
readings (:func:`analysis.dcqcn_model.queue_stats`, ``utilisation``, ``convergence_time``) apply
to the sampled :attr:`MarksResult.trajectory` unchanged; the cut interval and depth are read from
the cuts themselves, as a run's are (:func:`cut_readings`).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from analysis import dcqcn_model
from analysis.dcqcn_model import FluidResult
from testbed.core.dcqcn import DcqcnParams

# timer instants closer than this fraction of their step are the same instant (traffic.dcqcn.rp)
_SAME_INSTANT = 1e-9
_DRAWS = 1 << 14  # uniforms drawn from the RNG at a time


class _Rp:
    """One flow's reaction point: traffic.dcqcn.rp's paper rules, timers applied lazily."""

    __slots__ = (
        "a_base", "a_ref", "byte_stage", "bytes_since", "cuts", "increased", "last_cut", "line",
        "p", "rate_next", "rc", "rt", "timer_stage",
    )  # fmt: skip

    def __init__(self, p: DcqcnParams, line: float, t0: float, rate: float) -> None:
        self.p = p
        self.line = line
        self.rc = self.rt = rate
        self.a_base = p.alpha0
        # the α grid runs from the start (paper) or from the first CNP (the others)
        self.a_ref: float | None = t0 if p.variant == "paper" else None
        self.timer_stage = self.byte_stage = 0
        self.bytes_since = 0.0
        self.last_cut: float | None = None
        self.rate_next: float | None = None  # the increase timer's next instant; None: off
        self.increased = False
        self.cuts: list[tuple[float, float, float, float]] = []  # (t, RC before, after, α)

    def alpha(self, t: float) -> float:
        if self.a_ref is None:
            return self.a_base
        k = self.p.alpha_timer
        n = math.floor((t - self.a_ref) / k + _SAME_INSTANT)
        return self.a_base * (1.0 - self.p.g) ** max(0, n)

    def advance(self, t: float) -> None:
        T = self.p.rate_timer
        while self.rate_next is not None and self.rate_next <= t + _SAME_INSTANT * T:
            te = self.rate_next
            self.rate_next = te + T
            self.timer_stage += 1
            self._increase()

    def on_cnp(self, t: float) -> None:
        self.advance(t)
        p = self.p
        may_cut = (
            p.rate_reduce_period == 0
            or self.last_cut is None
            or t - self.last_cut >= p.rate_reduce_period
        )
        if p.variant == "ns3":  # the author's order: α first, the cut with the new α
            self._cnp_alpha(t)
            if may_cut:
                self._cut(t, self.alpha(t))
        else:
            if may_cut:
                self._cut(t, self.alpha(t))
            self._cnp_alpha(t)

    def on_sent(self, t: float, nbytes: float) -> None:
        self.advance(t)
        b = self.p.byte_counter
        if not b:
            return
        self.bytes_since += nbytes
        while self.bytes_since >= b:
            self.bytes_since -= b
            if self.rate_next is not None:  # disarmed: a no-op event
                self.byte_stage += 1
                self._increase()

    def _cnp_alpha(self, t: float) -> None:
        g = self.p.g
        self.a_base = (1.0 - g) * self.alpha(t) + g
        self.a_ref = t

    def _cut(self, t: float, a: float) -> None:
        p = self.p
        if p.clamp_target or self.increased:
            self.rt = self.rc
        before = self.rc
        self.rc = max(p.min_rate, self.rc * max(1.0 - a / 2.0, p.min_dec_fac))
        self.timer_stage = self.byte_stage = 0
        self.bytes_since = 0.0
        self.increased = False
        self.last_cut = t
        self.rate_next = t + p.rate_timer
        self.cuts.append((t, before, self.rc, a))

    def _increase(self) -> None:
        p = self.p
        f = p.fast_recovery_steps
        rc0 = self.rc
        hi = max(self.timer_stage, self.byte_stage)
        lo = min(self.timer_stage, self.byte_stage)
        if hi <= f:
            pass  # fast recovery: RC halves its way to RT
        elif lo > f:
            self.rt += (lo - f) * p.rhai
        else:
            self.rt += p.rai
        self.rt = min(self.rt, self.line)
        self.rc = min(self.line, max(p.min_rate, (self.rt + self.rc) / 2.0))
        self.increased = True
        if self.rt >= self.line and (self.rc == rc0 or self.rc >= self.line):
            self.rate_next = None  # at the line rate until the next cut: stop the timer


@dataclass(frozen=True)
class MarksResult:
    """A discrete-marks run: the sampled trajectory in the fluid model's shape (its
    ``cut_rate_hz``: the cuts in each sample's interval over its length) and every cut."""

    trajectory: FluidResult
    cut_t_s: np.ndarray
    cut_flow: np.ndarray
    cut_before_bps: np.ndarray  # RC just before the cut
    cut_after_bps: np.ndarray
    cut_alpha: np.ndarray  # the α the cut used
    packets: int
    marks: int
    cnps: int
    seed: int


def simulate(
    params: DcqcnParams,
    *,
    line_rate_bps: float,
    feedback_delay_s: float,
    kmin_bytes: float,
    kmax_bytes: float,
    pmax: float,
    packet_bytes: int,
    duration_s: float,
    n_flows: int = 1,
    starts_s: Sequence[float] | None = None,
    bottleneck_bps: float | None = None,
    initial_rate_bps: float | None = None,
    buffer_bytes: float | None = None,
    record_dt_s: float | None = None,
    seed: int = 0,
) -> MarksResult:
    """Run ``n_flows`` (or one per entry of ``starts_s``) DCQCN senders through one marking
    bottleneck of ``bottleneck_bps`` (default the line rate) for ``duration_s``, packet by packet;
    the arguments are :func:`analysis.dcqcn_model.integrate`'s.

    A flow sends ``packet_bytes`` every ``8·packet_bytes/RC`` from its start (RC after the
    send's own byte-counter event, as the live pacer spaces them); a packet arriving at a full
    ``buffer_bytes`` is dropped; the mark is decided at departure on the bytes left queued,
    p = RED(q) (0 to ``kmin_bytes``, ``pmax`` at ``kmax_bytes``, 1 above); the receiver sees the
    packet half of ``feedback_delay_s`` later and its CNP reaches the sender after the other
    half. ``record_dt_s``: the sampling of the trajectory (default T/10).
    """
    starts = tuple(float(s) for s in starts_s) if starts_s is not None else (0.0,) * n_flows
    if not starts:
        raise ValueError("no flows")
    if kmax_bytes <= kmin_bytes:
        raise ValueError(f"kmax ({kmax_bytes}) must exceed kmin ({kmin_bytes})")
    if feedback_delay_s < 0 or duration_s <= 0:
        raise ValueError("feedback delay must be >= 0 and duration > 0")
    n = len(starts)
    P = float(packet_bytes)
    line = float(line_rate_bps)
    cap = float(bottleneck_bps if bottleneck_bps is not None else line_rate_bps)
    rate0 = float(initial_rate_bps if initial_rate_bps is not None else line_rate_bps)
    buf = float(buffer_bytes) if buffer_bytes is not None else math.inf
    service = 8.0 * P / cap
    half = feedback_delay_s / 2.0
    N = params.cnp_interval
    span = kmax_bytes - kmin_bytes
    rdt = record_dt_s if record_dt_s else params.rate_timer / 10.0
    rng = np.random.default_rng(seed)
    draws = rng.random(_DRAWS).tolist()
    di = 0

    rps = [_Rp(params, line, s, rate0) for s in starts]
    sends = [(s, f) for f, s in enumerate(starts) if s < duration_s]
    heapq.heapify(sends)
    deps: deque[tuple[float, float, int]] = deque()  # (departure, bytes arrived through it, flow)
    cnps: list[tuple[float, int]] = []  # (arrival at the sender, flow)
    last_cnp = [-math.inf] * n  # at the receiver
    deferred = [math.inf] * n  # a CNP due at the receiver (a mark inside N)
    busy = 0.0
    arrived = departed = 0.0
    packets = marks = sent_cnps = 0
    dropped = 0.0

    n_rec = math.floor(duration_s / rdt + 1e-9) + 1
    rec_q = np.zeros(n_rec)
    rec_rc = np.zeros((n, n_rec))
    rec_rt = np.zeros((n, n_rec))
    rec_al = np.zeros((n, n_rec))
    k_rec = 0
    next_rec = 0.0
    inf = math.inf
    heappush, heappop = heapq.heappush, heapq.heappop

    while True:
        ts = sends[0][0] if sends else inf
        td = deps[0][0] if deps else inf
        tc = cnps[0][0] if cnps else inf
        t = ts if ts < td else td
        if tc <= t:
            t = tc
        while next_rec <= t and k_rec < n_rec:
            rec_q[k_rec] = arrived - departed
            for f, rp in enumerate(rps):
                if starts[f] <= next_rec:
                    rp.advance(next_rec)
                    rec_rc[f, k_rec] = rp.rc
                    rec_rt[f, k_rec] = rp.rt
                    rec_al[f, k_rec] = rp.alpha(next_rec)
            k_rec += 1
            next_rec = k_rec * rdt
        if t > duration_s:
            break
        if t == tc:  # a CNP first: the live sender takes CNPs before it sends
            _, f = heappop(cnps)
            rps[f].on_cnp(t)
        elif t == ts:
            _, f = heappop(sends)
            rp = rps[f]
            rp.on_sent(t, P)
            heappush(sends, (t + 8.0 * P / rp.rc, f))
            if arrived - departed + P > buf:
                dropped += P
                continue
            packets += 1
            arrived += P
            busy = (busy if busy > t else t) + service
            deps.append((busy, arrived, f))
        else:
            _, through, f = deps.popleft()
            departed += P
            q = arrived - through  # what it leaves behind (arrivals at t included)
            if q <= kmin_bytes:
                continue
            p = pmax * (q - kmin_bytes) / span if q <= kmax_bytes else 1.0
            if p < 1.0:
                if di == _DRAWS:
                    draws, di = rng.random(_DRAWS).tolist(), 0
                u = draws[di]
                di += 1
                if u >= p:
                    continue
            marks += 1
            at = t + half  # at the receiver
            if deferred[f] <= at:  # the deferred CNP went out in between
                last_cnp[f], deferred[f] = deferred[f], inf
            if at - last_cnp[f] >= N:
                last_cnp[f] = at
                sent_cnps += 1
                heappush(cnps, (at + half, f))
            elif deferred[f] == inf:
                deferred[f] = last_cnp[f] + N
                sent_cnps += 1
                heappush(cnps, (deferred[f] + half, f))

    t_s = np.arange(n_rec) * rdt
    cuts = sorted((c[0], f, c[1], c[2], c[3]) for f, rp in enumerate(rps) for c in rp.cuts)
    cut = np.array(cuts, dtype=float).reshape(-1, 5)
    per_sample = np.zeros((n, n_rec))
    for f in range(n):
        at = cut[cut[:, 1] == f, 0]
        np.add.at(per_sample[f], np.minimum(np.floor(at / rdt).astype(int), n_rec - 1), 1.0)
    traj = FluidResult(
        t_s=t_s,
        queue_bytes=rec_q,
        rc_bps=rec_rc,
        rt_bps=rec_rt,
        alpha=rec_al,
        cut_rate_hz=per_sample / rdt,
        params=params,
        line_rate_bps=line,
        bottleneck_bps=cap,
        feedback_delay_s=float(feedback_delay_s),
        kmin_bytes=float(kmin_bytes),
        kmax_bytes=float(kmax_bytes),
        pmax=float(pmax),
        packet_bytes=int(packet_bytes),
        starts_s=starts,
        duration_s=float(duration_s),
        dt_s=service,
        record_dt_s=rdt,
        dropped_bytes=dropped,
        steps=packets,
    )
    return MarksResult(
        trajectory=traj,
        cut_t_s=cut[:, 0],
        cut_flow=cut[:, 1].astype(int),
        cut_before_bps=cut[:, 2],
        cut_after_bps=cut[:, 3],
        cut_alpha=cut[:, 4],
        packets=packets,
        marks=marks,
        cnps=sent_cnps,
        seed=seed,
    )


def cut_readings(res: MarksResult, settle_s: float | None = None) -> tuple[float, float]:
    """(cut interval s, cut depth bit/s) over the settled window, read as a run's are
    (analysis.dcqcn.measure): the mean gap between a flow's consecutive cuts in the window and
    the mean RC a cut takes away. NaN without two cuts (one for the depth)."""
    m = dcqcn_model.settled(res.trajectory, settle_s)
    lo = float(res.trajectory.t_s[m][0])
    keep = res.cut_t_s >= lo
    gaps = [np.diff(res.cut_t_s[keep & (res.cut_flow == f)]) for f in range(res.trajectory.n_flows)]
    gap = np.concatenate(gaps) if gaps else np.zeros(0)
    depth = res.cut_before_bps[keep] - res.cut_after_bps[keep]
    return (
        float(gap.mean()) if gap.size else math.nan,
        float(depth.mean()) if depth.size else math.nan,
    )


def summary(res: MarksResult, settle_s: float | None = None) -> dict[str, float]:
    """:func:`analysis.dcqcn_model.summary`'s numbers for the sampled trajectory, with the cut
    interval and depth from the cuts themselves (:func:`cut_readings`), and the counts."""
    out = dcqcn_model.summary(res.trajectory, settle_s)
    out["cut_interval_s"], out["cut_depth_bps"] = cut_readings(res, settle_s)
    out |= {"cuts": float(res.cut_t_s.size), "marks": float(res.marks), "cnps": float(res.cnps)}
    return out
