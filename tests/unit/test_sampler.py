"""The one periodic sampler (testbed.trace.sampler): its drift rule, exactly (next_tick) and on a
real thread whose clock the test moves (testbed.core.clock.ManualClock); errors, lifecycle; and the
CPU monitor built on it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from testbed.core.clock import ManualClock
from testbed.core.procstat import TICK, cpu_seconds, tree_cpu_seconds
from testbed.trace.cpu import CpuMonitor, others_share, read_cpu_times
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


# -- the rule on a real thread, on a clock the test moves --------------------------------------
# The sampler thread is real; its time is a ManualClock, so every grid point, missed tick and
# wait is exact whatever the machine's load (the real clock's promptness is Python's own).
T0 = 1000.0


class Recorder(PeriodicSampler):
    def __init__(
        self, period: float, clock: ManualClock, slow: dict[int, float] | None = None
    ) -> None:
        super().__init__(period, clock=clock)
        self.times: list[float] = []
        self.slow = slow or {}
        self.opened = self.closed = 0

    def open(self) -> None:
        self.opened += 1

    def sample(self) -> None:
        self.times.append(self.clock.now())
        self.clock.sleep(self.slow.get(len(self.times) - 1, 0.0))  # the sample's cost

    def close(self) -> None:
        self.closed += 1


def test_thread_stays_on_the_grid_and_counts_an_overrun():
    clock = ManualClock(T0)
    # the second sample takes 2.5 periods: the grid points 2 and 3 pass while it runs
    with Recorder(1.0, clock, slow={1: 2.5}) as s:
        clock.run_to(T0 + 8.5)
    # on the grid t0 + k (no drift), 2 and 3 skipped and counted, no catch-up burst after
    assert s.times == [T0 + k for k in (0, 1, 4, 5, 6, 7, 8)]
    assert s.missed_ticks == 2
    # every grid point up to the last sample was either sampled or counted as missed
    assert len(s.times) + s.missed_ticks == 9
    assert s.opened == 1 and s.closed == 1
    assert len(s.sample_seconds) == len(s.times)
    assert s.errors == []


def test_not_immediate_samples_one_period_after_start():
    class Late(Recorder):
        immediate = False

    clock = ManualClock(T0)
    with Late(1.0, clock) as s:
        clock.run_to(T0 + 0.5)
        assert s.times == []
        clock.run_to(T0 + 2.5)
    assert s.times == [T0 + 1.0, T0 + 2.0]


def test_sample_errors_are_kept_once_and_sampling_goes_on():
    class Failing(PeriodicSampler):
        calls = 0

        def sample(self) -> None:
            self.calls += 1
            raise OSError("gone")

    clock = ManualClock(T0)
    with Failing(1.0, clock=clock) as s:
        clock.run_to(T0 + 4.5)
    assert s.calls == 5  # at 0, 1, 2, 3 and 4: an error does not cost the grid a tick
    assert s.errors == ["sampler: OSError: gone"] and s.missed_ticks == 0


def test_open_failure_closes_and_raises():
    class Broken(Recorder):
        def open(self) -> None:
            raise FileNotFoundError("no namespace")

    s = Broken(0.1, ManualClock(T0))
    with pytest.raises(FileNotFoundError):
        s.start()
    assert s.closed == 1
    assert not any(t.name == s.thread_name for t in threading.enumerate() if t.is_alive())


def test_stop_is_prompt_and_start_once():
    """stop() wakes the thread from its wait: it ends with none of the clock's time passed (it
    waited for the next tick, ten seconds away, before)."""
    clock = ManualClock(T0)
    s = Recorder(10.0, clock)
    s.start()
    with pytest.raises(RuntimeError, match="already started"):
        s.start()
    clock.run_to(T0)  # the thread has sampled and waits for the tick at T0 + 10
    s.stop()
    assert s._thread is not None and not s._thread.is_alive()
    assert clock.now() == T0 and clock.waiting() == 0
    assert s.errors == []  # not "did not stop within its timeout"
    assert s.times == [T0]  # the immediate first sample only
    assert s.closed == 1


def test_period_must_be_positive():
    with pytest.raises(ValueError, match="period"):
        Recorder(0, ManualClock(T0))


# -- the CPU monitor ---------------------------------------------------------------------------
def test_cpu_monitor_reads_this_machine():
    """Real /proc/stat readings, the sampler's time on a manual clock: one sample per period,
    taken after this thread kept a core busy for at least one jiffy since the baseline."""
    clock = ManualClock(T0)
    with CpuMonitor(period=1.0, clock=clock) as cpu:
        busy0, _ = read_cpu_times()
        while read_cpu_times()[0] == busy0:  # keep one core busy until the kernel counted it
            pass
        clock.run_to(T0 + 1.5)
    assert len(cpu.samples) == 1 and all(0.0 <= x <= 1.0 for x in cpu.samples)
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


def test_others_share_is_the_machines_process_time_less_the_trees():
    # 2 cores over 10 s (20 core-seconds): the machine's processes 13 s, the tree's own 3 s
    assert others_share((100.0, 500.0, 1000.0), (103.0, 513.0, 1020.0)) == pytest.approx(0.5)
    # the tree's irq time can make it exceed the machine's process time: never negative
    assert others_share((0.0, 0.0, 0.0), (2.0, 1.0, 20.0)) == 0.0
    assert others_share((0.0, 0.0, 5.0), (0.0, 0.0, 5.0)) is None


def test_a_monitor_with_an_owner_reports_the_others_share():
    clock = ManualClock(T0)
    with CpuMonitor(period=1.0, clock=clock, own=os.getpid()) as cpu:
        total0 = read_cpu_times()[1]
        while read_cpu_times()[1] == total0:  # until the kernel's count moved on by a tick
            pass
        clock.run_to(T0 + 1.5)
    share = cpu.summary()["cpu_others_mean"]
    assert share is not None and 0.0 <= share <= 1.0


BURN = "import time\nwhile time.process_time() < 0.2: pass\n"  # 0.2 CPU seconds, then exit


def test_tree_cpu_counts_exited_and_live_descendants():
    """A child that burnt 0.2 CPU seconds and was reaped counts (through this process's cutime),
    and so does a live one. The kernel reports whole ticks (1/TICK s), rounded down: a reading
    may lose up to one tick (and the float subtraction a few ulps, hence the rounding)."""
    before = tree_cpu_seconds(os.getpid())
    subprocess.run([sys.executable, "-c", BURN], check=True)
    after_exited = tree_cpu_seconds(os.getpid())
    assert round(after_exited - before, 9) >= 0.2 - 1 / TICK
    live = subprocess.Popen(
        [sys.executable, "-c", BURN + "import sys\nsys.stdin.read()\n"], stdin=subprocess.PIPE
    )
    try:
        while round(cpu_seconds(live.pid) or 0.0, 9) < 0.2 - 1 / TICK:  # the child's own count
            assert live.poll() is None
        assert tree_cpu_seconds(os.getpid()) - after_exited >= cpu_seconds(live.pid)
    finally:
        live.communicate(b"")
    assert tree_cpu_seconds(2**22 + 1) == 0.0  # no such process (above pid_max's default)
