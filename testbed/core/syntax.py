"""Quantities written as a scenario writes them (``100mbit``, ``20ms``, ``16MiB``, ``0.1%``). PURE.

testbed.core.units prints for reading (``100 Mbit/s``), which the scenario parser refuses; what
`testbed plan` shows a user may copy into a scenario or a ``--set``, so it prints these instead.
Each function is the inverse of its parser: ``parse_rate(rate_text(x)) == x`` and likewise,
exactly for whole bit/s and bytes, to the float's precision for durations and percentages.
"""

from __future__ import annotations

import math

from testbed.core.units import parse_duration, parse_percent, parse_rate, parse_size


def _number(x: float, digits: int = 3) -> str:
    """``x`` with at most ``digits`` decimals, without trailing zeros (``2.5``, ``100``)."""
    text = f"{x:.{digits}f}".rstrip("0").rstrip(".")
    return text or "0"


def rate_text(bps: float) -> str:
    """bit/s as a scenario rate: ``100mbit``, ``1.5gbit``, ``64000bit`` when no unit is exact."""
    whole = round(bps)
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if whole >= scale:
            text = _number(whole / scale) + unit
            if parse_rate(text) == whole:
                return text
    return f"{whole}bit"


def duration_text(seconds: float) -> str:
    """Seconds as a scenario duration: ``20ms``, ``1.5s``, ``250us``, ``0ms``."""
    if seconds == 0:
        return "0ms"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(seconds) >= scale or unit == "us":
            for digits in (3, 6, 9):
                text = _number(seconds / scale, digits) + unit
                if math.isclose(parse_duration(text), seconds, rel_tol=1e-9, abs_tol=1e-12):
                    return text
    return f"{seconds!r}s"


def size_text(nbytes: float) -> str:
    """Bytes as a scenario size: the shortest exact of ``16MiB``, ``500KB``, ``1500B``."""
    whole = round(nbytes)
    texts = [f"{whole}B"]
    for unit, scale in (
        ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3),
    ):  # fmt: skip
        if whole >= scale:
            text = _number(whole / scale) + unit
            if parse_size(text) == whole:
                texts.append(text)
    return min(texts, key=len)


def percent_text(fraction: float) -> str:
    """A fraction as a scenario percentage: ``0.1%``, ``0%``."""
    for digits in (3, 6, 9):
        text = _number(fraction * 100, digits) + "%"
        if math.isclose(parse_percent(text), fraction, rel_tol=1e-9, abs_tol=1e-15):
            return text
    return f"{fraction * 100!r}%"
