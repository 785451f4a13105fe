"""Compute utilisation of emulated-compute training runs and the bandwidth a method needs for a
given utilisation (Streaming DiLoCo's Table 4 shape). PURE (pandas and the pure schedule).

* CU = compute time / wall time, summed over the **settled** steps: the first
  :data:`WARMUP_STEPS` (the connections' first windows) are dropped, then a whole number of sync
  periods is kept (a DiLoCo run's CU depends on how many syncs fall in the window: count whole
  cycles; a DiLoCo sync after H idle steps restarts TCP from its initial window anyway, so the
  first sync is not colder than the later ones);
* needed bandwidth for CU ≥ x: along a bandwidth sweep the lowest point at or above x and the
  highest below it bracket the answer, interpolated linearly in log bandwidth (the sweeps are
  log-spaced); both bracketing points are kept so a reader sees how far it was interpolated;
* scale: the testbed runs at ``scale`` (bytes and link rates x scale): a real rate is the
  emulated one / scale, a real byte count the emulated one / scale; times are the same.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from analysis.model.diloco_wallclock import compute_utilisation as model_cu
from analysis.model.diloco_wallclock import hierarchical_comm, predicted_cu
from analysis.model.topology import Topology
from analysis.schedule_cu import schedule_model_cu
from analysis.training import step_table
from traffic.training.schedule import GATHERED, schedule_from_config, syncs_at

WARMUP_STEPS = 5


def sync_period(algorithm: str, inner_steps: int = 1, fragments: int = 1) -> int:
    """Steps between two identical points of the schedule: 1 for DDP, H for DiLoCo and for
    Streaming DiLoCo (all F fragments synced once)."""
    return 1 if algorithm == "ddp" else max(1, inner_steps)


def settled_steps(steps: Sequence[int], period: int, warmup: int = WARMUP_STEPS) -> list[int]:
    """The steps CU is measured over: after ``warmup`` steps, whole periods only (all the rest
    if less than one period remains)."""
    ordered = sorted(steps)
    rest = ordered[warmup:] if len(ordered) > warmup else ordered[1:] or ordered
    whole = len(rest) // period * period
    return rest[:whole] if whole else rest


def compute_utilisation(steps: pd.DataFrame, period: int) -> float | None:
    """CU over the settled steps of a step table (one row per step: ``step``, ``compute`` and
    ``wall``, as analysis.training.step_table makes it): Σ compute / Σ wall."""
    if steps.empty:
        return None
    keep = set(settled_steps(steps["step"].tolist(), period))
    sel = steps[steps["step"].isin(keep)]
    wall = float(sel["wall"].sum())
    return float(sel["compute"].sum()) / wall if wall > 0 else None


@dataclass(frozen=True)
class Needed:
    """The bandwidth needed for CU ≥ ``target``: ``bandwidth`` interpolated between ``below``
    (the highest swept bandwidth short of it, with its CU) and ``above`` (the lowest that
    reached it). ``bandwidth`` is None when no point reached it; ``below`` None when the lowest
    point already did (the answer is at most that point's bandwidth)."""

    target: float
    bandwidth: float | None
    below: tuple[float, float] | None
    above: tuple[float, float] | None


def needed_bandwidth(points: Sequence[tuple[float, float]], target: float) -> Needed:
    """From ``(bandwidth, CU)`` points of one method's sweep: the bandwidth where CU reaches
    ``target``. CU is taken as non-decreasing in bandwidth: the answer is above the highest
    point that missed the target (a noisy dip below a point that reached it counts as a miss)."""
    pts = sorted((float(b), float(c)) for b, c in points if b > 0 and not math.isnan(c))
    if not pts:
        return Needed(target, None, None, None)
    missed = [i for i, (_, c) in enumerate(pts) if c < target]
    if not missed:
        return Needed(target, pts[0][0], None, pts[0])
    last = missed[-1]
    if last == len(pts) - 1:
        return Needed(target, None, pts[last], None)
    lo, hi = pts[last], pts[last + 1]
    frac = (target - lo[1]) / (hi[1] - lo[1])
    bw = math.exp(math.log(lo[0]) + frac * (math.log(hi[0]) - math.log(lo[0])))
    return Needed(target, bw, lo, hi)


def needed_table(
    points: pd.DataFrame,
    targets: Sequence[float] = (0.5, 0.8, 0.9, 0.95, 0.99),
    method: str = "method",
    bandwidth: str = "bandwidth",
    cu: str = "compute_utilisation",
) -> pd.DataFrame:
    """One row per method and target: ``needed`` and the bracketing points (``below_bw``,
    ``below_cu``, ``above_bw``, ``above_cu``), in the units of the ``bandwidth`` column."""
    rows = []
    for name, g in points.groupby(method, sort=False):
        pts = list(zip(g[bandwidth], g[cu], strict=True))
        for x in targets:
            n = needed_bandwidth(pts, x)
            rows.append(
                {
                    method: name,
                    "target": x,
                    "needed": n.bandwidth,
                    "below_bw": n.below[0] if n.below else None,
                    "below_cu": n.below[1] if n.below else None,
                    "above_bw": n.above[0] if n.above else None,
                    "above_cu": n.above[1] if n.above else None,
                }
            )
    return pd.DataFrame(rows)


def real_rate(emulated_bps: float, scale: float) -> float:
    """A link rate the testbed ran at ``scale`` -> the real one it stands for."""
    return emulated_bps / scale


def emulated_rate(real_bps: float, scale: float) -> float:
    """A real link rate (or buffer, in bytes) -> what the testbed runs at ``scale``."""
    return real_bps * scale


def _ring_latency(topo: Topology, ranks: int) -> float:
    """ε of one ring all-reduce across the WAN: 2(R − 1) hops, each the slowest WAN delay."""
    delay = max((link.delay_s for link in topo.links), default=0.0)
    return 2 * (ranks - 1) * delay


def emulated_summary(
    rows: pd.DataFrame,
    workload: dict[str, Any],
    topo: Topology | None,
    alpha_beta_comm: float | None = None,
) -> dict:
    """What an emulated-compute run adds to its summary row: ``compute`` (emulated), ``scale``,
    CU over the settled steps, the WAN goodput in emulated and real units, and the paper's
    wall-clock model's CU (analysis.model.diloco_wallclock: no overlap, except Streaming's τ)
    at that goodput, the schedule model's CU (analysis.schedule_cu: DDP's buckets and overlap,
    gloo's per-call cost, the all-gather of codes); with ``alpha_beta_comm`` (the α-β model's
    communication per step over one sync period) its CU as ``cu_alpha_beta``, nothing
    overlapped either. ``rows``: one per rank and step, as the ranks wrote them."""
    algorithm = workload["algorithm"]
    diloco, streaming = workload.get("diloco") or {}, workload.get("streaming") or {}
    h = int(diloco.get("inner_steps", 1))
    fragments = int(streaming.get("fragments", 1)) if algorithm == "streaming-diloco" else 1
    tau = int(streaming.get("overlap_steps", 0)) if algorithm == "streaming-diloco" else 0
    scale = float(workload.get("scale", 1.0))
    step_s = float((workload.get("compute") or {}).get("step", 0.0))
    steps = step_table(rows)
    out: dict[str, Any] = {
        "compute": "emulated",
        "scale": scale,
        "compute_utilisation_settled": compute_utilisation(steps, sync_period(algorithm, h)),
        "late_p50": float(rows["late_s"].median()) if "late_s" in rows else None,
    }
    if alpha_beta_comm is not None and step_s > 0:
        out["cu_alpha_beta"] = model_cu(step_s, alpha_beta_comm)
    if topo is None or not topo.links or steps.empty:
        return out
    goodput = min(link.goodput_bps for link in topo.links)
    out |= {
        "wan_goodput_bps": goodput,
        "wan_goodput_real_bps": real_rate(goodput, scale),
        # with the machine's and gloo's terms the paper's model leaves out (None: no answer)
        "cu_schedule_model": schedule_model_cu(workload, topo),
    }
    if algorithm == "hierarchical":
        return out | {"cu_paper_model": hierarchical_paper_cu(workload, topo, goodput, step_s)}
    ranks = int(rows["rank"].nunique())
    # the whole payload of one cycle's all-reduce(s), emulated bits (gathered codes: the
    # all-reduce that moves the same bytes, N·R/2)
    payload = float(steps["payload_bytes"].max()) * 8 * (fragments if fragments > 1 else 1)
    if diloco.get("dtype") in ("int8", "fp4") and algorithm != "ddp":
        payload *= ranks / 2
    out |= {
        "cu_paper_model": predicted_cu(
            algorithm,
            payload,
            goodput,
            ranks,
            step_s,
            _ring_latency(topo, ranks),
            inner_steps=h,
            fragments=fragments,
            overlap_steps=tau,
        ),
    }
    return out


def hierarchical_paper_cu(
    workload: dict[str, Any], topo: Topology, goodput: float, step_s: float
) -> float:
    """The paper model's CU of hierarchical training (DiLoCo with M = the clusters,
    analysis.model.diloco_wallclock.hierarchical_comm): the inner all-reduce of the gradients
    over the slowest cluster's fabric (its goodput, or the unshaped hop's copy rate), the
    outer one of the pseudo-gradients among the leaders at the WAN ``goodput`` (gathered codes:
    the all-reduce that moves the same bytes, N·M/2); ε the rings' one-way delays. Clusters of
    unequal size count as M of the largest (its ring is the slowest)."""
    sizes = [m for _, m in topo.clusters if m]
    clusters, h = len(sizes), int(workload["diloco"]["inner_steps"])
    sched = schedule_from_config(workload)
    inner = sum(x.payload for x in syncs_at(sched, h - 1) if x.group == "cluster") * 8
    outer = sum(x.payload for x in syncs_at(sched, h - 1) if x.group == "leaders") * 8
    if sched.dtype in GATHERED:
        outer *= clusters / 2
    names = [c for c, m in topo.clusters if m]
    fabric = min(topo.fabric_goodput_bps.get(c) or topo.host_bw_bps for c in names)
    hop = 2 * max(topo.fabric_delay_s.get(c, 0.0) for c in names)  # host - gateway - host
    comm = hierarchical_comm(
        inner,
        outer,
        fabric,
        goodput,
        clusters * max(sizes),
        clusters,
        h,
        inner_latency=2 * (max(sizes) - 1) * hop,
        outer_latency=_ring_latency(topo, clusters),
    )
    return model_cu(step_s, comm)


# Streaming DiLoCo's Table 4 (arXiv 2501.18512), 1B, 0.1 s steps: Gbit/s needed at CU
# 50/80/90/95/99%, the paper's simulation
PAPER_TABLE4_1B = {
    "DP": (86.8, 152.6, 184.2, 222.3, 569.0),
    "DiLoCo": (1.4, 6.2, 13.3, 23.3, 86.8),
    "Streaming": (1.4, 5.2, 9.1, 16.0, 28.1),
    "+ overlap": (1.4, 4.3, 6.2, 9.1, 11.0),
    "+ overlap FP4": (0.4, 0.9, 1.7, 2.0, 3.0),
}
TABLE4_TARGETS = (0.5, 0.8, 0.9, 0.95, 0.99)


def method_label(row: dict[str, Any]) -> str:
    """Table 4's row name of a summary row (its ``workload.*`` sweep columns and algorithm)."""
    algorithm = row.get("algorithm") or row.get("workload.algorithm")
    if algorithm == "ddp":
        return "DP"
    if algorithm == "diloco":
        return "DiLoCo"
    if algorithm == "hierarchical":  # not a row of the paper's table
        return "Hierarchical"
    tau = int(row.get("workload.streaming.overlap_steps") or 0)
    if tau == 0:
        return "Streaming"
    return "+ overlap FP4" if row.get("workload.diloco.dtype") == "fp4" else "+ overlap"


def table4_points(summaries: Sequence[dict[str, Any]], goodput_factor: float) -> pd.DataFrame:
    """(method, real link rate in Gbit/s, settled CU) of emulated runs: the rate is the WAN
    goodput in real units over the plan's goodput factor (payload per wire byte)."""
    rows = [
        {
            "method": method_label(s),
            "bandwidth": s["wan_goodput_real_bps"] / goodput_factor / 1e9,
            "compute_utilisation": s["compute_utilisation_settled"],
            "cu_paper_model": s.get("cu_paper_model"),
            "cu_schedule_model": s.get("cu_schedule_model"),
            "scale": s.get("scale"),
        }
        for s in summaries
        if s.get("compute") == "emulated" and s.get("wan_goodput_real_bps")
    ]
    return pd.DataFrame(rows)
