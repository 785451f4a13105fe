"""Collective metrics in nccl-tests' conventions: algorithm bandwidth and bus bandwidth. PURE.

``algbw = size / time`` and ``busbw = algbw × factor``, where the factor makes busbw comparable to
the hardware's link speed whatever the collective and the world size ``n``. Each collective's
factor and what its ``size`` means: docs/model.md, "Metrics". The formulas are nccl-tests'
exactly, including n = 1 (factor 0 for the (n−1)/n collectives), so numbers compare with
nccl-tests'. Units: sizes in bytes, times in seconds, bandwidths in bytes per second (what
nccl-tests prints as GB/s is this divided by 1e9).
"""

from __future__ import annotations

from testbed.core.vocab import COLLECTIVES

SIZE_MEANING = {
    "all_reduce": "buffer size (input = output)",
    "all_gather": "total gathered output; each rank contributes size/n",
    "reduce_scatter": "total input per rank; each rank receives size/n",
    "broadcast": "buffer size",
    "all_to_all": "total send buffer per rank; size/n to each peer",
}


def bus_factor(collective: str, n: int) -> float:
    """busbw / algbw for ``collective`` over ``n`` ranks (nccl-tests' formulas)."""
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}; known: {', '.join(COLLECTIVES)}")
    if n < 1:
        raise ValueError(f"world size must be at least 1, got {n}")
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective == "broadcast":
        return 1.0
    return (n - 1) / n


def algbw(size_bytes: float, seconds: float) -> float:
    """Algorithm bandwidth in bytes/s: size / time."""
    if seconds <= 0:
        raise ValueError(f"a collective's time must be positive, got {seconds} s")
    return size_bytes / seconds


def busbw(collective: str, size_bytes: float, seconds: float, n: int) -> float:
    """Bus bandwidth in bytes/s: algbw × bus_factor(collective, n)."""
    return algbw(size_bytes, seconds) * bus_factor(collective, n)
