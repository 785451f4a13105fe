"""Recorded-link trace files (a WAN link's ``trace:``) read into bins: the three formats'
readers and the binning every format shares. PURE apart from reading the user's file.

A trace is a function of time from its start: rate (bit/s) and, for csv, delay and loss. It is
cut into bins of ``bin`` seconds; each bin carries the trace's mean over it (the rate a shaper
set for that bin delivers), with ``scale`` applied to the rate. The formats (``mahimahi``,
``pensieve``, ``csv``), where a trace's origin and length are, and how a length that is not a
whole number of bins is binned: docs/faults.md, "## Traces". One binning for every format, so a
trace's bins do not depend on the file format it came in.

Errors are ``ScenarioError`` naming the scenario file, the field (``wan[0].trace.file``), the
trace file and the line.
"""

from __future__ import annotations

import bisect
import csv
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from testbed.core.errors import ScenarioError
from testbed.core.units import parse_duration, parse_percent, parse_rate

OPPORTUNITY_BITS = 1500 * 8  # one Mahimahi delivery opportunity
FORMATS = ("mahimahi", "pensieve", "csv")
CSV_COLUMNS = ("t", "rate", "delay", "loss")
MAX_TRACE_BYTES = 256 << 20  # a trace bigger than this is a mistake (or not a trace)
_BARE_NUMBER = re.compile(r"\s*[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?\s*")


class TraceBin(NamedTuple):
    """One bin of a trace: from ``t`` (s after the trace's start) for one bin width."""

    t: float
    rate: int  # bit/s, scale applied
    delay: float | None  # s (csv with a delay column), else None: unchanged
    loss: float | None  # 0..1 (csv with a loss column), else None: unchanged


@dataclass(frozen=True)
class TraceBins:
    """A trace cut into bins: ``bins`` cover one period (``len(bins) * width`` seconds);
    ``last`` is what the link holds after the end when the trace does not loop."""

    file: Path
    format: str
    width: float  # s, the bin width
    bins: tuple[TraceBin, ...]
    last: TraceBin
    length: float  # s, the trace's own length before rounding to whole bins

    @property
    def period(self) -> float:
        return round(len(self.bins) * self.width, 9)

    def mean_rate(self) -> float:
        return sum(b.rate for b in self.bins) / len(self.bins)


class TraceFileError(ValueError):
    """A problem at a line of the trace file (0: the file as a whole)."""

    def __init__(self, line: int, message: str):
        super().__init__(message)
        self.line = line
        self.message = message


# -- one reader per format: text -> a piecewise description of one period ----------------------


@dataclass(frozen=True)
class _Steps:
    """Piecewise-constant values: ``times[i]`` starts row i (times[0] = 0); ``length`` ends the
    period; rate in bit/s."""

    times: list[float]
    rates: list[float]
    delays: list[float] | None
    losses: list[float] | None
    length: float
    last: tuple[float, float | None, float | None]  # (rate, delay, loss) after the end


def _read_mahimahi(lines: list[str]) -> tuple[list[int], int]:
    """Opportunity times (ms, sorted) and the period (ms: the last timestamp)."""
    times: list[int] = []
    for n, raw in enumerate(lines, 1):
        text = raw.strip()
        if not text:
            continue
        if not text.isdigit():
            raise TraceFileError(
                n, f"{text[:40]!r} is not a timestamp; a mahimahi trace has one integer (ms) a line"
            )
        ms = int(text)
        if times and ms < times[-1]:
            raise TraceFileError(
                n, f"timestamp {ms} ms is before the line above it ({times[-1]} ms)"
            )
        times.append(ms)
    if not times:
        raise TraceFileError(0, "no timestamps (an empty mahimahi trace)")
    if times[-1] <= 0:
        raise TraceFileError(0, "the last timestamp must be above 0 ms (it is the trace's length)")
    return times, times[-1]


def _number(cell: str, parse: Callable[[object], float], kind: str) -> float:
    """A csv cell: a bare SI number, or text with a unit for ``parse``."""
    value = float(cell) if _BARE_NUMBER.fullmatch(cell) else parse(cell.strip())
    if not math.isfinite(value):
        raise ValueError(f"{cell!r} is not a finite {kind}")
    return value


def _read_pensieve(lines: list[str]) -> _Steps:
    times: list[float] = []
    rates: list[float] = []
    for n, raw in enumerate(lines, 1):
        parts = raw.split()
        if not parts:
            continue
        if len(parts) != 2:
            raise TraceFileError(
                n, f"{raw.strip()[:40]!r}: a pensieve row is `time_s <whitespace> Mbit/s`"
            )
        try:
            t, mbit = float(parts[0]), float(parts[1])
        except ValueError:
            raise TraceFileError(
                n, f"{raw.strip()[:40]!r}: time (s) and rate (Mbit/s) must be numbers"
            ) from None
        _check_row(n, t, times, mbit * 1e6)
        times.append(t)
        rates.append(mbit * 1e6)
    return _steps(times, rates, None, None)


def _read_csv(lines: list[str]) -> _Steps:
    rows = [(n, row) for n, row in enumerate(csv.reader(lines), 1) if any(c.strip() for c in row)]
    if not rows:
        raise TraceFileError(0, "empty csv trace; it starts with a header: t,rate[,delay][,loss]")
    n0, header = rows[0]
    names = [h.strip().lower() for h in header]
    unknown = [h for h in names if h not in CSV_COLUMNS]
    if unknown or "t" not in names or "rate" not in names or len(set(names)) != len(names):
        raise TraceFileError(
            n0,
            f"header {','.join(header)!r}: the columns are t and rate, optionally delay and loss "
            f"(each once); e.g. t,rate,delay,loss",
        )
    col = {name: i for i, name in enumerate(names)}
    times: list[float] = []
    rates: list[float] = []
    delays: list[float] | None = [] if "delay" in col else None
    losses: list[float] | None = [] if "loss" in col else None
    parsers = {
        "t": (parse_duration, "time", "0s, 100ms, 1.5 (s)"),
        "rate": (parse_rate, "rate", "10mbit, 5e6 (bit/s)"),
        "delay": (parse_duration, "delay", "40ms, 0.04 (s)"),
        "loss": (parse_percent, "loss", "0.5%, 0.005"),
    }
    for n, row in rows[1:]:
        if len(row) != len(names):
            raise TraceFileError(n, f"{len(row)} cells; the header has {len(names)} ({header})")
        values: dict[str, float] = {}
        for name, i in col.items():
            parse, kind, examples = parsers[name]
            try:
                values[name] = _number(row[i], parse, kind)
            except ValueError:
                raise TraceFileError(
                    n, f"{name} {row[i]!r} is not a {kind}; examples: {examples}"
                ) from None
        if values.get("delay", 0) < 0:
            raise TraceFileError(n, f"delay {row[col['delay']]!r} is negative")
        if not 0 <= values.get("loss", 0) <= 1:
            raise TraceFileError(n, f"loss {row[col['loss']]!r} is outside 0% to 100%")
        _check_row(n, values["t"], times, values["rate"])
        times.append(values["t"])
        rates.append(values["rate"])
        if delays is not None:
            delays.append(values["delay"])
        if losses is not None:
            losses.append(values["loss"])
    return _steps(times, rates, delays, losses)


def _check_row(n: int, t: float, times: list[float], rate: float) -> None:
    if t < 0:
        raise TraceFileError(n, f"time {t:g} s is negative")
    if times and t <= times[-1]:
        raise TraceFileError(n, f"time {t:g} s is not after the row above it ({times[-1]:g} s)")
    if rate < 0:
        raise TraceFileError(n, f"rate {rate:g} bit/s is negative")


def _steps(
    times: list[float],
    rates: list[float],
    delays: list[float] | None,
    losses: list[float] | None,
) -> _Steps:
    if len(times) < 2:
        raise TraceFileError(
            0,
            f"{len(times)} row(s); a trace needs at least two (the last row's time is the trace's "
            "length)",
        )
    t0 = times[0]
    last = (rates[-1], delays[-1] if delays else None, losses[-1] if losses else None)
    return _Steps(
        [t - t0 for t in times[:-1]],
        rates[:-1],
        delays[:-1] if delays is not None else None,
        losses[:-1] if losses is not None else None,
        times[-1] - t0,
        last,
    )


# -- binning ------------------------------------------------------------------------------------


def _bin_count(length: float, width: float) -> int:
    return max(1, round(length / width))


def _bin_mahimahi(times: list[int], period: int, width: float) -> list[float]:
    """Bit/s per bin of the repeated trace. In integer ms where possible: float remainders would
    move an opportunity across a bin edge."""
    n = _bin_count(period / 1e3, width)
    # mm-link delivers at k * period + t for every line t; t = period is then the start of the
    # next period, so one period's opportunities are the times modulo the period.
    shifted = sorted(t % period for t in times)
    width_ms = round(width * 1e3, 6)

    def before(x_ms: float) -> int:  # opportunities of the repeated trace in [0, x)
        whole, rest = divmod(x_ms, period)
        return int(whole) * len(shifted) + bisect.bisect_left(shifted, round(rest, 6))

    edges = [before(round(i * width_ms, 6)) for i in range(n + 1)]
    return [(edges[i + 1] - edges[i]) * OPPORTUNITY_BITS / width for i in range(n)]


def _integral(steps: _Steps, values: list[float]) -> Callable[[float], float]:
    """x -> the integral over [0, x) of the repeated piecewise-constant ``values`` (prefix sums
    and a bisection: a long csv trace is cheap to bin)."""
    ends = [*steps.times[1:], steps.length]
    prefix = [0.0]
    for t, end, v in zip(steps.times, ends, values, strict=True):
        prefix.append(prefix[-1] + v * (end - t))

    def at(x: float) -> float:
        whole, rest = divmod(x, steps.length)
        i = bisect.bisect_right(steps.times, rest) - 1  # the row holding `rest`
        return whole * prefix[-1] + prefix[i] + values[i] * (rest - steps.times[i])

    return at


def _bin_steps(steps: _Steps, values: list[float], width: float) -> list[float]:
    n = _bin_count(steps.length, width)
    integral = _integral(steps, values)
    edges = [integral(i * width) for i in range(n + 1)]
    return [(edges[i + 1] - edges[i]) / width for i in range(n)]


def read_trace(
    path: Path,
    fmt: str,
    width: float,
    scale: float = 1.0,
    *,
    source: str = "<scenario>",
    field: str = "trace.file",
) -> TraceBins:
    """Read ``path`` in format ``fmt`` and cut it into bins of ``width`` s, rates times ``scale``.
    Raises ScenarioError "SOURCE: FIELD: PATH line N: problem"."""
    where = f"{source}: {field}: {path}"
    if fmt not in FORMATS:
        raise ScenarioError(f"{where}: format {fmt!r} is not allowed; allowed: {FORMATS}")
    try:
        size = path.stat().st_size
        if size > MAX_TRACE_BYTES:
            raise ScenarioError(f"{where}: {size} bytes is too big for a trace file")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(
            f"{where}: no such trace file (a trace's file is relative to the scenario's directory)"
        ) from None
    except OSError as exc:
        raise ScenarioError(f"{where}: cannot read the trace file: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        line = text_line_of_byte(path, exc.start)
        raise ScenarioError(f"{where} line {line}: not UTF-8 text (byte {exc.start})") from None
    lines = text.splitlines()
    try:
        if fmt == "mahimahi":
            times, length_ms = _read_mahimahi(lines)
            rates = _bin_mahimahi(times, length_ms, width)
            length = length_ms / 1e3
            delays = losses = None
            last = (rates[-1], None, None)
        else:
            steps = _read_pensieve(lines) if fmt == "pensieve" else _read_csv(lines)
            length = steps.length
            rates = _bin_steps(steps, steps.rates, width)
            delays = _bin_steps(steps, steps.delays, width) if steps.delays is not None else None
            losses = _bin_steps(steps, steps.losses, width) if steps.losses is not None else None
            last = steps.last
    except TraceFileError as exc:
        at = f" line {exc.line}" if exc.line else ""
        raise ScenarioError(f"{where}{at}: {exc.message} (format: {fmt})") from None
    bins = tuple(
        TraceBin(
            round(i * width, 9),
            round(r * scale),
            # means of piecewise-constant values carry float noise (0.020000000000000018 s):
            # round to what netem and the delay line can express anyway (ns, 1e-9)
            round(delays[i], 9) if delays is not None else None,
            round(losses[i], 9) if losses is not None else None,
        )
        for i, r in enumerate(rates)
    )
    if not any(b.rate for b in bins):
        raise ScenarioError(f"{where}: every bin has rate 0 (the link would never deliver)")
    last_bin = TraceBin(length, round(last[0] * scale), last[1], last[2])
    return TraceBins(path, fmt, width, bins, last_bin, length)


def text_line_of_byte(path: Path, offset: int) -> int:
    """The 1-based line holding byte ``offset`` of ``path`` (for a decoding error)."""
    try:
        return path.read_bytes()[:offset].count(b"\n") + 1
    except OSError:
        return 0
