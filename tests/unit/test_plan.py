"""The network plan (testbed.plan) and its iproute2 rendering (testbed.plan.render).

Pure tests: a scenario dict goes through ``parse_scenario`` and ``build_plan``; nothing touches
the kernel. The route walk below simulates IPv4 forwarding over the plan's addresses, routes,
veths and bridges, so a missing or looping route fails here instead of in a live testbed.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import itertools
import math
import re
from collections import Counter, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testbed.config.loading import load_scenario, parse_scenario
from testbed.core.errors import PlanError, ScenarioError
from testbed.core.frames import FRAME_BYTES
from testbed.link.kernel import KernelBackend, ShapingOnlyBackend
from testbed.plan.model import NetworkPlan
from testbed.plan.render import (
    AddrAdd,
    BridgeAdd,
    GsoMaxSegs,
    LinkUp,
    RouteAdd,
    SetMaster,
    ip_batches,
    ip_line,
    ip_ops,
    root_batch,
)
from testbed.plan.sizing import MIN_BUFFER, htb_burst, htb_quantum, netem_limit
from testbed.plan.topology import build_plan

PREFIX = "mctb0000"
SLOT = 77
REPO = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024
GSO_FLOOR = 65536 + 1514  # one 64 KiB GSO packet plus an Ethernet frame


# --- building scenarios -----------------------------------------------------------------------


def link(a: str, b: str, **settings: Any) -> dict[str, Any]:
    return {"between": [a, b], **settings}


def scenario(
    clusters: dict[str, int] | list[str],
    wan: list[dict[str, Any]],
    **top: Any,
) -> dict[str, Any]:
    """Scenario data: ``clusters`` maps name -> host count (a list means one host each)."""
    if isinstance(clusters, list):
        clusters = dict.fromkeys(clusters, 1)
    return {
        "name": "t",
        "clusters": {name: {"hosts": n} for name, n in clusters.items()},
        "wan": wan,
        **top,
    }


def plan_of(data: dict[str, Any]) -> NetworkPlan:
    return build_plan(parse_scenario(data, "t.yaml"), PREFIX, SLOT)


def two_dc(**settings: Any) -> NetworkPlan:
    """east <-> west, two hosts each, one WAN link with ``settings``."""
    return plan_of(scenario({"east": 2, "west": 2}, [link("east", "west", **settings)]))


def quickstart() -> NetworkPlan:
    return build_plan(load_scenario(REPO / "scenarios" / "quickstart.yaml"), PREFIX, SLOT)


LONG = [f"cluster{i:02d}abc" for i in range(16)]  # 16 clusters with 12-character names

TOPOLOGIES = {
    "single": scenario({"solo": 3}, []),
    "two-dc": scenario({"east": 2, "west": 2}, [link("east", "west", rate="100mbit")]),
    "chain": scenario({"a": 2, "b": 1, "c": 2}, [link("a", "b"), link("b", "c")]),
    "ring": scenario(
        ["a", "b", "c", "d", "e"],
        [link("a", "b"), link("b", "c"), link("c", "d"), link("d", "e"), link("e", "a")],
    ),
    "mesh": scenario(
        {"a": 2, "b": 2, "c": 2, "d": 2},
        [link(x, y) for i, x in enumerate("abcd") for y in "abcd"[i + 1 :]],
    ),
    "star-hub-last": scenario(
        ["s1", "s2", "s3", "s4", "hub"], [link(s, "hub") for s in ("s1", "s2", "s3", "s4")]
    ),
    "chain-16-long-names": scenario(LONG, [link(x, y) for x, y in itertools.pairwise(LONG)]),
    "64-hosts": scenario({"big": 64, "small": 1}, [link("small", "big")]),
}


@pytest.fixture(params=list(TOPOLOGIES), ids=list(TOPOLOGIES))
def topology(request: pytest.FixtureRequest) -> tuple[dict[str, Any], NetworkPlan]:
    data = TOPOLOGIES[request.param]
    return data, plan_of(data)


# --- names and addresses ----------------------------------------------------------------------


def test_every_namespace_is_prefixed(topology: tuple[dict[str, Any], NetworkPlan]) -> None:
    _, plan = topology
    for ns in plan.namespaces:
        assert ns.name == f"{PREFIX}-{ns.label}"
    declared = {ns.name for ns in plan.namespaces}
    used = (
        {v.ns_a for v in plan.veths}
        | {v.ns_b for v in plan.veths}
        | {a.ns for a in plan.addresses}
        | {r.ns for r in plan.routes}
        | {b.ns for b in plan.bridges}
        | {s.ns for s in plan.shapers}
        | {p.ns for p in plan.fabric}
        | {d.impairment.ns for d in plan.wan}
        | {h.ns for h in plan.hosts}
        | {g.ns for g in plan.gateways}
    )
    assert used <= declared


def test_namespace_names_are_unique(topology: tuple[dict[str, Any], NetworkPlan]) -> None:
    _, plan = topology
    names = Counter(ns.name for ns in plan.namespaces)
    assert [n for n, count in names.items() if count > 1] == []


def test_counts(topology: tuple[dict[str, Any], NetworkPlan]) -> None:
    data, plan = topology
    hosts = sum(c["hosts"] for c in data["clusters"].values())
    clusters, links = len(data["clusters"]), len(data["wan"])
    assert len(plan.hosts) == hosts
    assert len(plan.gateways) == clusters
    assert len(plan.namespaces) == hosts + clusters + links
    assert len(plan.veths) == hosts + 2 * links
    assert len(plan.wan) == len(plan.shapers) == 2 * links


def test_addresses_are_unique(topology: tuple[dict[str, Any], NetworkPlan]) -> None:
    _, plan = topology
    ips = Counter(ipaddress.IPv4Interface(a.cidr).ip for a in plan.addresses)
    assert [str(ip) for ip, count in ips.items() if count > 1] == []
    block = ipaddress.IPv4Network(f"10.{SLOT}.0.0/16")
    assert all(ip in block for ip in ips)
    # Every host and gateway address is one the plan actually configures.
    assert {ipaddress.IPv4Address(x) for x in plan.names().values()} <= set(ips)


def test_wan_links_use_30s_outside_the_cluster_subnets(
    topology: tuple[dict[str, Any], NetworkPlan],
) -> None:
    _, plan = topology
    subnets = [ipaddress.IPv4Network(g.subnet) for g in plan.gateways]
    wan = [
        ipaddress.IPv4Interface(a.cidr)
        for a in plan.addresses
        if a.ifname.startswith(("w-", "to-"))
    ]
    assert len(wan) == 2 * len(plan.wan)
    for iface in wan:
        assert iface.network.prefixlen == 30
        assert not any(iface.network.overlaps(s) for s in subnets)
    # The two ends of each veth share their /30 and no other veth uses it.
    networks = Counter(iface.network for iface in wan)
    assert set(networks.values()) <= {2}


def test_interface_names_fit_the_kernel_limit(topology: tuple[dict[str, Any], NetworkPlan]) -> None:
    _, plan = topology
    names = {v.if_a for v in plan.veths} | {v.if_b for v in plan.veths}
    names |= {b.name for b in plan.bridges}
    assert max(len(n) for n in names) <= 15
    # Interface names are unique inside each namespace.
    per_ns = Counter(
        [(v.ns_a, v.if_a) for v in plan.veths]
        + [(v.ns_b, v.if_b) for v in plan.veths]
        + [(b.ns, b.name) for b in plan.bridges]
    )
    assert [k for k, count in per_ns.items() if count > 1] == []


def test_slot_out_of_range() -> None:
    data = TOPOLOGIES["two-dc"]
    for slot in (0, 255):
        with pytest.raises(PlanError, match=f"address slot {slot} outside 1..254"):
            build_plan(parse_scenario(data), PREFIX, slot)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(
            scenario(
                ["a-b", "c", "a", "b-c"], [link("a-b", "c"), link("a", "b-c"), link("a", "c")]
            ),
            id="two-wires-wan-a-b-c",
        ),
        pytest.param(
            scenario(["wan-a", "a", "h0"], [link("a", "h0"), link("wan-a", "a")]),
            id="wire-vs-host",
        ),
        pytest.param(
            scenario(["x", "gw", "wan-x"], [link("x", "gw"), link("wan-x", "x")]),
            id="wire-vs-gateway",
        ),
    ],
)
def test_hyphenated_cluster_names_do_not_collide(data: dict[str, Any]) -> None:
    try:
        plan = plan_of(data)
    except (ScenarioError, PlanError):
        return  # refusing such names with a clear message is a fine fix too
    names = Counter(ns.name for ns in plan.namespaces)
    assert [n for n, count in names.items() if count > 1] == []


# --- routes -----------------------------------------------------------------------------------


def test_every_host_has_a_default_route_via_its_gateway(
    topology: tuple[dict[str, Any], NetworkPlan],
) -> None:
    _, plan = topology
    gw_ip = {g.cluster: g.address for g in plan.gateways}
    for host in plan.hosts:
        routes = [(r.dst, r.via) for r in plan.routes if r.ns == host.ns]
        assert routes == [("default", gw_ip[host.cluster])]


def test_every_gateway_routes_every_other_cluster(
    topology: tuple[dict[str, Any], NetworkPlan],
) -> None:
    _, plan = topology
    for gw in plan.gateways:
        routed = [r.dst for r in plan.routes if r.ns == gw.ns]
        others = [g.subnet for g in plan.gateways if g is not gw]
        assert sorted(routed) == sorted(others)
        # ...and speaks from its cluster address, so replies come back over cluster routes.
        assert {r.src for r in plan.routes if r.ns == gw.ns} <= {gw.address}


def _addr(plan: NetworkPlan, ns_label: str, ifname: str) -> str:
    (a,) = [a for a in plan.addresses if a.ns == f"{PREFIX}-{ns_label}" and a.ifname == ifname]
    return a.cidr.split("/")[0]


def test_chain_routes_through_the_middle_cluster() -> None:
    plan = plan_of(TOPOLOGIES["chain"])  # a - b - c, no a-c link
    subnet = {g.cluster: g.subnet for g in plan.gateways}
    routes = {(r.ns, r.dst): r.via for r in plan.routes}
    # a reaches c over the a-b wire...
    assert routes[(f"{PREFIX}-a-gw", subnet["c"])] == _addr(plan, "wan-a-b", "to-a")
    # ...the a-b wire hands c's traffic to b...
    assert routes[(f"{PREFIX}-wan-a-b", subnet["c"])] == _addr(plan, "b-gw", "w-a")
    # ...b sends it over the b-c wire, which delivers it to c.
    assert routes[(f"{PREFIX}-b-gw", subnet["c"])] == _addr(plan, "wan-b-c", "to-b")
    assert routes[(f"{PREFIX}-wan-b-c", subnet["c"])] == _addr(plan, "c-gw", "w-b")
    # And the same way back.
    assert routes[(f"{PREFIX}-c-gw", subnet["a"])] == _addr(plan, "wan-b-c", "to-c")
    assert routes[(f"{PREFIX}-wan-b-c", subnet["a"])] == _addr(plan, "b-gw", "w-c")
    assert routes[(f"{PREFIX}-wan-a-b", subnet["a"])] == _addr(plan, "a-gw", "w-b")


Table = list[tuple[ipaddress.IPv4Network, str, ipaddress.IPv4Address | None, ipaddress.IPv4Address]]


@dataclass
class RouteWalk:
    """IPv4 forwarding over a plan: connected subnets, static routes (longest prefix wins),
    next hops resolved on the same L2 segment (veth pairs, bridges)."""

    plan: NetworkPlan

    def __post_init__(self) -> None:
        self.parent: dict[tuple[str, str], tuple[str, str]] = {}
        for v in self.plan.veths:
            self._union((v.ns_a, v.if_a), (v.ns_b, v.if_b))
        for br in self.plan.bridges:
            for port in br.ports:
                self._union((br.ns, br.name), (br.ns, port))
        self.local: dict[str, set[ipaddress.IPv4Address]] = {}
        self.owner: dict[ipaddress.IPv4Address, tuple[str, str]] = {}
        # Per namespace: (destination, egress interface, gateway or None if on-link, source).
        self.table: dict[str, Table] = {}
        for a in self.plan.addresses:
            iface = ipaddress.IPv4Interface(a.cidr)
            self.local.setdefault(a.ns, set()).add(iface.ip)
            self.owner[iface.ip] = (a.ns, a.ifname)
            self.table.setdefault(a.ns, []).append((iface.network, a.ifname, None, iface.ip))
        for r in self.plan.routes:
            via = ipaddress.IPv4Address(r.via)
            on_link = [(n, i, src) for n, i, gw, src in self.table[r.ns] if gw is None and via in n]
            assert on_link, f"{r.ns}: gateway {via} of route {r.dst} is not on a local subnet"
            _, ifname, src = on_link[0]
            if r.src:
                src = ipaddress.IPv4Address(r.src)
                assert src in self.local[r.ns], f"{r.ns}: src {src} is not a local address"
            dst = ipaddress.IPv4Network("0.0.0.0/0" if r.dst == "default" else r.dst)
            self.table[r.ns].append((dst, ifname, via, src))
        self.forwards = {
            ns.name for ns in self.plan.namespaces if ns.sysctls.get("net.ipv4.ip_forward") == "1"
        }

    def _find(self, x: tuple[str, str]) -> tuple[str, str]:
        while self.parent.get(x, x) != x:
            x = self.parent[x]
        return x

    def _union(self, a: tuple[str, str], b: tuple[str, str]) -> None:
        self.parent[self._find(a)] = self._find(b)

    def lookup(
        self, ns: str, dst: ipaddress.IPv4Address
    ) -> tuple[str, ipaddress.IPv4Address, ipaddress.IPv4Address]:
        """(egress interface, next-hop address, preferred source) for ``dst`` in ``ns``."""
        matches = [entry for entry in self.table.get(ns, []) if dst in entry[0]]
        assert matches, f"{ns}: no route to {dst}"
        best = max(net.prefixlen for net, *_ in matches)
        winners = [entry for entry in matches if entry[0].prefixlen == best]
        assert len(winners) == 1, f"{ns}: ambiguous routes to {dst}: {winners}"
        _, ifname, gateway, src = winners[0]
        return ifname, gateway or dst, src

    def walk(self, src_ns: str, dst: ipaddress.IPv4Address, limit: int = 64) -> list[str]:
        """Namespaces a packet from ``src_ns`` to ``dst`` visits, ending where ``dst`` lives."""
        path = [src_ns]
        ns = src_ns
        while dst not in self.local.get(ns, ()):
            assert len(path) <= limit, f"routing loop: {path}"
            assert ns == src_ns or ns in self.forwards, f"{ns} would have to forward: {path}"
            ifname, next_hop, _ = self.lookup(ns, dst)
            assert next_hop in self.owner, f"{ns}: next hop {next_hop} does not exist: {path}"
            nh_ns, nh_if = self.owner[next_hop]
            assert self._find((ns, ifname)) == self._find((nh_ns, nh_if)), (
                f"{ns}/{ifname} and {nh_ns}/{nh_if} ({next_hop}) share no link: {path}"
            )
            ns = nh_ns
            path.append(ns)
        return path


def _cluster_distances(data: dict[str, Any]) -> dict[tuple[str, str], int]:
    neighbours: dict[str, set[str]] = {c: set() for c in data["clusters"]}
    for w in data["wan"]:
        a, b = w["between"]
        neighbours[a].add(b)
        neighbours[b].add(a)
    dist: dict[tuple[str, str], int] = {}
    for src in neighbours:
        seen, queue = {src: 0}, deque([src])
        while queue:
            here = queue.popleft()
            for n in neighbours[here] - seen.keys():
                seen[n] = seen[here] + 1
                queue.append(n)
        dist.update({(src, dst): d for dst, d in seen.items()})
    return dist


def test_route_walk_between_every_pair(topology: tuple[dict[str, Any], NetworkPlan]) -> None:
    """Every host and gateway reaches every other one on a shortest path, and the reply (sent to
    the source address the sender would pick) comes back."""
    data, plan = topology
    net = RouteWalk(plan)
    dist = _cluster_distances(data)
    endpoints = [(h.ns, h.cluster, ipaddress.IPv4Address(h.address), True) for h in plan.hosts]
    endpoints += [(g.ns, g.cluster, ipaddress.IPv4Address(g.address), False) for g in plan.gateways]
    for a_ns, a_cluster, _, a_is_host in endpoints:
        for b_ns, b_cluster, b_ip, b_is_host in endpoints:
            if a_ns == b_ns:
                continue
            path = net.walk(a_ns, b_ip)
            assert path[-1] == b_ns
            if a_is_host and b_is_host and a_cluster == b_cluster:
                expected = 1  # same bridge
            else:
                expected = 2 * dist[(a_cluster, b_cluster)] + a_is_host + b_is_host
            assert len(path) - 1 == expected, path
            _, _, src = net.lookup(a_ns, b_ip)
            assert net.walk(b_ns, src)[-1] == a_ns


@pytest.mark.parametrize(
    ("broken", "complaint"),
    [
        pytest.param(
            lambda r: not (r.ns == f"{PREFIX}-wan-a-b" and r.dst.startswith(f"10.{SLOT}.2.")),
            "no route to",
            id="wire-route-missing",
        ),
        pytest.param(
            lambda r: not (r.ns == f"{PREFIX}-c-gw" and r.dst.startswith(f"10.{SLOT}.0.")),
            "no route to",
            id="gateway-route-missing",
        ),
    ],
)
def test_route_walk_notices_a_broken_plan(broken: Any, complaint: str) -> None:
    plan = plan_of(TOPOLOGIES["chain"])
    damaged = dataclasses.replace(plan, routes=tuple(r for r in plan.routes if broken(r)))
    assert len(damaged.routes) == len(plan.routes) - 1
    net = RouteWalk(damaged)
    a_h0, c_h0 = plan.host("a-h0"), plan.host("c-h0")
    with pytest.raises(AssertionError, match=complaint):  # one of the two directions breaks
        net.walk(a_h0.ns, ipaddress.IPv4Address(c_h0.address))
        net.walk(c_h0.ns, ipaddress.IPv4Address(a_h0.address))


def test_route_walk_notices_a_loop() -> None:
    plan = plan_of(TOPOLOGIES["chain"])
    # b sends c's traffic back to the a-b wire, which sends it to b again.
    looped = tuple(
        dataclasses.replace(r, via=_addr(plan, "wan-a-b", "to-b"))
        if r.ns == f"{PREFIX}-b-gw" and r.dst.startswith(f"10.{SLOT}.2.")
        else r
        for r in plan.routes
    )
    net = RouteWalk(dataclasses.replace(plan, routes=looped))
    with pytest.raises(AssertionError, match="routing loop"):
        net.walk(plan.host("a-h0").ns, ipaddress.IPv4Address(plan.host("c-h0").address))


# --- BDP and buffers --------------------------------------------------------------------------


def test_quickstart_bdp_and_buffer() -> None:
    plan = quickstart()
    assert [d.name for d in plan.wan] == ["east->west", "west->east"]
    for d in plan.wan:
        assert d.rate == 100_000_000
        assert d.delay == pytest.approx(0.020)
        assert d.bdp == 500_000  # 100 Mbit/s x 40 ms RTT / 8
        assert d.buffer == 500_000
        assert d.shaper.buffer == d.buffer
    assert plan.warnings == ()


@pytest.mark.parametrize(
    ("buffer", "expected"),
    [
        ("1bdp", 500_000),
        ("0.5bdp", 250_000),
        ("2xBDP", 1_000_000),
        ("4MiB", 4 * MIB),
        ("256KB", 256_000),
        ("128KiB", MIN_BUFFER),  # exactly the floor: no warning
    ],
)
def test_buffer_sizing(buffer: str, expected: int) -> None:
    plan = two_dc(rate="100mbit", delay="20ms", buffer=buffer)
    assert [d.buffer for d in plan.wan] == [expected, expected]
    assert [d.shaper.buffer for d in plan.wan] == [expected, expected]
    assert plan.warnings == ()


@pytest.mark.parametrize(
    ("settings", "was"),
    [
        ({"rate": "100mbit", "delay": "1ms"}, 25_000),  # 1bdp of a 2 ms RTT
        ({"rate": "100mbit", "delay": "20ms", "buffer": "64KB"}, 64_000),
        ({"rate": "100mbit", "delay": "20ms", "buffer": "0.1bdp"}, 50_000),
        ({"rate": "1gbit"}, 0),  # no delay: the BDP is 0
    ],
)
def test_small_buffers_are_raised_with_a_warning(settings: dict[str, str], was: int) -> None:
    plan = two_dc(**settings)
    assert MIN_BUFFER == 2 * 65536
    assert [d.buffer for d in plan.wan] == [MIN_BUFFER, MIN_BUFFER]
    assert plan.warnings == tuple(
        f"wan[0] {direction}: buffer {was} B raised to 131072 B (two 64 KiB GSO packets)"
        for direction in ("east->west", "west->east")
    )


def test_asymmetric_link() -> None:
    plan = two_dc(rate="100mbit", delay="20ms", reverse={"rate": "200mbit", "delay": "10ms"})
    fwd, rev = plan.wan
    assert (fwd.src, fwd.dst, rev.src, rev.dst) == ("east", "west", "west", "east")
    assert (fwd.rate, rev.rate) == (100_000_000, 200_000_000)
    assert (fwd.delay, rev.delay) == (pytest.approx(0.020), pytest.approx(0.010))
    # BDP = rate x (forward delay + reverse delay): both directions share the 30 ms RTT.
    assert fwd.bdp == 100_000_000 // 8 * 30 // 1000 == 375_000
    assert rev.bdp == 200_000_000 // 8 * 30 // 1000 == 750_000
    assert (fwd.buffer, rev.buffer) == (375_000, 750_000)
    # The bottleneck sits on the sending gateway, propagation in the wire after it.
    assert (fwd.shaper.ns, fwd.shaper.ifname, fwd.shaper.rate) == (
        f"{PREFIX}-east-gw",
        "w-west",
        100_000_000,
    )
    assert (rev.shaper.ns, rev.shaper.ifname, rev.shaper.rate) == (
        f"{PREFIX}-west-gw",
        "w-east",
        200_000_000,
    )
    wire = f"{PREFIX}-wan-east-west"
    assert (fwd.impairment.ns, fwd.impairment.ingress_if, fwd.impairment.egress_if) == (
        wire,
        "to-east",
        "to-west",
    )
    assert (rev.impairment.ns, rev.impairment.ingress_if, rev.impairment.egress_if) == (
        wire,
        "to-west",
        "to-east",
    )
    assert (fwd.impairment.delay, rev.impairment.delay) == (
        pytest.approx(0.020),
        pytest.approx(0.010),
    )
    # netem holds this direction's data plus the other direction's ACKs.
    assert fwd.impairment.netem_limit == netem_limit(100_000_000, 200_000_000, 0.020, 0, 375_000)
    assert rev.impairment.netem_limit == netem_limit(200_000_000, 100_000_000, 0.010, 0, 750_000)


@pytest.mark.parametrize(
    ("rate", "delay", "reverse_delay", "bdp"),
    [
        ("10mbit", "25ms", "10ms", 43_750),
        ("10mbit", "10ms", "3ms", 16_250),
        ("10mbit", "20ms", "70ms", 112_500),
    ],
)
def test_bdp_is_exact_for_decimal_inputs(
    rate: str, delay: str, reverse_delay: str, bdp: int
) -> None:
    plan = two_dc(rate=rate, delay=delay, reverse={"delay": reverse_delay})
    assert [d.bdp for d in plan.wan] == [bdp, bdp]


# --- HTB and netem sizing ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rate", "burst"),
    [
        (1_000_000, GSO_FLOOR),
        (100_000_000, GSO_FLOOR),
        (536_000_000, GSO_FLOOR),  # 1 ms at 536 Mbit/s is 67000 B: still below the floor
        (537_000_000, 67_125),
        (1_000_000_000, 125_000),  # 1 ms at 1 Gbit/s
        (10_000_000_000, 1_250_000),
        (1_000_000_001, 125_001),  # rounded up, not down
    ],
)
def test_htb_burst_and_quantum(rate: int, burst: int) -> None:
    assert htb_burst(rate) == burst == max(65536 + 1514, math.ceil(rate / 8 * 1e-3))
    assert htb_quantum(rate) == GSO_FLOOR


def test_plan_shapers_use_burst_and_quantum() -> None:
    plan = two_dc(rate="1gbit", delay="5ms", reverse={"rate": "100mbit"})
    assert [(s.rate, s.burst, s.quantum) for s in plan.shapers] == [
        (1_000_000_000, 125_000, GSO_FLOOR),
        (100_000_000, GSO_FLOOR, GSO_FLOOR),
    ]


def test_netem_limit_formula() -> None:
    # 1 Gbit/s, 50 ms each way, buffer 1bdp = 1e9/8 x 0.1 s = 12.5 MB. In flight during 50 ms:
    # (1e9 + 1e9/2 of ACKs) / 8 x 0.05 = 9.375 MB; plus the buffer = 21.875 MB;
    # x2 for small packets / 1514 B per frame = 28896.97 -> 28897 packets.
    assert netem_limit(10**9, 10**9, 0.050, 0.0, 12_500_000) == 28_897
    plan = two_dc(rate="1gbit", delay="50ms")
    assert [d.impairment.netem_limit for d in plan.wan] == [28_897, 28_897]
    assert FRAME_BYTES == 1514


@pytest.mark.parametrize(
    ("rate", "delay"),
    [(1_000_000, 0.001), (10_000_000, 0.0), (100_000_000, 0.001), (1_000, 1.0)],
)
def test_netem_limit_never_below_the_default(rate: int, delay: float) -> None:
    assert netem_limit(rate, rate, delay, 0.0, 0) == 1000


def test_netem_limit_grows_with_rate_and_delay() -> None:
    limits = [
        netem_limit(rate, rate, delay, 0.0, 0)
        for rate, delay in [(10**8, 0.1), (10**9, 0.1), (10**9, 0.2), (10**10, 0.2)]
    ]
    assert limits == sorted(limits)
    assert len(set(limits)) == len(limits)
    # Jitter counts four times (netem holds packets up to delay + ~4 sigma).
    assert netem_limit(10**9, 10**9, 0.05, 0.005, 0) == netem_limit(10**9, 10**9, 0.07, 0.0, 0)
    # The buffer in front of netem adds to what it must hold.
    assert netem_limit(10**9, 10**9, 0.05, 0.0, 10**7) > netem_limit(10**9, 10**9, 0.05, 0.0, 0)


# --- TCP settings -----------------------------------------------------------------------------


def _host_sysctls(plan: NetworkPlan, cluster: str) -> list[dict[str, str]]:
    return [ns.sysctls for ns in plan.namespaces if ns.role == "host" and ns.cluster == cluster]


@pytest.mark.parametrize(
    ("settings", "tcp_max"),
    [
        ({"rate": "100mbit", "delay": "20ms"}, 6 * MIB),  # 2 x 3 x 500 kB < 6 MiB: the floor
        ({"rate": "1gbit", "delay": "50ms"}, 75_000_000),  # 2 x bbr's STARTUP inflight, 3 BDP
        # a deep buffer: 2 x (pipe + buffer) = 2 x 5 BDP
        ({"rate": "1gbit", "delay": "50ms", "buffer": "4bdp"}, 125_000_000),
        ({"rate": "100mbit", "delay": "20ms", "reverse": {"rate": "10gbit"}}, 300_000_000),
    ],
)
def test_auto_tcp_buffers_cover_twice_the_largest_inflight(
    settings: dict[str, Any], tcp_max: int
) -> None:
    plan = two_dc(**settings)
    assert tcp_max == max(6 * MIB, 2 * max(max(3 * d.bdp, d.bdp + d.buffer) for d in plan.wan))
    for cluster in ("east", "west"):
        for sysctls in _host_sysctls(plan, cluster):
            assert sysctls == {
                "net.ipv4.tcp_congestion_control": "cubic",
                "net.ipv4.tcp_ecn": "0",
                "net.ipv4.tcp_rmem": f"4096 131072 {tcp_max}",
                "net.ipv4.tcp_wmem": f"4096 16384 {tcp_max}",
                "net.ipv4.tcp_slow_start_after_idle": "1",
            }


def test_auto_wmem_keeps_bbr_startup_below_the_writer_wakeup_mark() -> None:
    """Linux wakes a writer on a full send buffer when the queued bytes fall to 2/3 of it; bbr's
    STARTUP keeps 2.89 x BDP in flight. Below that mark, the unsent queue never runs dry."""
    for settings in ({"rate": "1gbit", "delay": "25ms"}, {"rate": "5gbit", "delay": "50ms"}):
        plan = two_dc(**settings)
        bdp = max(d.bdp for d in plan.wan)
        wmem = int(_host_sysctls(plan, "east")[0]["net.ipv4.tcp_wmem"].split()[2])
        assert 2.89 * bdp < 2 / 3 * wmem


def test_auto_rmem_lets_a_loss_based_sender_fill_a_deep_buffer() -> None:
    """The advertised window is ~3/4 of tcp_rmem (measured 19.3 MB of 25 MB): it must cover
    pipe + buffer, or cubic never fills the bottleneck buffer it is given."""
    plan = two_dc(rate="1gbit", delay="25ms", buffer="3bdp")
    (d,) = (d for d in plan.wan if d.name == "east->west")
    rmem = int(_host_sysctls(plan, "west")[0]["net.ipv4.tcp_rmem"].split()[2])
    assert 0.75 * rmem > d.bdp + d.buffer


def test_largest_bdp_of_any_link_sizes_every_host() -> None:
    data = scenario(
        ["a", "b", "c"],
        [link("a", "b", rate="100mbit", delay="1ms"), link("b", "c", rate="10gbit", delay="50ms")],
    )
    plan = plan_of(data)
    for cluster in "abc":
        for sysctls in _host_sysctls(plan, cluster):
            assert sysctls["net.ipv4.tcp_rmem"] == "4096 131072 750000000"  # 2 x 3 x 125 MB


def test_explicit_tcp_settings_and_cluster_override() -> None:
    data = scenario(
        {"east": 2, "west": 1},
        [link("east", "west", rate="100mbit", delay="20ms")],
        tcp={
            "congestion": "cubic",
            "ecn": True,
            "rmem": "4MiB",
            "wmem": "1MiB",
            "slow_start_after_idle": False,
        },
    )
    data["clusters"]["west"]["tcp"] = {"congestion": "bbr", "wmem": "auto"}
    plan = plan_of(data)
    for sysctls in _host_sysctls(plan, "east"):
        assert sysctls == {
            "net.ipv4.tcp_congestion_control": "cubic",
            "net.ipv4.tcp_ecn": "1",
            "net.ipv4.tcp_rmem": f"4096 131072 {4 * MIB}",
            "net.ipv4.tcp_wmem": f"4096 16384 {MIB}",
            "net.ipv4.tcp_slow_start_after_idle": "0",
        }
    (west,) = _host_sysctls(plan, "west")
    assert west == {
        "net.ipv4.tcp_congestion_control": "bbr",
        "net.ipv4.tcp_ecn": "1",  # inherited
        "net.ipv4.tcp_rmem": f"4096 131072 {4 * MIB}",  # inherited
        "net.ipv4.tcp_wmem": f"4096 16384 {6 * MIB}",  # auto
        "net.ipv4.tcp_slow_start_after_idle": "0",  # inherited
    }
    assert plan.congestion == ("bbr", "cubic")
    assert {h.name: h.tcp.congestion for h in plan.hosts} == {
        "east-h0": "cubic",
        "east-h1": "cubic",
        "west-h0": "bbr",
    }


def test_only_hosts_get_tcp_settings_and_only_routers_forward() -> None:
    plan = quickstart()
    for ns in plan.namespaces:
        if ns.role == "host":
            assert "net.ipv4.ip_forward" not in ns.sysctls
            assert "net.ipv4.tcp_congestion_control" in ns.sysctls
        else:
            assert ns.sysctls == {"net.ipv4.ip_forward": "1"}
    assert plan.congestion == ("cubic",)


def test_hosts_file_names_every_host_and_gateway(
    topology: tuple[dict[str, Any], NetworkPlan],
) -> None:
    _, plan = topology
    lines = plan.hosts_file().splitlines()
    assert lines[0] == "127.0.0.1\tlocalhost"
    entries = dict(reversed(line.split("\t")) for line in lines[2:])
    expected = {h.name: h.address for h in plan.hosts} | {g.name: g.address for g in plan.gateways}
    assert entries == expected
    assert plan.hosts_file().endswith("\n")


def test_reorder_without_delay_warns() -> None:
    plan = two_dc(reorder="1%")
    assert "wan[0] east->west: reorder has no effect without delay" in plan.warnings
    assert "wan[0] west->east: reorder has no effect without delay" in plan.warnings


# --- render: iproute2 batches -----------------------------------------------------------------

VETH = re.compile(
    r"link add (\S+) netns (\S+) index (\d+) type veth peer name (\S+) netns (\S+) index (\d+)"
)


def test_root_batch_creates_everything_inside_namespaces(
    topology: tuple[dict[str, Any], NetworkPlan],
) -> None:
    _, plan = topology
    lines = root_batch(plan)
    adds = [line.removeprefix("netns add ") for line in lines if line.startswith("netns add ")]
    assert Counter(adds) == Counter(ns.name for ns in plan.namespaces)
    links = lines[len(adds) :]
    assert lines[: len(adds)] == [f"netns add {ns}" for ns in adds]  # namespaces first
    assert len(links) == len(plan.veths)
    indexes = []
    for line, veth in zip(links, plan.veths, strict=True):
        m = VETH.fullmatch(line)
        assert m, line
        assert (m[1], m[2], m[4], m[5]) == (veth.if_a, veth.ns_a, veth.if_b, veth.ns_b)
        assert {m[2], m[5]} <= set(adds)
        indexes += [int(m[3]), int(m[6])]
    # every end's index its own: never its peer's (the kernel would take the pair for one
    # device and bring a port's carrier back up to 1 s late)
    assert len(set(indexes)) == len(indexes)


def test_ip_batches_carry_addresses_and_routes() -> None:
    plan = quickstart()
    batches = ip_batches(plan)
    assert set(batches) == {ns.name for ns in plan.namespaces}
    assert all(lines[0] == "link set lo up" for lines in batches.values())
    for a in plan.addresses:
        assert f"addr add {a.cidr} dev {a.ifname}" in batches[a.ns]
    east_gw = batches[f"{PREFIX}-east-gw"]
    assert f"route add 10.{SLOT}.1.0/24 via 10.{SLOT}.128.2 src 10.{SLOT}.0.1" in east_gw
    assert east_gw.index("link add br0 type bridge stp_state 0 forward_delay 0") < east_gw.index(
        "link set h0 master br0"
    )
    assert batches[f"{PREFIX}-east-h0"][-1] == f"route add default via 10.{SLOT}.0.1"


def test_ip_ops_are_the_batch_lines_and_each_kind_renders_as_its_ip_command() -> None:
    plan = quickstart()
    ops = ip_ops(plan)
    assert {ns: [ip_line(op) for op in o] for ns, o in ops.items()} == ip_batches(plan)
    gw = ops[f"{PREFIX}-east-gw"]
    # Order matters to the kernel: the bridge before its ports, links up before routes via them.
    assert gw.index(BridgeAdd("br0")) < gw.index(SetMaster("h0", "br0"))
    last_up = max(i for i, op in enumerate(gw) if isinstance(op, LinkUp))
    assert all(i > last_up for i, op in enumerate(gw) if isinstance(op, RouteAdd))
    assert [ip_line(op) for op in (LinkUp("lo"), AddrAdd("10.1.0.1/24", "br0"))] == [
        "link set lo up",
        "addr add 10.1.0.1/24 dev br0",
    ]
    assert ip_line(GsoMaxSegs("eth0", 1)) == "link set dev eth0 gso_max_segs 1"
    assert ip_line(RouteAdd("default", "10.1.0.1")) == "route add default via 10.1.0.1"
    assert not any(isinstance(op, GsoMaxSegs) for o in ops.values() for op in o)
    lossy = ip_ops(two_dc(loss="1%"))
    assert lossy[f"{PREFIX}-east-h0"].count(GsoMaxSegs("eth0", 1)) == 1


def test_wan_bottleneck_lines() -> None:
    plan = quickstart()
    tc = ShapingOnlyBackend().tc_batches(plan)
    assert tc[f"{PREFIX}-east-gw"] == [
        "qdisc add dev w-west root handle 1: htb default 1",
        "class add dev w-west parent 1: classid 1:1 htb rate 100000000bit ceil 100000000bit "
        "burst 67050b cburst 67050b quantum 67050",
        "qdisc add dev w-west parent 1:1 handle 10: bfifo limit 500000",
    ]
    assert (
        tc[f"{PREFIX}-west-gw"][-1]
        == "qdisc add dev w-east parent 1:1 handle 10: bfifo limit 500000"
    )
    assert KernelBackend().tc_batches(plan)[f"{PREFIX}-east-gw"] == tc[f"{PREFIX}-east-gw"]


def test_wire_netem_with_kernel_propagation() -> None:
    plan = quickstart()
    # (100e6 + 50e6) / 8 x 0.02 s + 500000 B buffer = 875000 B; x2 / 1514 -> 1156 packets
    assert KernelBackend().tc_batches(plan)[f"{PREFIX}-wan-east-west"] == [
        "qdisc add dev to-west root handle 1: netem limit 1156 delay 20000us",
        "qdisc add dev to-east root handle 1: netem limit 1156 delay 20000us",
    ]


@pytest.mark.parametrize(
    ("settings", "tail"),
    [
        ({}, ""),
        ({"jitter": "2ms"}, " 2000us distribution normal"),
        ({"loss": "1%"}, " loss random 1%"),
        ({"loss": "0.1%"}, " loss random 0.1%"),
        ({"reorder": "5%"}, " reorder 5%"),
        (
            {"jitter": "2ms", "loss": "1%", "reorder": "5%"},
            " 2000us distribution normal loss random 1% reorder 5%",
        ),
    ],
)
def test_netem_arguments(settings: dict[str, str], tail: str) -> None:
    plan = two_dc(rate="100mbit", delay="20ms", **settings)
    fwd = plan.wan[0]
    assert KernelBackend().tc_batches(plan)[fwd.impairment.ns][0] == (
        f"qdisc add dev to-west root handle 1: netem limit {fwd.impairment.netem_limit} "
        f"delay 20000us{tail}"
    )


@pytest.mark.parametrize(
    "settings",
    [{"delay": "20ms"}, {"delay": "20ms", "jitter": "2ms", "loss": "1%", "reorder": "5%"}, {}],
)
def test_no_netem_without_kernel_propagation(settings: dict[str, str]) -> None:
    data = scenario({"east": 2, "west": 2}, [link("east", "west", **settings)])
    data["clusters"]["east"]["fabric"] = {"rate": "1gbit", "delay": "1ms"}
    data["clusters"]["west"]["fabric"] = {"delay": "1ms"}
    tc = ShapingOnlyBackend().tc_batches(plan_of(data))
    assert [line for lines in tc.values() for line in lines if "netem" in line] == []
    assert f"{PREFIX}-wan-east-west" not in tc


def test_no_netem_for_a_link_without_impairments() -> None:
    tc = KernelBackend().tc_batches(two_dc(rate="100mbit"))
    assert f"{PREFIX}-wan-east-west" not in tc


def _fabric_plan(**fabric: str) -> NetworkPlan:
    data = scenario({"east": 1, "west": 1}, [link("east", "west")])
    data["clusters"]["east"]["fabric"] = fabric
    return plan_of(data)


def _htb(dev: str, rate: int) -> list[str]:
    burst = htb_burst(rate)
    return [
        f"qdisc add dev {dev} root handle 1: htb default 1",
        f"class add dev {dev} parent 1: classid 1:1 htb rate {rate}bit ceil {rate}bit "
        f"burst {burst}b cburst {burst}b quantum {GSO_FLOOR}",
    ]


def test_fabric_rate_and_delay_is_htb_with_a_netem_leaf() -> None:
    plan = _fabric_plan(rate="1gbit", delay="1ms")
    assert [(p.ns, p.ifname) for p in plan.fabric] == [
        (f"{PREFIX}-east-h0", "eth0"),
        (f"{PREFIX}-east-gw", "h0"),
    ]
    tc = KernelBackend().tc_batches(plan)
    limit = plan.fabric[0].netem_limit
    assert limit >= 1000
    assert tc[f"{PREFIX}-east-h0"] == [
        *_htb("eth0", 1_000_000_000),
        f"qdisc add dev eth0 parent 1:1 handle 10: netem limit {limit} delay 1000us",
    ]
    assert tc[f"{PREFIX}-east-gw"][-3:] == [
        *_htb("h0", 1_000_000_000),
        f"qdisc add dev h0 parent 1:1 handle 10: netem limit {limit} delay 1000us",
    ]
    assert f"{PREFIX}-west-h0" not in tc  # west's fabric is unshaped
    # Without kernel propagation the delay is left out and the leaf is the byte-limited queue:
    # 1 Gbit/s x 2 ms = 250000 B.
    assert ShapingOnlyBackend().tc_batches(plan)[f"{PREFIX}-east-h0"] == [
        *_htb("eth0", 1_000_000_000),
        "qdisc add dev eth0 parent 1:1 handle 10: bfifo limit 250000",
    ]


def test_fabric_delay_only_is_a_root_netem() -> None:
    plan = _fabric_plan(delay="1ms")
    limit = plan.fabric[0].netem_limit
    assert limit >= 1000
    tc = KernelBackend().tc_batches(plan)
    assert tc[f"{PREFIX}-east-h0"] == [
        f"qdisc add dev eth0 root handle 1: netem limit {limit} delay 1000us"
    ]
    assert tc[f"{PREFIX}-east-gw"][-1] == (
        f"qdisc add dev h0 root handle 1: netem limit {limit} delay 1000us"
    )
    assert ShapingOnlyBackend().tc_batches(plan).get(f"{PREFIX}-east-h0", []) == []


def test_fabric_rate_only_is_htb_with_bfifo() -> None:
    plan = _fabric_plan(rate="10gbit")
    expected = [
        *_htb("eth0", 10_000_000_000),
        f"qdisc add dev eth0 parent 1:1 handle 10: bfifo limit {MIN_BUFFER}",
    ]
    for backend in (KernelBackend(), ShapingOnlyBackend()):
        assert backend.tc_batches(plan)[f"{PREFIX}-east-h0"] == expected
