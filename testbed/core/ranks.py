"""The rank-placement rule: which cluster's slot each torch.distributed rank takes. PURE.

``by-cluster``: ranks 0..m1-1 in the first cluster (slot by slot), then the next cluster, and so
on; a ring then crosses each WAN direction once. ``interleaved``: rank r goes to the r-th cluster
in round-robin order (clusters that run out of slots are skipped), so neighbouring ranks sit in
different clusters and a ring crosses the WAN at every step: the worst case for a WAN-unaware
algorithm. The plan places real ranks on hosts with it; the model counts ranks per cluster
with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from testbed.core.vocab import RANK_PLACEMENTS

T = TypeVar("T")


def rank_order(slots: Sequence[tuple[str, Sequence[T]]], placement: str) -> list[tuple[str, T]]:
    """(cluster, slot) in rank order, from each cluster's slots in cluster order."""
    if placement == "by-cluster":
        return [(cluster, slot) for cluster, items in slots for slot in items]
    if placement == "interleaved":
        queues = [(cluster, list(items)) for cluster, items in slots]
        out: list[tuple[str, T]] = []
        while any(items for _, items in queues):
            for cluster, items in queues:
                if items:
                    out.append((cluster, items.pop(0)))
        return out
    raise ValueError(f"unknown placement {placement!r}; allowed: {', '.join(RANK_PLACEMENTS)}")
