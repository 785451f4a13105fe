"""Live composed runs on the Mininet engine, one machine, on a link of one path and of two:
one scenario with many features at once (tests/composed.py): a command workload probing the
WAN, bulk and DCQCN cross-traffic, a schedule step, every fault kind (blackhole, link down,
flap, burst loss, partition, gateway crash, reset; on two paths those of a link on path 1),
tcp_info / queues / pcap tracing, static routing (two paths: unequal weights, an l4 hash);
each feature's evidence in the results."""

from __future__ import annotations

import pytest
from composed import check_faults_run, faults_scenario
from helpers import skip_without_mininet

import analysis
from testbed.config.sweep import expand
from testbed.experiment.sweep import Experiment

pytestmark = pytest.mark.live


def run_faults(tmp_path, paths: bool) -> None:
    skip_without_mininet()
    routing = {"mode": "static", "ecmp": {"hash": "l4"}}
    data = faults_scenario(tmp_path, "mininet", paths=paths, routing=routing)
    source = str(tmp_path / "scenario.yaml")
    exp = Experiment(expand(data, source), source, tmp_path / "out", resume=False)
    assert exp.run(selfcheck_seconds=0.5), exp.manifest["runs"]["p000-r0"]["reason"]
    run = exp.manifest["runs"]["p000-r0"]
    assert run["engine"] == "mininet"
    check_faults_run(analysis.load(exp.results.path), paths=paths)


# measured 24-26 s alone on 2 cores, 50 s beside another run
@pytest.mark.timeout(240)
@pytest.mark.timing
def test_every_fault_traffic_and_trace_on_the_mininet_engine(root, tmp_path):
    run_faults(tmp_path, paths=False)


# measured 50 s on 2 cores beside another run
@pytest.mark.timeout(240)
@pytest.mark.timing
def test_every_fault_traffic_and_trace_on_one_path_of_two_on_the_mininet_engine(root, tmp_path):
    run_faults(tmp_path, paths=True)
