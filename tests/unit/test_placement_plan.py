"""Clusters on several machines, pure: the placement's validation, the VXLAN cables
of the wires that cross machines, the MTU decision, each machine's part of the plan, the round
trips split for the compensation, the Ray nodes of the machine names."""

from __future__ import annotations

import pytest

from testbed.config.loading import parse_scenario
from testbed.core.errors import PlanError, ScenarioError
from testbed.live.spanned import MACHINE_LABEL, UNDERLAY_LABEL, machine_nodes, split_round_trips
from testbed.plan.render import LinkUp, SetMtu, cable_batch, ip_ops
from testbed.plan.topology import build_plan


def placed(machines: dict, **more) -> dict:
    return {
        "name": "place",
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}, "north": {"hosts": 1}},
        "wan": [
            {"between": ["east", "west"], "paths": [{"rate": "1gbit"}, {"rate": "1gbit"}]},
            {"between": ["east", "north"], "rate": "1gbit"},
        ],
        "placement": {"machines": machines} | more,
    }


def test_wires_crossing_machines_become_cables_and_the_mtu_drops():
    plan = build_plan(
        parse_scenario(placed({"east": "node-a", "west": "node-b", "north": "node-a"})), "mctbx", 5
    )
    assert [(c.link, c.vni, c.wire_ns, c.wire_if, c.wire_machine, c.gw_ns, c.gw_if, c.gw_machine)
            for c in plan.cables] == [
        ("east-west/0", 1280, "mctbx-wan-east-west-p0", "to-west", "node-a", "mctbx-west-gw",
         "p0-east", "node-b"),
        ("east-west/1", 1281, "mctbx-wan-east-west-p1", "to-west", "node-a", "mctbx-west-gw",
         "p1-east", "node-b"),
    ]  # fmt: skip
    assert plan.mtu == 1450 and plan.machines["north"] == "node-a"
    assert plan.goodput_factor == 1398 / 1464  # the HTB ceiling's TCP share of 1450-byte frames
    jumbo = placed({"east": "a", "west": "b", "north": "c"}, underlay_mtu=9000)
    plan = build_plan(parse_scenario(jumbo), "mctbx", 5)
    assert len(plan.cables) == 3 and plan.mtu is None  # the underlay carries 1500 + 50
    one = build_plan(parse_scenario(placed({"east": "a", "west": "a", "north": "a"})), "x", 5)
    assert one.cables == () and one.mtu is None and one.goodput_factor == 1448 / 1514


def test_the_analysis_reads_a_placed_runs_ceiling_at_its_interface_mtu():
    from analysis.loader import _runs_frame
    from analysis.upgrade import upgrade

    sc = parse_scenario(placed({"east": "a", "west": "b", "north": "a"}))
    plan = build_plan(sc, "mctbx", 5)
    resolved = sc.model_dump(mode="json")
    runs = {
        "p0": {"resolved": resolved, "interface_mtu": plan.interface_mtu},
        "p1": {"resolved": resolved},
    }
    _, tables = upgrade({"runs": runs}, {})  # directories without network.parquet
    frame = _runs_frame("r", runs, {}, tables["network"]).set_index("run_id")
    assert frame.loc["p0", "wan_goodput_bps"] == pytest.approx(1e9 * 1398 / 1464)
    assert frame.loc["p1", "wan_goodput_bps"] == pytest.approx(1e9 * 1448 / 1514)  # one machine


@pytest.mark.parametrize(
    "machines, text",
    [
        ({"east": "a", "west": "b"}, r"placement.machines: every cluster needs a .*: north"),
        ({"east": "a", "west": "b", "north": "c", "x": "d"}, r"placement.machines.x: unknown"),
        ({"east": "a b", "west": "b", "north": "c"}, r"'a b' is not a machine name"),
    ],
)  # fmt: skip
def test_bad_placements_are_named(machines, text):
    with pytest.raises(ScenarioError, match=text):
        parse_scenario(placed(machines))


def two_machines() -> dict:
    return placed({"east": "node-a", "west": "node-b", "north": "node-a"})


def test_each_machine_builds_its_clusters_its_wires_and_its_cable_ends():
    plan = build_plan(parse_scenario(two_machines()), "mctbx", 5)
    a, b = plan.part("node-a"), plan.part("node-b")
    assert sorted(n.label for n in a.namespaces) == [
        "east-gw", "east-h0", "north-gw", "north-h0", "wan-east-north", "wan-east-west-p0",
        "wan-east-west-p1",
    ]  # fmt: skip
    assert sorted(n.label for n in b.namespaces) == ["west-gw", "west-h0"]
    # a veth only between two namespaces of the same machine: the crossing ones are cables
    assert all(a.has_ns(v.ns_a) and a.has_ns(v.ns_b) for v in a.veths)
    assert len(a.veths) + len(b.veths) + len(plan.cables) == len(plan.veths)
    # every machine's hosts file names every host
    assert a.names() == b.names() == plan.names()
    # west->east's shaper is on west's gateway (here), its propagation in east's wire (not);
    # east->west is node-a's alone
    assert {d.name for d in b.wan} == {"west->east/0", "west->east/1"}
    assert all(b.has_ns(d.shaper.ns) and not b.has_ns(d.impairment.ns) for d in b.wan)
    with pytest.raises(PlanError, match=r"no cluster is placed on machine 'node-c'"):
        plan.part("node-c")


def test_cable_ends_are_made_on_their_machine_and_moved_in_under_the_planned_name():
    plan = build_plan(parse_scenario(two_machines()), "mctbx", 5)
    addresses = {"node-a": "192.0.2.1", "node-b": "192.0.2.2"}
    assert cable_batch(plan.part("node-b"), "node-b", addresses) == [
        "link add mctbxc0 mtu 1450 type vxlan id 1280 local 192.0.2.2 remote 192.0.2.1 "
        "dstport 4789",
        "link set mctbxc0 netns mctbx-west-gw name p0-east",
        "link add mctbxc1 mtu 1450 type vxlan id 1281 local 192.0.2.2 remote 192.0.2.1 "
        "dstport 4789",
        "link set mctbxc1 netns mctbx-west-gw name p1-east",
    ]
    wire_end = cable_batch(plan.part("node-a"), "node-a", addresses)
    assert wire_end[1] == "link set mctbxc0 netns mctbx-wan-east-west-p0 name to-west"
    with pytest.raises(ValueError, match="not IPv4"):
        cable_batch(plan, "node-a", {**addresses, "node-b": "2001:db8::1"})


def test_every_interface_of_a_part_gets_the_mtu_before_it_comes_up():
    part = build_plan(parse_scenario(two_machines()), "mctbx", 5).part("node-b")
    ops = ip_ops(part)
    gw = ops["mctbx-west-gw"]
    mtus = {op.dev for op in gw if isinstance(op, SetMtu) and op.mtu == 1450}
    assert mtus == {"h0", "p0-east", "p1-east", "br0"}
    first_up = min(i for i, op in enumerate(gw) if isinstance(op, LinkUp) and op.dev != "lo")
    assert all(i < first_up for i, op in enumerate(gw) if isinstance(op, SetMtu))
    assert [op for op in ops["mctbx-west-h0"] if isinstance(op, SetMtu)] == [SetMtu("eth0", 1450)]
    assert set(ops) == {"mctbx-west-gw", "mctbx-west-h0"}  # nothing for the other machine's


def test_a_round_trip_splits_its_excess_evenly_over_both_directions():
    doc = placed({"east": "a", "west": "b", "north": "a"})
    doc["wan"] = [
        {"between": ["east", "west"], "rate": "1gbit", "delay": "10ms",
         "reverse": {"delay": "30ms"}},
        {"between": ["east", "north"], "rate": "1gbit", "delay": "5ms"},
    ]  # fmt: skip
    plan = build_plan(parse_scenario(doc), "mctbx", 5)
    one_way = split_round_trips(plan, {"east-west": [0.0402, 0.0404]})
    assert one_way["east->west"] == pytest.approx([0.0101, 0.0102])
    assert one_way["west->east"] == pytest.approx([0.0301, 0.0302])
    assert one_way["east->north"] == []  # not measured: no compensation


def node(machine: str | None, address: str, testbed: bool = True, **labels: str) -> dict:
    return {
        "NodeID": f"id-{address}",
        "Alive": True,
        "NodeManagerAddress": address,
        "Labels": ({MACHINE_LABEL: machine} if machine else {}) | labels,
        "Resources": {"testbed": 1.0} if testbed else {},
    }


def test_machines_are_found_by_label_or_address_among_the_testbed_nodes():
    nodes = [
        node("node-a", "192.0.2.1", **{UNDERLAY_LABEL: "198.51.100.1"}),
        node(None, "192.0.2.2"),
        node("node-c", "192.0.2.3", testbed=False),
    ]
    found = machine_nodes(nodes, ["node-a", "192.0.2.2"])
    assert [(n.machine, n.node_id, n.address) for n in found] == [
        ("node-a", "id-192.0.2.1", "198.51.100.1"),
        ("192.0.2.2", "id-192.0.2.2", "192.0.2.2"),
    ]
    with pytest.raises(ScenarioError, match=r"no Ray node with label testbed-machine=node-c"):
        machine_nodes(nodes, ["node-c"])  # it offers no `testbed` resource
