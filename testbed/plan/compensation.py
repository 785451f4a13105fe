"""RTT compensation, the pure part: what each WAN direction's emulator must delay so that the
host-to-host delay is the configured one (README, "The configured RTT is the RTT you get").

Every path has a floor the emulated delay comes on top of (veths, bridges, the gateways'
forwarding and, on the userspace backend, the delay line's pass). At bring-up each direction's
one-way delay is measured host to host (``testbed.live.calibrate``) with the emulator set to the
configured delay; the excess is the direction's *floor* and the emulator gets configured - floor.
This module owns that arithmetic: :func:`configured_one_way` (the WAN delay plus the fabric
delays crossed), :func:`calibration_plan` (each delayed direction with its delay only, so a few
probes all arrive and their median is the delay) and :func:`compensate` (a delay above 0 below
its floor is refused, :class:`FloorError`, rather than silently delivered longer; a 0 ms
direction has nothing to subtract from). The floor is capped at twice the fastest probe's excess
plus ``STALL_SLACK``: a starved machine (a TCG guest on an overloaded host) once made most probes
wait, and an uncapped floor took tens of ms off the delay (docs/vm.md). A path across two WAN
links is compensated twice for the middle cluster's host side, so it is that much short.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from testbed.core.errors import TestbedError
from testbed.core.stats import quantile
from testbed.plan.model import NetworkPlan, WanDirection

# s: the floor is at most 2 x the fastest probe's excess + this (see the module docstring)
STALL_SLACK = 0.0002


class FloorError(TestbedError):
    """A configured delay is below the path's measured floor (a configuration the testbed
    cannot deliver: exit code 2, like a bad scenario)."""

    exit_code = 2


@dataclass(frozen=True)
class Compensation:
    """One WAN direction's calibration (seconds, one way, first host to first host)."""

    direction: str
    configured_s: float  # the direction's configured delay (the scenario's)
    path_configured_s: float  # plus the fabric delays crossed host to host
    measured_s: float | None  # median one-way delay measured with the emulator at configured_s
    fastest_s: float | None  # the fastest probe's one-way delay
    floor_s: float | None  # what the path adds on its own: measured - path configured, capped
    compensation_s: float  # subtracted from the emulated delay (0 where nothing to subtract)
    emulated_s: float  # what the emulator is set to: configured - compensation
    samples: int
    # "one-way": timed on one clock; "round-trip": across machines, whose clocks are not
    # compared, each direction is its configured delay plus half its link's excess round trip
    basis: str = "one-way"

    def row(self) -> dict:
        return dataclasses.asdict(self)


def configured_one_way(plan: NetworkPlan, d: WanDirection) -> float:
    """One-way delay from the first host of ``d.src`` to the first host of ``d.dst``: the WAN
    delay plus the fabric delay of the source host's port and of the destination gateway's port
    (netem sits on each port's egress)."""
    fabric = {p.ns: p.delay for p in plan.fabric}
    return (
        d.delay
        + fabric.get(plan.host(f"{d.src}-h0").ns, 0.0)
        + fabric.get(f"{plan.prefix}-{d.dst}-gw", 0.0)
    )


def calibration_plan(plan: NetworkPlan) -> NetworkPlan:
    """``plan`` with every delayed WAN direction stripped to its delay (no jitter, loss or
    reorder): what the emulators run while the floor is measured. Directions without delay keep
    what they have (stripping a loss-only direction would remove its emulator)."""

    def strip(d: WanDirection) -> WanDirection:
        if not d.delay:
            return d
        imp = dataclasses.replace(d.impairment, jitter=0.0, loss=0.0, reorder=0.0)
        return dataclasses.replace(d, jitter=0.0, loss=0.0, reorder=0.0, impairment=imp)

    return dataclasses.replace(plan, wan=tuple(strip(d) for d in plan.wan))


def compensate(plan: NetworkPlan, measured: dict[str, list[float]]) -> list[Compensation]:
    """The compensation of every WAN direction from its one-way samples (seconds, measured
    with the calibration plan); raises :class:`FloorError` naming every direction whose
    configured delay is above 0 but below its floor."""
    out = []
    refused = []
    for d in plan.wan:
        samples = measured.get(d.name, [])
        path = configured_one_way(plan, d)
        median = quantile(samples, 0.5) if samples else None
        fastest = min(samples) if samples else None
        floor = None
        if median is not None and fastest is not None:
            floor = min(median - path, 2 * (fastest - path) + STALL_SLACK)
        comp = 0.0
        if d.delay and floor is not None and floor > 0:
            if floor > d.delay:
                refused.append(
                    f"link {d.name}: configured delay {d.delay * 1e3:.3f} ms is below the "
                    f"measured floor of its path, {floor * 1e3:.3f} ms one way"
                )
            comp = min(floor, d.delay)
        out.append(
            Compensation(
                direction=d.name,
                configured_s=d.delay,
                path_configured_s=path,
                measured_s=median,
                fastest_s=fastest,
                floor_s=floor,
                compensation_s=comp,
                emulated_s=d.delay - comp,
                samples=len(samples),
            )
        )
    if refused:
        raise FloorError(
            "; ".join(refused)
            + ". The namespaces (and the delay line) add that much on their own; configure a "
            "delay of at least the floor, or 0 ms for no emulated delay"
        )
    return out
