"""Where a rank stands in the emulated topology: its context (``RankContext``), the process
groups every rank creates, and joining/leaving torch.distributed. Imported by the rank entry
points (:mod:`traffic.rank`, :mod:`traffic.user_rank`) and by the collectives they run."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist


@dataclass
class RankContext:
    """What a rank knows about its place in the emulated topology, with its process groups.

    Built once per process by :func:`setup` (every rank creates every group, in the same order,
    as torch requires). Rank functions receive it and may use the groups directly:

    * ``rank``, ``world_size``, ``host``, ``cluster``: this process and where it runs.
    * ``clusters``: every cluster's ranks (ascending), clusters ordered by their leader's rank.
    * ``cluster_ranks``, ``cluster_group``: this cluster's ranks and their process group.
      ``index_in_cluster`` is this rank's position in ``cluster_ranks``.
    * ``leader``, ``is_leader``: the cluster's leader is its lowest rank (rank 0 always leads).
    * ``leader_ranks``, ``leaders_group``: one rank per cluster; every rank holds the handle,
      only leaders may use it.
    * ``column_ranks``, ``column_group``: the ``index_in_cluster``-th rank of every cluster
      (for 2-D algorithms); None unless all clusters have the same number of ranks.
    * ``timer(name)``: context manager adding the body's duration to ``phases[name]``;
      ``take_phases()`` returns and clears them (the harness calls it around each operation).

    Group-relative calls take global ranks, as torch.distributed does:
    ``dist.reduce(t, dst=ctx.leader, group=ctx.cluster_group)``.
    """

    rank: int
    world_size: int
    host: str
    cluster: str
    clusters: dict[str, tuple[int, ...]]
    cluster_ranks: tuple[int, ...]
    cluster_group: Any
    leader_ranks: tuple[int, ...]
    leaders_group: Any
    column_ranks: tuple[int, ...] | None = None
    column_group: Any | None = None
    local_rank: int = 0
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def leader(self) -> int:
        return self.cluster_ranks[0]

    @property
    def is_leader(self) -> bool:
        return self.rank == self.leader

    @property
    def index_in_cluster(self) -> int:
        return self.cluster_ranks.index(self.rank)

    @contextlib.contextmanager
    def timer(self, name: str) -> Iterator[None]:
        """``with ctx.timer("leaders_all_reduce"): ...`` records the seconds under that name."""
        with phase_timer(self.phases, name):
            yield

    def take_phases(self) -> dict[str, float]:
        taken, self.phases = self.phases, {}
        return taken

    @property
    def label(self) -> str:
        return f"rank {self.rank} ({self.host})"


def topology(ranks: list[dict[str, Any]]) -> dict[str, tuple[int, ...]]:
    """Cluster name → ranks (ascending), clusters ordered by lowest rank. Pure."""
    for i, r in enumerate(ranks):
        if r["rank"] != i:
            raise ValueError(f"spec ranks[{i}] has rank {r['rank']}; ranks must be listed in order")
    members: dict[str, list[int]] = {}
    for r in ranks:
        members.setdefault(r["cluster"], []).append(r["rank"])
    ordered = sorted(members.items(), key=lambda kv: kv[1][0])
    return {name: tuple(rs) for name, rs in ordered}


def columns(clusters: dict[str, tuple[int, ...]]) -> list[tuple[int, ...]] | None:
    """The j-th rank of every cluster, for each j; None when cluster sizes differ. Pure."""
    sizes = {len(rs) for rs in clusters.values()}
    if len(sizes) != 1:
        return None
    (m,) = sizes
    return [tuple(rs[j] for rs in clusters.values()) for j in range(m)]


def set_user_timeout(seconds: float) -> int:
    """TCP_USER_TIMEOUT on every TCP socket this process holds (gloo's pairs and the store's
    connection: gloo sets none and offers no hook); returns how many sockets got it. A socket
    option belongs to the socket, so setting it through a duplicate of the descriptor is
    enough."""
    ms = round(seconds * 1000)
    done = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            fd = os.dup(int(name))
        except OSError:  # gone meanwhile (the listing's own descriptor)
            continue
        try:
            s = socket.socket(fileno=fd)
        except OSError:  # not a socket
            os.close(fd)
            continue
        with s:
            if s.family in (socket.AF_INET, socket.AF_INET6) and s.type == socket.SOCK_STREAM:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, ms)
                done += 1
    return done


# s: joining (store, every pair's connect) may take this long whatever the operations' timeout:
# ranks start torch seconds apart on a busy machine, and a short operation timeout (a fault test's
# 3 s) must not fail the join.
SETUP_TIMEOUT_S = 120.0


def setup(spec: dict[str, Any], rank: int) -> RankContext:
    """Join the process group and create the cluster, leaders and column groups.

    Joining uses ``max(timeout_s, SETUP_TIMEOUT_S)``; then every group's operations get
    ``timeout_s`` (gloo's only timer: a blocked operation fails with "Timed out waiting ...")."""
    world = int(spec["world_size"])
    ranks = spec["ranks"]
    if len(ranks) != world:
        raise ValueError(f"spec lists {len(ranks)} ranks for world_size {world}")
    if "LOCAL_WORLD_SIZE" in os.environ:
        raise RuntimeError("LOCAL_WORLD_SIZE is set: gloo may bypass the network; unset it")
    clusters = topology(ranks)
    cols = columns(clusters)
    op_timeout = timedelta(seconds=float(spec.get("timeout_s", 300)))
    timeout = max(op_timeout, timedelta(seconds=SETUP_TIMEOUT_S))
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{spec['master_addr']}:{int(spec['master_port'])}",
        rank=rank,
        world_size=world,
        timeout=timeout,
    )
    # every rank creates every group in the same order; new_group needs its own timeout
    me = ranks[rank]
    cluster_group = None
    for name, rs in clusters.items():
        g = dist.new_group(list(rs), timeout=timeout)
        if name == me["cluster"]:
            cluster_group = g
    leader_ranks = tuple(rs[0] for rs in clusters.values())
    leaders_group = dist.new_group(list(leader_ranks), timeout=timeout)
    column_ranks = column_group = None
    groups = [None, *(g for g in (cluster_group, leaders_group) if g is not None)]
    for col in cols or []:
        g = dist.new_group(list(col), timeout=timeout)
        groups.append(g)
        if rank in col:
            column_ranks, column_group = col, g
    if op_timeout != timeout:
        for g in groups:
            if g is None or not dist.distributed_c10d._rank_not_in_group(g):
                dist.distributed_c10d._set_pg_timeout(op_timeout, g)
    if me.get("tcp_user_timeout"):  # gloo has connected every pair by now (no lazy init)
        set_user_timeout(float(me["tcp_user_timeout"]))
    return RankContext(
        rank=rank,
        world_size=world,
        host=me["host"],
        cluster=me["cluster"],
        clusters=clusters,
        cluster_ranks=clusters[me["cluster"]],
        cluster_group=cluster_group,
        leader_ranks=leader_ranks,
        leaders_group=leaders_group,
        column_ranks=column_ranks,
        column_group=column_group,
        local_rank=int(me.get("local_rank", 0)),
    )


def teardown() -> None:
    """Wait for every rank, then leave the process group."""
    dist.barrier()
    dist.destroy_process_group()


@contextlib.contextmanager
def phase_timer(phases: dict[str, float], name: str) -> Iterator[None]:
    """Add the duration of the ``with`` body to ``phases[name]`` (seconds)."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        phases[name] = phases.get(name, 0.0) + time.perf_counter() - t0
