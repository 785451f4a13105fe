"""The α-β model's predictions of gloo's collectives across emulated clusters. PURE.

Flat = the collective over all n ranks. Hierarchical, as traffic.collectives runs it (k clusters,
leader = lowest rank of each): all_reduce = reduce in cluster → all_reduce among leaders →
broadcast in cluster; all_gather = gather to the leader → all_gather of cluster blocks among
leaders → broadcast in cluster; reduce_scatter = reduce in cluster → direct reduce-scatter among
leaders → scatter in cluster; broadcast = broadcast among leaders → broadcast in cluster.
hierarchical-2d all_reduce (m ranks per cluster): direct reduce-scatter in cluster → m concurrent
all_reduces of S/m across the clusters (sharing the WAN) → all_gather in cluster. Phases run one
after another; groups of one phase run concurrently. With unequal clusters the leaders' block
exchange is modelled with the largest block for every transfer. Ring all_reduces are replayed
as gloo runs them (analysis.model.gloo) unless ``ring="synchronous"``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from analysis.model.gloo import GlooRing, gloo_ring_finishes, gloo_rings
from analysis.model.harness import Starts, steady_slowest
from analysis.model.topology import (
    Edge,
    Phase,
    Topology,
    Where,
    cost,
    rank_hosts,
)
from testbed.core.vocab import ALGORITHMS, COLLECTIVES, SERVER_PLACEMENTS

# --- gloo's algorithms on one group (ordered ranks, root = group[0]) --------------------------
#
# What gloo runs (read from gloo's and torch's sources; g ranks in a group, ring order = rank
# order, root = lowest rank):
# * all_reduce (gloo::allreduce): ring, reduce-scatter then all-gather, each rank sends to
#   rank−1: 2(g−1) steps of S/g (replayed segment by segment instead: analysis.model.gloo).
# * all_gather (gloo::allgather): ring toward rank+1, g−1 steps of S/g (S = total output).
# * reduce_scatter (flat): torch's gloo backend implements reduce_scatter_tensor as an all_reduce
#   of the whole input followed by a local slice, so it costs an all_reduce of S.
# * broadcast (gloo::broadcast): binomial tree; round i (i = 0..⌈log2 g⌉−1) sends the whole
#   buffer from virtual ranks v < 2^i to v + 2^i; the rounds run one after the other.
# * reduce (gloo::reduce): ring reduce-scatter (g−1 steps of S/g), then every rank sends its
#   reduced chunk to the root at once (one step of S/g into the root's downlink).
# * scatter / gather (gloo::scatter, gloo::gather): the root sends each rank its piece /
#   receives each rank's piece, all at once (one step through the root's uplink / downlink).
# * all_to_all (gloo::alltoall[v]): every rank sends S/g to every peer at once (one step), so a
#   WAN direction carries S/g × (ordered rank pairs crossing it). traffic.collectives builds its
#   "direct" reduce-scatter (hierarchical algorithms) from it: an all_to_all of S plus a local sum.


def _ring(group: list[int], toward_lower: bool) -> tuple[Edge, ...]:
    d = -1 if toward_lower else 1
    return tuple((r, group[(i + d) % len(group)]) for i, r in enumerate(group))


def _allreduce(group: list[int], size: float) -> list[Phase]:
    g = len(group)
    return [(_ring(group, True), size / g, 2 * (g - 1))] if g > 1 else []


def _allgather(group: list[int], total: float) -> list[Phase]:
    g = len(group)
    return [(_ring(group, False), total / g, g - 1)] if g > 1 else []


def _reduce(group: list[int], size: float) -> list[Phase]:
    g = len(group)
    if g < 2:
        return []
    gather = tuple((r, group[0]) for r in group[1:])
    return [(_ring(group, True), size / g, g - 1), (gather, size / g, 1)]


def _broadcast(group: list[int], size: float) -> list[Phase]:
    phases: list[Phase] = []
    span = 1
    while span < len(group):
        edges = tuple((group[v], group[v + span]) for v in range(span) if v + span < len(group))
        phases.append((edges, size, 1))
        span *= 2
    return phases


def _scatter(group: list[int], piece: float) -> list[Phase]:
    return [(tuple((group[0], r) for r in group[1:]), piece, 1)] if len(group) > 1 else []


def _gather(group: list[int], piece: float) -> list[Phase]:
    return [(tuple((r, group[0]) for r in group[1:]), piece, 1)] if len(group) > 1 else []


def _alltoall(group: list[int], size: float) -> list[Phase]:
    g = len(group)
    pairs = tuple((a, b) for a in group for b in group if a != b)
    return [(pairs, size / g, 1)] if g > 1 else []


_FLAT: dict[str, Callable[[list[int], float], list[Phase]]] = {
    "all_reduce": _allreduce,
    "all_gather": _allgather,
    "reduce_scatter": _allreduce,  # torch's gloo: all_reduce of the input, keep own chunk
    "broadcast": _broadcast,
    "all_to_all": _alltoall,
}


# --- the predictions ---------------------------------------------------------------------------


def unsupported(collective: str, algorithm: str, topo: Topology) -> str | None:
    """Why ``collective`` × ``algorithm`` cannot run on ``topo``, or None when it can."""
    if collective not in COLLECTIVES:
        return f"unknown collective {collective!r}; known: {', '.join(COLLECTIVES)}"
    if algorithm not in ALGORITHMS:
        return f"unknown algorithm {algorithm!r}; known: {', '.join(ALGORITHMS)}"
    if algorithm == "hierarchical" and collective == "all_to_all":
        return (
            "hierarchical all_to_all does not exist: every rank's data is distinct per "
            "destination, so there is nothing to combine inside a cluster; use flat"
        )
    if algorithm == "hierarchical-2d":
        if collective != "all_reduce":
            return f"hierarchical-2d exists only for all_reduce, not {collective}"
        sizes = {c: m for c, m in topo.clusters if m}
        if len(set(sizes.values())) > 1:
            return (
                "hierarchical-2d needs the same number of ranks in every cluster, got "
                + ", ".join(f"{c}={m}" for c, m in sizes.items())
            )
    return None


def predict(collective: str, algorithm: str, size_bytes: float, topo: Topology) -> float:
    """Predicted seconds for one ``collective`` of ``size_bytes`` (nccl-tests' meaning of size,
    see analysis.metrics) with ``algorithm`` on ``topo``. Raises ValueError for combinations
    that do not exist."""
    reason = unsupported(collective, algorithm, topo)
    if reason:
        raise ValueError(reason)
    if size_bytes <= 0:
        raise ValueError(f"size must be positive, got {size_bytes} bytes")
    where = rank_hosts(topo)
    n, s = len(where), float(size_bytes)
    if algorithm == "flat":
        if collective in ("all_reduce", "reduce_scatter"):  # torch's gloo: both are all_reduces
            return _allreduce_phase(topo, where, [list(range(n))], s)
        return cost(topo, where, [_FLAT[collective](list(range(n)), s)])
    blocks = [[r for r in range(n) if where[r][0] == c] for c, m in topo.clusters if m]
    leaders = sorted(b[0] for b in blocks)
    widest = max(len(b) for b in blocks) * s / n  # a cluster's block (the largest if unequal)
    # One list of concurrent group schedules per phase; phases run one after another.
    if algorithm == "hierarchical-2d":
        m = len(blocks[0])
        columns = [sorted(b[j] for b in blocks) for j in range(m)]
        return (
            cost(topo, where, [_alltoall(b, s) for b in blocks])  # direct reduce-scatter
            + _allreduce_phase(topo, where, columns, s / m)
            + cost(topo, where, [_allgather(b, s) for b in blocks])
        )
    if collective == "all_reduce":
        return sum(predict_phases(collective, algorithm, size_bytes, topo).values())
    if collective == "all_gather":
        equal = len({len(b) for b in blocks}) == 1
        phases = [
            [_gather(b, s / n) for b in blocks],
            # equal blocks: gloo's ring all_gather; unequal: all_to_all_single (an all-gather-v)
            [_allgather(leaders, s) if equal else _alltoall(leaders, widest * len(leaders))],
            [_broadcast(b, s) for b in blocks],
        ]
    elif collective == "reduce_scatter":
        phases = [
            [_reduce(b, s) for b in blocks],
            [_alltoall(leaders, widest * len(leaders))],  # direct reduce-scatter of blocks
            [_scatter(b, s / n) for b in blocks],
        ]
    else:  # broadcast from rank 0, the first leader
        phases = [[_broadcast(leaders, s)], [_broadcast(b, s) for b in blocks]]
    return sum(cost(topo, where, p) for p in phases)


def predict_push_pull(size_bytes: float, servers: str, topo: Topology) -> float:
    """Predicted seconds of one synchronous parameter-server exchange (traffic.training
    .param_server): the ``size_bytes`` gradient is cut into one shard per server; every worker
    pushes shard j to server j, then server j sends its updated shard to every worker. A server
    is also a worker and its own shard does not move. ``servers``: ``first-cluster`` (every rank
    of the first cluster) or ``per-cluster`` (each cluster's first rank)."""
    if servers not in SERVER_PLACEMENTS:
        raise ValueError(f"unknown servers {servers!r}; allowed: {', '.join(SERVER_PLACEMENTS)}")
    if size_bytes <= 0:
        raise ValueError(f"size must be positive, got {size_bytes} bytes")
    where = rank_hosts(topo)
    n = len(where)
    blocks = [[r for r in range(n) if where[r][0] == c] for c, m in topo.clusters if m]
    srv = blocks[0] if servers == "first-cluster" else [b[0] for b in blocks]
    push = tuple((w, s) for s in srv for w in range(n) if w != s)
    pull = tuple((s, w) for w, s in push)
    piece = float(size_bytes) / len(srv)
    return cost(topo, where, [[(push, piece, 1), (pull, piece, 1)]])


def _allreduce_phase(topo: Topology, where: Where, groups: list[list[int]], size: float) -> float:
    """Concurrent ring all_reduces of ``size`` bytes, one per group: gloo's segmented ring
    replayed (``topo.ring == "gloo"``) or the synchronous α-β ring."""
    rings = [g for g in groups if len(g) > 1]
    if topo.ring == "gloo" and rings:
        return gloo_rings(topo, where, [GlooRing(tuple(g), size) for g in rings])
    return cost(topo, where, [_allreduce(g, size) for g in groups])


def predict_phases(
    collective: str, algorithm: str, size_bytes: float, topo: Topology
) -> dict[str, float]:
    """Predicted seconds of each phase, named like traffic.collectives' phase timers
    (``cluster_reduce``, ``leaders_all_reduce``, ``cluster_broadcast``; for hierarchical-2d
    ``cluster_reduce_scatter``, ``column_all_reduce``, ``cluster_all_gather``), so a report can put
    each measured phase beside its prediction. Flat and the other collectives: one entry named
    after the collective. The values sum to :func:`predict`."""
    reason = unsupported(collective, algorithm, topo)
    if reason:
        raise ValueError(reason)
    if size_bytes <= 0:
        raise ValueError(f"size must be positive, got {size_bytes} bytes")
    if algorithm == "flat" or (algorithm == "hierarchical" and collective != "all_reduce"):
        return {collective: predict(collective, algorithm, size_bytes, topo)}
    where = rank_hosts(topo)
    n, s = len(where), float(size_bytes)
    blocks = [[r for r in range(n) if where[r][0] == c] for c, m in topo.clusters if m]
    leaders = sorted(b[0] for b in blocks)
    if algorithm == "hierarchical-2d":
        m = len(blocks[0])
        columns = [sorted(b[j] for b in blocks) for j in range(m)]
        return {
            "cluster_reduce_scatter": cost(topo, where, [_alltoall(b, s) for b in blocks]),
            "column_all_reduce": _allreduce_phase(topo, where, columns, s / m),
            "cluster_all_gather": cost(topo, where, [_allgather(b, s) for b in blocks]),
        }
    return {
        "cluster_reduce": cost(topo, where, [_reduce(b, s) for b in blocks]),
        "leaders_all_reduce": _allreduce_phase(topo, where, [leaders], s),
        "cluster_broadcast": cost(topo, where, [_broadcast(b, s) for b in blocks]),
    }


def host_bw_from_phases(
    measured_s: float,
    phases: Iterable[str],
    collective: str,
    algorithm: str,
    size_bytes: float,
    topo: Topology,
) -> float:
    """The ``host_bw_bps`` at which the predicted sum of ``phases`` (names of
    :func:`predict_phases`) equals ``measured_s``: how an intra-cluster cost measured on the same
    topology with an unshaped WAN (e.g. hierarchical all_reduce's ``cluster_reduce`` +
    ``cluster_broadcast``) becomes the model's copy rate. Those phases cost A + B/host_bw (α and
    latencies, plus bits over the copy rate), so this solves that line."""
    from dataclasses import replace

    names = list(phases)

    def summed(bw: float) -> float:
        got = predict_phases(collective, algorithm, size_bytes, replace(topo, host_bw_bps=bw))
        missing = [n for n in names if n not in got]
        if missing:
            raise ValueError(f"no phase(s) {missing} in {collective} {algorithm}: {list(got)}")
        return sum(got[n] for n in names)

    fixed = summed(1e30)
    bits = (summed(topo.host_bw_bps) - fixed) * topo.host_bw_bps
    if bits <= 0:
        raise ValueError(f"phases {names} move no bytes at the copy rate; nothing to calibrate")
    if measured_s <= fixed:
        raise ValueError(
            f"measured {measured_s:.6f} s is not above the phases' latency part {fixed:.6f} s"
        )
    return bits / (measured_s - fixed)


TERMS = ("alpha_beta", "segments_and_notify", "cwnd", "loss", "barrier_skew")


def finishes(
    collective: str, algorithm: str, size_bytes: float, topo: Topology, starts: Starts
) -> Starts:
    """When each rank finishes the collective, each starting at ``starts[rank]``. gloo's ring
    all_reduce (flat, and the leaders' ring of hierarchical) is replayed with each rank's own
    start; hierarchical all_reduce's cluster reduce starts when the cluster's last rank arrived
    and its broadcast ends the leader's ring for every rank of the cluster. Anything else cannot
    finish before its last rank started: every rank ends :func:`predict` after the last start."""
    where = rank_hosts(topo)
    n, s = len(where), float(size_bytes)
    ring = topo.ring == "gloo" and collective in ("all_reduce", "reduce_scatter")
    if ring and algorithm == "flat" and n > 1:
        return gloo_ring_finishes(topo, where, [GlooRing(tuple(range(n)), s)], starts)
    if ring and algorithm == "hierarchical" and collective == "all_reduce":
        blocks = [[r for r in range(n) if where[r][0] == c] for c, m in topo.clusters if m]
        ready = {
            b[0]: max(starts[r] for r in b) + cost(topo, where, [_reduce(b, s)]) for b in blocks
        }
        leaders = tuple(b[0] for b in blocks)
        done = (
            gloo_ring_finishes(topo, where, [GlooRing(leaders, s)], ready)
            if n > len(blocks) or len(leaders) > 1
            else ready
        )
        return {r: done[b[0]] + cost(topo, where, [_broadcast(b, s)]) for b in blocks for r in b}
    end = max(starts.values()) + predict(collective, algorithm, size_bytes, topo)
    return dict.fromkeys(starts, end)


def predict_timed(collective: str, algorithm: str, size_bytes: float, topo: Topology) -> float:
    """The slowest rank's time of the timed loop (analysis.model.harness): barrier, then the
    collective from each rank's own barrier exit, once the skew pattern has settled."""
    reason = unsupported(collective, algorithm, topo)
    if reason:
        raise ValueError(reason)
    where = rank_hosts(topo)
    return steady_slowest(
        topo,
        where,
        list(range(len(where))),
        lambda starts: finishes(collective, algorithm, size_bytes, topo, starts),
    )


def predict_terms(
    collective: str, algorithm: str, size_bytes: float, topo: Topology
) -> dict[str, float]:
    """The prediction split into what each modelled effect adds, in seconds (they sum to the
    timed loop's slowest rank, :func:`predict_timed`): ``alpha_beta`` the synchronous α-β steps;
    ``segments_and_notify`` what gloo's segmented ring adds (two segments in flight, a
    recv-ready notify before every send, a notify queued behind data); ``cwnd`` what a congestion
    window below the BDP at the start (``cwnd_start_bytes``) adds; ``loss`` what the smaller
    window after a burst's loss (``cwnd_loss_bytes``) adds; ``barrier_skew`` what the
    ranks' staggered exits from gloo's barrier add to (or take from) the slowest rank's own
    timer. Signed: a term may be negative."""
    from dataclasses import replace

    unlimited = replace(
        topo,
        cwnd_start_bytes=None,
        links=tuple(replace(lk, cwnd_start_bytes=None) for lk in topo.links),
    )
    lossless = replace(topo, links=tuple(replace(lk, cwnd_loss_bytes=None) for lk in topo.links))
    base = predict(collective, algorithm, size_bytes, replace(unlimited, ring="synchronous"))
    if topo.ring == "synchronous":
        ring = windowed = full = base
    else:
        ring = predict(collective, algorithm, size_bytes, unlimited)
        windows = topo.cwnd_start_bytes is not None or any(lk.cwnd_start_bytes for lk in topo.links)
        windowed = predict(collective, algorithm, size_bytes, lossless) if windows else ring
        lost = windows and any(lk.cwnd_loss_bytes for lk in topo.links)
        full = predict(collective, algorithm, size_bytes, topo) if lost else windowed
    timed = predict_timed(collective, algorithm, size_bytes, topo)
    return {
        "alpha_beta": base,
        "segments_and_notify": ring - base,
        "cwnd": windowed - ring,
        "loss": full - windowed,
        "barrier_skew": timed - full,
    }


def predict_all(
    topo: Topology,
    size_bytes: float,
    collectives: Iterable[str] = COLLECTIVES,
    algorithms: Iterable[str] = ALGORITHMS,
) -> dict[tuple[str, str], float]:
    """{(collective, algorithm): seconds} for every combination that exists on ``topo``."""
    algorithms = tuple(algorithms)
    return {
        (c, a): predict(c, a, size_bytes, topo)
        for c in collectives
        for a in algorithms
        if unsupported(c, a, topo) is None
    }
