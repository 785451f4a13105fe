"""The schedule model's compute utilisation of an emulated-compute run (``cu_schedule_model``):
analysis.model.emulated_schedule applied to the run's workload and topology. PURE.

This module owns how a workload becomes that model's inputs: DDP's buckets as the emulated
ranks issue them (traffic.training.synthetic: torch's assignment on the unscaled layout, each
bucket's bytes x scale, ready when the backward wait has covered its share of the parameters,
or all at the step's end without overlap), the pseudo-gradient exchanges of DiLoCo and
Streaming DiLoCo (gathered codes: the all-reduce that moves the same bytes, x the gather
factor), the path's RTT and the slowest WAN direction's goodput. None where the model has no
answer (hierarchical, no WAN, a single rank).
"""

from __future__ import annotations

import math
from typing import Any

from analysis.model.emulated_schedule import (
    MachineTerms,
    ddp_cu,
    diloco_cu,
    streaming_cu,
    sync_time,
)
from analysis.model.topology import Topology
from traffic.training.schedule import GATHERED, HOOK_DTYPE, schedule_from_config, syncs
from traffic.training.synthetic import DTYPE_BITS, ddp_buckets, layout_of, parse_scale


def ddp_bucket_plan(workload: dict[str, Any]) -> tuple[list[float], list[float]]:
    """(each bucket's ready time in seconds from the step's start, its bits on the wire) of an
    emulated DDP step, in issue order."""
    full = layout_of(workload["model"])
    ddp = workload["ddp"]
    dtype = full.dtype if ddp["hook"] == "none" else HOOK_DTYPE[ddp["hook"]]
    elem = DTYPE_BITS[dtype] / 8
    scale = parse_scale(workload.get("scale", 1))
    compute = workload["compute"]
    step = float(compute["step"])
    forward = float(compute["forward"]) if compute.get("forward") is not None else step / 3
    numels = [t.numel for t in full.tensors]
    ready, bits, cum = [], [], 0
    for b in ddp_buckets(numels, elem, cap=int(ddp["bucket"])):
        n = sum(numels[i] for i in b)
        cum += n
        overlap = bool(ddp.get("overlap", True))
        ready.append(forward + (step - forward) * cum / full.numel if overlap else step)
        bits.append(8.0 * round(n * elem * scale))
    return ready, bits


def schedule_model_cu(
    workload: dict[str, Any], topo: Topology | None, terms: MachineTerms | None = None
) -> float | None:
    """The schedule model's CU of an emulated run on ``topo`` (one rank per cluster or more;
    the ring's bytes on the slowest WAN direction)."""
    algorithm = workload["algorithm"]
    if topo is None or not topo.links or algorithm not in ("ddp", "diloco", "streaming-diloco"):
        return None
    ranks = sum(m for _, m in topo.clusters)
    if ranks < 2:
        return None
    terms = terms or MachineTerms()
    bandwidth = min(link.goodput_bps for link in topo.links)
    fixed = terms.fixed(2 * max(link.delay_s for link in topo.links))
    step = float(workload["compute"]["step"])
    if algorithm == "ddp":
        ready, bits = ddp_bucket_plan(workload)
        return ddp_cu(ready, bits, bandwidth, ranks, step, fixed)
    sched = schedule_from_config({**workload, "steps": workload["diloco"]["inner_steps"]})
    gathered = sched.dtype in GATHERED
    pseudo = [x for x in syncs(sched) if x.what == "pseudo-gradients"]
    if not pseudo:
        return None
    # gathered codes: the all-reduce that moves the same bytes (N·R/2)
    per_sync = [8.0 * x.payload * (ranks / 2 if gathered else 1) for x in pseudo]
    times = [sync_time(b, bandwidth, ranks, fixed, gathered, terms.gather_factor) for b in per_sync]
    if algorithm == "diloco":
        return diloco_cu(sum(times), sched.inner_steps, step)
    return streaming_cu(
        sum(times) / len(times), len(times), sched.inner_steps, sched.overlap_steps, step
    )


# what the schedule model adds to the paper's, per Table 4 row (analysis.compute_util's names)
TERMS = {
    "DP": "DDP's bucket calls (gloo's per-call cost, in series)",
    "DP overlap": "the buckets' overlap with the backward",
    "+ overlap FP4": "gloo's all-gather of the codes",
}


def explaining_term(
    method: str,
    measured: float | None,
    paper: float | None,
    schedule: float | None,
    tolerance: float,
) -> str:
    """Which term explains a point's miss of the paper model: ``-`` when the measured CU is
    within ``tolerance`` (relative) of the paper model's; the schedule model's extra term for
    ``method`` when it is within ``tolerance`` of the schedule model's; else ``unexplained``."""
    vals = (measured, paper, schedule)
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in vals[:2]):
        return "-"
    assert measured is not None and paper is not None
    if abs(measured - paper) <= tolerance * paper:
        return "-"
    if schedule is None or math.isnan(schedule) or abs(measured - schedule) > tolerance * schedule:
        return "unexplained"
    if method == "DP" and measured > paper:
        return TERMS["DP overlap"]
    return TERMS.get(method, "the per-sync call cost")
