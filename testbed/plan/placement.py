"""Rank placement: which host (namespace) runs which torch.distributed rank. PURE.

``by-cluster``: ranks 0..m1-1 in the first cluster (host by host, ``ranks_per_host`` consecutive
ranks per host), then the next cluster, and so on; gloo's ring then crosses each WAN direction once.
``interleaved``: rank r goes to the r-th cluster in round-robin order (clusters that run out of
slots are skipped), so neighbouring ranks sit in different clusters and the ring crosses the WAN at
every step: the worst case for a WAN-unaware algorithm.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from testbed.plan.topology import NetworkPlan


@dataclass(frozen=True)
class RankSlot:
    rank: int
    host: str
    cluster: str
    local_rank: int  # index of the rank inside its cluster (by rank order)
    tcp_user_timeout: float = 0.0  # s; its host's tcp.user_timeout (0: the kernel's)

    def as_dict(self) -> dict:
        return asdict(self)


def place_ranks(plan: NetworkPlan, ranks_per_host: int, placement: str) -> list[RankSlot]:
    per_cluster: dict[str, list[str]] = {}
    for h in plan.hosts:
        per_cluster.setdefault(h.cluster, []).extend([h.name] * ranks_per_host)
    order: list[tuple[str, str]] = []  # (cluster, host) in rank order
    if placement == "by-cluster":
        for cluster, slots in per_cluster.items():
            order += [(cluster, host) for host in slots]
    elif placement == "interleaved":
        queues = {c: list(slots) for c, slots in per_cluster.items()}
        while any(queues.values()):
            for cluster, slots in queues.items():
                if slots:
                    order.append((cluster, slots.pop(0)))
    else:
        raise ValueError(f"unknown placement {placement!r}; allowed: by-cluster, interleaved")
    seen: dict[str, int] = {}
    out = []
    user_timeout = {h.name: h.tcp.user_timeout for h in plan.hosts}
    for rank, (cluster, host) in enumerate(order):
        out.append(RankSlot(rank, host, cluster, seen.get(cluster, 0), user_timeout[host]))
        seen[cluster] = seen.get(cluster, 0) + 1
    return out
