"""The algorithms, each a real sequence of torch.distributed calls (nothing is simulated).

* ``flat``: the library's own collective over the world group (gloo's reduce_scatter is an
  all-reduce of the whole input and a local slice: all-reduce bytes on the wire).
* ``hierarchical``: inside each cluster, then between cluster leaders (lowest rank of each
  cluster), then inside each cluster again. Only the leaders cross the WAN.
* ``hierarchical-2d`` (all-reduce only, equal ranks per cluster): reduce-scatter inside the
  cluster, all-reduce of shard j among the j-th ranks of all clusters, all-gather inside it.

Reduce-scatter steps inside the hierarchical algorithms are direct ones built from
``all_to_all_single`` (not gloo's reduce_scatter), which move exactly ``(n-1)/n * S``. Each step
is timed under its phase name (``ctx.timer``); docs/model.md gives each one's bytes on the wire.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from traffic.collectives.inputs import Buffers
from traffic.context import RankContext

# torch 2.13 renamed the single-tensor variants; keep working with older torch.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

Algorithm = Callable[[RankContext, Buffers], None]


def _cluster_order(ctx: RankContext) -> list[int]:
    """All ranks, cluster by cluster in leader order (the layout of leader-level buffers)."""
    return [r for ranks in ctx.clusters.values() for r in ranks]


def _in_rank_order(ctx: RankContext) -> bool:
    return _cluster_order(ctx) == list(range(ctx.world_size))


def _cluster_sizes(ctx: RankContext) -> list[int]:
    return [len(ranks) for ranks in ctx.clusters.values()]


def _direct_reduce_scatter(
    out: torch.Tensor,
    inp: torch.Tensor,
    splits: list[int],
    me: int,
    group: Any,
    recv: torch.Tensor,
) -> None:
    """Reduce-scatter with blocks of (possibly) unequal sizes, from all_to_all_single.

    ``inp`` holds ``len(splits)`` consecutive blocks, block j (``splits[j]`` elements) belonging
    to group member j; member ``me`` ends with the sum of everyone's block ``me`` in ``out``.
    ``recv`` must hold ``len(splits) * splits[me]`` elements. Moves ``(k-1)/k`` of the data,
    unlike gloo's reduce_scatter (an all-reduce).
    """
    k = len(splits)
    dist.all_to_all_single(
        recv, inp, output_split_sizes=[splits[me]] * k, input_split_sizes=splits, group=group
    )
    torch.sum(recv.view(k, splits[me]), dim=0, out=out)


# --------------------------------------------------------------------------- flat


def flat_all_reduce(ctx: RankContext, b: Buffers) -> None:
    dist.all_reduce(b.output)


def flat_all_gather(ctx: RankContext, b: Buffers) -> None:
    _all_gather_single(b.output, b.input)


def flat_reduce_scatter(ctx: RankContext, b: Buffers) -> None:
    _reduce_scatter_single(b.output, b.input)


def flat_broadcast(ctx: RankContext, b: Buffers) -> None:
    dist.broadcast(b.output, src=0)


def flat_all_to_all(ctx: RankContext, b: Buffers) -> None:
    dist.all_to_all_single(b.output, b.input)


# --------------------------------------------------------------------------- hierarchical


def hier_all_reduce(ctx: RankContext, b: Buffers) -> None:
    """Reduce to the leader in the cluster, all-reduce among leaders, broadcast in the cluster."""
    buf = b.output
    local = len(ctx.cluster_ranks) > 1
    if local:
        with ctx.timer("cluster_reduce"):
            dist.reduce(buf, dst=ctx.leader, group=ctx.cluster_group)
    if ctx.is_leader and len(ctx.leader_ranks) > 1:
        with ctx.timer("leaders_all_reduce"):
            dist.all_reduce(buf, group=ctx.leaders_group)
    if local:
        with ctx.timer("cluster_broadcast"):
            dist.broadcast(buf, src=ctx.leader, group=ctx.cluster_group)


def hier_all_gather(ctx: RankContext, b: Buffers) -> None:
    """Gather to the leader in the cluster, all-gather of cluster blocks among leaders,
    re-order the blocks to rank order (when clusters are not contiguous rank ranges), broadcast
    in the cluster. Unequal clusters exchange their blocks with all_to_all_single (an
    all-gather-v; each leader sends its block once to every other leader)."""
    inp, out = b.input, b.output
    c = inp.numel()
    m = len(ctx.cluster_ranks)
    if ctx.is_leader:
        mine = b.scratch("cluster_block", m * c)
        if m > 1:
            with ctx.timer("cluster_gather"):
                dist.gather(inp, list(mine.split(c)), dst=ctx.leader, group=ctx.cluster_group)
        else:
            mine.copy_(inp)
        identity = _in_rank_order(ctx)
        stage = out if identity else b.scratch("stage", out.numel())
        sizes = [s * c for s in _cluster_sizes(ctx)]
        k = len(sizes)
        if k == 1:
            stage.copy_(mine)
        else:
            with ctx.timer("leaders_all_gather"):
                if len(set(sizes)) == 1:
                    _all_gather_single(stage, mine, group=ctx.leaders_group)
                else:
                    send = b.scratch("send", k * m * c)
                    send.view(k, m * c).copy_(mine.view(1, m * c).expand(k, m * c))
                    dist.all_to_all_single(
                        stage,
                        send,
                        output_split_sizes=sizes,
                        input_split_sizes=[m * c] * k,
                        group=ctx.leaders_group,
                    )
        if not identity:
            order = torch.tensor(_cluster_order(ctx), dtype=torch.int64)
            out.view(ctx.world_size, c).index_copy_(0, order, stage.view(ctx.world_size, c))
    elif m > 1:
        with ctx.timer("cluster_gather"):
            dist.gather(inp, None, dst=ctx.leader, group=ctx.cluster_group)
    if m > 1:
        with ctx.timer("cluster_broadcast"):
            dist.broadcast(out, src=ctx.leader, group=ctx.cluster_group)


def hier_reduce_scatter(ctx: RankContext, b: Buffers) -> None:
    """Reduce to the leader in the cluster, direct reduce-scatter of cluster blocks among the
    leaders (all_to_all_single + local sum; not gloo's reduce_scatter, which is an all-reduce),
    scatter in the cluster. The input is used as scratch."""
    inp, out = b.input, b.output
    c = out.numel()
    m = len(ctx.cluster_ranks)
    if m > 1:
        with ctx.timer("cluster_reduce"):
            dist.reduce(inp, dst=ctx.leader, group=ctx.cluster_group)
    block = None
    if ctx.is_leader:
        # this cluster's sum, blocks re-ordered to cluster order when clusters interleave
        if _in_rank_order(ctx):
            staged = inp
        else:
            staged = b.scratch("stage", inp.numel())
            order = torch.tensor(_cluster_order(ctx), dtype=torch.int64)
            torch.index_select(inp.view(ctx.world_size, c), 0, order, out=staged.view(-1, c))
        sizes = [s * c for s in _cluster_sizes(ctx)]
        me = ctx.leader_ranks.index(ctx.rank)
        if len(sizes) == 1:
            block = staged
        else:
            block = b.scratch("block", m * c)
            with ctx.timer("leaders_reduce_scatter"):
                _direct_reduce_scatter(
                    block,
                    staged,
                    sizes,
                    me,
                    ctx.leaders_group,
                    b.scratch("recv", len(sizes) * m * c),
                )
    if m > 1:
        with ctx.timer("cluster_scatter"):
            scatter_list = list(block.split(c)) if block is not None else None
            dist.scatter(out, scatter_list, src=ctx.leader, group=ctx.cluster_group)
    else:
        assert block is not None
        out.copy_(block)


def hier_broadcast(ctx: RankContext, b: Buffers) -> None:
    """Broadcast from rank 0 among leaders (rank 0 always leads its cluster), then in clusters."""
    buf = b.output
    if ctx.is_leader and len(ctx.leader_ranks) > 1:
        with ctx.timer("leaders_broadcast"):
            dist.broadcast(buf, src=0, group=ctx.leaders_group)
    if len(ctx.cluster_ranks) > 1:
        with ctx.timer("cluster_broadcast"):
            dist.broadcast(buf, src=ctx.leader, group=ctx.cluster_group)


def hier2d_all_reduce(ctx: RankContext, b: Buffers) -> None:
    """Reduce-scatter in the cluster (rank j of the cluster owns shard j; direct, from
    all_to_all_single), all-reduce of shard j among the j-th ranks of every cluster, all-gather
    in the cluster."""
    buf = b.output
    m = len(ctx.cluster_ranks)
    shard = buf.numel() // m
    if m > 1:
        part = b.scratch("shard", shard)
        with ctx.timer("cluster_reduce_scatter"):
            _direct_reduce_scatter(
                part,
                buf,
                [shard] * m,
                ctx.index_in_cluster,
                ctx.cluster_group,
                b.scratch("recv", buf.numel()),
            )
    else:
        part = buf
    if ctx.column_group is not None and ctx.column_ranks and len(ctx.column_ranks) > 1:
        with ctx.timer("column_all_reduce"):
            dist.all_reduce(part, group=ctx.column_group)
    if m > 1:
        with ctx.timer("cluster_all_gather"):
            _all_gather_single(buf, part, group=ctx.cluster_group)
