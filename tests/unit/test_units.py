"""Unit parsing (testbed.core.units), the one place where "25ms", "1gbit", "4MiB", "0.1%" become
numbers.

Pure tests: good values map to SI numbers (bit/s, seconds, bytes, fractions); bad values raise
``ValueError`` whose text shows the bad value and examples of good ones.
"""

from __future__ import annotations

import pytest

from testbed.core.units import (
    format_duration,
    format_percent,
    format_rate,
    format_size,
    parse_buffer,
    parse_duration,
    parse_percent,
    parse_rate,
    parse_size,
)

RATE_EXAMPLES = "examples: 100mbit, 1gbit, 500kbit"
DURATION_EXAMPLES = "examples: 25ms, 100us, 1.5s"
SIZE_EXAMPLES = "examples: 64KB, 4MiB, 1500B"
PERCENT_EXAMPLES = "examples: 0%, 0.1%, 1%"
BUFFER_EXAMPLES = "examples: 1bdp, 0.5bdp, 2bdp, 4MiB, 256KB"


# --- rates: tc style, kbit/mbit/gbit are powers of 1000, a bare number is bit/s ---------------


@pytest.mark.parametrize(
    ("text", "bps"),
    [
        ("100mbit", 100_000_000),
        ("1gbit", 1_000_000_000),
        ("500kbit", 500_000),
        ("1.5gbit", 1_500_000_000),
        (".5gbit", 500_000_000),
        ("1tbit", 1_000_000_000_000),
        ("1000bit", 1000),
        ("1000bps", 1000),
        ("100Mbit", 100_000_000),  # units are case-insensitive
        ("1GBIT", 1_000_000_000),
        (" 10 mbit ", 10_000_000),  # surrounding and inner blanks are fine
        ("1e3kbit", 1_000_000),
        ("1000", 1000),  # a bare number is bit/s, as in tc
        (1000, 1000),
        (1.5, 2),  # rounded to whole bit/s
    ],
)
def test_parse_rate(text: object, bps: int) -> None:
    assert parse_rate(text) == bps
    assert isinstance(parse_rate(text), int)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("fast", f"'fast' is not a rate; {RATE_EXAMPLES}"),
        ("100mbps", f"'100mbps' is not a rate; {RATE_EXAMPLES}"),
        ("100MB", f"'100MB' is not a rate; {RATE_EXAMPLES}"),  # bytes are not a rate
        ("mbit", f"'mbit' is not a rate; {RATE_EXAMPLES}"),
        ("", f"'' is not a rate; {RATE_EXAMPLES}"),
        (True, f"True is not a rate; {RATE_EXAMPLES}"),  # YAML `yes` must not become 1 bit/s
        (None, f"None is not a rate; {RATE_EXAMPLES}"),
        ([1], f"[1] is not a rate; {RATE_EXAMPLES}"),
        ("1e400gbit", "'1e400gbit' is not a finite rate"),
    ],
)
def test_parse_rate_rejects(value: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_rate(value)
    assert str(info.value) == message


# --- durations: us/ms/s; a bare YAML number is seconds, a string needs a unit ----------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("25ms", 0.025),
        ("100us", 100e-6),
        ("1.5s", 1.5),
        ("0ms", 0.0),
        ("25 ms", 0.025),
        ("25MS", 0.025),
        ("1e-3s", 0.001),
        (0, 0.0),  # zero needs no unit
        ("0", 0.0),
    ],
)
def test_parse_duration(text: object, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds, rel=1e-12, abs=0)
    assert isinstance(parse_duration(text), float)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("25 parsecs", f"'25 parsecs' is not a duration; {DURATION_EXAMPLES}"),
        ("2min", f"'2min' is not a duration; {DURATION_EXAMPLES}"),
        ("25µs", f"'25µs' is not a duration; {DURATION_EXAMPLES}"),
        ("ms", f"'ms' is not a duration; {DURATION_EXAMPLES}"),
        ("", f"'' is not a duration; {DURATION_EXAMPLES}"),
        ("25", f"'25' is not a duration (unit missing); {DURATION_EXAMPLES}"),
        (0.025, f"0.025 is not a duration (unit missing); {DURATION_EXAMPLES}"),
        (25, f"25 is not a duration (unit missing); {DURATION_EXAMPLES}"),
        (True, f"True is not a duration; {DURATION_EXAMPLES}"),
        (None, f"None is not a duration; {DURATION_EXAMPLES}"),
        ("1e400s", "'1e400s' is not a finite duration"),
    ],
)
def test_parse_duration_rejects(value: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_duration(value)
    assert str(info.value) == message


# --- sizes: B, decimal KB/MB/GB and binary KiB/MiB/GiB; a bare number is bytes ---------------


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [
        ("1500B", 1500),
        ("1500b", 1500),
        ("1500", 1500),
        (1500, 1500),
        ("64KB", 64_000),
        ("1MB", 1_000_000),
        ("1GB", 1_000_000_000),
        ("1KiB", 1024),
        ("0.5KiB", 512),
        ("4MiB", 4 * 1024 * 1024),
        ("4 MiB", 4 * 1024 * 1024),
        ("4mib", 4 * 1024 * 1024),
        ("1GiB", 1024**3),
        (1.7, 2),  # rounded to whole bytes
    ],
)
def test_parse_size(text: object, nbytes: int) -> None:
    assert parse_size(text) == nbytes
    assert isinstance(parse_size(text), int)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("big", f"'big' is not a size; {SIZE_EXAMPLES}"),
        ("1kbit", f"'1kbit' is not a size; {SIZE_EXAMPLES}"),  # a rate is not a size
        ("4MiBs", f"'4MiBs' is not a size; {SIZE_EXAMPLES}"),
        (True, f"True is not a size; {SIZE_EXAMPLES}"),
        (None, f"None is not a size; {SIZE_EXAMPLES}"),
    ],
)
def test_parse_size_rejects(value: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_size(value)
    assert str(info.value) == message


# --- percentages: "0.1%" -> 0.001; the % sign is required except for zero ------------------


@pytest.mark.parametrize(
    ("text", "fraction"),
    [
        ("0%", 0.0),
        ("0.1%", 0.001),
        ("1%", 0.01),
        ("1 %", 0.01),
        ("100%", 1.0),
        (0, 0.0),
        ("0", 0.0),
    ],
)
def test_parse_percent(text: object, fraction: float) -> None:
    assert parse_percent(text) == pytest.approx(fraction, rel=1e-12, abs=0)


@pytest.mark.parametrize("value", ["0.5", 0.001, 1])
def test_parse_percent_needs_the_percent_sign(value: object) -> None:
    # Is a bare 1 one percent (tc) or 100% (a fraction)? Neither guess is safe.
    with pytest.raises(ValueError) as info:
        parse_percent(value)
    assert str(info.value) == f"{value!r} is not a percentage (% sign missing); {PERCENT_EXAMPLES}"


@pytest.mark.parametrize("value", ["percent", "%", "5ms", True, None, [1]])
def test_parse_percent_rejects(value: object) -> None:
    with pytest.raises(ValueError) as info:
        parse_percent(value)
    assert str(info.value) == f"{value!r} is not a percentage; {PERCENT_EXAMPLES}"


def test_parse_percent_leaves_the_range_check_to_the_schema() -> None:
    # The parser only converts; "150%" is rejected by the scenario schema (tests/test_scenario.py).
    assert parse_percent("150%") == pytest.approx(1.5)


# --- buffers: bytes or a multiple of the bandwidth-delay product -----------------------------


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("1bdp", ("bdp", 1.0)),
        ("0.5bdp", ("bdp", 0.5)),
        ("1.5 bdp", ("bdp", 1.5)),
        ("2BDP", ("bdp", 2.0)),
        ("2xBDP", ("bdp", 2.0)),
        ("2 x bdp", ("bdp", 2.0)),
        ("4MiB", ("bytes", 4 * 1024 * 1024)),
        ("256KB", ("bytes", 256_000)),
        (1000, ("bytes", 1000)),
    ],
)
def test_parse_buffer(text: object, parsed: tuple[str, float]) -> None:
    assert parse_buffer(text) == parsed


@pytest.mark.parametrize("value", ["lots", "bdp", "xbdp", "-1bdp", "1kbit", True, None])
def test_parse_buffer_rejects(value: object) -> None:
    with pytest.raises(ValueError) as info:
        parse_buffer(value)
    assert str(info.value) == f"{value!r} is not a buffer size; {BUFFER_EXAMPLES}"


# --- printing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("func", "value", "text"),
    [
        (format_rate, 100_000_000, "100 Mbit/s"),
        (format_rate, 1_500_000_000, "1.5 Gbit/s"),
        (format_rate, 500_000, "500 kbit/s"),
        (format_rate, 12, "12 bit/s"),
        (format_duration, 0, "0"),
        (format_duration, 100e-6, "100 us"),
        (format_duration, 0.025, "25 ms"),
        (format_duration, 1.5, "1.5 s"),
        (format_size, 4 * 1024 * 1024, "4 MiB"),
        (format_size, 64 * 1024, "64 KiB"),
        (format_size, 1500, "1.465 KiB"),
        (format_size, 1000, "1000 B"),
        (format_percent, 0.001, "0.1%"),
    ],
)
def test_format(func, value: float, text: str) -> None:
    assert func(value) == text


def test_format_takes_a_number_spec_for_axis_labels() -> None:
    assert format_size(1500, "g") == "1.46484 KiB"
    assert format_duration(0.0123456, "g") == "12.3456 ms"
    assert format_rate(1_234_567, ".2f") == "1.23 Mbit/s"
