"""Multipath WAN links, pure: the scenario's paths and routing, the plan of parallel
paths (wires, ports, directions, multipath routes, the hash policy), faults per path."""

from __future__ import annotations

import pytest

from testbed.config.loading import parse_scenario
from testbed.core.errors import ScenarioError
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
    assert gw.sysctls["net.ipv4.fib_multipath_hash_policy"] == "3"  # fields: the 5-tuple
    assert gw.sysctls["net.ipv4.fib_multipath_hash_fields"] == "55"
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


def test_routing_errors():
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
    with pytest.raises(ScenarioError, match=r"wan\[0\].paths: unequal weights need static"):
        parse_scenario(multipath(routing={"mode": "bgp"}))
    equal = multipath()
    equal["wan"][0]["paths"][1].pop("weight")
    for bad, text in (
        ({"hold": "9500ms"}, r"routing.bgp.hold: .*9.5 s is not whole seconds"),
        ({"hold": "2s"}, r"routing.bgp.hold"),
        ({"bfd": {"interval": "5ms"}}, r"routing.bgp.bfd.interval"),
        ({"bfd": {"interval": "50.5ms"}}, r"50.5 ms is not whole milliseconds"),
        ({"bfd": {"multiplier": 1}}, r"routing.bgp.bfd.multiplier"),
    ):
        with pytest.raises(ScenarioError, match=text):
            parse_scenario(equal | {"routing": {"mode": "bgp", "bgp": bad}})
    # the Mininet engine's nodes are named namespaces too: FRR runs in its gateways as in native
    on_mininet = parse_scenario(equal | {"routing": {"mode": "bgp"}, "engine": "mininet"})
    assert on_mininet.engine == "mininet" and on_mininet.routing.mode == "bgp"


def bgp_plan(bgp: dict | None = None):
    data = multipath()
    data["wan"][0]["paths"][1].pop("weight")
    data["routing"] = {"mode": "bgp", "ecmp": {"hash": "l4"}} | ({"bgp": bgp} if bgp else {})
    return build_plan(parse_scenario(data), "mctbx", 3)


def test_a_bgp_plan_routes_only_to_the_peer_ports_and_lists_the_sessions():
    plan = bgp_plan({"bfd": {"interval": "50ms", "multiplier": 3}, "hold": "9s"})
    gw = [(r.ns, r.dst, r.via, r.src, r.nexthops) for r in plan.routes if r.ns.endswith("-gw")]
    assert gw == [
        ("mctbx-east-gw", "10.3.128.5/32", "10.3.128.2", "10.3.128.1", ()),
        ("mctbx-west-gw", "10.3.128.1/32", "10.3.128.6", "10.3.128.5", ()),
        ("mctbx-east-gw", "10.3.128.13/32", "10.3.128.10", "10.3.128.9", ()),
        ("mctbx-west-gw", "10.3.128.9/32", "10.3.128.14", "10.3.128.13", ()),
        ("mctbx-east-gw", "10.3.128.21/32", "10.3.128.18", "10.3.128.17", ()),
        ("mctbx-west-gw", "10.3.128.17/32", "10.3.128.22", "10.3.128.21", ()),
    ]  # no route to the other cluster: BGP installs it
    bgp = plan.bgp
    assert (bgp.hold_s, bgp.keepalive_s, bgp.maximum_paths) == (9, 3, 3)
    assert (bgp.bfd_interval_ms, bgp.bfd_multiplier) == (50, 3)
    east, west = bgp.speakers
    assert (east.gateway, east.asn, east.router_id, east.network) == (
        "east-gw",
        65000,
        "10.3.0.1",
        "10.3.0.0/24",
    )
    assert [(n.address, n.local, n.asn, n.link) for n in east.neighbors] == [
        ("10.3.128.5", "10.3.128.1", 65001, "east-west/0"),
        ("10.3.128.13", "10.3.128.9", 65001, "east-west/1"),
        ("10.3.128.21", "10.3.128.17", 65001, "east-west/2"),
    ]
    assert east.expected == (("10.3.1.0/24", 3),) and west.expected == (("10.3.0.0/24", 3),)
    assert bgp_plan().bgp.bfd_interval_ms is None  # no bfd: the hold timer alone


def test_frr_configuration_text():
    from pathlib import Path

    from testbed.plan.frr import daemons, frr_configs

    plan = bgp_plan({"bfd": {"interval": "50ms", "multiplier": 3}, "hold": "9s"})
    files = frr_configs(plan.bgp, plan.bgp.speakers[0], Path("/run/x/east-gw"))
    assert daemons(plan.bgp) == ("zebra", "bfdd", "bgpd")
    assert files["zebra.conf"] == (
        "hostname east-gw\nlog file /run/x/east-gw/zebra.log\nlog timestamp precision 6\n"
        "no zebra nexthop kernel enable\n"
    )
    assert files["bfdd.conf"] == (
        "hostname east-gw\n"
        "log file /run/x/east-gw/bfdd.log\n"
        "log timestamp precision 6\n"
        "debug bfd peer\n"
        "bfd\n"
        " profile wan\n"
        "  transmit-interval 50\n"
        "  receive-interval 50\n"
        "  detect-multiplier 3\n"
        " exit\n"
        "exit\n"
    )
    first = [
        " neighbor 10.3.128.5 remote-as 65001",
        " neighbor 10.3.128.5 description east-west/0",
        " neighbor 10.3.128.5 ebgp-multihop 2",
        " neighbor 10.3.128.5 disable-connected-check",
        " neighbor 10.3.128.5 update-source 10.3.128.1",
        " neighbor 10.3.128.5 timers connect 2",
        " neighbor 10.3.128.5 advertisement-interval 0",
        " neighbor 10.3.128.5 bfd profile wan",
    ]
    lines = files["bgpd.conf"].splitlines()
    assert lines[:10] == [
        "hostname east-gw",
        "log file /run/x/east-gw/bgpd.log",
        "log timestamp precision 6",
        "debug bgp updates",
        "router bgp 65000",
        " bgp router-id 10.3.0.1",
        " bgp log-neighbor-changes",
        " no bgp ebgp-requires-policy",
        " timers bgp 3 9",
        *first[:1],
    ]
    assert lines[9:17] == first
    assert lines[-5:] == [
        " address-family ipv4 unicast",
        "  network 10.3.0.0/24",
        "  maximum-paths 3",
        " exit-address-family",
        "exit",
    ]
    assert len(lines) == 9 + 3 * 8 + 5
    plain = bgp_plan()
    assert daemons(plain.bgp) == ("zebra", "bgpd")
    text = frr_configs(plain.bgp, plain.bgp.speakers[0], Path("/d"))
    assert set(text) == {"zebra.conf", "bgpd.conf"} and "bfd" not in text["bgpd.conf"]


def test_the_analysis_shows_a_multipath_links_first_path():
    """As built (network.parquet) and as an older directory's resolved scenario gives it."""
    from analysis.network import reference
    from analysis.upgrade import network_from_resolved
    from testbed.plan.resolved import network_rows

    sc = parse_scenario(multipath())
    built = network_rows(build_plan(sc, "mctbx", 5), sc)
    older = network_from_resolved(sc.model_dump(mode="json"), 1500)
    for net in (reference(built), reference(older)):
        assert net["wan_rate_bps"] == 1e9
        assert net["rtt_s"] == pytest.approx(0.040)
