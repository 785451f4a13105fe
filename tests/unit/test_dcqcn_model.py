"""DCQCN's fluid model (analysis.dcqcn_model): the equations' limits, the paper's operating point,
two flows converging, time-dilation invariance, and what a feedback-delay sweep does (pure)."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math

import numpy as np
import pytest

from analysis.dcqcn_model import (
    FluidResult,
    convergence_time,
    default_dt,
    integrate,
    jain,
    queue_stats,
    sawtooth,
    summary,
    utilisation,
)
from testbed.core.dcqcn import DEFAULTS, dilate

PAPER = DEFAULTS["paper"]
# the paper's CP: Kmin 5 KB, Kmax 200 KB, Pmax 1 %; 1000-byte packets
CP = {"kmin_bytes": 5e3, "kmax_bytes": 200e3, "pmax": 0.01, "packet_bytes": 1000}


def test_jain() -> None:
    assert jain([5, 5, 5]) == pytest.approx(1.0)
    assert jain([1, 0]) == pytest.approx(0.5)
    assert jain([3, 1]) == pytest.approx(16 / 20)
    assert jain([0, 0]) == 1.0


def test_without_marks_alpha_decays_per_k_and_rc_climbs_to_the_line_rate() -> None:
    # one flow starting at 10 of a 40 Gbit/s line: the queue never forms, so p = 0 forever
    r = integrate(
        PAPER, line_rate_bps=40e9, initial_rate_bps=10e9, feedback_delay_s=85e-6,
        duration_s=0.06, **CP,
    )  # fmt: skip
    assert r.queue_bytes.max() == 0.0 and r.cut_rate_hz.max() == 0.0
    # α = α₀(1−g)^{t/K}: the fluid equation's e^{−g·t/K} is that to 0.2 % over 200 K
    k = PAPER.alpha_timer
    for t in (10 * k, 50 * k, 200 * k):
        i = int(np.searchsorted(r.t_s, t))
        assert r.alpha[0, i] == pytest.approx((1 - PAPER.g) ** (r.t_s[i] / k), rel=3e-3)
    # RT climbs by RAI per timer event (1/T) and per byte-counter event (RC/B), all past F
    t1, t2 = 1e-3, 2e-3
    i1, i2 = np.searchsorted(r.t_s, [t1, t2])
    slope = (r.rt_bps[0, i2] - r.rt_bps[0, i1]) / (r.t_s[i2] - r.t_s[i1])
    rc_mid = r.rc_bps[0, (i1 + i2) // 2]
    want = PAPER.rai * (1 / PAPER.rate_timer + rc_mid / 8 / PAPER.byte_counter)
    assert slope == pytest.approx(want, rel=1e-2)
    # RC follows RT up, never down, and reaches the line rate (30 Gbit/s / (RAI/T) ≈ 41 ms)
    assert np.all(np.diff(r.rc_bps[0]) >= -1e-3)
    assert r.rc_bps[0, -1] == pytest.approx(40e9)
    reached = r.t_s[np.argmax(r.rc_bps[0] >= 0.999 * 40e9)]
    assert 0.03 < reached < 0.05


def test_mellanox_has_no_byte_counter_term() -> None:
    m = DEFAULTS["mellanox"]
    r = integrate(
        m, line_rate_bps=40e9, initial_rate_bps=10e9, feedback_delay_s=85e-6,
        duration_s=0.01, **CP,
    )  # fmt: skip
    i1, i2 = np.searchsorted(r.t_s, [2e-3, 4e-3])
    slope = (r.rt_bps[0, i2] - r.rt_bps[0, i1]) / (r.t_s[i2] - r.t_s[i1])
    assert slope == pytest.approx(m.rai / m.rate_timer, rel=1e-6)


@functools.cache
def _paper_single_flow(dt_s: float | None = None, duration_s: float = 0.2) -> FluidResult:
    # one flow can only queue behind a slower bottleneck: a 80 Gbit/s NIC into 40 Gbit/s
    return integrate(
        PAPER, line_rate_bps=80e9, bottleneck_bps=40e9, feedback_delay_s=85e-6,
        duration_s=duration_s, dt_s=dt_s, **CP,
    )  # fmt: skip


def test_one_flow_at_the_papers_point_settles_between_kmin_and_kmax() -> None:
    r = _paper_single_flow()
    assert r.dt_s == pytest.approx(85e-6 / 31)  # 55 µs / 20, shortened to fit τ*
    qs = queue_stats(r)
    assert CP["kmin_bytes"] < qs.mean < CP["kmax_bytes"]  # measured 11.2 KB
    assert qs.amplitude < 1e3  # settled: p95 − p5 a few bytes
    assert utilisation(r) > 0.999
    sw = sawtooth(r)
    assert sw.mean_bps == pytest.approx(40e9, rel=1e-3)
    # ringing that dies out (period ~1.16 ms ≈ 14 τ*, swing ÷7 per 50 ms), not a limit cycle;
    # the discrete sawtooth it implies is a cut of α/2 every ~0.65 ms (~12 T), ~1.7 Gbit/s deep
    assert not sw.limit_cycle and sw.decay < 0.2
    assert 10 * 85e-6 < sw.period_s < 20 * 85e-6
    assert math.isnan(sawtooth(_paper_single_flow(duration_s=0.6), settle_s=0.5).period_s)
    assert 5 * PAPER.rate_timer < sw.cut_interval_s < 50 * PAPER.rate_timer
    assert 0.01 * 40e9 < sw.cut_depth_bps < 0.1 * 40e9
    # the step is small enough: halving it moves the mean queue and the cut interval < 1 %
    fine = _paper_single_flow(dt_s=r.dt_s / 2)
    assert queue_stats(fine).mean == pytest.approx(qs.mean, rel=1e-2)
    assert sawtooth(fine).cut_interval_s == pytest.approx(sw.cut_interval_s, rel=1e-2)


def test_an_oscillating_model_reports_its_period_and_depth() -> None:
    # ten synchronised flows at the same point oscillate (queue 0..~235 KB): a limit cycle
    r = integrate(
        PAPER, line_rate_bps=40e9, n_flows=10, feedback_delay_s=85e-6, duration_s=0.1, **CP
    )
    sw = sawtooth(r)
    assert sw.limit_cycle and 1e-3 < sw.period_s < 5e-3 and sw.depth_bps > 0.1 * sw.mean_bps
    assert queue_stats(r).p5 == 0.0 and utilisation(r) < 0.99
    # identical flows stay identical (integrated once, reported ten times)
    assert np.array_equal(r.rc_bps[0], r.rc_bps[9]) and r.rc_bps.shape[0] == 10


def test_two_flows_one_late_converge_to_a_fair_share() -> None:
    # the paper's two-flow case in real units: 40 Gbit/s, τ* 85 µs, the second flow 20 ms late
    r = integrate(
        PAPER, line_rate_bps=40e9, starts_s=[0.0, 0.02], feedback_delay_s=85e-6,
        duration_s=0.2, **CP,
    )  # fmt: skip
    assert r.rc_bps[1, r.t_s < 0.02].max() == 0.0  # silent before its start
    t = convergence_time(r)
    assert 0.01 < t < 0.05  # measured 27.8 ms after the late start
    end = r.rc_bps[:, -1]
    assert jain(end) > 0.999 and end.sum() == pytest.approx(40e9, rel=1e-2)
    # never reached at an impossible threshold
    assert math.isnan(convergence_time(r, threshold=1.0 + 1e-9))


def test_time_dilation_leaves_the_trajectories_unchanged_in_scaled_time() -> None:
    s = 100.0
    kw = {"starts_s": [0.0, 0.01], **CP}
    real = integrate(PAPER, line_rate_bps=40e9, feedback_delay_s=85e-6, duration_s=0.04, **kw)
    kw["starts_s"] = [0.0, 0.01 * s]
    emu = integrate(
        dilate(PAPER, s), line_rate_bps=40e9 / s, feedback_delay_s=85e-6 * s,
        duration_s=0.04 * s, **kw,
    )  # fmt: skip
    assert emu.dt_s == pytest.approx(real.dt_s * s) and emu.t_s.size == real.t_s.size
    assert emu.queue_bytes.max() > 1e5  # something happened
    np.testing.assert_allclose(emu.t_s, real.t_s * s, rtol=1e-9)
    np.testing.assert_allclose(emu.queue_bytes, real.queue_bytes, rtol=1e-6, atol=1e-3)
    np.testing.assert_allclose(emu.rc_bps * s, real.rc_bps, rtol=1e-6, atol=1.0)
    np.testing.assert_allclose(emu.alpha, real.alpha, rtol=1e-6, atol=1e-12)
    assert convergence_time(emu) == pytest.approx(convergence_time(real) * s, rel=1e-6)


def test_the_step_follows_the_shortest_time_scale() -> None:
    # paper: T = 55 µs binds; NVIDIA: a 1 µs α timer counts as K/g = 256 µs and a 4 µs CNP gap
    # as one 20 µs packet at 400 Mbit/s, so T = 300 µs... and 2 x 20 µs bind
    assert default_dt(PAPER, 85e-6, 40e9, 1000) == pytest.approx(55e-6 / 20)
    assert default_dt(DEFAULTS["mellanox"], 10e-3, 400e6, 1000) == pytest.approx(40e-6 / 20)


SWEEP_US = (85, 170, 340, 680)


@pytest.fixture(scope="module")
def delay_sweep() -> list[FluidResult]:
    # two flows at the paper's point, feedback delay doubled each time, T fixed at 55 µs
    runs = []
    for d in SWEEP_US:
        r = integrate(
            PAPER, line_rate_bps=40e9, n_flows=2, feedback_delay_s=d * 1e-6,
            duration_s=max(0.1, 300e-6 * d), **CP,
        )  # fmt: skip
        runs.append(r)
    return runs


def test_a_longer_feedback_delay_oscillates_more_and_uses_the_link_less(
    delay_sweep: list[FluidResult],
) -> None:
    amp = [queue_stats(r).amplitude for r in delay_sweep]
    util = [utilisation(r) for r in delay_sweep]
    # measured: p95 − p5 19, 50, 83, 155 KB; utilisation 1.000, 0.995, 0.969, 0.863
    assert all(b > 1.5 * a for a, b in itertools.pairwise(amp))
    assert all(b < a for a, b in itertools.pairwise(util)) and util[-1] < 0.9


@pytest.mark.xfail(
    strict=True,
    reason="the fluid model (no hyper increase, RC clamped to [min rate, line]) grows the "
    "queue amplitude about linearly in τ* past the onset (x2.6 from 85 to 170 µs, then x1.6, "
    "x1.9 per doubling): the note's D²/T overshoot is not what this model shows",
)
def test_the_amplitude_grows_faster_than_linearly_in_the_delay(
    delay_sweep: list[FluidResult],
) -> None:
    amp = [queue_stats(r).amplitude for r in delay_sweep]
    assert all(b > 2 * a for a, b in itertools.pairwise(amp))


def test_utilisation_counts_a_standing_queue_as_a_busy_link() -> None:
    r = _paper_single_flow()
    idle = dataclasses.replace(
        r, queue_bytes=np.zeros_like(r.queue_bytes), rc_bps=r.rc_bps * 0 + 10e9
    )
    assert utilisation(idle) == pytest.approx(0.25)


def test_summary_is_flat_and_says_nan_where_a_reading_does_not_apply() -> None:
    r = _paper_single_flow()
    s = summary(r)
    assert all(isinstance(v, float) for v in s.values())
    assert math.isnan(s["convergence_s"]) and s["dropped_bytes"] == 0.0
    assert s["queue_mean_bytes"] == pytest.approx(queue_stats(r).mean)
    assert s["utilisation"] > 0.999


def test_a_small_byte_counter_converges_a_little_slower_in_the_model() -> None:
    # two flows with a small byte counter: B = 150 KB lets the faster flow earn more increase
    # events; measured 27.8 ms (10 MB) vs 29.2 ms (150 KB) and a queue swinging to 0 instead of
    # 8-31 KB. The fluid model shows the effect, but small: the live runs may show more.
    kw = {"line_rate_bps": 40e9, "starts_s": [0.0, 0.02], "feedback_delay_s": 85e-6, **CP}
    big = integrate(PAPER, duration_s=0.2, **kw)
    small = integrate(dataclasses.replace(PAPER, byte_counter=150_000), duration_s=0.2, **kw)
    ratio = convergence_time(small) / convergence_time(big)
    assert 1.0 < ratio < 1.2
    assert queue_stats(small).amplitude > 2 * queue_stats(big).amplitude


def test_bad_inputs_are_refused() -> None:
    base = {"line_rate_bps": 1e9, "feedback_delay_s": 1e-3, "duration_s": 0.01, **CP}
    with pytest.raises(ValueError, match="kmax"):
        integrate(PAPER, **{**base, "kmax_bytes": 1e3})
    with pytest.raises(ValueError, match="no flows"):
        integrate(PAPER, starts_s=[], **base)
