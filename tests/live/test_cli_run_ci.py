"""testbed run in a CI log: off a terminal it prints one plain line per phase (build,
self-check, ranks, iterations, teardown) as the run goes, and --junit writes the expectations
as JUnit XML (one passing, one failing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from helpers import RUN_TAG, scenario

pytestmark = pytest.mark.live
CLI = [sys.executable, "-m", "testbed.cli"]


# a 2x2 run of 30 iterations at 20 ms one way: about 30 s on 2 cores, 4x for a busy host
@pytest.mark.timeout(240)
def test_cli_run_prints_phases_off_a_terminal_and_writes_junit(root, tmp_path):
    data = scenario(wan=[{"between": ["east", "west"], "rate": "1gbit", "delay": "20ms"}])
    data["name"] = f"{RUN_TAG}-h7ci"[:32]
    data["workload"] = {
        "sizes": ["64KiB"],
        "algorithms": ["flat"],
        "warmup": 1,
        "iterations": 30,
        "timeout": "60s",
    }
    data["expect"] = [
        {"metric": "time_p50", "relation": "<", "value": 60},
        {"metric": "time_p50", "relation": "<", "value": 1e-9},
    ]
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(data))
    junit = tmp_path / "ci" / "junit.xml"
    r = subprocess.run(
        [*CLI, "run", str(path), "--out", str(tmp_path / "out"), "--selfcheck", "0.3",
         "--junit", str(junit)],
        capture_output=True, text=True, env=dict(os.environ), timeout=230,
    )  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr  # the second expectation fails
    phases = [
        line.split(": ", 1)[1].split(" (", 1)[0]
        for line in r.stdout.splitlines()
        if line.startswith("p000-r0 ") and ": " in line and " (" in line
    ]
    kinds = [p.split(" ")[0] for p in phases]
    assert kinds[:2] == ["build", "self-check"], r.stdout
    assert "teardown" in kinds, r.stdout
    assert any(p.startswith("iteration ") and p.endswith("/30") for p in phases), r.stdout
    order = [k for k in dict.fromkeys(kinds)]
    assert order.index("self-check") < order.index("teardown"), r.stdout
    assert "ETA" in r.stdout
    root_el = ET.parse(junit).getroot()
    assert (root_el.get("tests"), root_el.get("failures")) == ("2", "1")
    (suite,) = root_el.iter("testsuite")
    assert float(suite.get("time") or 0) > 0
    failure = root_el.find("testsuite/testcase/failure")
    assert failure is not None and "bound 1e-09" in (failure.get("message") or "")
    assert f"junit: {junit}" in r.stdout
