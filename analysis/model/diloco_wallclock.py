"""The wall-clock model of "Scaling Laws for DiLoCo" (arXiv 2503.09799, Appendix A), as pure
functions, for the overlay beside every emulated-compute training point. PURE.

The paper's communication time of T steps:

* data-parallel: ``[(2N/W)(1 − 1/R) + ε]·T``;
* DiLoCo with M replicas: ``[(2N/W0)(1 − M/R) + ε0]·T + [(2N/W1)(1 − 1/R) + ε1]·T/H`` (M = 1:
  ``[(2N/W1)(1 − 1/R) + ε1]·T·(1 + 1/H)``), W0 the bandwidth inside a replica, W1 across.

N is what one all-reduce moves per chip, so here it is the payload in **bits** (parameters x bits
per element) and W in bit/s; R is the number of chips (ranks), ε the latency of one all-reduce.
Compute utilisation adds nothing the paper does not say: compute / (compute + communication),
nothing overlapped. Streaming DiLoCo "amortizes to the same per-step cost"; its overlap of τ
inner steps hides up to τ·step of each fragment's exchange (:func:`streaming_exposed`).

Hierarchical training (DDP inside each cluster, DiLoCo among the cluster leaders) is the DiLoCo
model with M = the clusters (:func:`hierarchical_comm`): its inner term ``(2N/W0)(1 − M/R)`` is
exactly the ring inside each cluster of R/M ranks over the fabric W0; its outer term is the
paper's with R = M, since only the M leaders cross the WAN, each with the whole model (the paper
counts every chip in the outer ring, each with a shard). The leaders' broadcast of the new
parameters inside each cluster has no term in the paper (it is one fabric transfer per H steps).
"""

from __future__ import annotations


def allreduce_time(bits: float, bandwidth: float, ranks: int, latency: float = 0.0) -> float:
    """One ring all-reduce: ``(2N/W)(1 − 1/R) + ε`` seconds (0 for a single rank)."""
    if ranks < 2:
        return 0.0
    if bandwidth <= 0:
        raise ValueError(f"bandwidth must be positive, got {bandwidth}")
    return 2 * bits / bandwidth * (1 - 1 / ranks) + latency


def dp_comm(bits: float, bandwidth: float, ranks: int, latency: float, steps: int) -> float:
    """Data-parallel: ``[(2N/W)(1 − 1/R) + ε]·T``."""
    return allreduce_time(bits, bandwidth, ranks, latency) * steps


def diloco_comm(
    bits: float,
    inner_bandwidth: float,
    outer_bandwidth: float,
    ranks: int,
    replicas: int,
    inner_steps: int,
    steps: int,
    inner_latency: float = 0.0,
    outer_latency: float = 0.0,
) -> float:
    """DiLoCo's communication over ``steps``: the inner data-parallel all-reduce inside each of
    the M replicas (``(1 − M/R)``: none with one rank per replica) every step, and the outer
    all-reduce across the R ranks every H steps."""
    if replicas < 1 or ranks % replicas:
        raise ValueError(f"{ranks} ranks in {replicas} replicas")
    outer = allreduce_time(bits, outer_bandwidth, ranks, outer_latency) * steps / inner_steps
    if replicas == 1:
        return allreduce_time(bits, outer_bandwidth, ranks, outer_latency) * steps + outer
    inner = 0.0
    if ranks > replicas:
        inner = (2 * bits / inner_bandwidth * (1 - replicas / ranks) + inner_latency) * steps
    return inner + outer


def streaming_exposed(
    fragment_bits: float,
    bandwidth: float,
    ranks: int,
    latency: float,
    fragments: int,
    inner_steps: int,
    overlap_steps: int,
    step_time: float,
) -> float:
    """Streaming DiLoCo's exposed communication per step: F fragment all-reduces every H steps,
    each hiding up to τ·step behind the inner steps it overlaps."""
    one = allreduce_time(fragment_bits, bandwidth, ranks, latency)
    return max(0.0, one - overlap_steps * step_time) * fragments / inner_steps


def hierarchical_comm(
    inner_bits: float,
    outer_bits: float,
    inner_bandwidth: float,
    outer_bandwidth: float,
    ranks: int,
    clusters: int,
    inner_steps: int,
    inner_latency: float = 0.0,
    outer_latency: float = 0.0,
) -> float:
    """Hierarchical training's communication per step: DiLoCo's inner term with M = ``clusters``
    replicas of R/M ranks, ``[(2N0/W0)(1 − M/R) + ε0]``, and its outer term among the M leaders,
    ``[(2N1/W1)(1 − 1/M) + ε1]/H``; N0 the gradients' bits, N1 the pseudo-gradients'."""
    if clusters < 1 or ranks % clusters:
        raise ValueError(f"{ranks} ranks in {clusters} clusters")
    inner = 0.0
    if ranks > clusters:
        inner = 2 * inner_bits / inner_bandwidth * (1 - clusters / ranks) + inner_latency
    return (
        inner + allreduce_time(outer_bits, outer_bandwidth, clusters, outer_latency) / inner_steps
    )


def compute_utilisation(compute: float, comm: float) -> float:
    """compute / (compute + exposed communication)."""
    total = compute + comm
    return compute / total if total > 0 else 1.0


def predicted_cu(
    method: str,
    bits: float,
    bandwidth: float,
    ranks: int,
    step_time: float,
    latency: float = 0.0,
    inner_steps: int = 1,
    fragments: int = 1,
    overlap_steps: int = 0,
) -> float:
    """The paper model's compute utilisation of one setup with one rank per replica (the
    emulated two-datacenter runs): ``method`` ddp, diloco or streaming-diloco; ``bits`` the whole
    payload (streaming: split evenly over the fragments)."""
    if method == "ddp":
        comm = allreduce_time(bits, bandwidth, ranks, latency)
    elif method == "diloco":
        comm = diloco_comm(bits, bandwidth, bandwidth, ranks, ranks, inner_steps, 1, 0, latency)
    elif method == "streaming-diloco":
        comm = streaming_exposed(
            bits / fragments,
            bandwidth,
            ranks,
            latency,
            fragments,
            inner_steps,
            overlap_steps,
            step_time,
        )
    else:
        raise ValueError(f"method {method!r}; allowed: ddp, diloco, streaming-diloco")
    return compute_utilisation(step_time, comm)
