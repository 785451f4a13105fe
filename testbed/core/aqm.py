"""The bottleneck's marking profiles (the ``aqm`` kinds) in one place: which thresholds each kind
takes and its marking law. The scenario schema checks a profile against ``KIND_FIELDS``, the delay
line validates its config with it and marks with ``mark_probability``; the kernel's rendering of
the same law is ``sch_red`` (``testbed.plan.render.red_args``). Standard library only: the delay
line imports it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# kind -> the thresholds it needs (and the only ones it takes)
KIND_FIELDS: dict[str, tuple[str, ...]] = {
    "droptail": (),
    "red": ("kmin", "kmax", "pmax"),
    "step": ("k",),
}
THRESHOLD_FIELDS = ("kmin", "kmax", "pmax", "k")


def mark_probability(aqm: Mapping[str, Any] | None, backlog: float) -> float:
    """Probability that a packet arriving at ``backlog`` queued bytes is marked (or dropped).

    red: 0 below kmin, rising linearly to pmax at kmax, 1 above kmax (DCQCN's ramp); step: 1 above
    k (DCTCP's). On the instantaneous queue, as those switches do."""
    if aqm is None:
        return 0.0
    kind = aqm["kind"]
    if kind == "step":
        return 1.0 if backlog > aqm["k"] else 0.0
    if kind == "red":
        kmin, kmax = aqm["kmin"], aqm["kmax"]
        if backlog <= kmin:
            return 0.0
        if backlog > kmax:
            return 1.0
        return aqm["pmax"] * (backlog - kmin) / (kmax - kmin)
    return 0.0


def marking_point(at: str | None, backend: str) -> str:
    """Where a marking profile decides on ``backend``: the scenario's ``at``, else ``dequeue`` on
    the delay line (``userspace``) and ``arrival`` in the kernel (``sch_red`` decides at
    enqueue)."""
    if at is not None:
        return at
    return "dequeue" if backend == "userspace" else "arrival"
