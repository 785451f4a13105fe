"""The emulated-compute training schedule as an α-β model with the terms of this machine and of
gloo that the paper's wall-clock model (analysis.model.diloco_wallclock) leaves out. PURE.

The paper's model charges a step ``(2N/W)(1 − 1/R) + ε`` with one ε per all-reduce. What the
emulated ranks (traffic.training.emulated) run differs in three measured ways
(benchmarks/table4_terms.py; RESULTS.md, "Streaming DiLoCo's Table 4 on the emulated WAN"):

* **DDP's buckets, one fixed cost each**: the gradient goes in B bucket all-reduces (48 for the
  24-layer 1B model: every tensor is over the 25 MiB cap), queued in gloo one after another. Each
  has a fixed cost that is not the bytes: gloo's call and the ranks' CPU (:data:`CALL_S`, on an
  unshaped link) plus the round trips its ring's two phases open with (:data:`CALL_RTTS` x the
  path's RTT). The bytes of one bucket go on the wire while the next bucket pays its fixed cost,
  so a step is a two-stage pipeline (:func:`ddp_comm_end`): the fixed costs in series, the bytes
  in series, each bucket starting when the backward has made it ready. Once B x fixed cost
  outlasts the bytes, more bandwidth buys nothing: DP's CU plateaus.
* **Gathered codes**: int8 and fp4 pseudo-gradients are all-gathered (codes cannot be summed on
  the wire); gloo's all-gather of a fragment took :data:`GATHER_FACTOR` x the all-reduce of the
  same bytes on the same link.
* **One fixed cost per sync** for DiLoCo and each Streaming fragment (the same per-call cost;
  Streaming pays it F times per H steps), and Streaming's H is the configured one (a multiple
  of F), not the paper's.

The measured inputs are module constants (one home), with where and under what load they were
measured; :class:`MachineTerms` lets a caller pass others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Measured by benchmarks/table4_terms.py on this project's 2-core VM (two ranks in two
# clusters of the testbed, the userspace delay line; load average 2-18, so +-30%):
# one gloo all-reduce of a 28-56 KB bf16 bucket on an unshaped link, no delay: 1.7 ms
# (median of 50); across 1 ms one way, chained 48 at a time as DDP queues them: 2.5-3.2 ms a
# bucket, i.e. 0.4-0.7 RTT on top of the call (the Table 4 run's own DP rows at 200-600 Mbit/s,
# load about 1: 2.5-2.6 ms a bucket).
CALL_S = 1.7e-3
CALL_RTTS = 0.4
# gloo's all-gather of a 625 KB fp4 fragment at 3 Mbit/s, 1 ms one way: 1.56-2.52 s (bimodal,
# most trials 2.4-2.5 s) where the all-reduce of the same bytes took 1.58-1.75 s (load 14-29);
# in the Table 4 run the fp4 fragments took 1.63x their bytes' time at each of 3-24 Mbit/s (bf16
# fragments 1.00-1.02x): the run's own factor is higher than this one, measured apart.
GATHER_FACTOR = 1.45


@dataclass(frozen=True)
class MachineTerms:
    """The non-WAN inputs: a collective call's fixed cost (``call_s`` plus ``call_rtts`` round
    trips of the path) and the all-gather's time over the all-reduce's of the same bytes."""

    call_s: float = CALL_S
    call_rtts: float = CALL_RTTS
    gather_factor: float = GATHER_FACTOR

    def fixed(self, rtt: float) -> float:
        """One collective call's fixed cost on a path of round-trip time ``rtt``."""
        return self.call_s + self.call_rtts * rtt


def wire_time(bits: float, bandwidth: float, ranks: int) -> float:
    """The bytes of one ring all-reduce on the slowest link: ``(2N/W)(1 − 1/R)``."""
    if ranks < 2:
        return 0.0
    if bandwidth <= 0:
        raise ValueError(f"bandwidth must be positive, got {bandwidth}")
    return 2 * bits / bandwidth * (1 - 1 / ranks)


def ddp_comm_end(
    ready: Sequence[float], bits: Sequence[float], bandwidth: float, ranks: int, fixed: float
) -> float:
    """When the last of DDP's bucket all-reduces ends (seconds from the step's start): bucket i
    is ready at ``ready[i]``, its call starts once it is ready and the previous call's fixed
    part is over, and its bytes (``bits[i]``) go on the wire from its start once the previous
    bucket's bytes are through."""
    if len(ready) != len(bits):
        raise ValueError(f"{len(ready)} ready times for {len(bits)} buckets")
    call_free = wire_free = end = 0.0
    for r, b in zip(ready, bits, strict=True):
        start = max(r, call_free)
        call_free = start + fixed
        wire_free = max(start, wire_free) + wire_time(b, bandwidth, ranks)
        end = max(end, call_free, wire_free)
    return end


def ddp_cu(
    ready: Sequence[float],
    bits: Sequence[float],
    bandwidth: float,
    ranks: int,
    step: float,
    fixed: float,
) -> float:
    """DDP's CU: the step's compute over the time until its compute and its last bucket are
    both done (``ready`` in seconds from the step's start; overlap as the schedule has it)."""
    wall = max(step, ddp_comm_end(ready, bits, bandwidth, ranks, fixed))
    return step / wall if wall > 0 else 1.0


def sync_time(
    bits: float,
    bandwidth: float,
    ranks: int,
    fixed: float,
    gathered: bool = False,
    gather_factor: float = GATHER_FACTOR,
) -> float:
    """One pseudo-gradient exchange of ``bits`` (the all-reduce's payload; gathered codes: the
    all-reduce that moves the same bytes): its bytes, x ``gather_factor`` when gathered, plus
    the call's fixed cost."""
    wire = wire_time(bits, bandwidth, ranks)
    return fixed + (wire * gather_factor if gathered else wire)


def diloco_cu(sync: float, inner_steps: int, step: float) -> float:
    """DiLoCo with one rank per replica: H steps of compute, then one blocking exchange."""
    compute = inner_steps * step
    return compute / (compute + sync)


def streaming_cu(
    fragment_sync: float, fragments: int, inner_steps: int, overlap_steps: int, step: float
) -> float:
    """Streaming DiLoCo: F fragment exchanges per H steps, each exposed beyond the τ steps of
    compute it overlaps."""
    compute = inner_steps * step
    exposed = fragments * max(0.0, fragment_sync - overlap_steps * step)
    return compute / (compute + exposed)
