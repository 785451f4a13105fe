"""BGP and routing events across machines (``routing.mode: bgp``, multipath links).

Each machine's agent starts FRR in the gateways of its part (``Network.up`` of the part does,
without waiting: a session needs the daemons of the machine across the cable); the driver then
waits until every part's kernels hold their BGP routes over every path and every BFD session is
up (:func:`wait_converged`). The sessions and BFD run over the VXLAN cables like any traffic of
the wires. Each daemon is recorded in its machine's part, so that machine's teardown, or
``testbed clean`` there after a killed driver, ends it by its recorded pid.

:class:`SpannedRoutingEvents` records the routing events of a run on every machine: each agent
runs :class:`testbed.trace.routing.RoutingEvents` on its part (route monitors in its gateways,
its FRR logs), the driver gathers the rows and the monitors' output into the run's directory.
Each machine stamps its rows with its own clock (unix seconds); given ``to_driver`` (a machine's
time -> the driver's, from the clock offsets of testbed.live.spanned.clocks) the rows are put
on the driver's timeline, else they keep their machine's clock (on the stand-in machines, one
kernel, that is one clock).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.core.errors import NetError
from testbed.net.frr import CONVERGE_TIMEOUT, POLL


def wait_converged(ray: Any, agents: dict[str, Any], timeout: float = CONVERGE_TIMEOUT) -> float:
    """Wait until every machine's gateways hold their BGP routes and BFD sessions; seconds it
    took. Raises ``NetError`` naming what each machine still lacks after ``timeout``."""
    t0 = time.monotonic()
    while True:
        got = ray.get([a.frr_not_converged.remote() for a in agents.values()])
        if not any(got):
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            why = ray.get([a.frr_not_converged_reason.remote() for a in agents.values()])
            parts = [f"{m}: {w}" for m, w, g in zip(agents, why, got, strict=True) if g]
            raise NetError(f"after {timeout:.0f} s across machines: " + " || ".join(parts))
        time.sleep(POLL)


class SpannedRoutingEvents:
    """Around one run across machines: every agent's route monitors and FRR logs; ``rows``
    (every machine's, in time order) once left, the monitors' output in ``run_dir/routing``."""

    def __init__(
        self,
        ray: Any,
        agents: dict[str, Any],
        run_dir: Path,
        to_driver: Callable[[str, float], float] | None = None,
    ) -> None:
        self.ray, self.agents = ray, dict(agents)
        self.to_driver = to_driver
        self.dir = run_dir / "routing"
        self.rows: list[dict[str, Any]] = []

    def __enter__(self) -> SpannedRoutingEvents:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ray.get([a.routing_start.remote() for a in self.agents.values()])
        return self

    def __exit__(self, *exc: object) -> None:
        got = self.ray.get([a.routing_stop.remote() for a in self.agents.values()])
        for machine, (rows, files) in zip(self.agents, got, strict=True):
            for name, data in files.items():
                (self.dir / name).write_bytes(data)
            if self.to_driver is not None:
                rows = [{**r, "time": self.to_driver(machine, r["time"])} for r in rows]
            self.rows += rows
        self.rows.sort(key=lambda r: r["time"])
