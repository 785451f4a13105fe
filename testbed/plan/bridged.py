"""The plan of one *bridged* link: a WAN link's two directions emulated in a wire namespace that
forwards at layer 2, for links the testbed does not route (``testbed.mininet.TestbedLink``, a
link between two nodes of a user's Mininet network). PURE.

The wire namespace ``<prefix>-<label>`` holds two bridges joined by a veth pair::

    end 1 --- a [br1] m1 ====== m2 [br2] b --- end 2

``a`` and ``b`` are the peers of the two ends' interfaces (made by the caller). Direction 1->2
leaves through ``m1`` (HTB + bfifo: the bottleneck), enters br2 through ``m2`` (the userspace
delay line hooks there) and leaves through ``b`` (kernel netem sits there); 2->1 the other way
round. So each direction crosses its bottleneck, a veth, then its propagation, as on a routed WAN
link, and the same backends realize it. iptables sees bridged packets only with
``net.bridge.bridge-nf-call-iptables`` on, naming the bridge as their interface: the rules match
the ports (``Impairment.bridged``; docs/mininet.md).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from testbed.plan.model import Bridge, Namespace, NetworkPlan, Veth
from testbed.plan.topology import _Parts

if TYPE_CHECKING:
    from testbed.config.scenario import Scenario

# The ends' peers in the wire, and the veth pair between the two bridges
END_PORTS = ("a", "b")
_CROSS = ("m1", "m2")
BRIDGE_SYSCTLS = {
    "net.bridge.bridge-nf-call-iptables": "1",
    "net.bridge.bridge-nf-call-ip6tables": "1",
}


def bridged_link_plan(scenario: Scenario, prefix: str, label: str) -> NetworkPlan:
    """The plan of ``scenario``'s only WAN link as a bridged wire ``<prefix>-<label>``: its
    directions (named ``first->second`` after ``between``) with every setting the routed plan
    resolves (buffers, limits, warnings), their queues and hooks in the wire."""
    if len(scenario.wan) != 1:
        raise ValueError("a bridged link plan takes a scenario with exactly one WAN link")
    parts = _Parts(scenario, prefix, "10.0")
    parts.wan_link(0, scenario.wan[0])
    wire = f"{prefix}-{label}"
    first = scenario.wan[0].between[0]
    (a, b), (m1, m2) = END_PORTS, _CROSS
    wan = []
    for d in parts.wan:
        shaper_if, in_if, out_if = (m1, m2, b) if d.src == first else (m2, m1, a)
        wan.append(
            replace(
                d,
                shaper=replace(d.shaper, ns=wire, ifname=shaper_if),
                impairment=replace(
                    d.impairment, ns=wire, ingress_if=in_if, egress_if=out_if, bridged=True
                ),
            )
        )
    return NetworkPlan(
        scenario=scenario.name,
        prefix=prefix,
        slot=0,
        namespaces=(Namespace(wire, "wire", label, None, dict(BRIDGE_SYSCTLS)),),
        veths=(Veth(wire, m1, wire, m2),),
        bridges=(Bridge(wire, "br1", (a, m1)), Bridge(wire, "br2", (m2, b))),
        addresses=(),
        routes=(),
        shapers=tuple(d.shaper for d in wan),
        fabric=(),
        wan=tuple(wan),
        hosts=(),
        gateways=(),
        congestion=(),
        wire_sized_packets=any(d.loss > 0 for d in wan),
        warnings=tuple(parts.warnings),
    )
