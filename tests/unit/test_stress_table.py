"""`make test-stress`'s pure parts (scripts/test_stress.py): each run's JUnit XML read into
outcomes, and the table over the runs."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("test_stress", ROOT / "scripts/test_stress.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


stress = load()

RUN = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.live.test_a" name="test_pass" time="1.0">
  <properties><property name="timing_attempts" value="1" /></properties></testcase>
<testcase classname="tests.live.test_a" name="test_rerun_pass" time="2.0">
  <properties><property name="timing_attempts" value="2" /></properties></testcase>
<testcase classname="tests.live.test_a" name="test_fail[10]" time="1.0">
  <failure message="assert 1.2 &lt;= 1.0">late</failure></testcase>
<testcase classname="tests.live.test_a" name="test_error" time="0.1">
  <error message="failed on setup">boom</error></testcase>
<testcase classname="tests.live.test_a" name="test_busy" time="2.0">
  <properties><property name="timing_attempts" value="2" /></properties>
  <skipped type="pytest.xfail"
    message="host saturated: busy mean 99%, p95 100%, saturated share 90%" />
</testcase>
<testcase classname="tests.live.test_a" name="test_other_xfail" time="0.1">
  <skipped type="pytest.xfail" message="known" /></testcase>
<testcase classname="tests.live.test_a" name="test_root" time="0.0">
  <skipped type="pytest.skip" message="needs root" /></testcase>
<testcase classname="tests.unit.test_b.TestGroup" name="test_m" time="0.0" />
</testsuite></testsuites>"""


def test_outcomes_of_one_run() -> None:
    assert stress.outcomes(RUN) == [
        ("tests/live/test_a.py::test_pass", "passed", False),
        ("tests/live/test_a.py::test_rerun_pass", "passed", True),
        ("tests/live/test_a.py::test_fail[10]", "failed", False),
        ("tests/live/test_a.py::test_error", "failed", False),
        ("tests/live/test_a.py::test_busy", "xfail_host", True),
        ("tests/live/test_a.py::test_other_xfail", "skipped", False),
        ("tests/live/test_a.py::test_root", "skipped", False),
        ("tests/unit/test_b.py::TestGroup::test_m", "passed", False),
    ]


def test_the_table_counts_each_test_over_the_runs_worst_first() -> None:
    a, b = "tests/live/t.py::test_a", "tests/live/t.py::test_b"
    runs = [
        [(a, "passed", False), (b, "failed", False)],
        [(a, "xfail_host", True), (b, "passed", True)],
        [(a, "passed", False), (b, "passed", False)],
    ]
    text, failed = stress.table(runs)
    assert failed
    head, first, second = text.split("\n")
    assert head.split()[:6] == ["test", "runs", "passed", "failed", "xfail(host", "saturated)"]
    assert first.split() == [b, "3", "2", "1", "0", "1", "0", "33%"]
    assert second.split() == [a, "3", "2", "0", "1", "1", "0", "0%"]


def test_no_failure_no_failed_flag() -> None:
    text, failed = stress.table([[("t.py::x", "xfail_host", True)]])
    assert not failed and text.split("\n")[1].split()[-1] == "0%"
