"""WAN faults on a live testbed: blackholes, TCP resets, a link going down, a gateway crashing.

This module owns how each fault is done in the kernel, identically on every link backend (the
backends emulate rate and propagation; a fault is the same kernel object whichever emulates
them). :class:`FaultOps` is built from the testbed's :class:`NetworkPlan`; each method
(``blackhole``, ``reset``, ``link``, ``gateway``) applies one fault action, returns the operation
it used (as text, for the events table) and raises ``NetError`` if the kernel refused it. It all
lives in the testbed's namespaces, so teardown removes it. Why each fault is made so:
docs/faults.md, "## Mechanisms".

An event must be applied within 20 ms of its schedule; an ``iptables-restore`` process per event
is too slow for that. So the rules are installed once per wire (:meth:`FaultOps.prepare`, or at a
wire's first fault) and switched by the *device group* of the wire's ingress ports (``-m
devgroup``, one bit per fault kind): one rtnetlink request. One rule per wire ingress port, so
their counters (:meth:`FaultOps.fault_drops`) say what each direction's faults dropped.
"""

from __future__ import annotations

import functools
import ipaddress
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from testbed.core.direction import Direction
from testbed.core.errors import NetError
from testbed.net import netns, rtnl
from testbed.plan.model import NetworkPlan, Route
from testbed.plan.render import (
    IpOp,
    LinkDown,
    LinkGroup,
    LinkUp,
    NeighDel,
    NeighLearn,
    NeighPin,
    RouteAdd,
    ip_line,
)

RESTORE = ["iptables-restore", "--noflush", "-w"]  # add beside what is there
# Device-group bits of a wire port (a wire's ports are in group 0 otherwise): its packets are
# blackholed, or its TCP reset (and UDP dropped).
BLACKHOLE_BIT, RESET_BIT = 1 << 20, 1 << 21


def _gate(bit: int) -> str:
    return f"-m devgroup --src-group {bit:#x}/{bit:#x}"


# raw PREROUTING: before the delay line's mangle rule and before routing. One rule per wire
# ingress port (its counters are that direction's fault drops: fault_drops()), written in the
# order iptables-save prints its words, so that its counters are found by the same text.
BLACKHOLE_RULES = ("raw", ("PREROUTING -i {port} " + _gate(BLACKHOLE_BIT) + " -j DROP",))
RESET_RULES = (
    "filter",
    (
        "FORWARD -i {port} -p tcp " + _gate(RESET_BIT) + " -j REJECT --reject-with tcp-reset",
        "FORWARD -i {port} -p udp " + _gate(RESET_BIT) + " -j DROP",
    ),
)
# fault_drops() columns of each rule above, in their order
DROP_COLUMNS = (("fault_dropped",), ("fault_reset", "fault_dropped"))
DROP_FIELDS = (
    "fault_dropped_packets", "fault_dropped_bytes", "fault_reset_packets", "fault_reset_bytes",
)  # fmt: skip


def wire_rules(ports: Sequence[str]) -> str:
    """``iptables-restore --noflush`` input of a wire's fault rules for its ingress ``ports``
    (inserted first in their chains); they act only on ports whose device group has their
    bit."""
    return "".join(
        restore_text(table, [r.format(port=p) for p in ports for r in rules], True)
        for table, rules in (BLACKHOLE_RULES, RESET_RULES)
    )


def parse_counters(save: str) -> dict[tuple[str, str], tuple[int, int]]:
    """(table, rule as ``iptables-save`` prints it after ``-A``) -> (packets, bytes), from
    ``iptables-save -c`` output."""
    out: dict[tuple[str, str], tuple[int, int]] = {}
    table = ""
    for line in save.splitlines():
        if line.startswith("*"):
            table = line[1:].strip()
        elif line.startswith("[") and "] -A " in line:
            counts, rule = line[1:].split("] -A ", 1)
            packets, nbytes = counts.split(":")
            out[(table, rule.strip())] = (int(packets), int(nbytes))
    return out


@dataclass(frozen=True)
class _Link:
    name: str  # "east-west"
    wire: str  # its wire namespace
    ends: tuple[tuple[str, str], tuple[str, str]]  # (gateway namespace, WAN port) per cluster


class _Pair(NamedTuple):
    """A port (``ns``, ``port``; its address ``ip`` on device ``dev``) and its veth's other
    end (``peer_ns``, ``peer_if``; its address ``peer_ip`` on ``peer_dev``, or "")."""

    ns: str
    port: str
    dev: str
    ip: str
    peer_ns: str
    peer_if: str
    peer_dev: str
    peer_ip: str


class FaultOps:
    """The fault actions of one testbed (see the module docstring). Thread-compatible: one
    caller at a time (the event runner)."""

    def __init__(self, plan: NetworkPlan, local: frozenset[str] | None = None) -> None:
        self.plan = plan
        # the namespaces this machine holds (a topology over several machines: each machine's
        # agent does the part of each action that is in its namespaces); None: all of them
        self.local = local
        self.directions = {d.name: d for d in plan.wan}
        # A link's two directions share its wire; each one's shaper sits on a gateway's WAN
        # port of the link (a->b on a's port toward b).
        ends: dict[str, list[tuple[str, str]]] = {}
        names: dict[str, str] = {}  # wire -> the link's name (east-west, a path: east-west/1)
        for d in plan.wan:
            ends.setdefault(d.impairment.ns, []).append((d.shaper.ns, d.shaper.ifname))
            path = Direction.parse(d.name).path
            names.setdefault(
                d.impairment.ns, f"{d.src}-{d.dst}" + (f"/{path}" if path is not None else "")
            )
        self.links: dict[str, _Link] = {}
        for wire, (a, b) in ends.items():
            self.links[names[wire]] = _Link(names[wire], wire, (a, b))
        self.gateways = {g.cluster: g for g in plan.gateways}
        self.ready: set[str] = set()  # wires whose fault rules are installed
        # (wire namespace, port) -> fault bit -> how many of that fault are on
        self.active: dict[tuple[str, str], dict[int, int]] = {}
        # (peer namespace, interface, address) -> how many down ports pin it (_pin)
        self.pinned: dict[tuple[str, str, str], int] = {}
        self.macs: dict[tuple[str, str], str] = {}  # (namespace, interface) -> its MAC

    def prepare(self) -> str:
        """Install the fault rules in every wire (one ``iptables-restore`` per wire, side by
        side), so that no fault pays for it when it happens. Idempotent."""
        return self._install([lk.wire for lk in self.links.values()])

    def _install(self, wires: list[str]) -> str:
        todo = sorted({w for w in wires if self._here(w)} - self.ready)
        if not todo:
            return ""
        op = run_restore({w: wire_rules(self._ingress_ports(w)) for w in todo})
        self.ready.update(todo)
        return op

    def _ingress_ports(self, wire: str) -> list[str]:
        return [d.impairment.ingress_if for d in self.plan.wan if d.impairment.ns == wire]

    def fault_drops(self) -> list[dict[str, Any]]:
        """Per WAN direction whose wire has the fault rules: the packets and bytes its faults
        dropped (``fault_dropped_packets``/``_bytes``: blackholes, partitions, a reset's UDP)
        and answered with an RST (``fault_reset_packets``/``_bytes``), from the rules'
        counters; kept apart from the emulator's queue-overflow drops."""
        wires = sorted(self.ready)
        saved = netns.run_in([(w, _iptables_save) for w in wires])
        rows = []
        for wire, text in zip(wires, saved, strict=True):
            counters = parse_counters(text)
            for d in self.plan.wan:
                if d.impairment.ns != wire:
                    continue
                port = d.impairment.ingress_if
                sums: dict[str, int] = dict.fromkeys(DROP_FIELDS, 0)
                for (table, rules), cols in zip(
                    (BLACKHOLE_RULES, RESET_RULES), DROP_COLUMNS, strict=True
                ):
                    for rule, col in zip(rules, cols, strict=True):
                        packets, nbytes = counters.get((table, rule.format(port=port)), (0, 0))
                        sums[f"{col}_packets"] += packets
                        sums[f"{col}_bytes"] += nbytes
                rows.append({"direction": d.name, **sums})
        return rows

    # -- the actions -----------------------------------------------------------------------------
    def blackhole(self, directions: Sequence[str], on: bool) -> str:
        """Silently drop every packet of ``directions`` entering their wires (or stop)."""
        ports = []
        for name in directions:
            d = self.directions.get(name)
            if d is None:
                raise NetError(f"blackhole: no WAN direction {name!r} ({self._known()})")
            ports.append((d.impairment.ns, d.impairment.ingress_if))
        return self._switch(ports, BLACKHOLE_BIT, on, BLACKHOLE_RULES)

    def reset(self, link: str, on: bool) -> str:
        """RST the TCP connections crossing ``link`` (and drop its UDP), or stop."""
        wire = self._link(link).wire
        ports = [(wire, d.impairment.ingress_if) for d in self.plan.wan if d.impairment.ns == wire]
        return self._switch(ports, RESET_BIT, on, RESET_RULES)

    def _switch(
        self, ports: list[tuple[str, str]], bit: int, on: bool, rules: tuple[str, tuple]
    ) -> str:
        """Count fault ``bit`` on or off on each (wire, port) and set the ports' device groups
        (one rtnetlink request each); the rules are installed first if they are not yet."""
        installed = self._install([ns for ns, _ in ports])
        ops: dict[str, list[IpOp]] = {}
        for ns, port in ports:
            counts = self.active.setdefault((ns, port), {})
            n = counts.get(bit, 0) + (1 if on else -1)
            if n < 0:
                raise NetError(f"{port} in {ns}: turning off a fault that is not on")
            counts[bit] = n
            group = sum(b for b, c in counts.items() if c > 0)
            if self._here(ns):
                ops.setdefault(ns, []).append(LinkGroup(port, group))
        table, lines = rules
        shown = " / ".join(r.format(port="<port>") for r in lines)
        gate = f"(iptables -t {table} {shown})"
        return (f"{installed}; " if installed else "") + f"{_apply(ops)} {gate}"

    def link(self, link: str, up: bool, unpin: bool = True) -> str:
        """Both gateways' WAN ports of ``link`` administratively down, or up with their routes
        (and their peers' pinned entries deleted, unless ``unpin`` is False: across machines
        that comes after every machine's ports are up, :meth:`unpin_link`)."""
        ends = self._link(link).ends
        ops: dict[str, list[IpOp]] = {}
        if not up:
            self._pin(ops, ends, True)
        for ns, port in ends:
            if up:
                ops[ns] = [LinkUp(port), *(_route_op(r) for r in self.routes_through(ns, port))]
            else:
                ops[ns] = [LinkDown(port)]
        if up and unpin:
            self._pin(ops, ends, False)
        return _apply(self._mine(ops))

    def unpin_link(self, link: str) -> str:
        """The second half of ``link(link, up=True, unpin=False)``: the peers' pinned entries of
        its ports deleted."""
        ops: dict[str, list[IpOp]] = {}
        self._pin(ops, self._link(link).ends, False)
        return _apply(self._mine(ops))

    def gateway(self, cluster: str, up: bool, unpin: bool = True) -> str:
        """All ports of ``cluster``'s gateway down (it stops forwarding, its queues are lost),
        or up with its routes (and its peers' pinned entries deleted unless ``unpin`` is False:
        :meth:`unpin_gateway`)."""
        ns, ports = self._gateway_ports(cluster)
        ops: dict[str, list[IpOp]] = {}
        if not up:
            self._pin(ops, [(ns, p) for p in ports], True)
        if up:
            routes = [_route_op(r) for r in self.plan.routes if r.ns == ns]
            ops[ns] = [*(LinkUp(p) for p in ports), *routes]
        else:
            ops[ns] = [LinkDown(p) for p in ports]
        if up and unpin:
            self._pin(ops, [(ns, p) for p in ports], False)
        return _apply(self._mine(ops))

    def unpin_gateway(self, cluster: str) -> str:
        """The second half of ``gateway(cluster, up=True, unpin=False)``."""
        ns, ports = self._gateway_ports(cluster)
        ops: dict[str, list[IpOp]] = {}
        self._pin(ops, [(ns, p) for p in ports], False)
        return _apply(self._mine(ops))

    def _gateway_ports(self, cluster: str) -> tuple[str, list[str]]:
        if cluster not in self.gateways:
            known = ", ".join(self.gateways)
            raise NetError(f"gateway: no cluster {cluster!r} (clusters: {known})")
        ns = self.gateways[cluster].ns
        return ns, self.ports(ns)

    def _pin(self, ops: dict[str, list[IpOp]], ports: Sequence[tuple[str, str]], on: bool) -> None:
        """While ``ports`` are down, their peers hold a permanent neighbour entry for the
        address behind each (a MAC nobody has). Without it the peer, its carrier gone, flushes
        the entry and queues what it sends there for address resolution (up to
        unres_qlen_bytes, ~100 packets), then delivers it all when the port comes back: a
        2 s gateway crash delivered every datagram sent during it at the restore. A dead
        gateway loses them.

        When a port comes back up, both ends learn each other's MAC (stale entries, which the
        kernel confirms on use) rather than resolve it: the port's own entries went with its
        down, and the kernel gives its peer back its queue only later, from its link-watch
        work, so the peer's reply to the port's first ARP request can be dropped, and the
        port then holds everything it sends there until it asks again 1 s later (seen: UDP
        probes answered 780 ms late after a flap). Across machines a port's peer on a cable
        (VXLAN) has no carrier to lose and keeps its queue: its pin is just deleted. Counted
        per entry, so that overlapping faults end with the last."""
        pairs = self.pairs(ports)
        self._read_macs(pairs)  # once, at the first down: the up is not held up by it
        for pair in pairs:
            key = (pair.peer_ns, pair.peer_if, pair.ip)
            n = self.pinned.get(key, 0) + (1 if on else -1)
            self.pinned[key] = max(n, 0)
            if on and n == 1:
                ops.setdefault(pair.peer_ns, []).append(NeighPin(pair.ip, pair.peer_if))
            elif not on and n == 0 and not self._both_here(pair):
                # a cable to another machine (VXLAN): its far end keeps its queue, so the
                # port's address is resolved as usual
                ops.setdefault(pair.peer_ns, []).append(NeighDel(pair.ip, pair.peer_if))
            elif not on and n == 0:
                mac = self.macs[pair.ns, pair.dev]
                ops.setdefault(pair.peer_ns, []).append(NeighLearn(pair.ip, pair.peer_if, mac))
                if pair.peer_ip:
                    peer_mac = self.macs[pair.peer_ns, pair.peer_dev]
                    ops.setdefault(pair.ns, []).append(NeighLearn(pair.peer_ip, pair.dev, peer_mac))

    def _read_macs(self, pairs: Sequence[_Pair]) -> None:
        """The MACs of both ends' address holders of ``pairs`` on this machine that are not
        known yet (read once: a testbed's interfaces keep theirs)."""
        both = [p for p in pairs if self._both_here(p)]
        todo = sorted(
            {(p.ns, p.dev) for p in both} | {(p.peer_ns, p.peer_dev) for p in both if p.peer_ip}
        )
        todo = [k for k in todo if k not in self.macs]
        got = netns.run_in([(ns, functools.partial(rtnl.hw_address, dev)) for ns, dev in todo])
        self.macs.update(zip(todo, got, strict=True))

    def _here(self, ns: str) -> bool:
        return self.local is None or ns in self.local

    def _both_here(self, pair: _Pair) -> bool:
        """Both ends of ``pair`` on this machine (a veth; else a cable across machines)."""
        return self._here(pair.ns) and self._here(pair.peer_ns)

    def _mine(self, ops: dict[str, list[IpOp]]) -> dict[str, list[IpOp]]:
        """The requests of this machine's namespaces (every one on a single machine)."""
        return {ns: o for ns, o in ops.items() if self._here(ns)}

    # -- what the plan says ----------------------------------------------------------------------
    def routes_through(self, ns: str, port: str) -> list[Route]:
        """The plan's routes of namespace ``ns`` whose next hop is on ``port``'s subnet (the
        routes an admin down of ``port`` flushes)."""
        nets = [
            ipaddress.IPv4Interface(a.cidr).network
            for a in self.plan.addresses
            if a.ns == ns and a.ifname == port
        ]
        return [
            r
            for r in self.plan.routes
            if r.ns == ns
            and any(
                ipaddress.IPv4Address(gw) in n
                for n in nets
                for gw in [r.via, *(h for h, _ in r.nexthops)]
            )
        ]

    def pairs(self, ports: Sequence[tuple[str, str]]) -> list[_Pair]:
        """Each (namespace, port) of ``ports`` with its veth's other end: both ends' addresses
        and the device holding each (the end itself, or the bridge it is in); ``peer_ip`` is ""
        where the peer holds none. Ports without a veth peer or an address are left out."""
        addr = {(a.ns, a.ifname): a.cidr.split("/")[0] for a in self.plan.addresses}
        bridge = {(b.ns, p): b.name for b in self.plan.bridges for p in b.ports}
        ends = {(v.ns_a, v.if_a): (v.ns_b, v.if_b) for v in self.plan.veths}
        ends |= {(v.ns_b, v.if_b): (v.ns_a, v.if_a) for v in self.plan.veths}

        def holder(ns: str, dev: str) -> tuple[str, str]:
            """(the device holding ``dev``'s address, that address or "")."""
            if (ns, dev) in addr:
                return dev, addr[ns, dev]
            master = bridge.get((ns, dev), "")
            return master, addr.get((ns, master), "")

        out = []
        for ns, port in ports:
            dev, ip = holder(ns, port)
            if (ns, port) not in ends or not ip:
                continue
            peer_ns, peer_if = ends[ns, port]
            peer_dev, peer_ip = holder(peer_ns, peer_if)
            out.append(_Pair(ns, port, dev, ip, peer_ns, peer_if, peer_dev, peer_ip))
        return out

    def ports(self, ns: str) -> list[str]:
        """Every interface of namespace ``ns`` but lo: veth ends first, then bridges (up in
        that order, so a bridge comes up with its ports)."""
        ends = [v.if_a for v in self.plan.veths if v.ns_a == ns]
        ends += [v.if_b for v in self.plan.veths if v.ns_b == ns]
        return ends + [b.name for b in self.plan.bridges if b.ns == ns]

    def _link(self, name: str) -> _Link:
        try:
            return self.links[name]
        except KeyError:
            raise NetError(f"no WAN link {name!r} (links: {', '.join(self.links)})") from None

    def _known(self) -> str:
        return "directions: " + ", ".join(self.directions)


def restore_text(table: str, rules: list[str], add: bool) -> str:
    """``iptables-restore --noflush`` input inserting ``rules`` first in their chains (``add``,
    in their order) or deleting one copy of each."""
    if add:
        rules = list(reversed(rules))  # each -I goes to the top: the last inserted is first
    verb = "-I" if add else "-D"
    return f"*{table}\n" + "".join(f"{verb} {r}\n" for r in rules) + "COMMIT\n"


def _route_op(r: Route) -> RouteAdd:
    # replace, not add: a restore that finds the route there (another fault's restore put it
    # back) is not an error
    return RouteAdd(r.dst, r.via, r.src, replace=True, nexthops=r.nexthops)


def _iptables_save() -> str:
    # Called from a thread inside the namespace: the child inherits it.
    done = subprocess.run(
        ["iptables-save", "-c"], capture_output=True, text=True, check=False, timeout=30
    )
    if done.returncode != 0:
        raise NetError(f"iptables-save -c: {done.stderr.strip()}")
    return done.stdout


def _popen_restore() -> subprocess.Popen:
    # Started from a thread inside the namespace: the child inherits the thread's namespace.
    return subprocess.Popen(
        RESTORE,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_restore(per_ns: dict[str, str]) -> str:
    """Run each namespace's ``iptables-restore`` input, all namespaces side by side; the
    operation as text. NetError names the namespaces that refused."""
    starters: list[tuple[str, Callable[[], subprocess.Popen]]] = [
        (ns, _popen_restore) for ns in per_ns
    ]
    procs = netns.run_in(starters)
    failed = []
    for (ns, text), proc in zip(per_ns.items(), procs, strict=True):
        _, stderr = proc.communicate(text)  # a few lines: fits the pipe
        if proc.returncode != 0:
            failed.append(f"{ns}: {stderr.strip()}")
    op = "; ".join(
        f"iptables-restore --noflush in {ns}: " + " / ".join(text.splitlines())
        for ns, text in per_ns.items()
    )
    if failed:
        raise NetError(f"iptables-restore failed in {'; '.join(failed)} ({op})")
    return op


def _apply(ops: dict[str, list[IpOp]]) -> str:
    """Send each namespace's link and route requests (rtnetlink); the operation as text."""
    rtnl.apply(ops)
    return "; ".join(f"ip -n {ns} " + " / ".join(ip_line(o) for o in o_) for ns, o_ in ops.items())
