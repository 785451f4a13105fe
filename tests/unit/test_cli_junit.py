"""testbed run --junit: the JUnit XML writer (one case per expectation per run, failures with
the measured value and the bound) parses as XML and counts what it holds."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from testbed.cli.junit import junit_xml, write_junit
from testbed.config.expect import Check


def _checks() -> list[Check]:
    return [
        Check(0, "time_p50 < 1s", "passed", "r000 all_reduce/ring/1024 B", 0.02, 1.0),
        Check(0, "time_p50 < 1s", "passed", "r001 all_reduce/ring/1024 B", 0.03, 1.0),
        Check(1, "busbw > 1e9 <&>", "failed", "r000 all_reduce/ring/1024 B", 5e6, 1e9),
        Check(1, "busbw > 1e9 <&>", "passed", "r001 all_reduce/ring/1024 B", 2e9, 1e9),
        Check(2, "x == 1", "failed", detail="no result matched; check where/when"),
    ]


def test_one_case_per_expectation_per_run_failures_name_measured_and_bound(tmp_path) -> None:
    path = write_junit(tmp_path / "sub" / "junit.xml", "demo", _checks(), {"r000": 12.5})
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("5", "2", "0")
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert set(suites) == {"demo.r000", "demo.r001", "demo.(no run)"}
    r000 = suites["demo.r000"]
    assert (r000.get("tests"), r000.get("failures"), r000.get("time")) == ("2", "1", "12.500")
    cases = {c.get("name"): c for c in r000.iter("testcase")}
    assert set(cases) == {"expect[0] time_p50 < 1s", "expect[1] busbw > 1e9 <&>"}
    assert cases["expect[0] time_p50 < 1s"].find("failure") is None
    failure = cases["expect[1] busbw > 1e9 <&>"].find("failure")
    assert failure is not None
    assert "measured 5e+06, bound 1e+09" in (failure.get("message") or "")
    assert "r000 all_reduce/ring/1024 B" in (failure.text or "")
    assert suites["demo.r001"].get("failures") == "0"
    assert suites["demo.(no run)"].find("testcase/failure") is not None


def test_unchecked_expectation_is_skipped() -> None:
    xml = junit_xml("s", [Check(0, "a < 1", "unchecked", "r000 x", detail="no twin row")])
    case = ET.fromstring(xml).find("testsuite/testcase")
    assert case is not None and case.find("skipped") is not None
    assert ET.fromstring(xml).get("skipped") == "1"
