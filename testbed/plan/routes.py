"""How the plan routes between clusters: the shortest WAN path's next hops (and hop counts),
the gateways' WAN port names and their multipath hash. PURE.

The next hops are ``testbed.core.wanpaths``' (the search the scenario checks reachability with
and the model prices paths with), over the scenario's links: a gateway routes each other cluster
toward its next hop, a wire each cluster toward its nearer end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from testbed.core.wanpaths import next_hops

if TYPE_CHECKING:
    from testbed.config.scenario import Scenario

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


def cluster_next_hops(scenario: Scenario) -> dict[tuple[str, str], str]:
    """(from cluster, to cluster) -> next cluster on a shortest WAN path (ties by link order)."""
    return next_hops(list(scenario.clusters), [link.between for link in scenario.wan])


def cluster_distances(scenario: Scenario) -> dict[tuple[str, str], int]:
    """(from cluster, to cluster) -> WAN links crossed on a shortest path (0 to itself)."""
    hops = cluster_next_hops(scenario)
    dist: dict[tuple[str, str], int] = {}
    for src in scenario.clusters:
        for dst in scenario.clusters:
            n, here = 0, src
            while here != dst:
                here = hops[(here, dst)]
                n += 1
            dist[(src, dst)] = n
    return dist
