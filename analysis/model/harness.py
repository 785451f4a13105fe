"""The timed loop as traffic.collectives runs it, replayed rank by rank. PURE.

Every timed iteration is ``dist.barrier()`` then the collective, each rank timing its own
collective from the moment it leaves the barrier; the reported time is the slowest rank's. gloo's
barrier (gloo/barrier.cc) is a dissemination barrier: in round d = 1, 2, 4, … every rank
receives from rank − d and sends to rank + d, and (gloo/transport/tcp/pair.cc) a send is written
only once the receiver's recv-ready notify has arrived. Across a WAN the ranks therefore leave the
barrier up to a WAN latency apart: an early rank's clock runs while it waits for the late ones, a
late rank finds its neighbours' notifies already there. So the slowest rank's time is neither the
collective's cost from a common start nor that cost plus the skew: this module replays the
barrier, then the collective with each rank's own start, iteration after iteration (the next
barrier starts when each rank finished), and reports the steady state.
"""

from __future__ import annotations

from collections.abc import Callable

from analysis.model.topology import Topology, Where, route

Starts = dict[int, float]  # rank -> time it starts (a barrier round, the collective)


def _latency(topo: Topology, where: Where, a: int, b: int) -> float:
    """One small message from rank ``a`` to rank ``b``: α + the route's latency."""
    return topo.alpha_s + route(topo, where, (a, b))[0]


def barrier_exits(topo: Topology, where: Where, group: list[int], entries: Starts) -> Starts:
    """When each rank of ``group`` (ordered) leaves gloo's dissemination barrier, having entered it
    at ``entries[rank]``. Round d: rank i posts its receive from i − d (a notify to it) and its
    send to i + d (written once i + d's notify arrived), and leaves the round when both are done."""
    g = len(group)
    t = {r: float(entries[r]) for r in group}
    d = 1
    while d < g:
        nxt = {}
        for i, r in enumerate(group):
            src, dst = group[(i - d) % g], group[(i + d) % g]
            notify_from_dst = t[dst] + _latency(topo, where, dst, r)
            written = max(t[r], notify_from_dst)
            notify_to_src = t[r] + _latency(topo, where, r, src)
            received = max(t[src], notify_to_src) + _latency(topo, where, src, r)
            nxt[r] = max(written, received)
        t = nxt
        d <<= 1
    return t


def steady_slowest(
    topo: Topology,
    where: Where,
    group: list[int],
    collective: Callable[[Starts], Starts],
    iterations: int = 6,
) -> float:
    """The slowest rank's time of the timed loop once it settles: ``collective`` maps each rank's
    start to its finish; every iteration starts with the barrier, entered when the rank finished
    the previous one. The last of ``iterations`` (the skew pattern repeats after two or three)."""
    t: Starts = dict.fromkeys(group, 0.0)
    slowest = 0.0
    for _ in range(iterations):
        starts = barrier_exits(topo, where, group, t)
        finish = collective(starts)
        slowest = max(finish[r] - starts[r] for r in group)
        t = finish
    return slowest
