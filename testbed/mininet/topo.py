"""``topo_from_scenario(path)``: a scenario file's clusters and WAN as a Mininet ``Topo``.

Nodes are named as the Mininet engine names them (``east_h0``, ``east_gw``: Mininet's CLI reads
``east-h0`` as ``east``). Each cluster's gateway is a :class:`ClusterGateway` node: a router
whose hosts' ports are bridged (``br0``, the cluster's ``.1``, as in the testbed's own plan), so
the topology needs no switch in the initial namespace. Hosts get the plan's addresses and a
default route through their gateway; each WAN link is a :class:`~testbed.mininet.link.TestbedLink`
between two gateways (one /30 per link) with the link's settings per direction, and gateways
route the other clusters' subnets along shortest WAN paths. A cluster's ``fabric`` (rate, delay)
becomes TestbedLinks too.

What a Topo cannot hold is left out, and said in :attr:`ScenarioTopo.left_out`: workloads,
traffic, schedules, traces, faults and TCP settings are the testbed's (``testbed run``).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from mininet.link import Link
from mininet.node import Node
from mininet.topo import Topo

from testbed.config.loading import load_scenario
from testbed.config.scenario import Scenario
from testbed.config.wan import WanLink
from testbed.mininet.link import TestbedLink
from testbed.net.engines import node_name
from testbed.plan.routes import cluster_next_hops
from testbed.plan.topology import HOST_OFFSET, WAN_BLOCK_OFFSET


class ClusterGateway(Node):
    """A cluster's gateway: forwards IPv4, bridges its hosts' ports (``br0``), routes to the
    other clusters. Configured by Mininet after the links exist (``config``)."""

    def config(  # type: ignore[override]
        self,
        bridge_ports: tuple[str, ...] = (),
        bridge_cidr: str = "",
        wan_addresses: tuple[tuple[str, str], ...] = (),
        routes: tuple[tuple[str, str], ...] = (),
        **params: Any,
    ) -> dict:
        params.pop("ip", None)  # the addresses are below, not on Mininet's default interface
        out = super().config(**params)
        self.cmd("sysctl -qw net.ipv4.ip_forward=1")
        self.cmd("ip link add br0 type bridge stp_state 0 forward_delay 0")
        for port in bridge_ports:
            self.cmd(f"ip link set {port} master br0")
        self.cmd(f"ip addr add {bridge_cidr} dev br0")
        self.cmd("ip link set br0 up")
        for ifname, cidr in wan_addresses:
            self.cmd(f"ip addr flush dev {ifname}")
            self.cmd(f"ip addr add {cidr} dev {ifname}")
        for dst, via in routes:
            self.cmd(f"ip route add {dst} via {via}")
        return out


def link_keywords(d: dict[str, Any]) -> dict[str, Any]:
    """One direction (``WanLink.direction``) as TestbedLink keywords. PURE."""
    kind, amount = d["buffer"]
    out: dict[str, Any] = {
        "bw": d["rate"] / 1e6,
        "buffer": f"{amount:g}bdp" if kind == "bdp" else int(amount),
    }
    if d["delay"]:
        out["delay"] = f"{d['delay'] * 1e3:g}ms"
    if d["jitter"]:
        out["jitter"] = f"{d['jitter'] * 1e3:g}ms"
    for key in ("loss", "reorder"):
        if d[key]:
            out[key] = d[key] * 100
    if d["aqm"] is not None:
        out["aqm"] = d["aqm"].model_dump(exclude_none=True)
    return out


def wan_keywords(link: WanLink) -> dict[str, Any]:
    """A WAN link's TestbedLink keywords, both directions. PURE."""
    out = link_keywords(link.direction(False))
    back = link_keywords(link.direction(True))
    if back != out:
        out["reverse"] = back
    return out


class ScenarioTopo(Topo):
    """The Topo of a scenario (see the module doc)."""

    def build(self, scenario: Scenario, slot: int = 1, backend: str = "auto") -> None:  # type: ignore[override]
        net = f"10.{slot}"
        self.left_out = [
            what
            for what, present in (
                ("workload", scenario.workload is not None),
                ("traffic", bool(scenario.traffic)),
                ("faults", bool(scenario.faults)),
                ("schedules and traces", any(w.schedule or w.trace for w in scenario.wan_paths)),
            )
            if present
        ]
        gw_ports: dict[str, list[str]] = {c: [] for c in scenario.clusters}
        wan_addr: dict[str, list[tuple[str, str]]] = {c: [] for c in scenario.clusters}
        peer_addr: dict[tuple[str, str], str] = {}  # (cluster, neighbour) -> neighbour's address
        hops = cluster_next_hops(scenario)
        block = ipaddress.IPv4Address(f"{net}.{WAN_BLOCK_OFFSET}.0")
        for i, link in enumerate(scenario.wan):
            a, b = link.between
            first, second = str(block + 4 * i + 1), str(block + 4 * i + 2)
            wan_addr[a].append((f"w-{b}", f"{first}/30"))
            wan_addr[b].append((f"w-{a}", f"{second}/30"))
            peer_addr[(a, b)], peer_addr[(b, a)] = second, first
        for k, (cluster, spec) in enumerate(scenario.clusters.items()):
            for i in range(spec.hosts):
                gw_ports[cluster].append(f"h{i}")
            routes = tuple(
                (f"{net}.{j}.0/24", peer_addr[(cluster, hops[(cluster, other)])])
                for j, other in enumerate(scenario.clusters)
                if other != cluster and (cluster, other) in hops
            )
            self.addNode(
                node_name(f"{cluster}-gw"),
                cls=ClusterGateway,
                bridge_ports=tuple(gw_ports[cluster]),
                bridge_cidr=f"{net}.{k}.1/24",
                wan_addresses=tuple(wan_addr[cluster]),
                routes=routes,
            )
            # an unshaped fabric (the default) is a plain veth, as on the testbed
            fabric: dict[str, Any] = {"cls": Link}
            if spec.fabric.rate is not None or spec.fabric.delay:
                fabric = {"cls": TestbedLink, "backend": backend}
                if spec.fabric.rate is not None:
                    fabric["bw"] = spec.fabric.rate / 1e6
                if spec.fabric.delay:
                    fabric["delay"] = f"{spec.fabric.delay * 1e3:g}ms"
            for i in range(spec.hosts):
                host = self.addHost(
                    node_name(f"{cluster}-h{i}"),
                    ip=f"{net}.{k}.{HOST_OFFSET + i}/24",
                    defaultRoute=f"via {net}.{k}.1",
                )
                self.addLink(
                    host, node_name(f"{cluster}-gw"), intfName1="eth0", intfName2=f"h{i}",
                    **fabric,
                )  # fmt: skip
        for link in scenario.wan:
            a, b = link.between
            self.addLink(
                node_name(f"{a}-gw"), node_name(f"{b}-gw"), intfName1=f"w-{b}",
                intfName2=f"w-{a}", cls=TestbedLink, backend=backend, **wan_keywords(link),
            )  # fmt: skip


def topo_from_scenario(path: str | Path, slot: int = 1, backend: str | None = None) -> ScenarioTopo:
    """The Mininet Topo of the scenario file ``path`` (addresses 10.<slot>.0.0/16; ``backend``
    defaults to the scenario's, ``tclink`` excepted). Raises ``ScenarioError`` naming the file
    and the field for an invalid scenario."""
    scenario = load_scenario(path)
    chosen = backend or (scenario.backend if scenario.backend != "tclink" else "auto")
    return ScenarioTopo(scenario=scenario, slot=slot, backend=chosen)
