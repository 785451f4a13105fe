"""Backends made of kernel qdiscs only: netem in the wires (``KernelBackend``), or shaping alone
(``ShapingOnlyBackend``, for scenarios with nothing to delay)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from testbed.core.direction import Direction
from testbed.core.errors import UnsupportedError
from testbed.link.base import LinkBackend
from testbed.net.batches import run_batches
from testbed.net.registry import Record
from testbed.plan.model import FabricPort, Impairment, NetworkPlan
from testbed.plan.render import fabric_lines, netem_lines
from testbed.plan.sizing import MIN_BUFFER, netem_limit


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

    def check(self, plan: NetworkPlan) -> None:
        for d in plan.wan:
            if d.marking and d.aqm is not None and d.aqm.at == "dequeue":
                raise UnsupportedError(
                    f"{d.name}: aqm at: dequeue is unsupported on the kernel backend (sch_red "
                    "decides at enqueue); use `at: arrival`, or `backend: userspace` (the delay "
                    "line decides at dequeue)"
                )

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason)
        self.netem: dict[str, Impairment] = {}  # what each running netem has, by direction
        self.bottleneck: dict[str, tuple[int, int]] = {}  # (rate, buffer) in force

    def start(self, plan: NetworkPlan, record: Record, trace_interval: float | None) -> None:
        super().start(plan, record, trace_interval)
        self.netem = {
            d.name: d.impairment
            for d in plan.wan
            if self._has_netem(d.name) and plan.has_ns(d.impairment.ns)
        }
        self.bottleneck = {d.name: (d.rate, d.buffer) for d in plan.wan}

    def _has_netem(self, name: str) -> bool:
        d = self.directions[name]
        return d.impairment.active or d.changes_later

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
        self._replace({n: self._sized(n, imp) for n, imp in changes.items()})

    def set_rate(self, changes: dict[str, tuple[int, int]]) -> None:
        """HTB in place (the base class), then netem's limit where the new rate or buffer needs
        more packets than it holds (:meth:`_sized`)."""
        super().set_rate(changes)
        # a held direction (rate 0) keeps its rate for sizing
        self.bottleneck.update(
            {n: (r or self.bottleneck[n][0], max(b, MIN_BUFFER)) for n, (r, b) in changes.items()}
        )
        # a direction's rate also sizes its reverse's netem (its ACKs)
        touched = {n for name in changes for n in (name, _reverse(name))}
        grown = {}
        for n in sorted(touched):
            if n in self.netem:
                imp = self._sized(n, self.netem[n])
                if imp.netem_limit > self.netem[n].netem_limit:
                    grown[n] = imp
        if grown:
            self._replace(grown)

    def _sized(self, name: str, imp: Impairment) -> Impairment:
        """``imp`` with a netem limit for the direction's rate, buffer, delay and jitter in force
        now (plan.sizing.netem_limit), never below the running one. The plan sized it for the
        configured link only: a delay or rate raised later (a schedule, a trace) would otherwise
        overflow netem's packet limit, a loss the userspace line does not have."""
        if name not in self.directions:
            return imp
        rate, buffer = self.bottleneck.get(name, (0, 0))
        reverse = self.bottleneck.get(_reverse(name), (0, 0))[0]
        held = self.netem[name].netem_limit if name in self.netem else 0
        need = netem_limit(rate, reverse, imp.delay, imp.jitter, buffer)
        return dataclasses.replace(imp, netem_limit=max(imp.netem_limit, held, need))

    def _replace(self, changes: dict[str, Impairment]) -> None:
        per_ns: dict[str, list[str]] = {}
        for imp in changes.values():
            per_ns.setdefault(imp.ns, []).extend(netem_lines(imp, verb="replace"))
        run_batches([(["tc", "-n", ns], lines) for ns, lines in per_ns.items()])
        self.netem.update(changes)


def _reverse(name: str) -> str:
    """ "a->b" -> "b->a" (a path's: "a->b/1" -> "b->a/1")."""
    return str(Direction.parse(name).reverse())
