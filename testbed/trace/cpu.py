"""The emulating machine's CPU load during a run: is the testbed itself the bottleneck?

:class:`CpuMonitor` samples the whole machine's busy share (``/proc/stat``: everything but idle
and iowait, over all cores) once per period with the project's one sampler thread
(:class:`testbed.trace.sampler.PeriodicSampler`), and summarizes it into the run's manifest
fields ``cpu_busy_mean``, ``cpu_busy_p95``, ``cpu_saturated_share`` and ``cpu_saturated``. A run
whose samples were mostly saturated measured the machine, not the emulated network.

Given the pid that owns a measurement (``own``), it also tells what the rest of the machine did
meanwhile: ``cpu_others_mean``, the share of all cores busy in processes other than ``own`` and
its descendants over the whole span. The test suite's timing plugin reads it to tell a host
busy with something else from a test whose own processes keep it busy. Interrupt and softirq
time (``/proc/stat``'s irq and softirq) is left out of that share: it is work for whichever
process's packets, often the measurement's own, so leaving it out can only understate the others.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed.core.clock import SYSTEM, Clock
from testbed.core.procstat import TICK, tree_cpu_seconds
from testbed.core.stats import quantile
from testbed.trace.sampler import PeriodicSampler

CPU_SATURATED = 0.95  # busy share of all cores that counts as saturated
CPU_FLAG_SHARE = 0.5  # flag the run when more than this share of samples was saturated


def cpu_fields() -> list[int]:
    """The all-cores line of ``/proc/stat`` in clock ticks since boot: user, nice, system, idle,
    iowait, irq, softirq, steal, ..."""
    return [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]


def read_cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot."""
    fields = cpu_fields()
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def process_and_total_seconds() -> tuple[float, float]:
    """(CPU seconds spent in processes: user, nice, system and steal, without irq and softirq;
    all cores' seconds in all) since boot."""
    fields = cpu_fields()
    process = fields[0] + fields[1] + fields[2] + (fields[7] if len(fields) > 7 else 0)
    return process / TICK, sum(fields) / TICK


def others_share(
    start: tuple[float, float, float], end: tuple[float, float, float]
) -> float | None:
    """The share of all cores that processes other than one tree kept busy between two readings
    of (the tree's CPU seconds, the machine's process CPU seconds, all cores' seconds); None when
    no time passed. Never negative: the tree's own seconds include some irq and softirq time
    that the machine's process seconds leave out."""
    (own0, busy0, total0), (own1, busy1, total1) = start, end
    if total1 <= total0:
        return None
    return max(0.0, (busy1 - busy0) - (own1 - own0)) / (total1 - total0)


class CpuMonitor(PeriodicSampler):
    """Samples the whole machine's CPU busy share every ``period`` seconds: each sample is the
    share over the period before it (so the first one is a period after the start)."""

    thread_name = "cpu-monitor"
    immediate = False  # a share needs two readings: the first is taken at start

    def __init__(
        self, period: float = 0.2, *, clock: Clock = SYSTEM, own: int | None = None
    ) -> None:
        super().__init__(period, clock=clock)
        self.samples: list[float] = []
        self._last = (0, 0)
        self.own = own
        self._span: list[tuple[float, float, float]] = []  # (own, process, total) at open, close

    def _span_reading(self) -> None:
        if self.own is not None:
            self._span.append((tree_cpu_seconds(self.own), *process_and_total_seconds()))

    def open(self) -> None:
        self._last = read_cpu_times()
        self._span_reading()

    def close(self) -> None:
        self._span_reading()

    def others_share(self) -> float | None:
        """The share of all cores busy in processes other than ``own``'s tree between start and
        stop (None: no ``own``, or not stopped)."""
        return others_share(*self._span) if len(self._span) == 2 else None

    def sample(self) -> None:
        busy1, total1 = read_cpu_times()
        busy0, total0 = self._last
        if total1 > total0:
            self.samples.append((busy1 - busy0) / (total1 - total0))
        self._last = busy1, total1

    def summary(self) -> dict[str, Any]:
        xs = self.samples
        others = {} if self.own is None else {"cpu_others_mean": self.others_share()}
        if not xs:
            return {"cpu_busy_mean": None, "cpu_busy_p95": None, "cpu_saturated": False, **others}
        saturated = sum(1 for x in xs if x >= CPU_SATURATED) / len(xs)
        return {
            "cpu_busy_mean": sum(xs) / len(xs),
            "cpu_busy_p95": quantile(xs, 0.95),
            "cpu_saturated_share": saturated,
            "cpu_saturated": saturated > CPU_FLAG_SHARE,
            **others,
        }
