"""The ``LinkBackend`` interface: what every way of emulating WAN directions provides.

A backend is chosen once (``testbed.link.choose``) and then asked, never compared by name: which
plans it can emulate (``check``), the qdiscs it needs (``tc_batches``, PURE), the processes it
runs beside them (``start``/``stop``), changes to a running link (``set_rate``,
``set_impairments``), and what it observed (``problems``, ``link_stats``, ``queue_trace``). The
base class's defaults render shaping alone and change it in place; a backend overrides what it
adds.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import ClassVar

from testbed.core.errors import NetError, UnsupportedError
from testbed.net import rtnl
from testbed.net.batches import run_batches
from testbed.net.registry import Record
from testbed.plan.model import FabricPort, Impairment, NetworkPlan, WanDirection
from testbed.plan.render import (
    TcOp,
    fabric_shaper_lines,
    holds_in_plug,
    plug_start_ops,
    rate_change_lines,
    rate_change_ops,
    wan_shaper_lines,
)
from testbed.plan.sizing import MIN_BUFFER


class LinkBackend:
    """One way of emulating WAN directions. Defaults: HTB shaping (with ``sch_red`` leaves for
    marking profiles) and nothing else."""

    name: ClassVar[str]  # recorded in manifests and registry records; never branched on

    def __init__(self, reason: str = "") -> None:
        self.reason = reason  # why this backend was chosen, for the user
        self.directions: dict[str, WanDirection] = {}  # the running plan's, by name (start)

    # -- what it can do (pure) ----------------------------------------------------------------
    def check(self, plan: NetworkPlan) -> None:
        """Raise ``UnsupportedError`` (saying what and why) if ``plan`` needs what this backend
        cannot emulate."""

    def mininet_link_params(self, d: WanDirection) -> dict | None:
        """Mininet ``TCLink`` keywords for the sending side of ``d`` when Mininet itself shapes
        it (backend tclink, engine mininet); None: the backend's own qdiscs do."""
        return None

    def owns_queue(self, d: WanDirection) -> bool:
        """Whether the backend itself, not a qdisc, holds the bottleneck queue of ``d``."""
        return False

    def fabric_lines(self, p: FabricPort) -> list[str]:
        return fabric_shaper_lines(p)

    def wire_lines(self, plan: NetworkPlan) -> dict[str, list[str]]:
        """Namespace -> qdisc lines in the wire namespaces (propagation), if any."""
        return {}

    def tc_batches(self, plan: NetworkPlan) -> dict[str, list[str]]:
        """Namespace -> ``tc`` batch lines: WAN bottlenecks, fabric ports, then the wires."""
        out: dict[str, list[str]] = defaultdict(list)
        for d in plan.wan:
            if not self.owns_queue(d):
                out[d.shaper.ns] += wan_shaper_lines(d)
        for p in plan.fabric:
            out[p.ns] += self.fabric_lines(p)
        for ns, lines in self.wire_lines(plan).items():
            out[ns] += lines
        # one machine's part of a topology over several: the halves of directions that are here
        return {ns: lines for ns, lines in out.items() if plan.has_ns(ns)}

    # -- lifecycle (after the kernel objects exist, before they go) ----------------------------
    def prepare(
        self, plan: NetworkPlan, record: Record, trace_interval: float | None
    ) -> Callable[[], None] | None:
        """Called before the build: begin what is slow to start, side by side with the build
        (default: nothing). May return a callable that the build calls once the namespaces
        exist (the rest of the build goes on meanwhile). :meth:`start` follows with the same
        arguments, unless the build failed (then :meth:`stop`)."""
        return None

    def start(self, plan: NetworkPlan, record: Record, trace_interval: float | None) -> None:
        """Start what runs beside the qdiscs; ``trace_interval`` asks for queue samples. An
        override calls this first: the running directions are what :meth:`set_rate` changes."""
        self.directions = {d.name: d for d in plan.wan}
        plugs = {}
        for d in plan.wan:
            if holds_in_plug(d) and not self.owns_queue(d) and plan.has_ns(d.shaper.ns):
                plugs.setdefault(d.shaper.ns, []).extend(plug_start_ops(d))
        rtnl.apply(plugs)

    def stop(self) -> None:
        """Stop it, keeping its statistics readable (the testbed's files go right after)."""

    def set_rate(self, changes: dict[str, tuple[int, int]]) -> None:
        """Give running WAN directions (by name) a new bottleneck: (rate bit/s, buffer bytes).
        In place: the HTB class changes rate (its token state and its leaf's packets survive)
        and the leaf its byte limit, as rtnetlink requests from this process (a ``tc`` process
        per namespace cost several ms; benchmarks/fault_ops.py), a marking leaf by a ``tc``
        batch (sch_red's parameters are tc's to compute); returns once the kernel applied
        them. A buffer below the plan's floor (two GSO packets) is raised to it, as at
        bring-up."""
        ops: dict[str, list[TcOp]] = {}
        red: dict[str, list[str]] = {}
        for name, (rate, buffer) in changes.items():
            d = self._direction(name)
            if rate < 0 or (rate == 0 and not holds_in_plug(d)):
                raise NetError(
                    f"{name}: rate {rate} bit/s: HTB needs a positive rate (0 holds the queue "
                    "of a direction that replays a trace, in a plug leaf, not a red one)"
                )
            buffer = max(buffer, MIN_BUFFER)
            ops.setdefault(d.shaper.ns, []).extend(rate_change_ops(d, rate, buffer))
            if d.marking:
                red.setdefault(d.shaper.ns, []).append(rate_change_lines(d, rate, buffer)[-1])
        rtnl.apply(ops)
        if red:
            run_batches([(["tc", "-n", ns], lines) for ns, lines in red.items()])

    def _direction(self, name: str) -> WanDirection:
        try:
            return self.directions[name]
        except KeyError:
            known = ", ".join(self.directions) or "none: the backend is not started"
            raise NetError(f"no WAN direction {name!r} (directions: {known})") from None

    def set_impairments(self, changes: dict[str, Impairment]) -> None:
        """Give running WAN directions (by name) new delay, jitter, loss, reorder and burst
        loss (``ge_p``, ``ge_r``), for the packets that arrive from now on; returns once
        applied. Used by the RTT compensation
        at bring-up; meant for schedules that change a link while it carries traffic."""
        if changes:
            raise UnsupportedError(
                f"backend {self.name} emulates no delay, jitter, loss or reorder to change"
            )

    # -- what it observed -----------------------------------------------------------------------
    def problems(self) -> list[str]:
        """Why links are broken right now (a dead process, overflow); empty when healthy."""
        return []

    def link_stats(self) -> list[dict]:
        """Counters per WAN direction, where the backend keeps its own."""
        return []

    def queue_trace(self) -> list[dict]:
        """Samples of the queues the backend owns (``owns_queue``), in the queues-table columns."""
        return []
