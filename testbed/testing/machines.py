"""Stand-in machines on one kernel, to run a placed scenario without a rack (the tests, the
benchmark, trying ``placement:`` out): a network namespace per machine, all joined by a veth
underlay (MTU 1500, like a plain Ethernet between machines), and a real Ray cluster on this
machine with one node per stand-in, labelled with its name, its underlay address and the
namespace that stands for it (testbed.live.spanned makes its cables there).

    with stand_in_machines(["node-a", "node-b"]) as (address, namespaces):
        tb = SpannedNetwork(scenario, address=address).up()
"""

from __future__ import annotations

import contextlib
import secrets
import subprocess
from collections.abc import Iterator, Sequence

UNDERLAY_NET = "192.168.251"  # the underlay /30 between the two stand-ins


def _ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True)


@contextlib.contextmanager
def stand_in_machines(names: Sequence[str]) -> Iterator[tuple[str, list[str]]]:
    """Two stand-in machines named ``names``: yields the Ray cluster's address and their
    namespaces; everything is gone afterwards (Ray's processes, the namespaces)."""
    import ray
    from ray.cluster_utils import Cluster

    from testbed.live.spanned import MACHINE_LABEL, NETNS_LABEL, UNDERLAY_LABEL

    if len(names) != 2:
        raise ValueError("stand-in machines come in a pair (one veth between them)")
    tag = f"tbm{secrets.token_hex(2)}"
    spaces = [f"{tag}-m{i}" for i in range(len(names))]
    cluster = None
    try:
        for ns in spaces:
            _ip("netns", "add", ns)
        _ip("link", "add", "u0", "netns", spaces[0], "type", "veth", "peer", "name", "u1",
            "netns", spaces[1])  # fmt: skip
        for i, ns in enumerate(spaces):
            _ip("-n", ns, "addr", "add", f"{UNDERLAY_NET}.{i + 1}/30", "dev", f"u{i}")
            _ip("-n", ns, "link", "set", f"u{i}", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        cluster = Cluster(
            initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False}
        )
        for i, name in enumerate(names):
            labels = {MACHINE_LABEL: name, UNDERLAY_LABEL: f"{UNDERLAY_NET}.{i + 1}",
                      NETNS_LABEL: spaces[i]}  # fmt: skip
            cluster.add_node(num_cpus=0, resources={"testbed": 1}, labels=labels)
        cluster.wait_for_nodes()
        address = cluster.address
        assert address is not None, "initialize_head started the head node"
        yield address, spaces
    finally:
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        for ns in spaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
