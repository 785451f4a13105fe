"""mycomms: the communication code this example project guards with regression tests.

Every function here is a *rank function*: it runs in every rank's process with torch.distributed
initialised, gets the rank's context (``ctx.rank``, ``ctx.world_size``, ``ctx.cluster_group``,
``ctx.leaders_group``, ``ctx.timer(name)``, ...) and returns a value per rank. They are plain
top-level functions, so the testbed can import them by name in each rank process.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = ["flat_allreduce", "hierarchical_allreduce", "ring_allreduce"]


def _input(ctx, nbytes: int) -> torch.Tensor:
    """float32 buffer of ``nbytes`` filled with rank + 1: the sum over ranks is n(n+1)/2."""
    return torch.full((nbytes // 4,), float(ctx.rank + 1))


def _check(ctx, x: torch.Tensor) -> float:
    expected = ctx.world_size * (ctx.world_size + 1) / 2
    wrong = (x != expected).nonzero()
    if len(wrong):
        i = int(wrong[0])
        raise AssertionError(f"element {i} is {float(x[i])}, expected {expected}")
    return expected


def _exchange(send: torch.Tensor, recv: torch.Tensor, right: int, left: int) -> None:
    """Send to the right neighbour while receiving from the left one."""
    for request in (dist.isend(send, right), dist.irecv(recv, left)):
        request.wait()


def ring_allreduce(ctx, nbytes: int) -> float:
    """A hand-written ring all-reduce (reduce-scatter, then all-gather) of ``nbytes``.

    Each of the n-1 reduce-scatter steps sends one n-th of the buffer to the next rank and adds
    what arrives from the previous one; each all-gather step passes a finished chunk on. That is
    2(n-1) steps of nbytes/n: what the α-β model calls a flat (ring) all-reduce.
    """
    n, r = ctx.world_size, ctx.rank
    x = _input(ctx, nbytes)
    chunks = list(torch.tensor_split(x, n))  # views: updating a chunk updates x
    right, left = (r + 1) % n, (r - 1) % n
    with ctx.timer("reduce_scatter"):
        for step in range(n - 1):
            out, into = (r - step) % n, (r - step - 1) % n
            incoming = torch.empty_like(chunks[into])
            _exchange(chunks[out], incoming, right, left)
            chunks[into] += incoming
    with ctx.timer("all_gather"):
        for step in range(n - 1):
            out, into = (r - step + 1) % n, (r - step) % n
            _exchange(chunks[out], chunks[into], right, left)
    return _check(ctx, x)


def flat_allreduce(ctx, nbytes: int) -> float:
    """The library's own all-reduce over all ranks (gloo's ring)."""
    x = _input(ctx, nbytes)
    dist.all_reduce(x)
    return _check(ctx, x)


def hierarchical_allreduce(ctx, nbytes: int) -> float:
    """Reduce inside each datacenter, all-reduce among one leader per datacenter (the only WAN
    traffic: the whole buffer once per direction), broadcast inside each datacenter."""
    x = _input(ctx, nbytes)
    with ctx.timer("reduce"):
        dist.reduce(x, dst=ctx.leader, group=ctx.cluster_group)
    if ctx.is_leader:
        with ctx.timer("leaders"):
            dist.all_reduce(x, group=ctx.leaders_group)
    with ctx.timer("broadcast"):
        dist.broadcast(x, src=ctx.leader, group=ctx.cluster_group)
    return _check(ctx, x)
