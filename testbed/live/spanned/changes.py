"""The WAN's changes and faults on one machine's part of a spanned testbed (the agent's side).

The event runner stays on the driver (testbed.experiment.events) and sends each event's part to
the machines that hold what it acts on: a rate to the sending gateway's machine, an impairment
to the wire's, a fault to every machine (:class:`~testbed.net.faults.FaultOps` on the whole plan
does there only what is in that machine's namespaces). An action arrives ahead of its time with
its due time on this machine's clock; :class:`MachineChanges` waits for it (sleep, then spin) and
applies it, returning when it was applied on this machine's clock, which the driver puts on its
own timeline with the clock offset's bound (testbed.live.spanned.clocks).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from testbed.link.base import LinkBackend
from testbed.net.faults import FaultOps
from testbed.plan.model import Impairment, NetworkPlan

SPIN = 0.002  # s before the due time: sleep until then, then spin

# what a machine can be asked to do: name -> how (the whole plan's FaultOps, the part's backend)
Action = tuple[str, tuple[Any, ...]]


class MachineChanges:
    """Rates, impairments and faults on this machine's part (``local``: its namespaces)."""

    def __init__(self, whole: NetworkPlan, local: frozenset[str], backend: LinkBackend) -> None:
        self.backend = backend
        self.faults = FaultOps(whole, local=local)

    def apply(self, actions: Sequence[Action], due_unix: float | None) -> tuple[str, float, float]:
        """At ``due_unix`` (this machine's clock; None: now) do ``actions`` in order: the
        operations as text, when they started and when the last returned (unix, this clock)."""
        if due_unix is not None:
            left = due_unix - time.time()
            if left > SPIN:
                time.sleep(left - SPIN)
            while time.time() < due_unix:
                pass
        t0 = time.time()
        done = [self._one(name, args) for name, args in actions]
        return "; ".join(d for d in done if d), t0, time.time()

    def _one(self, name: str, args: tuple[Any, ...]) -> str:
        if name == "set_rate":
            rates: dict[str, tuple[int, int]] = args[0]
            self.backend.set_rate(rates)
            return ""
        if name == "set_impairments":
            imps: dict[str, Impairment] = args[0]
            self.backend.set_impairments(imps)
            return ""
        if name == "prepare":
            return self.faults.prepare()
        if name == "blackhole":
            return self.faults.blackhole(args[0], on=args[1])
        if name == "reset":
            return self.faults.reset(args[0], on=args[1])
        if name == "link":
            return self.faults.link(args[0], up=args[1], unpin=False)
        if name == "unpin_link":
            return self.faults.unpin_link(args[0])
        if name == "gateway":
            return self.faults.gateway(args[0], up=args[1], unpin=False)
        if name == "unpin_gateway":
            return self.faults.unpin_gateway(args[0])
        raise ValueError(f"unknown WAN action {name!r}")

    def fault_drops(self) -> list[dict[str, Any]]:
        return self.faults.fault_drops() if self.faults.ready else []
