"""Unit parsing and printing: the one place where "25ms", "1gbit", "4MiB", "0.1%" become numbers.

Inside the project every quantity is an SI number: rates in bit/s (int), durations in seconds
(float), sizes in bytes (int), fractions in 0..1 (float). Parsers raise ``ValueError`` with a
message that shows the bad value and examples of good ones; the schema turns that into a
user-facing error naming the file and field.
"""

from __future__ import annotations

import math
import re

_NUMBER = r"(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"

# tc style: kbit/mbit/gbit are powers of 1000, bare integers are bit/s.
_RATE_UNITS = {
    "": 1,
    "bit": 1,
    "bps": 1,
    "kbit": 1e3,
    "mbit": 1e6,
    "gbit": 1e9,
    "tbit": 1e12,
}
_DURATION_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
}


_QUANTITY = re.compile(r"\s*(?P<value>-?" + _NUMBER + r")\s*(?P<unit>[A-Za-z%]*)\s*")


def _split(text: str) -> tuple[float, str] | None:
    """'25 ms' -> (25.0, 'ms'); None when the text is not a number with an optional unit."""
    m = _QUANTITY.fullmatch(text)
    if not m:
        return None
    return float(m.group("value")), m.group("unit").lower()


def _parse(value: object, units: dict[str, float], kind: str, examples: str) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a {kind}; examples: {examples}")
    if isinstance(value, int | float):
        number, unit = float(value), ""
    elif isinstance(value, str):
        parts = _split(value)
        if parts is None:
            raise ValueError(f"{value!r} is not a {kind}; examples: {examples}")
        number, unit = parts
    else:
        raise ValueError(f"{value!r} is not a {kind}; examples: {examples}")
    if unit not in units:
        raise ValueError(f"{value!r} is not a {kind}; examples: {examples}")
    if not math.isfinite(number):
        raise ValueError(f"{value!r} is not a finite {kind}")
    return number * units[unit]


def parse_rate(value: object) -> int:
    """'100mbit' -> 100_000_000 bit/s. A bare number is bit/s (as in tc)."""
    bits = _parse(value, _RATE_UNITS, "rate", "100mbit, 1gbit, 500kbit")
    return round(bits)


def parse_duration(value: object) -> float:
    """'25ms' -> 0.025 s. A unit is required (a bare 25 would silently mean 25 s); only 0 may go
    without one."""
    bare = isinstance(value, int | float) and not isinstance(value, bool)
    parts = _split(value) if isinstance(value, str) else None
    if (bare and value != 0) or (parts is not None and parts[1] == "" and parts[0] != 0):
        raise ValueError(f"{value!r} is not a duration (unit missing); examples: 25ms, 100us, 1.5s")
    units = {**_DURATION_UNITS, "": 1.0}
    return _parse(value, units, "duration", "25ms, 100us, 1.5s")


def parse_size(value: object) -> int:
    """'4MiB' -> 4194304 bytes. A bare number is bytes."""
    return round(_parse(value, _SIZE_UNITS, "size", "64KB, 4MiB, 1500B"))


def parse_percent(value: object) -> float:
    """'0.1%' -> 0.001. The % sign is required (is a bare 1 one percent, as in tc, or 100%?);
    only 0 may go without it."""
    examples = "examples: 0%, 0.1%, 1%"
    if isinstance(value, str):
        parts = _split(value)
        if parts is None or parts[1] not in ("%", ""):
            raise ValueError(f"{value!r} is not a percentage; {examples}")
        number, unit = parts
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number, unit = float(value), ""
    else:
        raise ValueError(f"{value!r} is not a percentage; {examples}")
    if unit == "" and number != 0:
        raise ValueError(f"{value!r} is not a percentage (% sign missing); {examples}")
    if not math.isfinite(number):
        raise ValueError(f"{value!r} is not a finite percentage; {examples}")
    return number / 100


def parse_buffer(value: object) -> tuple[str, float]:
    """A queue size: bytes ('4MiB') or a multiple of the bandwidth-delay product ('0.5bdp').

    Returns ('bytes', n) or ('bdp', factor); the plan resolves BDP multiples once the rate and
    delay are known.
    """
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(?P<value>" + _NUMBER + r")\s*x?\s*bdp\s*", value, re.IGNORECASE)
        if m:
            factor = float(m.group("value"))
            if not math.isfinite(factor):
                raise ValueError(f"{value!r} is not a finite multiple of the BDP")
            return "bdp", factor
    try:
        return "bytes", float(parse_size(value))
    except ValueError:
        raise ValueError(
            f"{value!r} is not a buffer size; examples: 1bdp, 0.5bdp, 2bdp, 4MiB, 256KB"
        ) from None


def format_buffer(kind: str, value: float) -> str:
    """A queue size as :func:`parse_buffer` reads it back: ``1bdp``, ``250000B``."""
    return f"{value:g}bdp" if kind == "bdp" else f"{value:.0f}B"


def format_rate(bps: float, spec: str = ".4g") -> str:
    """``bps`` with the largest decimal unit that keeps it >= 1 (``spec`` formats the number)."""
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= scale:
            return f"{bps / scale:{spec}} {unit}"
    return f"{bps:{spec}} bit/s"


def format_duration(seconds: float, spec: str = ".4g") -> str:
    """Seconds in s, ms or us; signed (a model term may take time off: ``-39.7 ms``)."""
    if seconds < 0:
        return "-" + format_duration(-seconds, spec)
    if seconds == 0:
        return "0"
    if seconds < 1e-3:
        return f"{seconds * 1e6:{spec}} us"
    if seconds < 1:
        return f"{seconds * 1e3:{spec}} ms"
    return f"{seconds:{spec}} s"


def format_size(nbytes: float, spec: str = ".4g") -> str:
    """Binary units above 1 KiB; whole bytes below."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if nbytes >= scale:
            return f"{nbytes / scale:{spec}} {unit}"
    return f"{nbytes:.0f} B"


def format_percent(fraction: float) -> str:
    return f"{fraction * 100:.4g}%"
