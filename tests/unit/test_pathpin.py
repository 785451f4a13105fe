"""Pure: the host routes that hold a host pair on one path of a multipath link (the self-check
measures the path it names), and the round trip it compares a path's probes with."""

from __future__ import annotations

import ipaddress

import pytest

from testbed.config.loading import parse_scenario
from testbed.live.selfcheck import configured_rtt
from testbed.plan.pathpin import PinRoute, pin_routes
from testbed.plan.topology import build_plan


def two_paths() -> dict:
    return {
        "name": "mp",
        "clusters": {"east": {"hosts": 2}, "west": {"hosts": 1}},
        "wan": [
            {
                "between": ["east", "west"],
                "paths": [
                    {"rate": "1gbit", "delay": "20ms"},
                    {"rate": "400mbit", "delay": "35ms", "weight": 3},
                ],
            }
        ],
        "routing": {"mode": "static", "ecmp": {"hash": "l3"}},
    }


def direction(plan, name):
    return next(d for d in plan.wan if d.name == name)


def test_a_path_is_pinned_by_a_host_route_in_each_gateway_via_its_wire():
    plan = build_plan(parse_scenario(two_paths()), "pinx", 3)
    routes = pin_routes(plan, direction(plan, "east->west/1"), "east-h0", "west-h0")
    # path 1 is the second wire: 10.3.128.8/30 on east's side, 10.3.128.12/30 on west's
    assert routes == (
        PinRoute("east-gw", "10.3.1.10/32", "10.3.128.10", "10.3.0.1"),
        PinRoute("west-gw", "10.3.0.10/32", "10.3.128.14", "10.3.1.1"),
    )
    assert routes[0].add_argv() == [
        "ip", "route", "replace", "10.3.1.10/32", "via", "10.3.128.10", "src", "10.3.0.1",
    ]  # fmt: skip
    assert routes[0].del_argv() == ["ip", "route", "del", "10.3.1.10/32", "via", "10.3.128.10"]
    # each next hop lies on the gateway's port of that path (p1-<peer>), nowhere else
    for r, port in zip(routes, ("p1-west", "p1-east"), strict=True):
        ns = f"pinx-{r.gateway}"
        nets = {
            a.ifname: ipaddress.ip_interface(a.cidr).network for a in plan.addresses if a.ns == ns
        }
        assert [i for i, n in nets.items() if ipaddress.ip_address(r.via) in n] == [port]


def test_both_directions_of_a_path_pin_the_same_two_routes():
    plan = build_plan(parse_scenario(two_paths()), "pinx", 3)
    fwd = pin_routes(plan, direction(plan, "east->west/0"), "east-h0", "west-h0")
    rev = pin_routes(plan, direction(plan, "west->east/0"), "west-h0", "east-h0")
    assert set(fwd) == set(rev) and len(fwd) == 2
    assert {r.via for r in fwd} == {"10.3.128.2", "10.3.128.6"}  # path 0's wire


def test_the_hosts_named_are_the_ones_pinned():
    plan = build_plan(parse_scenario(two_paths()), "pinx", 3)
    routes = pin_routes(plan, direction(plan, "east->west/0"), "east-h1", "west-h0")
    assert [r.dst for r in routes] == ["10.3.1.10/32", "10.3.0.11/32"]


def test_a_link_with_one_path_needs_no_route():
    data = two_paths() | {"wan": [{"between": ["east", "west"], "rate": "1gbit"}]}
    plan = build_plan(parse_scenario(data), "pinx", 3)
    assert pin_routes(plan, plan.wan[0], "east-h0", "west-h0") == ()


@pytest.mark.parametrize(("name", "rtt"), [("east->west/0", 0.040), ("west->east/1", 0.070)])
def test_a_paths_round_trip_comes_back_on_the_same_path(name, rtt):
    plan = build_plan(parse_scenario(two_paths()), "pinx", 3)
    assert configured_rtt(plan, direction(plan, name)) == pytest.approx(rtt)
