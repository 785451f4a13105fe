"""JUnit XML of a run's expectations (``testbed run --junit FILE``), for CI systems that show
test results: one test suite per run, one test case per expectation in that run. A case fails
when any of its rows failed; its failure message gives each failed row's measured value and the
bound it was held to. An expectation that matched no row is one case of its own (suite
``(no run)``): failed when nothing matched, skipped when runs were skipped on this kernel.

Built with :mod:`xml.etree.ElementTree` so the text is escaped as XML requires.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

NO_RUN = "(no run)"


def _run_of(check: Any) -> str:
    return check.row.split(" ", 1)[0] if check.row else NO_RUN


def _row_line(check: Any) -> str:
    nums = ""
    if check.lhs is not None and check.rhs is not None:
        nums = f": measured {check.lhs:.6g}, bound {check.rhs:.6g}"
    detail = f" ({check.detail})" if check.detail else ""
    return f"{check.row or 'no row'}{nums}{detail}"


def junit_xml(scenario: str, checks: list[Any], durations: dict[str, float] | None = None) -> str:
    """The JUnit XML document of ``checks`` (testbed.config.expect.Check) of scenario
    ``scenario``; ``durations``: seconds per run id, the suites' ``time``."""
    durations = durations or {}
    runs: dict[str, dict[int, list[Any]]] = {}
    for c in checks:
        runs.setdefault(_run_of(c), {}).setdefault(c.expectation, []).append(c)
    root = ET.Element("testsuites", name=scenario)
    totals = {"tests": 0, "failures": 0, "skipped": 0}
    for run_id, by_exp in runs.items():
        suite = ET.SubElement(root, "testsuite", name=f"{scenario}.{run_id}")
        counts = {"tests": 0, "failures": 0, "skipped": 0}
        for index, rows in by_exp.items():
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"{scenario}.{run_id}",
                name=f"expect[{index}] {rows[0].description}",
                time="0",
            )
            counts["tests"] += 1
            failed = [c for c in rows if c.status == "failed"]
            if failed:
                counts["failures"] += 1
                fail = ET.SubElement(
                    case,
                    "failure",
                    message=f"{len(failed)} of {len(rows)} row(s) failed: {_row_line(failed[0])}",
                    type="ExpectationFailed",
                )
                fail.text = "\n".join(_row_line(c) for c in failed)
            elif all(c.status == "unchecked" for c in rows):
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message="; ".join(_row_line(c) for c in rows))
            out = ET.SubElement(case, "system-out")
            out.text = "\n".join(f"{c.status}: {_row_line(c)}" for c in rows)
        for k, v in counts.items():
            suite.set(k, str(v))
            totals[k] += v
        suite.set("errors", "0")
        suite.set("time", f"{durations.get(run_id, 0.0):.3f}")
    for k, v in totals.items():
        root.set(k, str(v))
    root.set("errors", "0")
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def write_junit(
    path: str | Path, scenario: str, checks: list[Any], durations: dict[str, float] | None = None
) -> Path:
    """Write :func:`junit_xml` to ``path`` (its directory made); the path written."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(junit_xml(scenario, checks, durations))
    return p
