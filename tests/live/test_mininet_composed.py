"""Live composed runs on the Mininet engine, one machine, on a link of one path and of two,
each one scenario with many features at once (tests/composed.py), each feature's evidence
asserted in the results: a command workload probing the WAN beside bulk and DCQCN
cross-traffic, a schedule step, every fault kind (on two paths those of a link on path 1) and
tcp_info / queues / pcap tracing, static routing (two paths: unequal weights, an l4 hash); a
sweep of every workload (collectives on two paths, training of a real and of an emulated model,
DCQCN flows) beside bulk cross-traffic with a trace and a preset, then the bulk flow alone; BGP
with BFD on a link of one path."""

from __future__ import annotations

import json

import pytest
from composed import (
    HOLD_ONE_MACHINE,
    bulk_alone,
    check_bulk_alone,
    check_faults_run,
    check_workloads_run,
    faults_scenario,
    workloads_scenario,
)
from helpers import scenario, skip_without_mininet

import analysis
from testbed.config.sweep import expand
from testbed.experiment.sweep import Experiment
from testbed.net import frr

pytestmark = pytest.mark.live


def run_faults(tmp_path, paths: bool) -> None:
    skip_without_mininet()
    routing = {"mode": "static", "ecmp": {"hash": "l4"}}
    data = faults_scenario(tmp_path, "mininet", paths, routing, hold=HOLD_ONE_MACHINE)
    source = str(tmp_path / "scenario.yaml")
    exp = Experiment(expand(data, source), source, tmp_path / "out", resume=False)
    assert exp.run(selfcheck_seconds=0.5), exp.manifest["runs"]["p000-r0"]["reason"]
    run = exp.manifest["runs"]["p000-r0"]
    assert run["engine"] == "mininet"
    check_faults_run(analysis.load(exp.results.path), paths=paths)


# measured 24-30 s on 2 cores, 50 s beside another run (14.5 s of probing); 37 s at a load
# average of 24 with 12.9 s of probing (faults of 0.6 s)
@pytest.mark.timeout(240)
@pytest.mark.timing
def test_every_fault_traffic_and_trace_on_the_mininet_engine(root, tmp_path):
    run_faults(tmp_path, paths=False)


# measured 38 s on 2 cores at a load average of 14, 50 s beside another run (14.5 s of
# probing); 48 s at 24 with 12.9 s of probing (faults of 0.6 s)
@pytest.mark.timeout(240)
@pytest.mark.timing
def test_every_fault_traffic_and_trace_on_one_path_of_two_on_the_mininet_engine(root, tmp_path):
    run_faults(tmp_path, paths=True)


def run_workloads(tmp_path, paths: bool, kinds: tuple[str, ...]) -> None:
    """The workloads' sweep, then the same scenario's bulk flow alone."""
    skip_without_mininet()
    data = workloads_scenario(tmp_path, "mininet", paths=paths, kinds=kinds)
    source = str(tmp_path / "scenario.yaml")
    exp = Experiment(expand(data, source), source, tmp_path / "out", resume=False)
    assert exp.run(selfcheck_seconds=0.5), exp.manifest["runs"]
    assert {r["engine"] for r in exp.manifest["runs"].values()} == {"mininet"}
    check_workloads_run(analysis.load(exp.results.path), kinds, paths=paths)
    alone = bulk_alone(data)
    exp = Experiment(expand(alone, source), source, tmp_path / "alone", resume=False)
    assert exp.run(selfcheck_seconds=0.5), exp.manifest["runs"]
    check_bulk_alone(analysis.load(exp.results.path), paths=paths)


# measured 67 s on 2 cores at a load average of 5 (four runs), 145-211 s at 15-37
@pytest.mark.timeout(600)
def test_every_workload_and_bulk_alone_with_a_trace_and_a_preset_on_the_mininet_engine(
    root, tmp_path
):
    run_workloads(tmp_path, paths=False, kinds=("real", "emulated", "dcqcn"))


# measured 92 s on 2 cores at a load average of 3 (five runs), 205-529 s at 15-37
@pytest.mark.timeout(600)
def test_every_workload_and_bulk_alone_with_a_trace_and_a_preset_on_two_paths_on_mininet(
    root, tmp_path
):
    run_workloads(tmp_path, paths=True, kinds=("collectives", "real", "emulated", "dcqcn"))


def test_bgp_with_bfd_on_a_link_of_one_path_on_the_mininet_engine(root, make_testbed):
    # FRR in the Mininet nodes' gateways on one path: six daemons, the BFD session up, each
    # gateway's route to the other cluster from BGP, and a ping across it
    skip_without_mininet()
    if why := frr.missing():
        pytest.skip(why)
    bgp = {"hold": "9s", "bfd": {"interval": "50ms", "multiplier": 3}}
    wan = [{"between": ["east", "west"], "rate": "100mbit", "delay": "5ms"}]
    tb = make_testbed(scenario(wan=wan, routing={"mode": "bgp", "bgp": bgp}, engine="mininet"))
    assert tb.record.engine == "mininet"
    daemons = [p for p, _, what in tb.record.processes if what.startswith("frr ")]
    assert len(daemons) == 6  # zebra, bfdd, bgpd in each gateway
    for gw in ("east-gw", "west-gw"):
        assert frr.kernel_routes(tb.namespace(gw)), gw  # a BGP route, one nexthop
    d = frr.gateway_dir(tb.record, "east-gw")
    peers = json.loads(frr.vtysh(tb.namespace("east-gw"), d, "show bfd peers json"))
    assert [p["status"] for p in peers] == ["up"]
    r = tb.run("east-h0", ["ping", "-c", "3", "-i", "0.2", "west-h1"])
    assert r.returncode == 0, r.stdout + r.stderr
