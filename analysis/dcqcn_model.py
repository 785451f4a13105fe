"""DCQCN's fluid model (Zhu et al., SIGCOMM 2015, §5) and the predictions a DCQCN run's
measurements are checked against. PURE: numpy and :mod:`testbed.core.dcqcn` only.

This module owns :func:`integrate` (the paper's delay-differential equations for α, RT, RC and
the bottleneck queue, fixed-step Euler) and the numbers derived from its trajectories:
:func:`queue_stats` (mean, p95−p5, max−min), :func:`sawtooth` (period and depth of the rate),
:func:`convergence_time` (Jain ≥ 0.95 and staying), :func:`utilisation`, :func:`jain`, and
:func:`summary`, all of them as one flat dict for a run to record.

The equations, how each variant maps onto them and what is added to them (rate bounds, flow
starts, a finite buffer, CNP windows shorter than a packet): docs/congestion.md, "The fluid
model". :func:`integrate` picks dt from the parameters' times, so a dilated run
(testbed.core.dcqcn.dilate) takes the same number of steps and gives the same trajectory.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from testbed.core.dcqcn import DcqcnParams

# p is held just below 1 above Kmax so log(1−p) stays finite; the terms it feeds are then
# e^{−27.6·x}-small, the p = 1 limit (no increase, a cut per window) to within 1e−12.
_P_CAP = 1.0 - 1e-12


@dataclass(frozen=True)
class FluidResult:
    """A fluid-model trajectory. Arrays are sampled every ``record_dt_s``; rates in bit/s,
    the queue in bytes, per-flow arrays shaped (flows, samples)."""

    t_s: np.ndarray
    queue_bytes: np.ndarray
    rc_bps: np.ndarray
    rt_bps: np.ndarray
    alpha: np.ndarray
    cut_rate_hz: np.ndarray  # a/τ: expected CNP-driven cuts per second of each flow
    params: DcqcnParams
    line_rate_bps: float
    bottleneck_bps: float
    feedback_delay_s: float
    kmin_bytes: float
    kmax_bytes: float
    pmax: float
    packet_bytes: int
    starts_s: tuple[float, ...]
    duration_s: float
    dt_s: float
    record_dt_s: float
    dropped_bytes: float = 0.0
    steps: int = 0

    @property
    def n_flows(self) -> int:
        return len(self.starts_s)

    @property
    def total_bps(self) -> np.ndarray:
        return self.rc_bps.sum(axis=0)


def default_dt(
    params: DcqcnParams, feedback_delay_s: float, line_rate_bps: float, packet_bytes: int
) -> float:
    """The step: 1/20 of the shortest time the equations resolve.

    A cut takes at most half of RC per CNP window (a/τ ≤ 1/τ, the window no shorter than one
    packet at the line rate), so RC relaxes no faster than 2τ; increases come every T; the
    feedback lags τ*; K enters only as K/g (α relaxes at rate g/K), so a 1 µs NVIDIA α timer
    does not force 50 ns steps.
    """
    window = max(_cut_window(params), 8.0 * packet_bytes / line_rate_bps)
    times = [params.rate_timer, params.alpha_timer / params.g, 2 * window]
    times += [feedback_delay_s] if feedback_delay_s > 0 else []
    return min(times) / 20


def _cut_window(params: DcqcnParams) -> float:
    # CNPs at most one per N, cuts at most one per reduce period (mellanox): the slower binds
    return max(params.cnp_interval, params.rate_reduce_period)


def integrate(
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
    dt_s: float | None = None,
    bottleneck_bps: float | None = None,
    initial_rate_bps: float | None = None,
    buffer_bytes: float | None = None,
    record_dt_s: float | None = None,
) -> FluidResult:
    """Integrate the fluid model of ``n_flows`` DCQCN flows (or one per entry of ``starts_s``)
    through one bottleneck of ``bottleneck_bps`` (default: the line rate) for ``duration_s``.

    ``dt_s`` defaults to :func:`default_dt`, shortened so τ* is a whole number of steps (the
    delayed terms are then read exactly from the history). ``initial_rate_bps``: RC = RT at a
    flow's start (default the line rate, as the paper's flows start). ``bottleneck_bps`` below
    the line rate is what lets a single flow queue at all (at equal rates one flow never marks).
    ``buffer_bytes``: the queue's limit, what overflows is counted in ``dropped_bytes``.
    ``record_dt_s``: the sampling of the returned arrays (default every step; the delayed
    terms always come from the per-step ring, never from the sampled record).
    """
    starts = tuple(float(s) for s in starts_s) if starts_s is not None else (0.0,) * n_flows
    if not starts:
        raise ValueError("no flows")
    if kmax_bytes <= kmin_bytes:
        raise ValueError(f"kmax ({kmax_bytes}) must exceed kmin ({kmin_bytes})")
    if feedback_delay_s < 0 or duration_s <= 0:
        raise ValueError("feedback delay must be >= 0 and duration > 0")
    P = float(packet_bytes)
    pps = 1.0 / (8.0 * P)  # bit/s -> packets/s
    line = line_rate_bps * pps
    cap = (bottleneck_bps if bottleneck_bps is not None else line_rate_bps) * pps
    rc0 = (initial_rate_bps if initial_rate_bps is not None else line_rate_bps) * pps
    kmin, kmax = kmin_bytes / P, kmax_bytes / P
    buf = buffer_bytes / P if buffer_bytes is not None else math.inf
    rai = params.rai * pps
    min_rate = params.min_rate * pps
    tau, K, T, g = _cut_window(params), params.alpha_timer, params.rate_timer, params.g
    F = float(params.fast_recovery_steps)
    B = params.byte_counter / P if params.byte_counter is not None else None
    cut_cap = 1.0 - params.min_dec_fac  # the largest cut, as a fraction of RC
    inv_T = 1.0 / T

    dt0 = (
        dt_s
        if dt_s is not None
        else default_dt(params, feedback_delay_s, line_rate_bps, packet_bytes)
    )
    # whole steps of delay: τ*/dt rounded up, then dt shrunk to fit
    lag = math.ceil(feedback_delay_s / dt0 - 1e-9) if feedback_delay_s > 0 else 0
    dt = feedback_delay_s / lag if lag else dt0
    nsteps = math.ceil(duration_s / dt - 1e-9)
    every = max(1, round(record_dt_s / dt)) if record_dt_s else 1

    # flows with one start time stay identical (same equations, same initial state), so each
    # group is integrated once with its multiplicity: 64 synchronised flows cost one
    group_starts = sorted(set(starts))
    counts = [starts.count(s) for s in group_starts]
    G = len(group_starts)
    start_step = [math.ceil(s / dt - 1e-9) for s in group_starts]

    # the ring holds the last lag+1 steps of q and of each group's RC (before t = 0: an empty
    # queue and silent flows)
    R = lag + 1
    q_hist = [0.0] * R
    rc_hist = [[0.0] * R for _ in range(G)]

    q = 0.0
    rc = [0.0] * G
    rt = [0.0] * G
    al = [params.alpha0] * G
    started = [False] * G
    dropped = 0.0

    rec_t: list[float] = []
    rec_q: list[float] = []
    rec_rc: list[list[float]] = [[] for _ in range(G)]
    rec_rt: list[list[float]] = [[] for _ in range(G)]
    rec_al: list[list[float]] = [[] for _ in range(G)]
    rec_cut: list[list[float]] = [[] for _ in range(G)]

    span = kmax - kmin
    expm1, exp, log1p = math.expm1, math.exp, math.log1p
    waiting = G  # groups not started yet
    groups = range(G)
    # plain Python floats: with a handful of groups, numpy's per-call overhead on arrays of
    # length 1-2 would cost more than the arithmetic
    for k in range(nsteps + 1):
        if waiting:
            for j in groups:
                if not started[j] and k >= start_step[j]:
                    started[j] = True
                    rc[j] = rt[j] = rc0
                    al[j] = params.alpha0
                    waiting -= 1
        slot = k % R
        q_hist[slot] = q
        old = (k + 1) % R  # the step k − lag
        qd = q_hist[old]
        if qd <= kmin:
            p = 0.0
        elif qd <= kmax:
            p = pmax * (qd - kmin) / span
        else:
            p = 1.0
        if p > 0.0:
            L = -log1p(-min(p, _P_CAP))  # −ln(1−p)
            u = 0.0 if p >= 1.0 else p / L  # → 1 as p → 0
        else:
            L, u = 0.0, 1.0
        record = k % every == 0
        if record:
            rec_t.append(k * dt)
            rec_q.append(q)
        last = k == nsteps

        arrivals = 0.0
        for j in groups:
            hist = rc_hist[j]
            hist[slot] = r = rc[j]
            if not started[j]:
                if record:
                    rec_rc[j].append(0.0)
                    rec_rt[j].append(0.0)
                    rec_al[j].append(al[j])
                    rec_cut[j].append(0.0)
                continue
            rd = hist[old]
            gap = rt[j] - r
            a = al[j]
            if L == 0.0:
                # no marks: no cut, one timer event per T and one byte event per B packets,
                # all of them past fast recovery (the model's p → 0 limit, exactly)
                a_tau = 0.0
                timer = timer_ai = inv_T
                byte = byte_ai = rd / B if B is not None else 0.0
                da = -g / K * a
            else:
                x = rd * L  # −ln(1−p)·Rc'
                # a/τ; a window shorter than a packet (NVIDIA's µs CNP gaps at low rates) makes
                # each marked packet a CNP, p·Rc' per second, where the formula would count
                # fractions of packets (and diverge as p → 1); the two agree at τ·Rc' = 1
                a_tau = -expm1(-tau * x) / tau if tau * rd >= 1.0 else p * rd
                y = T * x
                timer = u * (y / expm1(y) if 1e-9 < y < 700.0 else float(y < 1.0)) / T  # Rc'·d
                timer_ai = timer * exp(-F * y)  # Rc'·e
                if B is not None:
                    y = B * L
                    byte = u * (y / expm1(y) if 1e-9 < y < 700.0 else float(y < 1.0)) * rd / B
                    byte_ai = byte * exp(-F * y)  # Rc'·c
                else:
                    byte = byte_ai = 0.0
                da = g / K * (-expm1(-K * x) - a)
            if record:
                rec_rc[j].append(r)
                rec_rt[j].append(rt[j])
                rec_al[j].append(a)
                rec_cut[j].append(a_tau)
            if last:
                continue
            arrivals += counts[j] * r
            al[j] = a + da * dt
            drt = -gap * a_tau + rai * (byte_ai + timer_ai)
            drc = -r * min(a / 2, cut_cap) * a_tau + gap / 2 * (byte + timer)
            nt = rt[j] + drt * dt
            rt[j] = line if nt > line else (min_rate if nt < min_rate else nt)
            nc = r + drc * dt
            rc[j] = line if nc > line else (min_rate if nc < min_rate else nc)
        if last:
            break
        q += (arrivals - cap) * dt
        if q < 0.0:
            q = 0.0
        elif q > buf:
            dropped += q - buf
            q = buf
    # per flow, in bit/s and bytes
    idx = [group_starts.index(s) for s in starts]
    bps = 8.0 * P
    return FluidResult(
        t_s=np.asarray(rec_t),
        queue_bytes=np.asarray(rec_q) * P,
        rc_bps=np.asarray(rec_rc)[idx] * bps,
        rt_bps=np.asarray(rec_rt)[idx] * bps,
        alpha=np.asarray(rec_al)[idx],
        cut_rate_hz=np.asarray(rec_cut)[idx],
        params=params,
        line_rate_bps=float(line_rate_bps),
        bottleneck_bps=cap * bps,
        feedback_delay_s=float(feedback_delay_s),
        kmin_bytes=float(kmin_bytes),
        kmax_bytes=float(kmax_bytes),
        pmax=float(pmax),
        packet_bytes=int(packet_bytes),
        starts_s=starts,
        duration_s=float(duration_s),
        dt_s=dt,
        record_dt_s=dt * every,
        dropped_bytes=dropped * P,
        steps=nsteps,
    )


# --- predictions derived from a trajectory ---------------------------------------------------


def jain(rates: Sequence[float] | np.ndarray) -> float:
    """Jain's fairness index (Σx)²/(n·Σx²): 1 for equal shares, 1/n when one flow has it all."""
    x = np.asarray(rates, dtype=float)
    if x.size == 0:
        raise ValueError("no rates")
    sq = float(np.sum(x * x))
    return 1.0 if sq == 0.0 else float(np.sum(x)) ** 2 / (x.size * sq)


def settled(res: FluidResult, settle_s: float | None) -> np.ndarray:
    """The samples after ``settle_s`` (default: halfway from the last start to the end)."""
    if settle_s is None:
        last = max(res.starts_s)
        settle_s = last + (res.duration_s - last) / 2
    m = res.t_s >= settle_s
    if m.sum() < 2:
        raise ValueError(f"fewer than two samples after {settle_s} s")
    return m


@dataclass(frozen=True)
class QueueStats:
    """The bottleneck queue after settling, bytes."""

    mean: float
    p5: float
    p95: float
    min: float
    max: float

    @property
    def amplitude(self) -> float:
        """p95 − p5: the oscillation, robust to a single excursion."""
        return self.p95 - self.p5

    @property
    def peak_to_peak(self) -> float:
        return self.max - self.min


def queue_stats(res: FluidResult, settle_s: float | None = None) -> QueueStats:
    q = res.queue_bytes[settled(res, settle_s)]
    p5, p95 = np.percentile(q, [5, 95])
    return QueueStats(float(q.mean()), float(p5), float(p95), float(q.min()), float(q.max()))


@dataclass(frozen=True)
class Sawtooth:
    """One flow's rate after settling, two readings of the sawtooth a real RP shows.

    ``period_s``/``depth_bps``: the fluid trajectory's own oscillation, from its upward
    crossings of the mean (NaN period when it has fewer than three, i.e. a fixed point);
    ``decay`` is the swing of the window's second half over its first's: ≈ 1 for a limit cycle
    (``limit_cycle``), < 1 for ringing that dies out. ``cut_interval_s``/``cut_depth_bps``: the
    discrete sawtooth the model implies at its operating point: cuts arrive at a/τ per second,
    each taking min(α/2, 1 − min_dec_fac)·RC, and recovery climbs back in between. A settled model
    is compared through the second reading, an oscillating one through the first.
    """

    mean_bps: float
    period_s: float
    depth_bps: float
    decay: float
    cut_interval_s: float
    cut_depth_bps: float

    @property
    def limit_cycle(self) -> bool:
        return not math.isnan(self.period_s) and self.decay > 0.8


def sawtooth(res: FluidResult, flow: int = 0, settle_s: float | None = None) -> Sawtooth:
    m = settled(res, settle_s)
    t, rc = res.t_s[m], res.rc_bps[flow, m]
    mean = float(rc.mean())
    ptp = float(rc.max() - rc.min())
    half = rc.size // 2
    first, second = float(np.ptp(rc[:half])), float(np.ptp(rc[half:]))
    decay = second / first if first > 0 else 0.0
    period = math.nan
    depth = ptp
    # below 1e−9 of the mean is rounding, not an oscillation
    if ptp > 1e-9 * mean:
        # hysteresis of 10 % of the swing either side of the mean, so ripple near the mean is
        # not counted as a cycle
        band = 0.1 * ptp
        side = np.where(rc > mean + band, 1, np.where(rc < mean - band, -1, 0))
        nz = np.flatnonzero(side)
        ups = nz[1:][(side[nz[:-1]] == -1) & (side[nz[1:]] == 1)]
        if ups.size >= 3:
            period = float(np.mean(np.diff(t[ups])))
            depth = float(np.mean([np.ptp(rc[i:j]) for i, j in itertools.pairwise(ups)]))
    cuts = float(res.cut_rate_hz[flow, m].mean())
    cut_frac = np.minimum(res.alpha[flow, m] / 2, 1.0 - res.params.min_dec_fac)
    return Sawtooth(
        mean_bps=mean,
        period_s=period,
        depth_bps=depth,
        decay=decay,
        cut_interval_s=1.0 / cuts if cuts > 0 else math.inf,
        cut_depth_bps=float(np.mean(cut_frac * rc)),
    )


def convergence_time(
    res: FluidResult, threshold: float = 0.95, since_s: float | None = None
) -> float:
    """The first time after ``since_s`` (default: the last flow's start) from which Jain's
    index of the flows' RC stays ≥ ``threshold`` to the end, in seconds after ``since_s``;
    NaN if it never does. Flows not started count as rate 0 (so before the last start the index
    is below 1 by construction)."""
    since = max(res.starts_s) if since_s is None else since_s
    m = res.t_s >= since
    x = res.rc_bps[:, m]
    n = x.shape[0]
    sq = np.sum(x * x, axis=0)
    j = np.divide(np.sum(x, axis=0) ** 2, n * sq, out=np.ones_like(sq), where=sq > 0)
    bad = np.flatnonzero(j < threshold)
    if bad.size == 0:
        return 0.0
    if bad[-1] == j.size - 1:
        return math.nan
    return float(res.t_s[m][bad[-1] + 1] - since)


def utilisation(res: FluidResult, settle_s: float | None = None) -> float:
    """The bottleneck's mean utilisation after settling: busy whenever a queue stands, else
    carrying Σ RC (this counts what leaves the link, not what is offered)."""
    m = settled(res, settle_s)
    out = np.where(res.queue_bytes[m] > 0, res.bottleneck_bps, res.total_bps[m])
    return float(np.mean(np.minimum(out, res.bottleneck_bps)) / res.bottleneck_bps)


def summary(res: FluidResult, settle_s: float | None = None) -> dict[str, float]:
    """The predictions a run records beside its measurement, flat (SI units; NaN where a
    reading does not apply: a period without oscillation, convergence with one flow)."""
    qs = queue_stats(res, settle_s)
    sw = sawtooth(res, 0, settle_s)
    out = {
        "queue_mean_bytes": qs.mean,
        "queue_p5_bytes": qs.p5,
        "queue_p95_bytes": qs.p95,
        "queue_amplitude_bytes": qs.amplitude,
        "queue_peak_to_peak_bytes": qs.peak_to_peak,
        "rate_mean_bps": sw.mean_bps,
        "rate_period_s": sw.period_s,
        "rate_depth_bps": sw.depth_bps,
        "rate_decay": sw.decay,
        "cut_interval_s": sw.cut_interval_s,
        "cut_depth_bps": sw.cut_depth_bps,
        "utilisation": utilisation(res, settle_s),
        "convergence_s": convergence_time(res) if res.n_flows > 1 else math.nan,
        "dropped_bytes": res.dropped_bytes,
    }
    return out
