"""Stand-in machines on one kernel, to run a placed scenario without a rack (the tests, the
benchmark, trying ``placement:`` out): a network namespace per machine, all joined by a veth
underlay (MTU 1500, like a plain Ethernet between machines), and a real Ray cluster on this
machine with one node per stand-in, labelled with its name, its underlay address and the
namespace that stands for it (testbed.live.spanned makes its cables there).

    with stand_in_machines(["node-a", "node-b"]) as (address, namespaces):
        tb = SpannedNetwork(scenario, address=address).up()

``StandInMachines`` is the same pair kept for several users one after the other (the tests share
one pair: starting Ray's processes is the slow part): ``leftovers()`` says what a user left on
them, ``dead()`` which of Ray's processes no longer run.

The pair is a testbed of the registry (testbed.net.registry): its namespaces carry its prefix
and are recorded before they exist, Ray's processes once they run, so a pair whose owner was
killed (a test session stopped with SIGKILL) is removed by ``testbed clean`` like any testbed.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
from collections.abc import Iterator, Sequence
from typing import Any

from testbed.net import build, registry

UNDERLAY_NET = "192.168.251"  # the underlay /30 between the two stand-ins


def _ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True)


class StandInMachines:
    """Two stand-in machines named ``names``: ``start()`` makes the namespaces and the Ray
    cluster (its address in ``address``, the namespaces in ``spaces``), ``close()`` removes
    everything (Ray's processes, the namespaces); idempotent."""

    def __init__(self, names: Sequence[str]) -> None:
        if len(names) != 2:
            raise ValueError("stand-in machines come in a pair (one veth between them)")
        self.names = list(names)
        self.spaces: list[str] = []
        self.prefix = ""  # its registry prefix, once started
        self.address = ""
        self._cluster: Any = None
        self._record: registry.Record | None = None

    def start(self) -> StandInMachines:
        from ray.cluster_utils import Cluster

        from testbed.live.spanned import MACHINE_LABEL, NETNS_LABEL, UNDERLAY_LABEL

        self._record = rec = registry.claim(
            f"stand-ins-{os.getpid()}-{secrets.token_hex(2)}", scenario="stand-ins"
        )
        self.prefix = rec.prefix
        try:
            self.spaces = [f"{rec.prefix}-m{i}" for i in range(len(self.names))]
            rec.namespaces = list(self.spaces)
            rec.save()  # before the first namespace exists
            for ns in self.spaces:
                _ip("netns", "add", ns)
            _ip("link", "add", "u0", "netns", self.spaces[0], "type", "veth", "peer", "name",
                "u1", "netns", self.spaces[1])  # fmt: skip
            for i, ns in enumerate(self.spaces):
                _ip("-n", ns, "addr", "add", f"{UNDERLAY_NET}.{i + 1}/30", "dev", f"u{i}")
                _ip("-n", ns, "link", "set", f"u{i}", "up")
                _ip("-n", ns, "link", "set", "lo", "up")
            self._cluster = Cluster(
                initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False}
            )
            for i, name in enumerate(self.names):
                labels = {MACHINE_LABEL: name, UNDERLAY_LABEL: f"{UNDERLAY_NET}.{i + 1}",
                          NETNS_LABEL: self.spaces[i]}  # fmt: skip
                self._cluster.add_node(num_cpus=0, resources={"testbed": 1}, labels=labels)
            self._cluster.wait_for_nodes()
            nodes = self._nodes()
            ray_processes = [(i.process.pid, f"ray {kind}") for n in nodes
                             for kind, infos in n.all_processes.items() for i in infos]  # fmt: skip
            rec.add_processes(ray_processes)
            rec.phase = "up"
            rec.save()
            address = self._cluster.address
            assert address is not None, "initialize_head started the head node"
            self.address = address
        except BaseException:
            self.close()
            raise
        return self

    def _nodes(self) -> list[Any]:
        """The cluster's Ray nodes, head first (none before start or after close)."""
        c = self._cluster
        return [] if c is None or c.head_node is None else [c.head_node, *c.worker_nodes]

    def dead(self) -> list[str]:
        """The cluster's processes that no longer run (their kind: raylet, gcs_server, ...)."""
        nodes = self._nodes()
        if not nodes:
            return ["the cluster"]
        gone = [f"node {i}" for i in range(len(nodes), 1 + len(self.names))]
        return gone + [kind for n in nodes for kind, _ in n.dead_processes()]

    def leftovers(self) -> list[str]:
        """What is on the stand-ins beyond their own underlay (a cable's device, a lost
        namespace): empty once every user's topology is gone."""
        found = []
        for i, ns in enumerate(self.spaces):
            out = subprocess.run(["ip", "-n", ns, "-o", "link"], capture_output=True, text=True)
            if out.returncode != 0:
                found.append(f"{ns}: {out.stderr.strip()}")
                continue
            links = sorted(x.split(":")[1].strip().split("@")[0] for x in out.stdout.splitlines())
            if links != ["lo", f"u{i}"]:
                found.append(f"{ns}: links {links}")
        return found

    def close(self) -> None:
        import ray

        ray.shutdown()
        if self._cluster is not None:
            self._cluster.shutdown()
            self._cluster = None
        if self._record is not None:  # what Ray's shutdown left, then the namespaces
            build.destroy(self._record)
            self._record = None


@contextlib.contextmanager
def stand_in_machines(names: Sequence[str]) -> Iterator[tuple[str, list[str]]]:
    """Two stand-in machines named ``names``: yields the Ray cluster's address and their
    namespaces; everything is gone afterwards (Ray's processes, the namespaces)."""
    machines = StandInMachines(names)
    try:
        machines.start()
        yield machines.address, machines.spaces
    finally:
        machines.close()
