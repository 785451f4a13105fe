"""RTT compensation at bring-up, the side effects: measure each WAN direction's floor, then give
its emulator the configured delay minus that floor (the arithmetic and its rules:
``testbed.plan.compensation``).

The testbed comes up with the calibration plan (delays only), then this module sends a few UDP
probes from the first host of each direction's source cluster to the first host of its
destination, all directions at once, from *this* process: the sockets are made inside the host
namespaces (a worker thread enters each, the socket stays in the namespace it was made in) and
the probe is ``traffic.udpping.one_way`` (kernel receive stamps, one clock for all namespaces).
It costs about the longest one-way delay plus ``PROBES`` x ``INTERVAL`` (and each probe's
``sendto``, which carries the packet through the veths, bridge and shaper into the emulator), no
process start-up. Then the backend's ``set_impairments`` applies the compensated delays
together with the directions' jitter, loss and reorder.
"""

from __future__ import annotations

import dataclasses
import socket

from testbed.core.errors import NetError
from testbed.link.base import LinkBackend
from testbed.net import netns
from testbed.plan.compensation import Compensation, compensate, configured_one_way
from testbed.plan.model import NetworkPlan
from traffic.udpping import one_way, timestamped_socket

# Per direction; the first is dropped (it may wait for address resolution). More do not help:
# the floor itself wanders over seconds by more than more probes would average out.
PROBES = 8
# s between a direction's probes (the directions' probes spread over it): the floor is that of an
# idle path, as an idle ping sees it (closer probes read lower: a busy CPU answers faster than
# one woken from idle).
INTERVAL = 0.01
WAIT = 0.5  # s beyond the longest configured one-way delay for the last probe to arrive


def measure_one_way(plan: NetworkPlan) -> dict[str, list[float]]:
    """Direction name -> one-way delays (s), first host to first host, of the probes that
    arrived (the first probe of each direction left out)."""
    # (namespace, what to make there, which socket it is), sorted so that the worker thread
    # enters each host namespace once
    work = []
    # A path of a multipath link is not probed: the gateways' hash, not the probe, chooses the
    # path a probe takes. Its delay is emulated as configured (no compensation).
    probed = [d for d in plan.wan if not d.multipath]
    if not probed:
        return {}
    for i, d in enumerate(probed):
        src, dst = plan.host(f"{d.src}-h0"), plan.host(f"{d.dst}-h0")
        work.append((src.ns, _sender, (i, 0)))
        work.append((dst.ns, _receiver(dst.address), (i, 1)))
    work.sort(key=lambda w: w[0])
    made = netns.run_in([(ns, make) for ns, make, _ in work])
    try:
        ends = {w[2]: s for w, s in zip(work, made, strict=True)}
        pairs = [(ends[i, 0], ends[i, 1]) for i in range(len(probed))]
        longest = max(configured_one_way(plan, d) for d in probed)
        got = one_way(pairs, PROBES, INTERVAL, wait=longest + WAIT)
    finally:
        for s in made:
            s.close()
    return {
        d.name: [v for seq, v in sorted(g.items()) if seq > 0]
        for d, g in zip(probed, got, strict=True)
    }


def _sender() -> socket.socket:
    return socket.socket(socket.AF_INET, socket.SOCK_DGRAM)


def _receiver(address: str):
    def make() -> socket.socket:
        s = timestamped_socket()
        s.bind((address, 0))
        return s

    return make


def calibrate(plan: NetworkPlan, backend: LinkBackend) -> list[Compensation]:
    """Measure every direction's floor (the emulators running the calibration plan), check and
    compute the compensation (``FloorError`` when a delay is below its floor) and apply it
    with the plan's jitter, loss and reorder. Returns the compensation of every direction."""
    measured = measure_one_way(plan)
    silent = [d.name for d in plan.wan if d.delay and not d.multipath and not measured[d.name]]
    if silent:
        raise NetError(
            f"RTT calibration: no probe crossed {', '.join(silent)} within "
            f"{WAIT:.1f} s of its configured delay; the link does not forward"
        )
    comps = compensate(plan, measured)
    backend.set_impairments(
        {
            d.name: dataclasses.replace(d.impairment, delay=c.emulated_s)
            for d, c in zip(plan.wan, comps, strict=True)
            if d.delay
        }
    )
    return comps
