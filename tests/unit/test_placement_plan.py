"""Clusters on several machines, pure (issue 19 b, planned): the placement's validation, the
VXLAN cables of the wires that cross machines, the MTU decision."""

from __future__ import annotations

import pytest

from testbed.config.scenario import parse_scenario
from testbed.core.errors import ScenarioError
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
    jumbo = placed({"east": "a", "west": "b", "north": "c"}, underlay_mtu=9000)
    plan = build_plan(parse_scenario(jumbo), "mctbx", 5)
    assert len(plan.cables) == 3 and plan.mtu is None  # the underlay carries 1500 + 50
    one = build_plan(parse_scenario(placed({"east": "a", "west": "a", "north": "a"})), "x", 5)
    assert one.cables == () and one.mtu is None


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
