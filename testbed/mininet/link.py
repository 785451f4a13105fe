"""``TestbedLink``: the project's links as a Mininet link class, for a user's own Mininet script.

``Mininet(topo, link=TestbedLink, controller=None)`` (or ``net.addLink(a, b, cls=TestbedLink,
bw=10, delay="10ms")``) gives every link TCLink's keywords (``bw``, ``delay``, ``jitter``,
``loss``, ``max_queue_size``) plus the project's ``buffer``, ``reorder``, ``aqm``, ``reverse`` and
``backend``, validated by the scenario schema and emulated by the project's backends, per
direction, on any kernel (docs/mininet.md says how this differs from TCLink).

Each link is a wire namespace between its two nodes (:mod:`testbed.plan.bridged`), so the link
stays a layer-2 link and nothing is added to the nodes themselves. The wires of one Python process
belong to one registry record (``mininet-<pid>``): ``net.stop()`` removes each link, and if the
script dies first, ``testbed clean`` finds the wires and delay lines by that record. Unlike
``testbed up``, a TestbedLink does not measure and subtract the delay line's floor.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import threading
from typing import Any, ClassVar

from mininet.link import Intf, Link
from mininet.log import info

from testbed.config.loading import parse_scenario
from testbed.core.errors import ScenarioError
from testbed.core.frames import FRAME_BYTES
from testbed.link.base import LinkBackend
from testbed.link.choose import choose_backend
from testbed.net import build, netns, probe, registry
from testbed.net.batches import run_batches
from testbed.net.engines import Engine
from testbed.net.registry import Record
from testbed.plan.bridged import END_PORTS, bridged_link_plan
from testbed.plan.model import NetworkPlan
from testbed.plan.render import VETH_INDEX

# TCLink's keywords and the project's own, per direction
DIRECTION_KEYWORDS = (
    "bw", "delay", "jitter", "loss", "max_queue_size", "buffer", "aqm", "reorder",
)  # fmt: skip
KEYWORDS = (*DIRECTION_KEYWORDS, "reverse", "backend")
BACKENDS = ("auto", "kernel", "userspace")
# TCLink's keywords that TestbedLink has no use for: refused, never silently dropped (the others
# go to Mininet's interfaces, as with any Link: ip, mac, ...)
TCLINK_ONLY = ("speedup", "use_hfsc", "use_tbf", "latency_ms", "enable_ecn", "enable_red")
ENDS = ("n1", "n2")  # the link's ends in its scenario and direction names (n1->n2, n2->n1)


def direction_settings(where: str, params: dict[str, Any]) -> dict[str, Any]:
    """TCLink-style keywords of one direction as WanLink fields. PURE."""
    unknown = sorted(set(params) - set(DIRECTION_KEYWORDS))
    if unknown:
        raise ScenarioError(
            f"{where}: unknown keyword {', '.join(map(repr, unknown))}; allowed: "
            f"{', '.join(DIRECTION_KEYWORDS)}"
        )
    out: dict[str, Any] = {}
    bw = params.get("bw")
    if bw is not None:
        if isinstance(bw, bool) or not isinstance(bw, int | float) or bw <= 0:
            raise ScenarioError(f"{where}: bw: {bw!r} is not a rate in Mbit/s (a number > 0)")
        out["rate"] = round(bw * 1e6)
    for key in ("delay", "jitter"):
        value = params.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise ScenarioError(
                f"{where}: {key}: {value!r} is not a duration string; examples: '10ms', '1.5ms'"
            )
        out[key] = value
    for key in ("loss", "reorder"):
        value = params.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 100:
            raise ScenarioError(f"{where}: {key}: {value!r} is not a percentage (0 to 100)")
        out[key] = f"{value}%"
    packets, buffer = params.get("max_queue_size"), params.get("buffer")
    if packets is not None and buffer is not None:
        raise ScenarioError(
            f"{where}: give max_queue_size (packets) or buffer (bytes, bdp), not both"
        )
    if packets is not None:
        if isinstance(packets, bool) or not isinstance(packets, int) or packets <= 0:
            raise ScenarioError(
                f"{where}: max_queue_size: {packets!r} is not a number of packets (an int > 0)"
            )
        out["buffer"] = packets * FRAME_BYTES
    elif buffer is not None:
        out["buffer"] = buffer
    if params.get("aqm") is not None:
        out["aqm"] = params["aqm"]
    return out


def link_scenario(where: str, params: dict[str, Any]) -> dict[str, Any]:
    """The one-link scenario (as loaded YAML) of a TestbedLink's keywords. PURE."""
    unknown = sorted(set(params) - set(KEYWORDS))
    if unknown:
        raise ScenarioError(
            f"{where}: unknown keyword {', '.join(map(repr, unknown))}; allowed: "
            f"{', '.join(KEYWORDS)}"
        )
    backend = params.get("backend", "auto")
    if backend not in BACKENDS:
        raise ScenarioError(f"{where}: backend: {backend!r} is not allowed; allowed: {BACKENDS}")
    link = {"between": list(ENDS), "rate": "10gbit"}  # TCLink without bw: not shaped
    link |= direction_settings(where, {k: v for k, v in params.items() if k in DIRECTION_KEYWORDS})
    reverse = params.get("reverse")
    if reverse is not None:
        if not isinstance(reverse, dict):
            raise ScenarioError(
                f"{where}: reverse: a dict of the second->first direction's keywords "
                f"({', '.join(DIRECTION_KEYWORDS)})"
            )
        link["reverse"] = direction_settings(f"{where}: reverse", reverse)
    return {
        "name": "mininet-link",
        "clusters": {end: {"hosts": 1} for end in ENDS},
        "wan": [link],
        "backend": backend,
    }


class _Session:
    """The wires of this process: one registry record, claimed at the first link."""

    lock = threading.Lock()
    record: Record | None = None
    links: ClassVar[set[str]] = set()  # wire namespaces alive
    counter = itertools.count()
    features: Any = None

    @classmethod
    def add(cls) -> tuple[Record, str]:
        with cls.lock:
            if cls.record is None or not cls.record.path.exists():
                cls.record = registry.claim(f"mininet-{os.getpid()}", "TestbedLink")
                cls.record.engine = "mininet"
                cls.record.phase = "up"
                cls.features = probe.probe()
            label = f"l{next(cls.counter)}"
            cls.links.add(f"{cls.record.prefix}-{label}")
            return cls.record, label

    @classmethod
    def remove(cls, wire: str) -> None:
        with cls.lock:
            cls.links.discard(wire)
            rec = cls.record
            if rec is None:
                return
            rec.namespaces = sorted(cls.links)
            rec.processes = [p for p in rec.processes if registry.process_alive(p[0], p[1])]
            if cls.links:
                rec.save()
            else:
                rec.remove()
                shutil.rmtree(rec.state_dir, ignore_errors=True)
                cls.record = None


# The interface indexes of the veths between Mininet's nodes and the wires, two a veth, counted
# per process from above the plan's own (testbed.plan.render.VETH_INDEX + 2 per plan veth).
_WIRE_VETH_INDEXES = itertools.count(VETH_INDEX + 20000)


class _WireEngine(Engine):
    """Makes a bridged link's wire (the native way) and the veths from its two nodes into it."""

    def __init__(self, ends: list[tuple[str, int, str | None]], gso_max_segs: int | None) -> None:
        self.ends = ends  # (interface name, node pid, MAC or None) of end 1 and end 2
        self.gso_max_segs = gso_max_segs

    def create(self, plan: NetworkPlan, rec: Record) -> None:
        super().create(plan, rec)
        wire = plan.namespaces[0].name
        lines = []
        for (name, pid, mac), port in zip(self.ends, END_PORTS, strict=True):
            options = (f" address {mac}" if mac else "") + (
                f" gso_max_segs {self.gso_max_segs}" if self.gso_max_segs else ""
            )
            # each end its own index, as the plan's veths (testbed.plan.render.VETH_INDEX): an
            # end whose index equals its peer's has its carrier back on the kernel's slow path
            node_index, wire_index = next(_WIRE_VETH_INDEXES), next(_WIRE_VETH_INDEXES)
            lines.append(f"link add {name}{options} netns {pid} index {node_index} type veth "
                         f"peer name {port} netns {wire} index {wire_index}")  # fmt: skip
        run_batches([(["ip"], lines)])


class TestbedLink(Link):
    """A Mininet link emulated by the project's backends; keywords as TCLink's (module doc)."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        node1: Any,
        node2: Any,
        port1: int | None = None,
        port2: int | None = None,
        intfName1: str | None = None,
        intfName2: str | None = None,
        addr1: str | None = None,
        addr2: str | None = None,
        intf: type = Intf,
        cls1: type | None = None,
        cls2: type | None = None,
        params1: dict | None = None,
        params2: dict | None = None,
        fast: bool = True,
        **params: Any,
    ) -> None:
        where = f"TestbedLink({node1.name}, {node2.name})"
        shaping = {k: params.pop(k) for k in list(params) if k in (*KEYWORDS, *TCLINK_ONLY)}
        data = link_scenario(where, shaping)
        try:
            scenario = parse_scenario(data, where)
        except ScenarioError as exc:
            raise ScenarioError(str(exc).replace(f"{where}: wan[0].", f"{where}: ")) from None
        self.node1, self.node2 = node1, node2
        self.backend: LinkBackend | None = None
        self.record, label = _Session.add()
        self.wire = f"{self.record.prefix}-{label}"
        try:
            self.plan = bridged_link_plan(scenario, self.record.prefix, label)
            self.backend = choose_backend(
                scenario.backend,
                self.plan.needs_propagation_emulation(),
                _Session.features,
                self.plan.needs_marking(),
            )
            self.backend.check(self.plan)
            for warning in self.plan.warnings:
                info(f"*** {where}: {warning.removeprefix('wan[0] ')}\n")
            super().__init__(
                node1, node2, port1, port2, intfName1, intfName2, addr1, addr2, intf, cls1,
                cls2, params1, params2, fast, **params,
            )  # fmt: skip
        except BaseException:
            self._teardown()
            raise

    def makeIntfPair(
        self,
        intfname1: str,
        intfname2: str,
        addr1: str | None = None,
        addr2: str | None = None,
        node1: Any = None,
        node2: Any = None,
        deleteIntfs: bool = True,
    ) -> None:
        """The two interfaces, as veths into the wire, and the wire with its emulation."""
        n1, n2 = node1 or self.node1, node2 or self.node2
        assert self.backend is not None
        rec, plan, backend = self.record, self.plan, self.backend
        # loss applies per wire packet, not per 64 KiB GSO packet: the ends send no GSO
        segs = 1 if plan.wire_sized_packets else None
        engine = _WireEngine([(intfname1, n1.pid, addr1), (intfname2, n2.pid, addr2)], segs)
        known = list(rec.namespaces)
        namespaces_made = backend.prepare(plan, rec, None)
        build.build(plan, rec, _Session.features, backend.tc_batches(plan), engine, namespaces_made)
        rec.namespaces = sorted(set(known) | {self.wire})  # build() lists this plan's only
        rec.backend = backend.name
        rec.save()
        backend.start(plan, rec, None)

    def delete(self) -> None:
        """Stop the emulation, then remove the wire (and with it both interfaces)."""
        try:
            self._teardown()
        finally:
            for intf in (self.intf1, self.intf2):
                if intf is not None:
                    intf.node.delIntf(intf)
            self.intf1 = self.intf2 = None

    def _teardown(self) -> None:
        try:
            if self.backend is not None:
                backend, self.backend = self.backend, None
                backend.stop()
        finally:
            if (netns.NETNS_DIR / self.wire).exists():
                run_batches([(["ip"], [f"netns del {self.wire}"])])
            with contextlib.suppress(FileNotFoundError):
                _Session.remove(self.wire)

    def stats(self) -> list[dict]:
        """Counters per direction (``n1->n2``, ``n2->n1``), where the backend keeps its own."""
        return self.backend.link_stats() if self.backend is not None else []

    def status(self) -> str:
        return f"{super().status()} via {self.wire} ({self.plan.wan[0].name} and back)"
