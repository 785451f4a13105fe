"""Engines: what makes a plan's namespaces and veth pairs (the rest of a build is the same).

* ``native``: one ``ip -batch`` in the initial namespace (``netns add``, ``link add ... type
  veth``), the fastest way (benchmarks/setup_speed.py).
* ``mininet``: every namespace is a Mininet node and every veth pair a Mininet ``Link`` with the
  plan's interface names (the veths made by the native batch, with their indexes); each node's
  namespace is then given the plan's name (``ip netns attach``), so everything after it is the
  native build's, unchanged (docs/mininet.md). Node names are the plan's labels with ``_`` for
  ``-`` (Mininet's CLI reads ``east-h0`` as ``east``).

Mininet is imported only here, and only when the engine is used. Its ``mn`` script,
``Mininet.cleanup()`` and ``net.iperf()`` kill processes host-wide by name and are never called;
the nodes' shells are recorded in the registry, so ``clean`` finds them like any process.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Any, ClassVar

from testbed.core.errors import NetError, UnsupportedError
from testbed.net.batches import run_batches
from testbed.net.registry import Record

if TYPE_CHECKING:
    from testbed.plan.model import NetworkPlan

# What Mininet runs in its nodes' shells: without them it exits the whole process (sys.exit)
MININET_TOOLS = {"mnexec": "mininet", "ifconfig": "net-tools"}


def node_name(label: str) -> str:
    """A plan label as a Mininet node name (``east-h0`` -> ``east_h0``)."""
    return label.replace("-", "_")


class Engine:
    """The native engine: the plan's namespaces and veth pairs in one ``ip`` batch."""

    name: ClassVar[str] = "native"

    def check(self) -> None:
        """Raise ``UnsupportedError`` (saying what to install) if this engine cannot run here."""

    def set_tclinks(self, params: dict[tuple[str, str], dict]) -> None:
        """Make these veth ends ((namespace, interface) -> ``TCLink`` keywords) Mininet
        TCLinks (backend tclink): only the Mininet engine can."""
        if params:
            raise UnsupportedError(
                "backend tclink is Mininet's TCLink: use it with `engine: mininet`"
            )

    def create(self, plan: NetworkPlan, rec: Record) -> None:
        from testbed.plan.render import root_batch

        run_batches([(["ip"], root_batch(plan))])

    def stop(self) -> None:
        """Let go of what the engine holds (its namespaces go with the testbed's teardown)."""


class MininetEngine(Engine):
    """The plan's namespaces as Mininet nodes, its veth pairs as Mininet links."""

    name: ClassVar[str] = "mininet"

    def __init__(self) -> None:
        self.net: Any = None  # mininet.net.Mininet, once created
        self.nodes: dict[str, Any] = {}  # namespace -> mininet.node.Node
        self.tclinks: dict[tuple[str, str], dict] = {}  # veth end -> TCLink keywords

    def set_tclinks(self, params: dict[tuple[str, str], dict]) -> None:
        self.tclinks = params

    def check(self) -> None:
        missing = [f"{tool} (Debian package {pkg})" for tool, pkg in MININET_TOOLS.items()
                   if shutil.which(tool) is None]  # fmt: skip
        try:
            import mininet.net  # noqa: F401
        except ImportError:
            missing.append("the Python module mininet (pip extra [mininet])")
        if missing:
            raise UnsupportedError(
                f"engine mininet needs {', '.join(missing)}; scripts/setup.sh installs them"
            )

    def create(self, plan: NetworkPlan, rec: Record) -> None:
        # Network.up ran check() before claiming the registry: Mininet's tools are there
        from mininet.link import Link, TCLink
        from mininet.log import setLogLevel
        from mininet.net import Mininet
        from mininet.node import Node

        from testbed.plan.render import veth_batch

        setLogLevel("warning")
        # build=False and no topo: nodes and links are made as they are added; no controller,
        # no switch (the plan's bridges are made by the native build, in the gateway nodes)
        self.net = Mininet(topo=None, build=False, controller=None, autoSetMacs=False)
        for ns in plan.namespaces:
            node = self.net.addHost(node_name(ns.label), cls=Node, ip=None, inNamespace=True)
            self.nodes[ns.name] = node
        rec.add_processes([(n.pid, f"mininet node {n.name}") for n in self.nodes.values()])
        # named, so that `ip netns exec`, `tc -n` and the rtnetlink worker find them
        run_batches([(["ip"], [f"netns attach {ns} {n.pid}" for ns, n in self.nodes.items()])])
        # The veths are the native build's (one batch, each end its own interface index);
        # Mininet's links then take them as made. Mininet makes a pair without indexes, so two
        # ends in fresh namespaces often shared one, and a port brought up again (a link down's
        # or a gateway crash's end) had no queue for up to 1 s: its ARP replies were dropped
        # and nothing crossed it (plan.render.VETH_INDEX says why).
        run_batches([(["ip"], veth_batch(plan))])
        made = {base: type(f"Made{base.__name__}", (base,), {"makeIntfPair": _already_made})
                for base in (Link, TCLink)}  # fmt: skip
        for v in plan.veths:
            a, b = self.nodes[v.ns_a], self.nodes[v.ns_b]
            params = self.tclinks.get((v.ns_a, v.if_a))  # backend tclink: a WAN sending side
            if params is None:
                self.net.addLink(a, b, intfName1=v.if_a, intfName2=v.if_b, cls=made[Link])
            else:
                self.net.addLink(
                    a, b, intfName1=v.if_a, intfName2=v.if_b, cls=made[TCLink], params1=params,
                    params2={},
                )  # fmt: skip
        # Mininet's own view of the addresses (its CLI puts a node's IP for its name)
        for a in plan.addresses:
            ip, prefix_len = a.cidr.split("/")
            intf = self.nodes[a.ns].nameToIntf.get(a.ifname)  # not the bridges: not Mininet's
            if intf is not None:
                intf.ip, intf.prefixLen = ip, int(prefix_len)

    def stop(self) -> None:
        if self.net is None:
            return
        net, self.net = self.net, None
        # Mininet would delete each veth through a node's shell (a command per interface: 1.2 s
        # for 4 x 8 hosts); deleting the namespaces right after removes them all at once
        net.links = []
        try:
            net.stop()
        except Exception as exc:  # a node's shell already gone: teardown removes the rest
            raise NetError(f"mininet: stopping the network failed: {exc!r}") from None

    def node(self, host: str) -> Any:
        """The Mininet node of a plan label (``east-h0``)."""
        return next(n for n in self.nodes.values() if n.name == node_name(host))


@classmethod
def _already_made(cls: type, *args: Any, **kwargs: Any) -> None:
    """A Mininet link's ``makeIntfPair`` for a veth pair that exists already."""


ENGINES: dict[str, type[Engine]] = {"native": Engine, "mininet": MininetEngine}


def make_engine(name: str) -> Engine:
    try:
        return ENGINES[name]()
    except KeyError:
        raise UnsupportedError(f"engine {name!r}: choose one of {', '.join(ENGINES)}") from None
