"""The one periodic sampler (testbed.trace.sampler): its drift rule, exactly (next_tick) and on a
real thread; errors, lifecycle; and the CPU monitor built on it."""

from __future__ import annotations

import threading
import time

import pytest

from testbed.trace.cpu import CpuMonitor
from testbed.trace.sampler import PeriodicSampler, next_tick


# -- the rule, exactly -------------------------------------------------------------------------
def test_next_tick_on_time_is_the_next_grid_point():
    assert next_tick(10.0, 10.03, 0.1) == (pytest.approx(10.1), 0)


def test_next_tick_skips_and_counts_missed_grid_points():
    # a sample due at 10.0 that ended at 10.25: 10.1 and 10.2 were missed, the next is 10.3
    tick, missed = next_tick(10.0, 10.25, 0.1)
    assert missed == 2 and tick == pytest.approx(10.3)
    # ending exactly on a grid point misses it (it is not ahead any more)
    tick, missed = next_tick(0.0, 1.0, 1.0)
    assert (tick, missed) == (2.0, 1)


def test_next_tick_never_drifts():
    """Whatever each sample costs, the ticks stay on t0 + k * period."""
    tick, period = 0.0, 0.25
    for cost in [0.01, 0.2, 0.6, 0.0, 1.3, 0.1]:
        tick, _ = next_tick(tick, tick + cost, period)
        assert tick / period == pytest.approx(round(tick / period))


# -- the rule on a real thread -----------------------------------------------------------------
class Recorder(PeriodicSampler):
    def __init__(self, period: float, slow: dict[int, float] | None = None) -> None:
        super().__init__(period)
        self.times: list[float] = []
        self.slow = slow or {}
        self.opened = self.closed = 0

    def open(self) -> None:
        self.opened += 1

    def sample(self) -> None:
        self.times.append(time.monotonic())
        time.sleep(self.slow.get(len(self.times) - 1, 0.0))

    def close(self) -> None:
        self.closed += 1


def _offsets(times: list[float], period: float) -> list[float]:
    """Each sample's position on the grid of the first one, in periods."""
    return [(t - times[0]) / period for t in times]


def test_thread_stays_on_the_grid_and_counts_an_overrun():
    period = 0.1
    # the second sample takes 2.5 periods: the grid points 2 and 3 pass while it runs
    with Recorder(period, slow={1: 2.5 * period}) as s:
        time.sleep(8.5 * period)
    offsets = _offsets(s.times, period)
    assert s.missed_ticks >= 2
    assert offsets[2] >= 3.9  # no catch-up burst after the overrun: the next sample is at 4
    # every sample sits on the grid (up to the wake-up latency of a shared machine), so the
    # sampling did not drift however long each sample took
    for k in offsets:
        assert k - round(k) == pytest.approx(0, abs=0.4), offsets
    # every grid point up to the last sample was either sampled or counted as missed
    assert len(s.times) + s.missed_ticks == pytest.approx(round(offsets[-1]) + 1, abs=1)
    assert s.opened == 1 and s.closed == 1
    assert len(s.sample_seconds) == len(s.times)


def test_not_immediate_samples_one_period_after_start():
    class Late(Recorder):
        immediate = False

    period = 0.2
    started = time.monotonic()
    with Late(period) as s:
        time.sleep(0.1)
        assert s.times == []
        time.sleep(0.3)
    assert s.times and s.times[0] - started >= period * 0.9


def test_sample_errors_are_kept_once_and_sampling_goes_on():
    class Failing(PeriodicSampler):
        calls = 0

        def sample(self) -> None:
            self.calls += 1
            raise OSError("gone")

    with Failing(0.02) as s:
        time.sleep(0.2)
    assert s.calls >= 3
    assert s.errors == ["sampler: OSError: gone"]


def test_open_failure_closes_and_raises():
    class Broken(Recorder):
        def open(self) -> None:
            raise FileNotFoundError("no namespace")

    s = Broken(0.1)
    with pytest.raises(FileNotFoundError):
        s.start()
    assert s.closed == 1
    assert not any(t.name == s.thread_name for t in threading.enumerate() if t.is_alive())


def test_stop_is_prompt_and_start_once():
    s = Recorder(10.0)
    s.start()
    with pytest.raises(RuntimeError, match="already started"):
        s.start()
    t0 = time.monotonic()
    s.stop()
    assert time.monotonic() - t0 < 2.0
    assert len(s.times) == 1  # the immediate first sample only


def test_period_must_be_positive():
    with pytest.raises(ValueError, match="period"):
        Recorder(0)


# -- the CPU monitor ---------------------------------------------------------------------------
def test_cpu_monitor_reads_this_machine():
    with CpuMonitor(period=0.05) as cpu:
        end = time.monotonic() + 0.4
        while time.monotonic() < end:  # keep one core busy
            pass
    assert cpu.samples and all(0.0 <= x <= 1.0 for x in cpu.samples)
    summary = cpu.summary()
    assert 0.0 < summary["cpu_busy_mean"] <= 1.0
    assert set(summary) == {
        "cpu_busy_mean",
        "cpu_busy_p95",
        "cpu_saturated_share",
        "cpu_saturated",
    }


def test_cpu_summary_without_samples():
    assert CpuMonitor().summary() == {
        "cpu_busy_mean": None,
        "cpu_busy_p95": None,
        "cpu_saturated": False,
    }
