"""``build_plan``: a validated scenario -> the ``NetworkPlan`` (testbed.plan.model). PURE.

One testbed takes 10.<slot>.0.0/16. Cluster ``c`` (index k): gateway ``<prefix>-c-gw`` with
bridge ``br0`` at 10.S.k.1/24, host ``c-h<i>`` at 10.S.k.(10+i) behind it. A WAN link (or each
path of a multipath one) is a *wire* namespace ``wan-<a>-<b>[-p<j>]`` joined to both gateways by
veths, one /30 per side from 10.S.128.0/17; gateways route other clusters along the shortest WAN
path (testbed.plan.routes), or leave it to FRR's BGP (``routing.mode: bgp``). Per direction
a->b: HTB + bfifo on gateway a's egress (sizes: testbed.plan.sizing), propagation in the wire
(netem on its egress, or the userspace delay line on its ingress). Fabric links are shaped on
both ends of each host veth. ``testbed.plan.render`` turns the plan into iproute2 input.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from testbed.core.errors import PlanError
from testbed.plan.directions import (
    changing_directions,
    link_directions,
    loss_later,
    traced_directions,
)
from testbed.plan.model import (
    Address,
    BgpNeighbor,
    BgpPlan,
    BgpSpeaker,
    Bridge,
    Cable,
    FabricPort,
    Gateway,
    Host,
    Impairment,
    Namespace,
    NetworkPlan,
    Route,
    Shaper,
    Veth,
    WanDirection,
)
from testbed.plan.routes import MULTIPATH_HASH, cluster_distances, cluster_next_hops, wan_port
from testbed.plan.sizing import (
    MIN_BUFFER,
    bdp_bytes,
    htb_burst,
    htb_quantum,
    netem_limit,
    resolve_buffer,
    sender_inflight_max,
    tcp_buffer_max,
    unfloored_buffer,
)

if TYPE_CHECKING:  # annotations only: a teardown imports the plan without the schema (pydantic)
    from testbed.config.clusters import TcpSettings
    from testbed.config.scenario import Scenario
    from testbed.config.wan import WanLink

WAN_BLOCK_OFFSET = 128  # WAN /30s start at 10.S.128.0
HOST_OFFSET = 10  # hosts start at .10 in their cluster's /24


def build_plan(scenario: Scenario, prefix: str, slot: int) -> NetworkPlan:
    """Scenario -> plan. ``prefix`` names every kernel object; ``slot`` picks 10.<slot>.0.0/16."""
    if not 1 <= slot <= 254:
        raise PlanError(f"address slot {slot} outside 1..254")
    parts = _Parts(scenario, prefix, f"10.{slot}")
    # WAN links first: host TCP buffers depend on the largest inflight over any WAN path.
    for i, link in enumerate(scenario.wan_paths):
        parts.wan_link(i, link)
    for k, cluster in enumerate(scenario.clusters):
        parts.cluster(cluster, k)
    parts.routes.extend(parts.wire_routes)
    later = changing_directions(scenario)
    traced = traced_directions(scenario)
    return NetworkPlan(
        scenario=scenario.name,
        prefix=prefix,
        slot=slot,
        namespaces=tuple(parts.namespaces),
        veths=tuple(parts.veths),
        bridges=tuple(parts.bridges),
        addresses=tuple(parts.addresses),
        routes=tuple(parts.routes),
        shapers=tuple(parts.shapers),
        wan=tuple(
            replace(d, changes_later=d.name in later, traced=d.name in traced) for d in parts.wan
        ),
        hosts=tuple(parts.hosts),
        gateways=tuple(parts.gateways),
        fabric=tuple(parts.fabric),
        congestion=tuple(sorted(parts.congestion)),
        wire_sized_packets=any(d.loss > 0 for d in parts.wan) or loss_later(scenario),
        warnings=tuple(parts.warnings),
        bgp=_bgp_plan(scenario, parts) if scenario.routing.mode == "bgp" else None,
        machines=dict(scenario.placement.machines) if scenario.placement else {},
        cables=tuple(parts.cables),
        mtu=_mtu(scenario) if parts.cables else None,
    )


VXLAN_OVERHEAD = 50  # bytes: outer IPv4 (20) + UDP (8) + VXLAN (8) + inner Ethernet (14)
VNI_PER_SLOT = 256  # a testbed's cables take VNIs slot * 256 + i


def _mtu(scenario: Scenario) -> int | None:
    """Every testbed interface's MTU when cables cross machines: 1450 unless the underlay
    carries a full 1500-byte frame plus the cable's overhead."""
    assert scenario.placement is not None
    return None if scenario.placement.underlay_mtu >= 1500 + VXLAN_OVERHEAD else 1450


BGP_ASN_BASE = 65000  # cluster k speaks as AS 65000 + k (private AS numbers)


def _bgp_plan(scenario: Scenario, parts: _Parts) -> BgpPlan:
    bgp = scenario.routing.bgp
    hold = round(bgp.hold) if bgp is not None else 9
    bfd = bgp.bfd if bgp is not None else None
    speakers = []
    for g in parts.gateways:
        neighbors = tuple(
            BgpNeighbor(peer, local, BGP_ASN_BASE + parts.cluster_index[there], link)
            for (here, there, link, local, peer) in parts.sessions
            if here == g.cluster
        )
        asn = BGP_ASN_BASE + parts.cluster_index[g.cluster]
        paths_toward = {
            c: len(parts.gw_wan_addr[(g.cluster, parts.hops[(g.cluster, c)])])
            for c in parts.cluster_index
            if c != g.cluster
        }
        expected = tuple(
            (f"{parts.net}.{parts.cluster_index[c]}.0/24", n) for c, n in paths_toward.items()
        )
        speakers.append(BgpSpeaker(g.name, g.ns, asn, g.address, g.subnet, neighbors, expected))
    return BgpPlan(
        speakers=tuple(speakers),
        hold_s=hold,
        keepalive_s=max(1, hold // 3),
        maximum_paths=max(len(link.paths_of()) for link in scenario.wan),
        bfd_interval_ms=round(bfd.interval * 1e3) if bfd is not None else None,
        bfd_multiplier=bfd.multiplier if bfd is not None else 3,
    )


@dataclass
class _Parts:
    """``build_plan``'s working state: the plan's lists in the order realization uses them, and
    what the WAN half hands the cluster half (gateway next hops, the largest BDP)."""

    scenario: Scenario
    prefix: str
    net: str  # "10.<slot>"
    namespaces: list[Namespace] = field(default_factory=list)
    veths: list[Veth] = field(default_factory=list)
    bridges: list[Bridge] = field(default_factory=list)
    addresses: list[Address] = field(default_factory=list)
    routes: list[Route] = field(default_factory=list)  # hosts' and gateways'
    wire_routes: list[Route] = field(default_factory=list)  # appended after the others
    shapers: list[Shaper] = field(default_factory=list)
    fabric: list[FabricPort] = field(default_factory=list)
    wan: list[WanDirection] = field(default_factory=list)
    hosts: list[Host] = field(default_factory=list)
    gateways: list[Gateway] = field(default_factory=list)
    congestion: set[str] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)
    # (gw, peer) -> the wire addresses (and weights) of each path between them
    gw_wan_addr: dict[tuple[str, str], list[tuple[str, int]]] = field(default_factory=dict)
    cables: list[Cable] = field(default_factory=list)  # wires crossing machines (placement)
    # BGP sessions (routing.mode bgp): (cluster, peer cluster, path name, local port, peer port)
    sessions: list[tuple[str, str, str, str, str]] = field(default_factory=list)
    max_inflight: int = 0  # sender_inflight_max over the WAN directions: sizes the TCP buffers

    def __post_init__(self) -> None:
        self.cluster_index = {c: k for k, c in enumerate(self.scenario.clusters)}
        self.hops = cluster_next_hops(self.scenario)
        self.dist = cluster_distances(self.scenario)

    def ns_name(self, label: str) -> str:
        return f"{self.prefix}-{label}"

    def machine(self, cluster: str) -> str:
        """The machine ``cluster`` is placed on ("" without a placement)."""
        placement = self.scenario.placement
        return placement.machines[cluster] if placement is not None else ""

    # -- the WAN half ------------------------------------------------------------------------
    def wan_link(self, i: int, link: WanLink) -> None:
        """Wire ``i`` (a link, or one path of a multipath link): its namespace, its two veths and
        /30s, its routes, both directions."""
        a, b = link.between
        label = f"wan-{a}-{b}" + ("" if link.path is None else f"-p{link.path}")
        wire = self.ns_name(label)
        self.namespaces.append(
            Namespace(wire, "wire", label, None, {"net.ipv4.ip_forward": "1"}, self.machine(a))
        )
        wan_base = ipaddress.IPv4Address(f"{self.net}.{WAN_BLOCK_OFFSET}.0")
        side, wire_side = {}, {}
        for j, (here, there) in enumerate(((a, b), (b, a))):
            block = wan_base + 8 * i + 4 * j
            gw_ip, wire_ip = str(block + 1), str(block + 2)
            gw_ns = self.ns_name(f"{here}-gw")
            port = wan_port(there, link.path)
            self.veths.append(Veth(gw_ns, port, wire, f"to-{here}"))
            self.cable(link, wire, f"to-{here}", gw_ns, port, here)
            self.addresses.append(Address(gw_ns, port, f"{gw_ip}/30"))
            self.addresses.append(Address(wire, f"to-{here}", f"{wire_ip}/30"))
            self.gw_wan_addr.setdefault((here, there), []).append((wire_ip, link.weight))
            side[here] = gw_ip
            wire_side[here] = wire_ip
        if self.scenario.routing.mode == "bgp":
            # BGP speaks gateway to gateway across the wire: each gateway reaches its peer's
            # port on this path through this path's wire only (a host route), from its own port.
            for here, there in ((a, b), (b, a)):
                gw_ns = self.ns_name(f"{here}-gw")
                self.routes.append(
                    Route(gw_ns, f"{side[there]}/32", wire_side[here], src=side[here])
                )
                self.sessions.append((here, there, link.name, side[here], side[there]))
        # The wire forwards each destination cluster toward the nearer end.
        for dst, k in self.cluster_index.items():
            toward = a if self.dist[(a, dst)] <= self.dist[(b, dst)] else b
            self.wire_routes.append(Route(wire, f"{self.net}.{k}.0/24", side[toward]))
        fwd, rev = link.direction(False), link.direction(True)
        rtt = fwd["delay"] + rev["delay"]
        names = link_directions(link.between, "both", link.path)
        for name, src, dst, d, other in ((names[0], a, b, fwd, rev), (names[1], b, a, rev, fwd)):
            self.wan_direction(
                name, f"wan[{i}] {name}", wire, src, dst, d, other["rate"], rtt, link.path
            )

    def cable(
        self, link: WanLink, wire: str, wire_if: str, gw_ns: str, gw_if: str, here: str
    ) -> None:
        """The veth wire_if <-> gw_if as a cable when the gateway's machine is not the wire's
        (the wire is on the machine of the link's first cluster)."""
        placement = self.scenario.placement
        if placement is None:
            return
        wire_machine, gw_machine = self.machine(link.between[0]), self.machine(here)
        if gw_machine != wire_machine:
            vni = int(self.net.split(".")[1]) * VNI_PER_SLOT + len(self.cables)
            self.cables.append(
                Cable(link.name, vni, wire, wire_if, wire_machine, gw_ns, gw_if, gw_machine)
            )

    def wan_direction(
        self,
        name: str,
        where: str,
        wire: str,
        src: str,
        dst: str,
        d: dict[str, Any],
        reverse_rate: int,
        rtt: float,
        path: int | None = None,
    ) -> None:
        """One direction's shaper (on ``src``'s gateway) and impairment (in the wire)."""
        rate, delay, jitter, loss, reorder = (
            d[k] for k in ("rate", "delay", "jitter", "loss", "reorder")
        )
        bdp = bdp_bytes(rate, rtt)
        buffer = self.buffer(where, d["buffer"], bdp)
        self.max_inflight = max(self.max_inflight, sender_inflight_max(bdp, buffer))
        aqm = d["aqm"]
        if aqm is not None and aqm.threshold >= buffer:
            raise PlanError(
                f"{where}: aqm threshold {aqm.threshold} B is not below the "
                f"buffer ({buffer} B): the queue would overflow before marking; raise "
                "`buffer` or lower the thresholds"
            )
        if reorder and not delay:
            self.warnings.append(f"{where}: reorder has no effect without delay")
        shaper = Shaper(
            self.ns_name(f"{src}-gw"),
            wan_port(dst, path),
            rate,
            htb_burst(rate),
            htb_quantum(rate),
            buffer,
        )
        limit = netem_limit(rate, reverse_rate, delay, jitter, buffer)
        impairment = Impairment(wire, f"to-{src}", f"to-{dst}", delay, jitter, loss, reorder, limit)
        self.shapers.append(shaper)
        self.wan.append(
            WanDirection(
                name,
                src,
                dst,
                rate,
                delay,
                jitter,
                loss,
                reorder,
                buffer,
                bdp,
                shaper,
                impairment,
                aqm,
            )
        )

    def buffer(self, where: str, setting: tuple[str, float], bdp: int) -> int:
        """Bytes of a ``buffer`` setting (("bdp", multiple) or ("bytes", n)), with the floor."""
        buffer = resolve_buffer(setting, bdp)
        if buffer != unfloored_buffer(setting, bdp):
            self.warnings.append(
                f"{where}: buffer {unfloored_buffer(setting, bdp)} B raised to {MIN_BUFFER} B "
                "(two 64 KiB GSO packets)"
            )
        return buffer

    # -- the cluster half --------------------------------------------------------------------
    def cluster(self, cluster: str, k: int) -> None:
        """Cluster ``k``: its gateway and bridge, its hosts, the gateway's routes to the others."""
        gw_ns = self.ns_name(f"{cluster}-gw")
        subnet = f"{self.net}.{k}.0/24"
        gw_ip = f"{self.net}.{k}.1"
        sysctls = {"net.ipv4.ip_forward": "1"}
        if any(link.paths for link in self.scenario.wan):
            sysctls.update(MULTIPATH_HASH[self.scenario.routing.ecmp.hash])
        self.namespaces.append(
            Namespace(gw_ns, "gateway", f"{cluster}-gw", cluster, sysctls, self.machine(cluster))
        )
        self.gateways.append(Gateway(f"{cluster}-gw", cluster, gw_ns, gw_ip, subnet))
        self.addresses.append(Address(gw_ns, "br0", f"{gw_ip}/24"))
        tcp = self.scenario.cluster_tcp(cluster)
        self.congestion.add(tcp.congestion)
        sysctls = _tcp_sysctls(tcp, self.max_inflight)
        hosts = self.scenario.clusters[cluster].hosts
        for i in range(hosts):
            self.host(cluster, k, i, tcp, sysctls)
        self.bridges.append(Bridge(gw_ns, "br0", tuple(f"h{i}" for i in range(hosts))))
        for dst, m in self.cluster_index.items():
            if dst != cluster and self.scenario.routing.mode == "static":
                vias = self.gw_wan_addr[(cluster, self.hops[(cluster, dst)])]
                multi = tuple(vias) if len(vias) > 1 else ()
                self.routes.append(
                    Route(gw_ns, f"{self.net}.{m}.0/24", vias[0][0], src=gw_ip, nexthops=multi)
                )

    def host(self, cluster: str, k: int, i: int, tcp: TcpSettings, sysctls: dict[str, str]) -> None:
        """Host ``i`` of cluster ``k``: namespace, veth to the gateway, address, default route,
        and the fabric link's shaping or delay on both ends if the cluster has any."""
        label = f"{cluster}-h{i}"
        hns, gw_ns = self.ns_name(label), self.ns_name(f"{cluster}-gw")
        addr = f"{self.net}.{k}.{HOST_OFFSET + i}"
        here = self.machine(cluster)
        self.namespaces.append(Namespace(hns, "host", label, cluster, sysctls, here))
        self.veths.append(Veth(hns, "eth0", gw_ns, f"h{i}"))
        self.addresses.append(Address(hns, "eth0", f"{addr}/24"))
        self.routes.append(Route(hns, "default", f"{self.net}.{k}.1"))
        self.hosts.append(Host(label, cluster, i, hns, "eth0", addr, tcp))
        fabric = self.scenario.clusters[cluster].fabric
        if fabric.rate or fabric.delay:
            rate, delay = fabric.rate, fabric.delay
            bdp = bdp_bytes(rate or 0, 2 * delay)
            limit = netem_limit(rate or 100_000_000_000, rate or 0, delay, 0, bdp)
            for ns, ifname in ((hns, "eth0"), (gw_ns, f"h{i}")):
                self.fabric.append(FabricPort(ns, ifname, rate, delay, max(MIN_BUFFER, bdp), limit))


def _tcp_sysctls(tcp: TcpSettings, max_inflight: int) -> dict[str, str]:
    auto = tcp_buffer_max(max_inflight)
    rmem = auto if tcp.rmem == "auto" else tcp.rmem
    wmem = auto if tcp.wmem == "auto" else tcp.wmem
    out = {
        "net.ipv4.tcp_congestion_control": tcp.congestion,
        "net.ipv4.tcp_ecn": "1" if tcp.ecn else "0",
        "net.ipv4.tcp_rmem": f"4096 131072 {rmem}",
        "net.ipv4.tcp_wmem": f"4096 16384 {wmem}",
        "net.ipv4.tcp_slow_start_after_idle": "1" if tcp.slow_start_after_idle else "0",
    }
    if tcp.retries2 is not None:
        out["net.ipv4.tcp_retries2"] = str(tcp.retries2)
    return out
