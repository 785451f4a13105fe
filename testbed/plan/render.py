"""Plan -> what to create in the kernel, as iproute2 batch input and structured operations.
PURE: no kernel access.

One ``ip`` batch runs in the initial namespace to create the namespaces and the veth pairs
directly inside them (nothing ever appears in the initial namespace). Then each namespace's
links, addresses and routes are :func:`ip_ops` (structured; :mod:`testbed.net.rtnl` sends them as
rtnetlink requests from the testbed's own process, which beat one ``ip -n NS -batch`` process per
namespace, and :func:`ip_line` is each one as an ``ip`` command), and one ``tc -n NS -batch`` per
namespace with qdiscs. iproute2 batches and these requests both measured several times faster
than pyroute2 (benchmarks/RESULTS.md). Every token comes from the validated plan, never from raw
text. The qdisc lines are pieces: which of them a testbed gets is its link backend's choice
(``testbed.link``: kernel netem, shaping only, or the userspace delay line)."""

from __future__ import annotations

import dataclasses
import ipaddress
import math
from collections import defaultdict
from typing import Any, NamedTuple

from testbed.core.frames import FRAME_BYTES
from testbed.plan.model import FabricPort, Impairment, NetworkPlan, Shaper, WanDirection
from testbed.plan.sizing import htb_burst, htb_quantum

# The interface index of each veth end: VETH_INDEX + 2i and the next for the plan's veth i.
# Indexes count per namespace, so two ends made in fresh namespaces may get the same one; the
# kernel then takes the end for a device of its own (its link is itself) and puts the carrier
# change of a port brought up again (a link down's or a gateway crash's end) on its slow path:
# up to 1 s without a queue on that port, every packet through it dropped meanwhile.
VETH_INDEX = 1000


def root_batch(plan: NetworkPlan) -> list[str]:
    return [f"netns add {ns.name}" for ns in plan.namespaces] + veth_batch(plan)


def veth_batch(plan: NetworkPlan) -> list[str]:
    """The plan's veth pairs between its (existing, named) namespaces, each end its index."""
    return [
        f"link add {v.if_a} netns {v.ns_a} index {VETH_INDEX + 2 * i} type veth "
        f"peer name {v.if_b} netns {v.ns_b} index {VETH_INDEX + 2 * i + 1}"
        for i, v in enumerate(plan.veths)
    ]


VXLAN_PORT = 4789  # IANA's: a machine's cables share one UDP socket, told apart by VNI


def cable_batch(plan: NetworkPlan, machine: str, addresses: dict[str, str]) -> list[str]:
    """``ip`` batch lines, run in ``machine``'s own namespace, that make its ends of the
    plan's VXLAN cables and move each into its wire or gateway namespace under the planned
    name (the device keeps its UDP socket in the namespace it was made in, on the underlay).
    ``addresses``: machine -> its underlay IPv4 address."""
    for name, addr in addresses.items():
        if ipaddress.ip_address(addr).version != 4:
            raise ValueError(f"underlay address of {name}: {addr!r} is not IPv4")
    lines = []
    for i, c in enumerate(plan.cables):
        for ns, ifname, mine, other in (
            (c.wire_ns, c.wire_if, c.wire_machine, c.gw_machine),
            (c.gw_ns, c.gw_if, c.gw_machine, c.wire_machine),
        ):
            if mine != machine:
                continue
            made = f"{plan.prefix}c{i}"  # unique on the machine while it is there
            lines += [
                f"link add {made} mtu {plan.mtu or 1500} type vxlan id {c.vni} "
                f"local {addresses[mine]} remote {addresses[other]} dstport {VXLAN_PORT}",
                f"link set {made} netns {ns} name {ifname}",
            ]
    return lines


def teardown_batch(namespaces: list[str]) -> list[str]:
    return [f"netns del {ns}" for ns in namespaces]


class LinkUp(NamedTuple):
    dev: str


class LinkDown(NamedTuple):
    """Administratively down (a fault): the kernel flushes the routes through it."""

    dev: str


class SetMtu(NamedTuple):
    """The interface's MTU (every testbed interface, when VXLAN cables cross machines)."""

    dev: str
    mtu: int


class BridgeAdd(NamedTuple):
    """A bridge without STP and without forwarding delay: ports forward as soon as they are up."""

    name: str


class SetMaster(NamedTuple):
    port: str
    master: str


class AddrAdd(NamedTuple):
    cidr: str
    dev: str


class GsoMaxSegs(NamedTuple):
    dev: str
    segs: int


class LinkGroup(NamedTuple):
    """The interface's device group (a fault's switch: ``iptables -m devgroup`` matches it)."""

    dev: str
    group: int


class RouteAdd(NamedTuple):
    dst: str  # "default" or a CIDR
    via: str
    src: str | None = None
    replace: bool = False  # create or replace (a fault's restore: idempotent)
    nexthops: tuple[tuple[str, int], ...] = ()  # a multipath route: (gateway, weight) each


class NeighPin(NamedTuple):
    """A permanent neighbour entry for ``ip`` on ``dev`` with a MAC nobody has (a dead peer:
    packets for it leave and are lost, none wait for address resolution)."""

    ip: str
    dev: str


class NeighDel(NamedTuple):
    ip: str
    dev: str


class NeighLearn(NamedTuple):
    """A neighbour entry for ``ip`` on ``dev`` with the MAC it has (``mac``), stale: as if
    learned from a packet, so the kernel confirms it when it next uses it (a port back up:
    its traffic need not wait for address resolution, faults.FaultOps._pin)."""

    ip: str
    dev: str
    mac: str


# Locally administered, never given to an interface here (veths get random ones).
DEAD_MAC = "02:de:ad:00:00:01"

IpOp = (
    LinkUp | LinkDown | LinkGroup | SetMtu | BridgeAdd | SetMaster | AddrAdd | GsoMaxSegs | RouteAdd
    | NeighPin | NeighDel | NeighLearn
)  # fmt: skip


def ip_ops(plan: NetworkPlan) -> dict[str, list[IpOp]]:
    """Namespace -> what to configure in it, in order (links up, bridges, addresses, routes).

    :mod:`testbed.net.rtnl` sends these as rtnetlink requests; :func:`ip_line` is each one's
    ``ip`` command (the same request), for error messages and for running it by hand."""
    out: dict[str, list[IpOp]] = defaultdict(list)
    for ns in plan.namespaces:
        out[ns.name].append(LinkUp("lo"))
    for br in plan.bridges:
        out[br.ns].append(BridgeAdd(br.name))
        out[br.ns] += [SetMaster(port, br.name) for port in br.ports]
    for a in plan.addresses:
        out[a.ns].append(AddrAdd(a.cidr, a.ifname))
    ifaces: dict[str, list[str]] = defaultdict(list)
    for v in plan.veths:
        ifaces[v.ns_a].append(v.if_a)
        ifaces[v.ns_b].append(v.if_b)
    for c in plan.cables:  # this machine's ends of the VXLAN cables (made by testbed.net.cables)
        for ns, ifname in ((c.wire_ns, c.wire_if), (c.gw_ns, c.gw_if)):
            if plan.has_ns(ns) and ifname not in ifaces[ns]:
                ifaces[ns].append(ifname)
    for br in plan.bridges:
        # a port made outside the plan (a bridged link's ends, testbed.plan.bridged) too
        ifaces[br.ns] += [p for p in br.ports if p not in ifaces[br.ns]] + [br.name]
    for ns, names in ifaces.items():
        # a bridge takes its ports' smallest MTU, but only if it has none set: all get it
        out[ns] += [SetMtu(name, plan.mtu) for name in names] if plan.mtu else []
        out[ns] += [LinkUp(name) for name in names]
    if plan.wire_sized_packets:
        # Loss applies per queued packet, in netem as in the delay line; a 64 KiB GSO packet
        # would lose 44 wire packets at once. One segment per packet makes loss per wire packet.
        for h in plan.hosts:
            if plan.has_ns(h.ns):
                out[h.ns].append(GsoMaxSegs(h.ifname, 1))
    for r in plan.routes:
        out[r.ns].append(RouteAdd(r.dst, r.via, r.src, nexthops=r.nexthops))
    return dict(out)


def ip_line(op: IpOp) -> str:
    """``op`` as a line of ``ip -batch`` input."""
    match op:
        case LinkUp(dev):
            return f"link set {dev} up"
        case LinkDown(dev):
            return f"link set {dev} down"
        case BridgeAdd(name):
            return f"link add {name} type bridge stp_state 0 forward_delay 0"
        case SetMaster(port, master):
            return f"link set {port} master {master}"
        case AddrAdd(cidr, dev):
            return f"addr add {cidr} dev {dev}"
        case GsoMaxSegs(dev, segs):
            return f"link set dev {dev} gso_max_segs {segs}"
        case LinkGroup(dev, group):
            return f"link set dev {dev} group {group}"
        case SetMtu(dev, mtu):
            return f"link set dev {dev} mtu {mtu}"
        case RouteAdd(dst, via, src, replace, nexthops):
            verb = "replace" if replace else "add"
            src_part = f" src {src}" if src else ""
            if nexthops:
                hops = "".join(f" nexthop via {gw} weight {w}" for gw, w in nexthops)
                return f"route {verb} {dst}{src_part}{hops}"
            return f"route {verb} {dst} via {via}{src_part}"
        case NeighPin(ip, dev):
            return f"neigh replace {ip} lladdr {DEAD_MAC} nud permanent dev {dev}"
        case NeighDel(ip, dev):
            return f"neigh del {ip} dev {dev}"
        case NeighLearn(ip, dev, mac):
            return f"neigh replace {ip} lladdr {mac} nud stale dev {dev}"
    raise TypeError(f"not an ip operation: {op!r}")


def ip_batches(plan: NetworkPlan) -> dict[str, list[str]]:
    """Namespace -> ``ip`` batch lines: :func:`ip_ops` as text."""
    return {ns: [ip_line(op) for op in ops] for ns, ops in ip_ops(plan).items()}


def shaper_lines(s: Shaper) -> list[str]:
    dev = s.ifname
    return [
        f"qdisc add dev {dev} root handle 1: htb default 1",
        f"class add dev {dev} parent 1: classid 1:1 htb rate {s.rate}bit ceil {s.rate}bit "
        f"burst {s.burst}b cburst {s.burst}b quantum {s.quantum}",
        f"qdisc add dev {dev} parent 1:1 handle 10: bfifo limit {s.buffer}",
    ]


def red_args(d: WanDirection) -> str:
    """``sch_red`` parameters for a red (DCQCN-like) or step (DCTCP-like) profile.

    A step at k is RED with min k, max k+1 and probability 1. ``burst`` is the smallest tc accepts
    for ``min``, which gives the averaging weight 1/2: RED then reacts to (nearly) the
    instantaneous queue, as DCQCN's and DCTCP's switches do, instead of a slow average. Above
    ``max`` RED marks ECN-capable packets (no ``harddrop``) and drops the others."""
    aqm = d.aqm
    assert aqm is not None and aqm.kind in ("red", "step")
    if aqm.kind == "red":
        assert aqm.kmin is not None and aqm.kmax is not None and aqm.pmax is not None
        kmin, kmax, p = aqm.kmin, aqm.kmax, aqm.pmax
    else:
        assert aqm.k is not None
        kmin, kmax, p = aqm.k, aqm.k + 1, 1.0
    burst = kmin // FRAME_BYTES + 1
    args = (
        f"red limit {d.buffer} min {kmin} max {kmax} avpkt {FRAME_BYTES} burst {burst} "
        f"probability {p:.6g} bandwidth {d.rate}bit"
    )
    return args + (" ecn" if aqm.ecn else "")


def wan_shaper_lines(d: WanDirection) -> list[str]:
    """The bottleneck of one WAN direction: HTB with a bfifo leaf, or a red leaf, or (a trace
    replays on it) a plug leaf, which can hold its queue through a zero-rate bin. tc knows no
    plug options: the leaf starts plugged with its default limit, and :func:`plug_start_ops`
    (rtnetlink) sets its limit and opens it before any traffic."""
    lines = shaper_lines(d.shaper)
    if d.marking:
        lines[-1] = f"qdisc add dev {d.shaper.ifname} parent 1:1 handle 10: {red_args(d)}"
    elif d.traced:
        lines[-1] = f"qdisc add dev {d.shaper.ifname} parent 1:1 handle 10: plug"
    return lines


def holds_in_plug(d: WanDirection) -> bool:
    """Whether the kernel bottleneck of ``d`` has a plug leaf (:func:`wan_shaper_lines`)."""
    return d.traced and not d.marking


def plug_start_ops(d: WanDirection) -> list[TcOp]:
    """The plug leaf's byte limit (the buffer, as bfifo's) and its opening (a FIFO from now)."""
    return [PlugCtl(d.shaper.ifname, PLUG_LIMIT, d.buffer), PlugCtl(d.shaper.ifname, PLUG_OPEN)]


class HtbChange(NamedTuple):
    """``tc class change`` of a bottleneck's HTB class 1:1 (rate = ceil, burst = cburst)."""

    dev: str
    rate: int  # bit/s
    burst: int  # bytes
    quantum: int  # bytes


class FifoLimit(NamedTuple):
    """``tc qdisc change`` of a bottleneck's bfifo leaf 10: to a new byte limit."""

    dev: str
    limit: int  # bytes


# sch_plug's actions (linux/pkt_sched.h TCQ_PLUG_*): close = keep what arrives (BUFFER), open =
# release everything and go on as a FIFO (RELEASE_INDEFINITE), limit = a new byte limit
PLUG_CLOSE, PLUG_OPEN, PLUG_LIMIT = 0, 2, 3
PLUG_WORDS = {PLUG_CLOSE: "block", PLUG_OPEN: "release_indefinite", PLUG_LIMIT: "limit"}


class PlugCtl(NamedTuple):
    """A ``plug`` leaf 10:'s action (closed: a zero-rate trace bin holds the queue)."""

    dev: str
    action: int  # PLUG_CLOSE | PLUG_OPEN | PLUG_LIMIT
    limit: int = 0  # bytes, for PLUG_LIMIT


TcOp = HtbChange | FifoLimit | PlugCtl


def rate_change_ops(d: WanDirection, rate: int, buffer: int) -> list[TcOp]:
    """Changing the bottleneck of ``d`` to ``rate`` bit/s and a ``buffer``-byte queue in place:
    HTB recomputes rate, ceil, burst and quantum of the class and keeps its token state; the
    leaf keeps the packets it holds (a byte-limited queue does not follow the rate on its own,
    so its limit changes with it). Rate 0 (a trace's zero-rate bin) closes a plug leaf: HTB
    cannot shape to 0, and a tiny rate leaves a token debt of seconds per packet.
    :mod:`testbed.net.rtnl` sends them as rtnetlink requests; :func:`tc_line` is each one as a
    ``tc`` command. A marking (red) leaf is not one of them: :func:`rate_change_lines`."""
    dev = d.shaper.ifname
    if holds_in_plug(d):
        if rate == 0:  # held: HTB keeps its rate and tokens, the leaf keeps what it has
            return [PlugCtl(dev, PLUG_LIMIT, buffer), PlugCtl(dev, PLUG_CLOSE)]
        return [
            HtbChange(dev, rate, htb_burst(rate), htb_quantum(rate)),
            PlugCtl(dev, PLUG_LIMIT, buffer),
            PlugCtl(dev, PLUG_OPEN),
        ]
    ops: list[TcOp] = [HtbChange(dev, rate, htb_burst(rate), htb_quantum(rate))]
    if not d.marking:
        ops.append(FifoLimit(dev, buffer))
    return ops


def tc_line(op: TcOp) -> str:
    """``op`` as a line of ``tc -batch`` input (the class and leaf of :func:`shaper_lines`)."""
    match op:
        case HtbChange(dev, rate, burst, quantum):
            return (
                f"class change dev {dev} parent 1: classid 1:1 htb rate {rate}bit ceil {rate}bit "
                f"burst {burst}b cburst {burst}b quantum {quantum}"
            )
        case FifoLimit(dev, limit):
            return f"qdisc change dev {dev} parent 1:1 handle 10: bfifo limit {limit}"
        case PlugCtl(dev, action, limit):  # libnl's words: iproute2's tc has no plug options
            word = PLUG_WORDS[action] + (f" {limit}" if action == PLUG_LIMIT else "")
            return f"qdisc change dev {dev} parent 1:1 handle 10: plug {word}"
    raise TypeError(f"not a tc operation: {op!r}")


def rate_change_lines(d: WanDirection, rate: int, buffer: int) -> list[str]:
    """:func:`rate_change_ops` as ``tc`` lines, plus a marking leaf's change (its limit and
    bandwidth: ``sch_red`` takes them in one ``tc qdisc change``)."""
    lines = [tc_line(op) for op in rate_change_ops(d, rate, buffer)]
    if d.marking:
        changed = dataclasses.replace(d, rate=rate, buffer=buffer)
        leaf = f"qdisc change dev {d.shaper.ifname} parent 1:1 handle 10: {red_args(changed)}"
        lines.append(leaf)
    return lines


def fabric_shaper_lines(p: FabricPort) -> list[str]:
    """A fabric link end, shaped only: HTB for the rate with a bfifo leaf; its delay is left out."""
    if p.rate is None:
        return []
    return shaper_lines(
        Shaper(p.ns, p.ifname, p.rate, htb_burst(p.rate), htb_quantum(p.rate), p.buffer)
    )


def fabric_lines(p: FabricPort) -> list[str]:
    """A fabric link end with its delay: HTB for the rate, netem for the delay (as HTB's leaf when
    both)."""
    if not p.delay:
        return fabric_shaper_lines(p)
    netem = f"netem limit {p.netem_limit} delay {round(p.delay * 1e6)}us"
    if p.rate is None:
        return [f"qdisc add dev {p.ifname} root handle 1: {netem}"]
    lines = fabric_shaper_lines(p)
    lines[-1] = f"qdisc add dev {p.ifname} parent 1:1 handle 10: {netem}"
    return lines


def netem_args(imp: Impairment) -> str:
    """netem parameters of one direction (microsecond resolution, as netem keeps them)."""
    parts = [f"limit {imp.netem_limit}", f"delay {round(imp.delay * 1e6)}us"]
    if imp.jitter:
        parts.append(f"{round(imp.jitter * 1e6)}us distribution normal")
    if imp.ge_p:
        # Simple Gilbert with the random loss in the good state: tc takes p, r, 1-h (loss in
        # the bad state: all) and 1-k (loss in the good state), in percent (tc-netem(8)).
        parts.append(
            f"loss gemodel {imp.ge_p * 100:.6g}% {imp.ge_r * 100:.6g}% 100% {imp.loss * 100:.6g}%"
        )
    elif imp.loss:
        parts.append(f"loss random {imp.loss * 100:.6g}%")
    if imp.reorder:
        parts.append(f"reorder {imp.reorder * 100:.6g}%")
    return " ".join(parts)


def netem_lines(imp: Impairment, verb: str = "add") -> list[str]:
    """The wire's netem; ``verb`` "replace" changes a running one in place (same handle: netem
    takes the new parameters and keeps the packets it holds) or adds it where there was none."""
    return [f"qdisc {verb} dev {imp.egress_if} root handle 1: netem {netem_args(imp)}"]


# -- Mininet's TCLink (backend tclink) -------------------------------------------------------
def tclink_params(d: WanDirection, netem: bool = True) -> dict[str, Any]:
    """A WAN direction as Mininet's ``TCIntf.config`` keywords on its sending side's egress, as
    a Mininet user would write them (``backend: tclink``, testbed.link.tclink). Without netem
    no ``max_queue_size`` (Mininet sets it as netem's limit: it would fail, and the leaf stay
    the default one)."""
    params: dict[str, Any] = {"bw": d.rate / 1e6}
    if netem:  # netem's limit is Mininet's max_queue_size, in packets
        params["max_queue_size"] = math.ceil(d.buffer / FRAME_BYTES)
    if d.delay:
        params["delay"] = f"{d.delay * 1e3:g}ms"
    if d.jitter:
        params["jitter"] = f"{d.jitter * 1e3:g}ms"
    if d.loss:
        params["loss"] = d.loss * 100
    return params
