"""The unix-to-monotonic offset a delay line converts kernel stamps with: never too large, so a
converted stamp is never early, whatever preempts the readings."""

from __future__ import annotations

from collections.abc import Iterator

from testbed.core.clock import SystemClock, wall_offset

TRUE_OFFSET = 1_700_000_000.0  # unix seconds at monotonic zero in these scripted clocks


class ScriptedClock(SystemClock):
    """Monotonic readings from a script; the unix reading is the true wall time at the moment of
    the call, which the script places between the monotonic readings around it."""

    def __init__(self, readings: list[tuple[float, float, float]]) -> None:
        self._steps: Iterator[float] = iter(x for r in readings for x in r)

    def now(self) -> float:
        return next(self._steps)

    def wall(self) -> float:
        return next(self._steps) + TRUE_OFFSET


def test_a_preemption_before_the_unix_reading_errs_late_not_early() -> None:
    # monotonic 10.0, then 80 us of preemption, unix read at 10.00008, monotonic 10.00008
    clock = ScriptedClock([(10.0, 10.00008, 10.00008)])
    off = wall_offset(clock, tries=1)
    # the naive wall() - now() in that order reads 80 us too large: every stamp 80 us early
    assert TRUE_OFFSET - 8e-5 <= off <= TRUE_OFFSET


def test_the_tightest_bracket_is_kept() -> None:
    clock = ScriptedClock(
        [
            (1.0, 1.0001, 1.0005),  # preempted after the unix reading: 400 us late
            (2.0, 2.0000005, 2.000001),  # a 1 us bracket: 0.5 us late
            (3.0, 3.0002, 3.0002),
        ]
    )
    off = wall_offset(clock, tries=3)
    assert TRUE_OFFSET - 1e-6 <= off <= TRUE_OFFSET
