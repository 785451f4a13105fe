"""The emulating machine's CPU load during a run: is the testbed itself the bottleneck?

:class:`CpuMonitor` samples the whole machine's busy share (``/proc/stat``: everything but idle
and iowait, over all cores) once per period with the project's one sampler thread
(:class:`testbed.trace.sampler.PeriodicSampler`), and summarizes it into the run's manifest
fields ``cpu_busy_mean``, ``cpu_busy_p95``, ``cpu_saturated_share`` and ``cpu_saturated``. A run
whose samples were mostly saturated measured the machine, not the emulated network.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed.core.clock import SYSTEM, Clock
from testbed.core.stats import quantile
from testbed.trace.sampler import PeriodicSampler

CPU_SATURATED = 0.95  # busy share of all cores that counts as saturated
CPU_FLAG_SHARE = 0.5  # flag the run when more than this share of samples was saturated


def read_cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


class CpuMonitor(PeriodicSampler):
    """Samples the whole machine's CPU busy share every ``period`` seconds: each sample is the
    share over the period before it (so the first one is a period after the start)."""

    thread_name = "cpu-monitor"
    immediate = False  # a share needs two readings: the first is taken at start

    def __init__(self, period: float = 0.2, *, clock: Clock = SYSTEM) -> None:
        super().__init__(period, clock=clock)
        self.samples: list[float] = []
        self._last = (0, 0)

    def open(self) -> None:
        self._last = read_cpu_times()

    def sample(self) -> None:
        busy1, total1 = read_cpu_times()
        busy0, total0 = self._last
        if total1 > total0:
            self.samples.append((busy1 - busy0) / (total1 - total0))
        self._last = busy1, total1

    def summary(self) -> dict[str, Any]:
        xs = self.samples
        if not xs:
            return {"cpu_busy_mean": None, "cpu_busy_p95": None, "cpu_saturated": False}
        saturated = sum(1 for x in xs if x >= CPU_SATURATED) / len(xs)
        return {
            "cpu_busy_mean": sum(xs) / len(xs),
            "cpu_busy_p95": quantile(xs, 0.95),
            "cpu_saturated_share": saturated,
            "cpu_saturated": saturated > CPU_FLAG_SHARE,
        }
