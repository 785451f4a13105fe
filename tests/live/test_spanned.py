"""Live tests of one topology over two machines, on one kernel: two namespaces stand
for the machines, joined by a veth (the underlay, MTU 1500, so MTU bugs show), and a real Ray
cluster of a head and two nodes, one per "machine" (labels: its name, underlay address and
namespace: testbed.testing.machines). The driver places an agent on each (STRICT_SPREAD);
east is on one, west on the other, the WAN wire crosses over a VXLAN cable."""

from __future__ import annotations

import json
import subprocess
import time

import pandas as pd
import pytest
from helpers import kill_owner, owner_script, testbed_clean, unique_name

from testbed.config.loading import parse_scenario
from testbed.core.vocab import SELFCHECK_TOLERANCE as TOLERANCE
from testbed.live.selfcheck import check_links
from testbed.net import registry

pytestmark = pytest.mark.live
ray = pytest.importorskip("ray", reason="the [ray] extra is not installed")

WAN = {"between": ["east", "west"], "rate": "100mbit", "delay": "10ms"}


def spanned_scenario(name: str = "span", **more) -> dict:
    return {
        "name": name,
        "clusters": {"east": {"hosts": 2}, "west": {"hosts": 2}},
        "wan": [WAN],
        "placement": {"machines": {"east": "node-a", "west": "node-b"}},
        **more,
    }


def links_in(ns: str) -> list[str]:
    out = subprocess.run(["ip", "-n", ns, "-o", "link"], capture_output=True, text=True).stdout
    return sorted(line.split(":")[1].strip().split("@")[0] for line in out.splitlines())


def assert_clean(prefix: str, spaces: list[str]) -> None:
    from testbed.live.ray_common import NODE_DIR

    assert registry.namespaces_with_prefix(prefix) == []
    assert not [r for r in registry.records() if r.prefix == prefix]
    assert not list(registry.STATE_DIR.glob(f"{prefix}*"))
    assert not list(NODE_DIR.glob(f"{prefix}-*"))
    # the cables' devices went with the namespaces they were moved into
    assert [links_in(ns) for ns in spaces] == [["lo", "u0"], ["lo", "u1"]]


@pytest.mark.timing
def test_a_topology_over_two_machines_reaches_checks_and_reduces_like_one(
    machines, make_testbed, tmp_path
):
    from testbed.experiment.ranks import RankLaunch, RankSpec
    from testbed.experiment.workloads import KINDS
    from testbed.live.spanned import SpannedNetwork
    from testbed.plan.ranks import place_ranks

    address, spaces = machines
    sc = parse_scenario(spanned_scenario(), "test")
    tb = SpannedNetwork(sc, name=unique_name("span"), address=address)
    tb.up()
    try:
        prefix = tb.plan.prefix
        assert tb.machine_of("east-h1") == "node-a" and tb.machine_of("west-h0") == "node-b"
        # the stand-ins share one kernel: 0.026-0.043 ms (RESULTS.md "Topology across
        # machines"); 10 ms only says "measured and small", a sanity bound
        assert 0 < tb.underlay_rtt[("node-a", "node-b")] < 0.01
        # every host reaches every other, with full-size frames of the 1450-byte MTU
        hosts = [h for h in tb.hosts if "-h" in h]
        for src in hosts:
            for dst in hosts:
                if src != dst:
                    r = tb.run(src, ["ping", "-c1", "-W2", "-M", "do", "-s", "1422", dst])
                    assert r.returncode == 0, (src, dst, r.stdout + r.stderr)
        assert "mtu 1450" in tb.run("west-h0", ["ip", "link", "show", "eth0"]).stdout
        # the self-check across machines matches the same scenario on one machine
        spanned = {r.direction: r for r in check_links(tb, duration=1.0)}
        alone = make_testbed({k: v for k, v in spanned_scenario().items() if k != "placement"})
        local = {r.direction: r for r in check_links(alone, duration=1.0)}
        alone.down()
        for name, r in spanned.items():
            assert r.ok, (name, r.problem)
            one = local[name]
            # the goal's SELFCHECK_TOLERANCE of one machine's reading; RESULTS.md "Topology
            # across machines": RTT within 0.02-0.08 ms (<= 0.6%), goodput 0.999-1.000 both ways
            assert abs(r.rtt_median_s - one.rtt_median_s) <= TOLERANCE * one.rtt_median_s, (r, one)
            assert abs(r.goodput_bps - one.goodput_bps) <= TOLERANCE * one.goodput_bps, (r, one)
            assert r.compensation_s is not None
        # a real all-reduce across the machines, checked by every rank
        ranks = place_ranks(tb.plan, 1, "interleaved")
        master = tb.plan.host(ranks[0].host)
        keys = {"collectives": ["all_reduce"], "algorithms": ["flat"], "sizes": [1 << 20],
                "dtype": "float32", "warmup": 1, "iterations": 3}  # fmt: skip
        spec = RankSpec.build(tb, master.address, ranks, tmp_path, 60.0, **keys)
        launch = RankLaunch(tb, ranks, spec, tmp_path, KINDS["collectives"].rank_module)
        assert launch.run(120) == []
        assert launch.codes == {0: 0, 1: 0, 2: 0, 3: 0}, [launch.log(r) for r in range(4)]
        for r in range(4):
            rows = [json.loads(line) for line in (tmp_path / f"rank-{r}.jsonl").open()]
            assert len(rows) == 3 and all(row["correct"] for row in rows), rows
            assert "joined" in launch.log(r)
        assert {tb.machine_of(s.host) for s in ranks} == {"node-a", "node-b"}
    finally:
        tb.down()
    assert_clean(prefix, spaces)


DRIVER = """
import time, ray
from testbed.config.loading import parse_scenario
from testbed.live.spanned import SpannedNetwork
tb = SpannedNetwork(parse_scenario({scenario!r}, "test"), name={name!r}, address={address!r})
tb.up()
print("READY", tb.plan.prefix, flush=True)
time.sleep(600)
"""


def test_a_killed_driver_leaves_what_testbed_clean_removes_on_each_machine(machines):
    address, spaces = machines
    code = DRIVER.format(scenario=spanned_scenario(), name=unique_name("spandead"), address=address)
    with owner_script(code, 120) as (proc, (prefix,)):
        parts = [r for r in registry.records() if r.prefix == prefix]
        # each part names the namespace standing for its machine (the fixture tells pairs by it)
        assert sorted((r.machine, r.machine_netns) for r in parts) == [
            ("node-a", spaces[0]),
            ("node-b", spaces[1]),
        ]
        kill_owner(proc)
        # Ray ends the dead driver's agents: their parts have no live owner any more
        deadline = time.monotonic() + 60
        while any(r.live() for r in registry.records() if r.prefix == prefix):
            assert time.monotonic() < deadline, "the agents outlived their driver"
            time.sleep(0.5)
        assert registry.namespaces_with_prefix(prefix)  # left behind until cleaned
        testbed_clean()
        assert_clean(prefix, spaces)


STAND_INS_OWNER = """
import time
from testbed.testing.machines import StandInMachines
pair = StandInMachines(["node-x", "node-y"]).start()
print("READY", pair.prefix, flush=True)
time.sleep(600)
"""


def test_stand_in_machines_whose_owner_was_killed_are_removed_by_testbed_clean(machines):
    # (machines: this pair runs beside the session's, as a killed test session's would)
    with owner_script(STAND_INS_OWNER, 120) as (proc, (prefix,)):
        (rec,) = [r for r in registry.records() if r.prefix == prefix]
        assert (
            len(rec.namespaces) == 2 and registry.namespaces_with_prefix(prefix) == rec.namespaces
        )
        kinds = {what for _, _, what in rec.processes}
        assert {"ray raylet", "ray gcs_server"} <= kinds, rec.processes
        kill_owner(proc)
    testbed_clean()
    assert registry.namespaces_with_prefix(prefix) == []
    assert not [r for r in registry.records() if r.prefix == prefix]
    alive = [
        (pid, what) for pid, start, what in rec.processes if registry.process_alive(pid, start)
    ]
    assert alive == [], alive


def test_up_without_agents_says_how_to_run_a_placement(make_testbed):
    from testbed.core.errors import UnsupportedError

    with pytest.raises(UnsupportedError, match=r"--ray ADDRESS"):
        make_testbed(spanned_scenario())


def test_a_machine_without_a_node_is_named(machines):
    from testbed.core.errors import ScenarioError
    from testbed.live.spanned import SpannedNetwork

    address, _ = machines
    doc = spanned_scenario()
    doc["placement"]["machines"]["west"] = "node-z"
    tb = SpannedNetwork(parse_scenario(doc, "test"), name=unique_name(), address=address)
    with pytest.raises(ScenarioError, match=r"no Ray node with label testbed-machine=node-z"):
        tb.up()


def test_testbed_run_of_a_placed_scenario_spans_the_machines(machines, tmp_path):
    """Through the runner (what `testbed run FILE --ray ADDRESS` does): the self-check's rows,
    the ranks' results and the expectation, from a topology over both machines."""
    from testbed.config.sweep import load_runs
    from testbed.experiment.sweep import Experiment

    address, spaces = machines
    source = "scenarios/span-two-machines.yaml"
    exp = Experiment(load_runs(source, []), source, tmp_path / "out", resume=False)
    exp.ray_address = address
    assert exp.run(selfcheck_seconds=0.5), exp.manifest["runs"]
    (run,) = exp.manifest["runs"].values()
    assert run["status"] == "ok" and run["backend"] == "userspace", run
    # no one-way delay across machines: the compensation comes from round trips
    assert [c["basis"] for c in run["rtt_compensation"]] == ["round-trip", "round-trip"]
    assert sorted(run["machines"]) == ["node-a", "node-b"] and run["machines"]["node-a"]["kernel"]
    assert sorted(run["underlay_rtt_s"]) == ["node-a->node-b", "node-b->node-a"]
    assert run["interface_mtu"] == 1450  # the stand-in underlay carries 1500-byte frames
    links = pd.read_parquet(exp.results.path / "links.parquet")
    assert links["ok"].all(), links[["direction", "problem"]]
    rows = pd.read_parquet(exp.results.path / "collectives.parquet")
    assert rows["correct"].all() and set(rows["algorithm"]) == {"flat", "hierarchical"}
    assert [c.status for c in exp.check_expectations()] == ["passed"]
    assert not [r for r in registry.records() if r.prefix == run["prefix"]]
    assert [links_in(ns) for ns in spaces] == [["lo", "u0"], ["lo", "u1"]]
