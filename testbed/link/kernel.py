"""Backends made of kernel qdiscs only: netem in the wires (``KernelBackend``), or shaping alone
(``ShapingOnlyBackend``, for scenarios with nothing to delay)."""

from __future__ import annotations

from typing import ClassVar

from testbed.core.errors import UnsupportedError
from testbed.link.base import LinkBackend
from testbed.net.build import run_batches
from testbed.plan.render import fabric_lines, netem_lines
from testbed.plan.topology import FabricPort, Impairment, NetworkPlan


class ShapingOnlyBackend(LinkBackend):
    """HTB (and red leaves); refuses a plan with delay, jitter, loss or reorder."""

    name: ClassVar[str] = "none"

    def check(self, plan: NetworkPlan) -> None:
        if plan.needs_propagation_emulation():
            raise UnsupportedError(
                "this scenario has WAN or fabric delay/jitter/loss/reorder, which shaping alone "
                "cannot emulate (unsupported on this kernel: netem); use `backend: auto`"
            )


class KernelBackend(LinkBackend):
    """netem on each wire's egress (and in fabric leaves); ``sch_red`` leaves for marking."""

    name: ClassVar[str] = "kernel"

    def fabric_lines(self, p: FabricPort) -> list[str]:
        return fabric_lines(p)

    def wire_lines(self, plan: NetworkPlan) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for d in plan.wan:
            # A direction changed later gets its netem now, idle or not: a `replace` then
            # changes it in place (adding a root qdisc under traffic would reset the device's
            # queue, and the RTT compensation measured the path with it).
            if d.impairment.active or d.changes_later:
                out.setdefault(d.impairment.ns, []).extend(netem_lines(d.impairment))
        return out

    def set_impairments(self, changes: dict[str, Impairment]) -> None:
        """``tc qdisc replace`` of each wire's netem (one batch per wire namespace, in
        parallel): in place where it runs, keeping what it holds. netem stamps each packet's
        send time at enqueue, so the held ones keep their old delay: a delay decrease larger
        than the gap between packets reorders them (docs/faults.md)."""
        per_ns: dict[str, list[str]] = {}
        for imp in changes.values():
            per_ns.setdefault(imp.ns, []).extend(netem_lines(imp, verb="replace"))
        run_batches([(["tc", "-n", ns], lines) for ns, lines in per_ns.items()])
