"""Live composed run on a link of two paths, native engine, one machine: one scenario with
many features at once (tests/composed.py): a command workload probing the WAN, bulk and DCQCN
cross-traffic, a schedule step on path 1, every fault kind (path 1's blackhole, link down,
flap, burst loss and reset; a partition; a gateway crash), tcp_info / queues / pcap tracing,
unequal path weights spread by an l4 hash; each feature's evidence in the results."""

from __future__ import annotations

import pytest
from composed import (
    HOLD_ONE_MACHINE,
    check_faults_run,
    check_workloads_run,
    faults_scenario,
    workloads_scenario,
)

import analysis
from testbed.config.sweep import expand
from testbed.experiment.sweep import Experiment

pytestmark = pytest.mark.live


# measured 30 s on 2 cores at a load average of 3, 36-50 s beside another run (14.5 s of
# probing); 52 s at 23 with 12.9 s of probing (faults of 0.6 s)
@pytest.mark.timeout(240)
@pytest.mark.timing
def test_every_fault_traffic_and_trace_on_one_path_of_two(root, tmp_path):
    routing = {"ecmp": {"hash": "l4"}}
    data = faults_scenario(tmp_path, "native", True, routing, hold=HOLD_ONE_MACHINE)
    source = str(tmp_path / "scenario.yaml")
    exp = Experiment(expand(data, source), source, tmp_path / "out", resume=False)
    assert exp.run(selfcheck_seconds=0.5), exp.manifest["runs"]["p000-r0"]["reason"]
    check_faults_run(analysis.load(exp.results.path), paths=True)


# measured 130 s on 2 cores at a load average of 14, 376 s at 37 (three runs: two trainings'
# ranks start)
@pytest.mark.timeout(480)
def test_every_workload_beside_traffic_with_a_trace_and_a_preset_on_two_paths(root, tmp_path):
    kinds = ("real", "emulated", "dcqcn")
    data = workloads_scenario(tmp_path, "native", paths=True, kinds=kinds)
    source = str(tmp_path / "scenario.yaml")
    exp = Experiment(expand(data, source), source, tmp_path / "out", resume=False)
    assert exp.run(selfcheck_seconds=0.5), exp.manifest["runs"]
    check_workloads_run(analysis.load(exp.results.path), kinds, paths=True)
