"""The network plan: a PURE function from a validated scenario to every object the kernel will hold.

Topology (one testbed, address block 10.<slot>.0.0/16):

* cluster ``c`` (index k): gateway namespace ``<prefix>-c-gw`` with bridge ``br0`` at 10.S.k.1/24;
  host ``c-h<i>`` is namespace ``<prefix>-c-h<i>`` with ``eth0`` at 10.S.k.(10+i)/24, default
  route via the gateway, its veth peer ``h<i>`` enslaved to ``br0``.
* WAN link between clusters a and b: a *wire* namespace ``<prefix>-wan-<a>-<b>`` joined to each
  gateway by a veth (gateway side ``w-<other>``, wire side ``to-<cluster>``), one /30 per side
  from 10.S.128.0/17. The wire routes; gateways route other clusters' subnets over the shortest
  WAN path. A multipath link has a wire per path (``wan-<a>-<b>-p<j>``, ports ``p<j>-<other>``)
  and the gateways one multipath route over them; with ``routing.mode: bgp`` the gateways get
  no routes to other clusters from the plan, only a host route to each peer port across its
  path's wire, and FRR's BGP (``BgpPlan``, rendered by ``testbed.plan.frr``) installs the rest.

Per WAN direction a->b: the bottleneck is HTB (rate, explicit burst/quantum) with a byte-limited
bfifo leaf (the buffer) on gateway a's egress ``w-b``; propagation (delay, jitter, loss, reorder)
happens in the wire, after a veth crossing: a netem qdisc on the wire's egress ``to-b`` (kernel
backend) or the userspace delay line on the wire's ingress ``to-a``. Fabric links are shaped with
HTB on both ends of each host veth.

Nothing here touches the kernel: the plan is data, and ``testbed.plan.render`` turns it into
iproute2 batch input.
"""

from __future__ import annotations

import ipaddress
import math
from collections import deque
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from testbed.core.errors import PlanError
from testbed.core.frames import FRAME_BYTES, MTU, goodput_factor

if TYPE_CHECKING:  # annotations only: a teardown imports the plan without the schema (pydantic)
    from testbed.config.scenario import Aqm, Scenario, TcpSettings, WanLink

# A GSO packet can be up to 64 KiB; a byte-limited queue smaller than two of them would drop
# every large packet, so buffers get this floor (and the plan says so).
MIN_BUFFER = 2 * 65536
WAN_BLOCK_OFFSET = 128  # WAN /30s start at 10.S.128.0
HOST_OFFSET = 10  # hosts start at .10 in their cluster's /24


@dataclass(frozen=True)
class Namespace:
    name: str  # full kernel name, prefix included
    role: str  # host | gateway | wire
    label: str  # name without the prefix (east-h0, east-gw, wan-east-west)
    cluster: str | None
    sysctls: dict[str, str] = field(default_factory=dict)
    machine: str = ""  # where it lives when clusters are placed on machines ("": this one)


@dataclass(frozen=True)
class Veth:
    ns_a: str
    if_a: str
    ns_b: str
    if_b: str


@dataclass(frozen=True)
class Address:
    ns: str
    ifname: str
    cidr: str


@dataclass(frozen=True)
class Route:
    ns: str
    dst: str  # "default" or a CIDR
    via: str
    src: str | None = None  # preferred source: gateways speak from their cluster address
    # A multipath route (a link's parallel paths): (gateway, weight) each; ``via`` is the first.
    nexthops: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Bridge:
    ns: str
    name: str
    ports: tuple[str, ...]


@dataclass(frozen=True)
class Shaper:
    """HTB + byte-limited bfifo on one interface's egress."""

    ns: str
    ifname: str
    rate: int  # bit/s
    burst: int  # bytes
    quantum: int  # bytes
    buffer: int  # bytes (bfifo limit)


@dataclass(frozen=True)
class FabricPort:
    """One end of a host<->gateway link: optional HTB rate, optional one-way delay (netem)."""

    ns: str
    ifname: str
    rate: int | None
    delay: float
    buffer: int  # bytes: bfifo limit when shaped without delay
    netem_limit: int  # packets: when delayed


@dataclass(frozen=True)
class Impairment:
    """Propagation of one direction: delay/jitter/loss/reorder, applied in a wire namespace.

    ``ge_p``/``ge_r`` turn on Gilbert-Elliott burst loss (a ``burst_loss`` fault): per packet
    the link moves good -> bad with probability ``ge_p`` and bad -> good with ``ge_r``; every
    packet is lost in the bad state, ``loss`` applies in the good one (netem ``loss gemodel p r
    100% loss``; the delay line's model does the same). Long-run loss ~ p/(p+r) (plus ``loss``
    of the rest), mean burst 1/r packets. Off (0, 0) at bring-up: only faults set it."""

    ns: str
    ingress_if: str  # where packets of this direction enter the wire (userspace line hooks here)
    egress_if: str  # where they leave it (kernel netem sits here)
    delay: float
    jitter: float
    loss: float
    reorder: float
    netem_limit: int  # packets
    ge_p: float = 0.0  # Gilbert-Elliott: good -> bad per packet (0: off)
    ge_r: float = 0.0  # bad -> good per packet
    # The wire forwards at layer 2 (a bridged link, testbed.plan.bridged): its interfaces are
    # bridge ports, which iptables matches with -m physdev.
    bridged: bool = False

    @property
    def active(self) -> bool:
        return bool(self.delay or self.jitter or self.loss or self.reorder or self.ge_p)


@dataclass(frozen=True)
class WanDirection:
    name: str  # "east->west"
    src: str
    dst: str
    rate: int
    delay: float
    jitter: float
    loss: float
    reorder: float
    buffer: int  # bytes, resolved
    bdp: int  # bytes: rate x RTT of this link (forward + reverse delay)
    shaper: Shaper
    impairment: Impairment
    aqm: Aqm | None = None  # None: drop-tail in the HTB leaf
    # A schedule, trace or fault changes its delay, jitter, loss, reorder or burst loss while
    # it runs: the backend emulates its propagation from bring-up, even when idle at first.
    changes_later: bool = False
    # A trace replays on it: its rate changes every bin, and a zero-rate bin holds its queue.
    traced: bool = False

    @property
    def multipath(self) -> bool:
        """One path of a multipath link (``east->west/1``): the gateways hash flows onto it."""
        return "/" in self.name

    @property
    def marking(self) -> bool:
        """A red or step profile: the kernel needs ``sch_red``, else the delay line emulates it."""
        return self.aqm is not None and self.aqm.kind != "droptail"


@dataclass(frozen=True)
class Host:
    name: str  # east-h0
    cluster: str
    index: int
    ns: str
    ifname: str
    address: str
    tcp: TcpSettings


@dataclass(frozen=True)
class Gateway:
    name: str  # east-gw
    cluster: str
    ns: str
    address: str
    subnet: str


@dataclass(frozen=True)
class Cable:
    """A WAN wire's veth that crosses machines (``placement``): the wire namespace (on the
    machine of the link's first cluster) and the far gateway are joined by a VXLAN cable
    instead, one VNI each (UDP 4789), each end made in its machine's own namespace and moved
    into the wire or gateway. Shaping stays where it is (HTB + bfifo on the sending gateway,
    propagation in the wire), never on the cable."""

    link: str  # the wire's link or path name, "east-west" / "east-west/1"
    vni: int
    wire_ns: str
    wire_if: str  # to-<cluster>
    wire_machine: str
    gw_ns: str
    gw_if: str  # w-<peer> / p<j>-<peer>
    gw_machine: str


@dataclass(frozen=True)
class BgpNeighbor:
    """An eBGP session of a gateway on one WAN path: to the peer gateway's port on that path
    (two hops away, across the path's wire), spoken from this gateway's port."""

    address: str  # the peer gateway's port
    local: str  # this gateway's port (update-source, BFD's source)
    asn: int  # the peer's
    link: str  # the path's name, "east-west/1" ("east-west" for a single-path link)


@dataclass(frozen=True)
class BgpSpeaker:
    """FRR in one gateway: its AS, router id, the cluster subnet it announces, its sessions."""

    gateway: str  # east-gw
    ns: str
    asn: int
    router_id: str  # the gateway's cluster address
    network: str  # the cluster subnet
    neighbors: tuple[BgpNeighbor, ...]
    # (subnet, nexthops): the routes it has once every session is up (its bring-up waits for
    # them), each over every path of the link toward that cluster's next hop
    expected: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class BgpPlan:
    """``routing.mode: bgp``: every gateway speaks eBGP on every WAN path; equal-cost multipath
    over all paths (maximum-paths); timers; BFD on every session when ``bfd_interval_ms``."""

    speakers: tuple[BgpSpeaker, ...]
    hold_s: int
    keepalive_s: int
    maximum_paths: int
    bfd_interval_ms: int | None
    bfd_multiplier: int


@dataclass(frozen=True)
class NetworkPlan:
    scenario: str
    prefix: str
    slot: int
    namespaces: tuple[Namespace, ...]
    veths: tuple[Veth, ...]
    bridges: tuple[Bridge, ...]
    addresses: tuple[Address, ...]
    routes: tuple[Route, ...]
    shapers: tuple[Shaper, ...]  # WAN bottlenecks
    fabric: tuple[FabricPort, ...]  # shaped or delayed host<->gateway link ends
    wan: tuple[WanDirection, ...]
    hosts: tuple[Host, ...]
    gateways: tuple[Gateway, ...]
    congestion: tuple[str, ...]  # every algorithm some namespace selects
    wire_sized_packets: bool  # loss > 0 somewhere: senders emit MTU-sized packets, not GSO
    warnings: tuple[str, ...]
    bgp: BgpPlan | None = None  # routing.mode bgp: FRR in the gateways routes between clusters
    # placement across machines (planned, issue 19 b): cluster -> machine, the cables, and the
    # MTU of every testbed interface (None: the kernel's 1500; 1450 under a 1500 underlay)
    machines: dict[str, str] = field(default_factory=dict)
    cables: tuple[Cable, ...] = ()
    mtu: int | None = None

    @property
    def interface_mtu(self) -> int:
        """The MTU every testbed interface has (the kernel's default unless ``mtu`` is set)."""
        return self.mtu or MTU

    @property
    def goodput_factor(self) -> float:
        """TCP payload per frame byte on this plan's interfaces (the HTB ceiling's share)."""
        return goodput_factor(self.interface_mtu)

    def has_ns(self, ns: str) -> bool:
        """Whether namespace ``ns`` is this plan's to build (every one, unless the plan is one
        machine's part of a topology over several: :meth:`part`)."""
        return ns in self._names

    @cached_property
    def _names(self) -> frozenset[str]:
        return frozenset(n.name for n in self.namespaces)

    def part(self, machine: str) -> NetworkPlan:
        """What ``machine`` builds of a topology placed over several machines: its clusters'
        and wires' namespaces with what lives in them, the veths between two of them, and the
        WAN directions whose shaper or wire is here (a backend builds only the halves in
        :meth:`has_ns`). ``cables`` stays whole (each machine makes its own ends), and so do
        ``hosts`` and ``gateways``: every machine's hosts file names them all."""
        if machine not in self.machines.values():
            known = ", ".join(sorted(set(self.machines.values())))
            raise PlanError(f"no cluster is placed on machine {machine!r} (machines: {known})")
        here = frozenset(n.name for n in self.namespaces if n.machine == machine)
        return replace(
            self,
            namespaces=tuple(n for n in self.namespaces if n.name in here),
            veths=tuple(v for v in self.veths if v.ns_a in here and v.ns_b in here),
            bridges=tuple(b for b in self.bridges if b.ns in here),
            addresses=tuple(a for a in self.addresses if a.ns in here),
            routes=tuple(r for r in self.routes if r.ns in here),
            shapers=tuple(s for s in self.shapers if s.ns in here),
            fabric=tuple(p for p in self.fabric if p.ns in here),
            wan=tuple(d for d in self.wan if d.shaper.ns in here or d.impairment.ns in here),
            bgp=None
            if self.bgp is None
            else replace(self.bgp, speakers=tuple(s for s in self.bgp.speakers if s.ns in here)),
        )

    def machine_of(self, ns: str) -> str:
        """The machine namespace ``ns`` lives on ("" without a placement)."""
        return next(n.machine for n in self.namespaces if n.name == ns)

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def names(self) -> dict[str, str]:
        """Every resolvable name (hosts and gateways) -> address."""
        out = {h.name: h.address for h in self.hosts}
        out.update({g.name: g.address for g in self.gateways})
        return out

    def hosts_file(self) -> str:
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        lines += [f"{addr}\t{name}" for name, addr in self.names().items()]
        return "\n".join(lines) + "\n"

    def needs_propagation_emulation(self) -> bool:
        return any(d.impairment.active for d in self.wan) or any(p.delay for p in self.fabric)

    def needs_marking(self) -> bool:
        return any(d.marking for d in self.wan)

    def needs_hold(self) -> bool:
        """A trace replays on a WAN direction: its zero-rate bins hold the queue (in the kernel,
        a plug leaf under HTB)."""
        return any(d.traced for d in self.wan)


# The gateways' multipath hash. l4 is policy 3 with the 5-tuple's fields (source and
# destination address, protocol, ports: 0x37), not policy 1: policy 1 takes a packet's own L4
# hash when it carries one, and a packet from a socket on this machine carries the socket's
# random hash across the veths (a router behind a real cable never sees it), which TCP picks
# anew after a retransmission timeout: its path would be a coin toss per socket and change
# with every RTO. Policy 3 hashes the fields of every packet, as a router does.
MULTIPATH_HASH = {
    "l3": {"net.ipv4.fib_multipath_hash_policy": "0"},
    "l4": {
        "net.ipv4.fib_multipath_hash_policy": "3",
        "net.ipv4.fib_multipath_hash_fields": "55",  # 0x37
    },
}


def wan_port(peer: str, path: int | None) -> str:
    """A gateway's WAN port toward ``peer``: ``w-<peer>``, or ``p<j>-<peer>`` for path j of a
    multipath link (at most 15 characters: cluster names are at most 12)."""
    return f"w-{peer}" if path is None else f"p{path}-{peer}"


def bdp_bytes(rate: int, rtt: float) -> int:
    """rate x RTT in bytes; rounded to the nearest byte so float noise (10 Mbit/s x 35 ms =
    43750.000000001) does not add one."""
    return round(rate * rtt / 8)


def unfloored_buffer(setting: tuple[str, float], bdp: int) -> int:
    """Bytes of a ``buffer`` setting (("bdp", multiple) or ("bytes", n)) at this BDP."""
    kind, amount = setting
    return math.ceil(amount * bdp) if kind == "bdp" else int(amount)


def resolve_buffer(setting: tuple[str, float], bdp: int) -> int:
    """The bottleneck buffer in bytes: the setting at this BDP, never below ``MIN_BUFFER``. The
    plan sizes each direction with it at bring-up and the timeline again at every rate or
    delay change (a ``buffer: Nbdp`` follows the link)."""
    return max(MIN_BUFFER, unfloored_buffer(setting, bdp))


def htb_burst(rate: int) -> int:
    """Bucket size: at least one 64 KiB GSO packet, or 1 ms at the rate, whichever is larger."""
    return max(65536 + FRAME_BYTES, math.ceil(rate / 8 * 1e-3))


def htb_quantum(rate: int) -> int:
    """HTB's default quantum (rate/r2q) overflows at high rates; pin it to one 64 KiB packet."""
    return 65536 + FRAME_BYTES


def netem_limit(rate: int, reverse_rate: int, delay: float, jitter: float, buffer: int) -> int:
    """Packets netem must be able to hold: everything in flight during the delay, plus the ACKs
    of the opposite direction's data, plus the buffer; counted in full-size frames, doubled for
    small packets, never below netem's default of 1000 (the classic long-fat-link pitfall)."""
    hold = delay + 4 * jitter
    in_flight = (rate + reverse_rate / 2) / 8 * hold + buffer
    return max(1000, math.ceil(2 * in_flight / FRAME_BYTES))


# bbr's STARTUP cwnd gain is 2.89 (2/ln 2): the most a sender keeps in flight on an empty path
STARTUP_INFLIGHT_BDP = 3


def sender_inflight_max(bdp: int, buffer: int) -> int:
    """The most one sender keeps in flight over a WAN direction: bbr's STARTUP cwnd (about
    3 x BDP), or pipe + buffer for a loss-based one that fills the bottleneck."""
    return max(STARTUP_INFLIGHT_BDP * bdp, bdp + buffer)


def tcp_buffer_max(inflight: int) -> int:
    """tcp_rmem/tcp_wmem maximum for 'auto': twice the largest ``sender_inflight_max``, never
    below the kernel default (6 MiB).

    Send side: Linux wakes a writer blocked on a full send buffer only once the queued bytes (in
    flight and not yet sent) are down to 2/3 of it (sk_stream_write_space). If what is in flight
    alone is above 2/3, the unsent part runs dry first and the next write finds an empty queue
    with room in the cwnd: the socket is marked application-limited. bbr ignores
    application-limited bandwidth samples when it checks whether its bandwidth stopped growing,
    so with 4 x BDP (2/3 of it is 2.67 BDP, below STARTUP's 2.89 BDP) it could stay in STARTUP
    for the whole transfer, overflowing a 1-BDP bottleneck buffer (docs/congestion.md, "bbr
    through the delay line"). Twice the inflight leaves a third of the buffer unsent when the
    writer is woken.
    Receive side: the window advertised is about 3/4 of the buffer (the payload share of the
    received skbs' memory), so twice the inflight is a window of 1.5 x it; with 4 x BDP a cubic
    flow could not fill a bottleneck buffer deeper than ~2 BDP (receive-window-limited)."""
    return max(6 * 1024 * 1024, 2 * inflight)


def link_directions(
    between: tuple[str, str], which: str, path: int | None = None
) -> tuple[str, ...]:
    """A WAN link's direction names for ``forward`` (between[0] -> between[1]), ``reverse`` or
    ``both``; a path of a multipath link has its index after a slash (``east->west/1``)."""
    a, b = between
    tail = "" if path is None else f"/{path}"
    return {
        "forward": (f"{a}->{b}{tail}",),
        "reverse": (f"{b}->{a}{tail}",),
        "both": (f"{a}->{b}{tail}", f"{b}->{a}{tail}"),
    }[which]


PROPAGATION = ("delay", "jitter", "loss", "reorder")


def changing_directions(scenario: Scenario) -> set[str]:
    """WAN directions whose propagation (delay, jitter, loss, reorder, burst loss) a schedule, a
    trace or a fault changes while the workload runs (``WanDirection.changes_later``): their
    emulation must exist from bring-up. Rate changes and blackholes need none (HTB, iptables).
    A csv trace may carry delay and loss: the plan does not read files, so it counts."""
    out: set[str] = set()
    for link in scenario.wan:
        for step in link.schedule:
            if any(getattr(step, f) is not None for f in PROPAGATION):
                out.update(link_directions(link.between, step.direction))
        if link.trace is not None and link.trace.format == "csv":
            out.update(link_directions(link.between, link.trace.direction))
    for f in scenario.faults:
        if f.kind == "burst_loss":
            for p in scenario.links_named(f.link):
                out.update(link_directions(p.between, f.direction, p.path))
    return out


def traced_directions(scenario: Scenario) -> set[str]:
    """WAN directions a trace replays on (``WanDirection.traced``)."""
    return {
        d
        for link in scenario.wan
        if link.trace is not None
        for d in link_directions(link.between, link.trace.direction)
    }


def loss_later(scenario: Scenario) -> bool:
    """Whether a schedule step, a csv trace (it may carry loss) or a burst loss brings loss to a
    link while it runs: the hosts must then send wire-sized packets from bring-up (render.py)."""
    steps = any(s.loss for link in scenario.wan for s in link.schedule)
    traces = any(link.trace is not None and link.trace.format == "csv" for link in scenario.wan)
    return steps or traces or any(f.kind == "burst_loss" for f in scenario.faults)


def _shortest_next_hops(scenario: Scenario) -> dict[tuple[str, str], str]:
    """(from cluster, to cluster) -> next cluster on a shortest WAN path (BFS, ties by order)."""
    neighbours: dict[str, list[str]] = {c: [] for c in scenario.clusters}
    for link in scenario.wan:
        a, b = link.between
        neighbours[a].append(b)
        neighbours[b].append(a)
    hops: dict[tuple[str, str], str] = {}
    for src in scenario.clusters:
        first: dict[str, str] = {}
        queue = deque()
        for n in neighbours[src]:
            if n not in first:
                first[n] = n
                queue.append(n)
        while queue:
            here = queue.popleft()
            for n in neighbours[here]:
                if n != src and n not in first:
                    first[n] = first[here]
                    queue.append(n)
        for dst, nxt in first.items():
            hops[(src, dst)] = nxt
    return hops


def _distances(scenario: Scenario) -> dict[tuple[str, str], int]:
    hops = _shortest_next_hops(scenario)
    dist: dict[tuple[str, str], int] = {}
    for src in scenario.clusters:
        for dst in scenario.clusters:
            n, here = 0, src
            while here != dst:
                here = hops[(here, dst)]
                n += 1
            dist[(src, dst)] = n
    return dist


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
        self.hops = _shortest_next_hops(self.scenario)
        self.dist = _distances(self.scenario)

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
