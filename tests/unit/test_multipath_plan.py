"""Multipath WAN links, pure (issue 18): the scenario's paths and routing, the plan of parallel
paths (wires, ports, directions, multipath routes, the hash policy), faults per path."""

from __future__ import annotations

import pytest

from testbed.config.scenario import parse_scenario
from testbed.core.errors import PlanError, ScenarioError
from testbed.net.faults import FaultOps
from testbed.plan.render import ip_batches
from testbed.plan.timeline import build_timeline
from testbed.plan.topology import build_plan


def multipath(**more) -> dict:
    return {
        "name": "mp",
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": [
            {
                "between": ["east", "west"],
                "paths": [
                    {"rate": "1gbit", "delay": "20ms"},
                    {"rate": "1gbit", "delay": "35ms", "weight": 2},
                    {"rate": "400mbit", "delay": "20ms", "loss": "0.1%"},
                ],
            }
        ],
        "routing": {"mode": "static", "ecmp": {"hash": "l4"}},
    } | more


def test_a_multipath_plan_has_a_wire_per_path_and_multipath_routes():
    plan = build_plan(parse_scenario(multipath()), "mctbx", 3)
    assert [(d.name, d.shaper.ifname, d.impairment.ns, d.rate, d.delay) for d in plan.wan] == [
        ("east->west/0", "p0-west", "mctbx-wan-east-west-p0", 1_000_000_000, 0.020),
        ("west->east/0", "p0-east", "mctbx-wan-east-west-p0", 1_000_000_000, 0.020),
        ("east->west/1", "p1-west", "mctbx-wan-east-west-p1", 1_000_000_000, 0.035),
        ("west->east/1", "p1-east", "mctbx-wan-east-west-p1", 1_000_000_000, 0.035),
        ("east->west/2", "p2-west", "mctbx-wan-east-west-p2", 400_000_000, 0.020),
        ("west->east/2", "p2-east", "mctbx-wan-east-west-p2", 400_000_000, 0.020),
    ]
    assert all(d.multipath for d in plan.wan) and plan.wire_sized_packets  # path 2's loss
    routes = [line for line in ip_batches(plan)["mctbx-east-gw"] if line.startswith("route")]
    assert routes == [
        "route add 10.3.1.0/24 src 10.3.0.1 nexthop via 10.3.128.2 weight 1 nexthop via "
        "10.3.128.10 weight 2 nexthop via 10.3.128.18 weight 1"
    ]
    gw = next(n for n in plan.namespaces if n.name == "mctbx-east-gw")
    assert gw.sysctls["net.ipv4.fib_multipath_hash_policy"] == "1"
    assert set(FaultOps(plan).links) == {"east-west/0", "east-west/1", "east-west/2"}


def test_a_single_path_link_plans_as_before():
    data = multipath(wan=[{"between": ["east", "west"], "rate": "1gbit", "delay": "20ms"}])
    plan = build_plan(parse_scenario(data), "mctbx", 3)
    assert [(d.name, d.shaper.ifname) for d in plan.wan] == [
        ("east->west", "w-west"), ("west->east", "w-east"),
    ]  # fmt: skip
    gw = next(n for n in plan.namespaces if n.name == "mctbx-east-gw")
    assert "net.ipv4.fib_multipath_hash_policy" not in gw.sysctls
    assert "route add 10.3.1.0/24 via 10.3.128.2 src 10.3.0.1" in ip_batches(plan)["mctbx-east-gw"]


def test_faults_name_a_whole_link_or_one_path():
    data = multipath(
        workload={"kind": "collectives", "sizes": ["1MiB"]},
        faults=[
            {"kind": "blackhole", "link": "east-west/1", "at": "1s", "duration": "2s"},
            {"kind": "link_down", "link": "west-east", "at": "5s", "duration": "1s"},
        ],
    )
    sc = parse_scenario(data)
    plan = build_plan(sc, "mctbx", 3)
    events = [(e.at, e.action, e.link) for e in build_timeline(sc, plan, ".", 60).events]
    assert events[:2] == [(1.0, "blackhole", "east-west/1"), (3.0, "unblackhole", "east-west/1")]
    downs = [link for at, action, link in events if action == "link_down"]
    assert downs == ["east-west/0", "east-west/1", "east-west/2"]


@pytest.mark.parametrize(
    ("change", "text"),
    [
        ({"rate": "1gbit"}, "wan[0].rate: a link with `paths` has its settings in each path"),
        ({"paths": [{"rate": "1gbit"}]}, "wan[0].paths: 1 paths given; a multipath link has 2"),
        ({"paths": [{}, {"weight": 0}]}, "wan[0].paths[1].weight: 0 is out of range"),
        ({"paths": [{}, {"speed": 1}]}, "paths[1].speed: unknown key 'speed'; allowed: rate"),
    ],
)
def test_bad_paths_are_named(change, text):
    data = multipath()
    data["wan"] = [data["wan"][0] | change]
    with pytest.raises(ScenarioError) as err:
        parse_scenario(data)
    assert text in str(err.value)


def test_routing_errors_and_bgp_not_built_yet():
    with pytest.raises(ScenarioError, match=r"routing.ecmp.hash: 'l7' is not allowed"):
        parse_scenario(multipath(routing={"ecmp": {"hash": "l7"}}))
    with pytest.raises(ScenarioError, match=r"routing.bgp: bgp settings apply to `mode: bgp`"):
        parse_scenario(multipath(routing={"bgp": {"hold": "9s"}}))
    with pytest.raises(ScenarioError, match=r"faults\[0\].link: no WAN link 'east-west/5'"):
        parse_scenario(
            multipath(
                workload={"kind": "collectives"},
                faults=[{"kind": "blackhole", "link": "east-west/5", "at": "1s", "duration": "1s"}],
            )
        )
    bgp = parse_scenario(multipath(routing={"mode": "bgp", "bgp": {"bfd": {"interval": "50ms"}}}))
    with pytest.raises(PlanError, match=r"routing.mode bgp .* not built yet"):
        build_plan(bgp, "mctbx", 3)


def test_the_analysis_shows_a_multipath_links_first_path():
    from analysis.loader import _network

    resolved = parse_scenario(multipath()).model_dump(mode="json")
    net = _network(resolved, None)
    assert net["wan_rate_bps"] == 1e9
    assert net["rtt_s"] == pytest.approx(0.040)
