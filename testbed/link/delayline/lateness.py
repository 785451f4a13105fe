"""The release-lateness histogram of a queue (how late its verdicts were, in microseconds).

This module owns the bins, their percentiles and the summary the stats file carries; the hot path
(:func:`testbed.link.delayline.loop.release`) fills the bins inline.
"""

from __future__ import annotations

import bisect
import itertools
import math


class LatenessHistogram:
    """Microsecond histogram: 1 us bins below 1 ms, 100 us bins up to 1 s, then one overflow bin.

    :meth:`percentile` uses the project's one quantile convention (``testbed.core.stats.quantile``:
    linear interpolation between the closest ranks, position ``p/100 * (count - 1)``), applied to
    order statistics read from the bins: the k-th smallest sample is taken as its bin's lower edge
    (capped at the exact maximum, and the largest sample is the exact maximum). Lateness is
    recorded in whole microseconds, so below 1 ms every bin holds one value and the result equals
    ``quantile`` of the recorded values exactly; above 1 ms it is less than one 100 us bin below
    it. (The nearest-rank bin value used before differed from ``quantile`` by up to one rank.)
    """

    FINE = 1000
    COARSE = 100
    NBINS = FINE + (1_000_000 - FINE) // COARSE + 2

    def __init__(self) -> None:
        self.counts = [0] * self.NBINS
        self.count = 0
        self.max_us = 0

    @classmethod
    def bin_of(cls, us: int) -> int:
        # the hot path (loop.release) inlines this mapping: keep the two in step
        if us < cls.FINE:
            return us if us > 0 else 0
        if us < 1_000_000:
            return cls.FINE + (us - cls.FINE) // cls.COARSE
        return cls.NBINS - 1

    @classmethod
    def bin_value(cls, b: int) -> float:
        if b < cls.FINE:
            return float(b)
        return float(cls.FINE + (b - cls.FINE) * cls.COARSE)

    def add_us(self, us: int) -> None:
        self.counts[self.bin_of(us)] += 1
        self.count += 1
        if us > self.max_us:
            self.max_us = us

    def percentile(self, p: float) -> float | None:
        """The ``p``-th percentile (0..100) of the recorded lateness, None when empty."""
        if self.count == 0:
            return None
        if not 0.0 <= p <= 100.0:
            raise ValueError(f"percentile {p} is not within [0, 100]")
        cumulative = list(itertools.accumulate(self.counts))
        pos = p / 100.0 * (self.count - 1)
        lo = math.floor(pos)
        low = self._order_statistic(cumulative, lo)
        if pos == lo:
            return low
        high = self._order_statistic(cumulative, lo + 1)
        return low + (high - low) * (pos - lo)

    def _order_statistic(self, cumulative: list[int], k: int) -> float:
        """The ``k``-th smallest recorded value (0-based), as its bin's lower edge."""
        if k >= self.count - 1:
            return float(self.max_us)
        b = bisect.bisect_right(cumulative, k)
        return min(self.bin_value(b), float(self.max_us))

    def summary(self) -> dict[str, float | int | None]:
        return {
            "p50": self.percentile(50),
            "p99": self.percentile(99),
            "max": self.max_us if self.count else None,
            "count": self.count,
        }
