"""Rank placement on hosts: which host (namespace) runs which torch.distributed rank. PURE.

Each host offers ``ranks_per_host`` consecutive slots; ``testbed.core.ranks.rank_order`` (the
rule the model counts ranks per cluster with) orders the clusters' slots into ranks, by cluster
or interleaved. Named after ranks, not "placement": that word is the clusters' machines here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from testbed.core.ranks import rank_order
from testbed.plan.model import NetworkPlan


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
    """Every rank's slot: ``placement`` (by-cluster | interleaved) over the plan's hosts."""
    per_cluster: dict[str, list[str]] = {}
    for h in plan.hosts:
        per_cluster.setdefault(h.cluster, []).extend([h.name] * ranks_per_host)
    order = rank_order(list(per_cluster.items()), placement)
    seen: dict[str, int] = {}
    out = []
    user_timeout = {h.name: h.tcp.user_timeout for h in plan.hosts}
    for rank, (cluster, host) in enumerate(order):
        out.append(RankSlot(rank, host, cluster, seen.get(cluster, 0), user_timeout[host]))
        seen[cluster] = seen.get(cluster, 0) + 1
    return out
