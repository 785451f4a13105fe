"""The network plan's data: every object the kernel will hold, as frozen dataclasses. PURE.

``NetworkPlan`` is what ``testbed.plan.topology.build_plan`` returns and every backend, renderer
and run reads: namespaces, veths, bridges, addresses and routes; per WAN direction its shaper
(HTB + bfifo on the sending gateway) and impairment (propagation in the wire); the fabric ports,
hosts, gateways, BGP speakers and the cables of a topology placed over several machines. Data
only (the schema is imported for annotations alone: a teardown reads a plan without pydantic).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING

from testbed.core.direction import Direction
from testbed.core.errors import PlanError
from testbed.core.frames import MTU, goodput_factor

if TYPE_CHECKING:  # annotations only: a teardown imports the plan without the schema (pydantic)
    from testbed.config.clusters import TcpSettings
    from testbed.config.wan import Aqm


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
        return Direction.parse(self.name).multipath

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
    # placement across machines: cluster -> machine, the cables, and the MTU of every testbed
    # interface (None: the kernel's 1500; 1450 under a 1500 underlay)
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
