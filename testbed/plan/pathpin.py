"""Host routes that hold one host pair's traffic on one path of a multipath WAN link, both ways.
PURE.

The gateways spread a multipath link's flows over its paths (a static multipath route hashed on
L3 or L4 fields, or FRR's equal-cost BGP routes), so a probe between two hosts crosses whichever
path the hash picks. A measurement that names a path (the link self-check,
testbed.live.selfcheck) adds these routes for its duration: in the sending cluster's gateway a
/32 for the far host via the path's wire, and in the far gateway a /32 for the near host via
the same path's wire. A /32 is more specific than the cluster subnet's routes, the plan's and
BGP's alike, so it wins while it exists; deleting it gives the subnet's routes back untouched.
A link with one path needs none: its route is that path.
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.core.errors import PlanError
from testbed.plan.model import NetworkPlan, WanDirection
from testbed.plan.render import RouteAdd, ip_line


@dataclass(frozen=True)
class PinRoute:
    """One host route in a gateway: ``gateway`` is its name (``east-gw``), what a live network
    runs commands in; ``dst`` a host's /32, ``via`` the path's wire address on this gateway's
    side, ``src`` the gateway's cluster address (as its subnet routes have)."""

    gateway: str
    dst: str
    via: str
    src: str

    def add_argv(self) -> list[str]:
        """The ``ip`` command that adds it (or replaces a same-destination one left behind)."""
        return ["ip", *ip_line(RouteAdd(self.dst, self.via, self.src, replace=True)).split()]

    def del_argv(self) -> list[str]:
        """The ``ip`` command that deletes it (only this route: destination and next hop)."""
        return ["ip", "route", "del", self.dst, "via", self.via]


def pin_routes(
    plan: NetworkPlan, d: WanDirection, src_host: str, dst_host: str
) -> tuple[PinRoute, ...]:
    """The routes that send ``src_host`` <-> ``dst_host`` (hosts of ``d.src`` and ``d.dst``)
    over ``d``'s path both ways; none when ``d`` is not a path of a multipath link."""
    if not d.multipath:
        return ()
    gateways = {g.cluster: g for g in plan.gateways}
    wire = {a.ifname: a.cidr.split("/")[0] for a in plan.addresses if a.ns == d.impairment.ns}
    out = []
    for here, far_host, wire_if in (
        (d.src, dst_host, d.impairment.ingress_if),  # the wire's port toward d.src
        (d.dst, src_host, d.impairment.egress_if),
    ):
        if wire_if not in wire:
            raise PlanError(
                f"direction {d.name}: the plan holds no address of {d.impairment.ns} {wire_if} "
                "(a plan of one machine's part lacks the wires of the others)"
            )
        gw, far = gateways[here], plan.host(far_host).address
        out.append(PinRoute(gw.name, f"{far}/32", wire[wire_if], gw.address))
    return tuple(out)
