"""Trace readers (testbed.config.linktrace): the three formats binned, checked against small
synthetic files written here and against the real traces in /work/shared/traces (their README's
numbers; skipped where absent), and the errors naming file, field, trace file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.config.linktrace import TraceBins, read_trace
from testbed.core.errors import ScenarioError

SHARED = Path("/work/shared/traces")


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def rates(bins: TraceBins) -> list[float]:
    return [b.rate for b in bins.bins]


def error(path: Path, fmt: str, width: float = 0.1) -> str:
    with pytest.raises(ScenarioError) as info:
        read_trace(path, fmt, width, source="s.yaml", field="wan[0].trace.file")
    assert info.value.exit_code == 2
    return str(info.value)


# -- mahimahi ------------------------------------------------------------------------------------


def test_mahimahi_single_line_is_12_mbit(tmp_path: Path) -> None:
    """mm-link's own example: a file holding just `1` is 12 Mbit/s (it wraps every ms)."""
    bins = read_trace(write(tmp_path, "one", "1\n"), "mahimahi", 0.1)
    assert rates(bins) == [12_000_000]
    assert bins.period == pytest.approx(0.1)


def test_mahimahi_counts_opportunities_per_bin_and_scales(tmp_path: Path) -> None:
    # 0..100 ms: 10 opportunities, and the last line's (200 ms = 0 ms of the next period, as
    # mm-link wraps); 100..200 ms: none
    lines = [str(t) for t in range(0, 100, 10)] + ["200"]
    bins = read_trace(write(tmp_path, "t", "\n".join(lines) + "\n"), "mahimahi", 0.1, scale=2)
    assert rates(bins) == [2 * 11 * 12000 / 0.1, 0]
    assert [b.t for b in bins.bins] == [0, pytest.approx(0.1)]
    assert all(b.delay is None and b.loss is None for b in bins.bins)


def test_mahimahi_bins_follow_the_repeated_trace_when_length_is_not_a_multiple(
    tmp_path: Path,
) -> None:
    # one opportunity per ms for 150 ms: 12 Mbit/s whatever the bins (1 bin of 200 ms here)
    text = "\n".join(str(t) for t in range(1, 151)) + "\n"
    bins = read_trace(write(tmp_path, "t", text), "mahimahi", 0.2)
    assert rates(bins) == [12_000_000]


@pytest.mark.parametrize(
    "text, line, says",
    [
        ("1\n2\nx\n", 3, "'x' is not a timestamp"),
        ("5\n3\n", 2, "timestamp 3 ms is before the line above it (5 ms)"),
        ("1\n-2\n", 2, "'-2' is not a timestamp"),
    ],
)
def test_mahimahi_errors_name_the_line(tmp_path: Path, text: str, line: int, says: str) -> None:
    path = write(tmp_path, "bad.up", text)
    assert error(path, "mahimahi") == (
        f"s.yaml: wan[0].trace.file: {path} line {line}: {says}; a mahimahi trace has one "
        "integer (ms) a line (format: mahimahi)"
        if "not a timestamp" in says
        else f"s.yaml: wan[0].trace.file: {path} line {line}: {says} (format: mahimahi)"
    )


def test_missing_and_empty_files(tmp_path: Path) -> None:
    missing = tmp_path / "nope.up"
    assert error(missing, "mahimahi") == (
        f"s.yaml: wan[0].trace.file: {missing}: no such trace file (a trace's file is relative "
        "to the scenario's directory)"
    )
    empty = write(tmp_path, "empty.up", "\n")
    assert error(empty, "mahimahi").endswith(
        "no timestamps (an empty mahimahi trace) (format: mahimahi)"
    )
    zeros = write(tmp_path, "zeros.csv", "t,rate\n0s,0\n1s,0\n")
    assert error(zeros, "csv").endswith("every bin has rate 0 (the link would never deliver)")


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "bin.up"
    path.write_bytes(b"1\n2\n\xff\n")
    assert error(path, "mahimahi") == (
        f"s.yaml: wan[0].trace.file: {path} line 3: not UTF-8 text (byte 4)"
    )


# -- pensieve and csv ----------------------------------------------------------------------------


def test_pensieve_is_piecewise_constant_and_last_row_is_the_length(tmp_path: Path) -> None:
    path = write(tmp_path, "p.tsv", "0.0\t1.0\n0.15\t3.0\n0.3\t9.0\n")
    bins = read_trace(path, "pensieve", 0.1)
    # 0-0.1: 1; 0.1-0.2: half 1, half 3; 0.2-0.3: 3 Mbit/s
    assert rates(bins) == [1_000_000, 2_000_000, 3_000_000]
    assert bins.length == pytest.approx(0.3)
    assert bins.last.rate == 9_000_000  # held after the end when loop: false


def test_pensieve_origin_is_the_first_row(tmp_path: Path) -> None:
    bins = read_trace(write(tmp_path, "p", "5 2\n5.2 4\n"), "pensieve", 0.1)
    assert rates(bins) == [2_000_000, 2_000_000]


def test_csv_units_or_si_numbers(tmp_path: Path) -> None:
    text = "t,rate,delay,loss\n0s,10mbit,40ms,0.5%\n0.1,20e6,0.06,0.01\n200ms,1mbit,10ms,0%\n"
    bins = read_trace(write(tmp_path, "c.csv", text), "csv", 0.1)
    assert [(b.rate, b.delay, b.loss) for b in bins.bins] == [
        (10_000_000, pytest.approx(0.04), pytest.approx(0.005)),
        (20_000_000, pytest.approx(0.06), pytest.approx(0.01)),
    ]
    assert (bins.last.rate, bins.last.delay, bins.last.loss) == (1_000_000, 0.01, 0)


def test_csv_rate_only(tmp_path: Path) -> None:
    bins = read_trace(write(tmp_path, "c.csv", "T,Rate\n0s,5mbit\n1s,5mbit\n"), "csv", 0.5)
    assert [(b.rate, b.delay, b.loss) for b in bins.bins] == [(5_000_000, None, None)] * 2


@pytest.mark.parametrize(
    "fmt, text, message",
    [
        (
            "csv",
            "t,speed\n0s,1mbit\n",
            "line 1: header 't,speed': the columns are t and rate, optionally delay and loss "
            "(each once); e.g. t,rate,delay,loss",
        ),
        ("csv", "t,rate\n0s,1mbit\n1s\n", "line 3: 1 cells; the header has 2 (['t', 'rate'])"),
        (
            "csv",
            "t,rate\n0s,fast\n",
            "line 2: rate 'fast' is not a rate; examples: 10mbit, 5e6 (bit/s)",
        ),
        ("csv", "t,rate,loss\n0s,1mbit,150%\n1s,1mbit,0%\n", "line 2: loss '150%' is outside"),
        ("csv", "t,rate\n1s,1mbit\n1s,2mbit\n", "line 3: time 1 s is not after the row above"),
        ("csv", "t,rate\n0s,1mbit\n", "1 row(s); a trace needs at least two"),
        ("pensieve", "0 1\n1 2 3\n", "line 2: '1 2 3': a pensieve row is `time_s"),
        ("pensieve", "0 1\n1 x\n", "line 2: '1 x': time (s) and rate (Mbit/s) must be numbers"),
        ("pensieve", "0 1\n1 -2\n", "line 2: rate -2e+06 bit/s is negative"),
    ],
)
def test_csv_and_pensieve_errors(tmp_path: Path, fmt: str, text: str, message: str) -> None:
    path = write(tmp_path, "bad", text)
    got = error(path, fmt)
    assert got.startswith(f"s.yaml: wan[0].trace.file: {path}")
    assert message in got
    assert got.endswith(f"(format: {fmt})")


# -- the real traces (README numbers) ------------------------------------------------------------


def shared(name: str) -> Path:
    path = SHARED / name
    if not path.exists():
        pytest.skip(f"{path} is absent")
    return path


def test_att_lte_uplink_matches_its_readme() -> None:
    """ATT-LTE-driving-2016.up: 120 s, mean 1.91 Mbit/s, per-second up to 12.8 Mbit/s (lowest
    non-empty second 0.01), outages of 2.2 s at 3.0 s and 4.1 s at 20.8 s."""
    path = shared("ATT-LTE-driving-2016.up")
    fine = read_trace(path, "mahimahi", 0.1)
    assert len(fine.bins) == 1200
    assert fine.mean_rate() == pytest.approx(1.91e6, rel=0.005)
    per_second = rates(read_trace(path, "mahimahi", 1.0))
    assert max(per_second) == pytest.approx(12.8e6, rel=0.01)
    assert min(r for r in per_second if r) == pytest.approx(0.012e6, rel=0.01)
    outages = dark_runs(fine)
    assert any(abs(t - 3.0) <= 0.15 and 2.0 <= d <= 2.25 for t, d in outages), outages
    assert any(abs(t - 20.8) <= 0.15 and 3.85 <= d <= 4.15 for t, d in outages), outages


def dark_runs(bins: TraceBins) -> list[tuple[float, float]]:
    """(start, length) of each run of zero-rate bins."""
    runs: list[tuple[float, float]] = []
    start = None
    for b in (*bins.bins, None):
        if b is not None and b.rate == 0:
            start = b.t if start is None else start
        elif start is not None:
            end = b.t if b is not None else bins.period
            runs.append((start, end - start))
            start = None
    return runs


def test_att_lte_downlink_first_60s() -> None:
    per_second = rates(read_trace(shared("ATT-LTE-driving-2016-first60s.down"), "mahimahi", 1.0))
    assert len(per_second) == 60
    assert min(per_second) == pytest.approx(0.3e6, rel=0.05)
    assert max(per_second) == pytest.approx(27.6e6, rel=0.01)


def test_norway_pensieve_trace() -> None:
    bins = read_trace(shared("pensieve-norway_train_2.tsv"), "pensieve", 0.1)
    assert bins.length == pytest.approx(128.23, abs=0.01)
    assert min(rates(bins)) == pytest.approx(0.28e6, rel=0.01)
    assert max(rates(bins)) == pytest.approx(1.37e6, rel=0.01)
