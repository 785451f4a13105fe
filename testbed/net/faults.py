"""WAN faults on a live testbed: blackholes, TCP resets, a link going down, a gateway crashing.

This module owns how each fault is done in the kernel, identically on every link backend (the
backends emulate rate and propagation; a fault is the same kernel object whichever emulates
them). :class:`FaultOps` is built from the testbed's :class:`NetworkPlan`; each method applies
one fault action, returns the operation it used (as text, for the events table) and raises
``NetError`` if the kernel refused it. Everything lives in the testbed's own namespaces, so a
teardown removes it with them.

* ``blackhole(directions, on)``: ``iptables -t raw -I PREROUTING -i <wire ingress> -j DROP`` in
  the wire namespace of each direction. The raw table's hook comes before mangle, where the
  delay line's NFQUEUE rule sits, and netem only sees packets on the wire's egress: the drop
  comes first on both backends. What the emulator already holds is still delivered (as from a
  cut upstream of it). Each ``on`` adds one rule and each ``off`` deletes one, so two
  overlapping blackholes of a direction (a partition and a blackhole) end with the last.
* ``reset(link, on)``: in the link's wire, filter FORWARD: TCP gets ``REJECT --reject-with
  tcp-reset`` (an RST to the sender, in both directions: every connection that sends a segment
  or an ACK across the link is reset), UDP is dropped, while the window lasts.
* ``link(link, up)``: both gateways' WAN ports of the link administratively down (the kernel
  flushes the routes through them and the gateway answers ICMP net unreachable: an established
  TCP connection treats that as a soft error and keeps retrying); ``up`` brings them up and
  re-adds every plan route through them (static routes do not come back by themselves; that
  includes the routes to clusters further away over the same link).
* ``gateway(cluster, up)``: all of the gateway's ports down (WAN ports, host ports, the bridge):
  it stops forwarding and the packets queued on its ports are lost; ``up`` brings them up and
  re-adds the gateway's routes.

Links, addresses and routes go through :mod:`testbed.net.rtnl` (rtnetlink from this process, no
``ip`` process); iptables rules as ``iptables-restore`` input generated from the plan, one
process per namespace, started from a thread inside that namespace (no ``ip netns exec``), all
namespaces side by side. No shell anywhere.
"""

from __future__ import annotations

import ipaddress
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from testbed.core.errors import NetError
from testbed.net import netns, rtnl
from testbed.plan.render import IpOp, LinkDown, LinkUp, RouteAdd, ip_line
from testbed.plan.topology import NetworkPlan, Route

RESTORE = ["iptables-restore", "--noflush", "-w"]  # add (or -D delete) beside what is there
BLACKHOLE = "PREROUTING -i {iface} -j DROP"  # raw table: before the delay line's mangle rule
RESET = (
    "FORWARD -p tcp -j REJECT --reject-with tcp-reset",
    "FORWARD -p udp -j DROP",
)


@dataclass(frozen=True)
class _Link:
    name: str  # "east-west"
    wire: str  # its wire namespace
    ends: tuple[tuple[str, str], tuple[str, str]]  # (gateway namespace, WAN port) per cluster


class FaultOps:
    """The fault actions of one testbed (see the module docstring). Thread-compatible: one
    caller at a time (the event runner)."""

    def __init__(self, plan: NetworkPlan) -> None:
        self.plan = plan
        self.directions = {d.name: d for d in plan.wan}
        # A link's two directions share its wire; each one's shaper sits on a gateway's WAN
        # port of the link (a->b on a's port toward b).
        ends: dict[str, list[tuple[str, str]]] = {}
        for d in plan.wan:
            ends.setdefault(d.impairment.ns, []).append((d.shaper.ns, d.shaper.ifname))
        self.links: dict[str, _Link] = {}
        for wire, (a, b) in ends.items():
            name = wire.removeprefix(f"{plan.prefix}-").removeprefix("wan-")
            self.links[name] = _Link(name, wire, (a, b))
        self.gateways = {g.cluster: g for g in plan.gateways}

    # -- the actions -----------------------------------------------------------------------------
    def blackhole(self, directions: Sequence[str], on: bool) -> str:
        """Silently drop every packet of ``directions`` entering their wires (or stop)."""
        per_ns: dict[str, list[str]] = {}
        for name in directions:
            d = self.directions.get(name)
            if d is None:
                raise NetError(f"blackhole: no WAN direction {name!r} ({self._known()})")
            rule = BLACKHOLE.format(iface=d.impairment.ingress_if)
            per_ns.setdefault(d.impairment.ns, []).append(rule)
        return _restore({ns: restore_text("raw", rules, on) for ns, rules in per_ns.items()})

    def reset(self, link: str, on: bool) -> str:
        """RST the TCP connections crossing ``link`` (and drop its UDP), or stop."""
        wire = self._link(link).wire
        return _restore({wire: restore_text("filter", list(RESET), on)})

    def link(self, link: str, up: bool) -> str:
        """Both gateways' WAN ports of ``link`` administratively down, or up with their routes."""
        ops: dict[str, list[IpOp]] = {}
        for ns, port in self._link(link).ends:
            if up:
                ops[ns] = [LinkUp(port), *(_route_op(r) for r in self.routes_through(ns, port))]
            else:
                ops[ns] = [LinkDown(port)]
        return _apply(ops)

    def gateway(self, cluster: str, up: bool) -> str:
        """All ports of ``cluster``'s gateway down (it stops forwarding, its queues are lost),
        or up with its routes."""
        if cluster not in self.gateways:
            known = ", ".join(self.gateways)
            raise NetError(f"gateway: no cluster {cluster!r} (clusters: {known})")
        ns = self.gateways[cluster].ns
        ports = self.ports(ns)
        if up:
            routes = [_route_op(r) for r in self.plan.routes if r.ns == ns]
            ops: list[IpOp] = [*(LinkUp(p) for p in ports), *routes]
        else:
            ops = [LinkDown(p) for p in ports]
        return _apply({ns: ops})

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
            if r.ns == ns and any(ipaddress.IPv4Address(r.via) in n for n in nets)
        ]

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
    """``iptables-restore --noflush`` input inserting ``rules`` first in their chains (``add``)
    or deleting one copy of each."""
    verb = "-I" if add else "-D"
    return f"*{table}\n" + "".join(f"{verb} {r}\n" for r in rules) + "COMMIT\n"


def _route_op(r: Route) -> RouteAdd:
    # replace, not add: a restore that finds the route there (another fault's restore put it
    # back) is not an error
    return RouteAdd(r.dst, r.via, r.src, replace=True)


def _popen_restore() -> subprocess.Popen:
    # Started from a thread inside the namespace: the child inherits the thread's namespace.
    return subprocess.Popen(
        RESTORE,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _restore(per_ns: dict[str, str]) -> str:
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
