"""α-β cost model of torch.distributed's gloo collectives across emulated clusters. PURE.

This module owns the *predicted* time of every collective × algorithm the testbed measures, so a
report can show measured / predicted. It imports neither torch nor ``testbed``: the runner builds a
:class:`Topology` (plain data) from its NetworkPlan, with ``goodput = rate × GOODPUT_FACTOR``.
Units: sizes in bytes, rates in bit/s, times in seconds. docs/model.md has the full reasoning.

Network (one rank per host unless ``ranks_per_host`` > 1; hosts hang off their cluster's gateway):

* between two ranks on one host: a loopback copy at ``host_bw`` per sending process, no latency;
* between two hosts of one cluster (host→gateway→host): latency ``2·d_f(c)``, bandwidth
  ``β_f(c)`` = fabric goodput (or ``host_bw`` when the fabric is unshaped), capped at ``host_bw``;
* between clusters a and b: the shortest WAN path in hops; latency ``d_f(a) + Σ delay + d_f(b)``,
  bandwidth limited by every hop's goodput and by both hosts' fabric ports.

Concurrent transfers share what they cross (a host's uplink, a host's downlink, a WAN direction):
with ``u`` transfers on a resource of capacity ``B``, each gets ``B/u``. One *step* of a set of
concurrent transfers of ``c`` bytes each costs

    T_step = max over transfers e of ( α + L_e + 8·c / min over resources r of e (B_r / u_r) )

and an algorithm is a sequence of steps. Example: flat all_reduce, k clusters by cluster, WAN
slowest: ``T = 2(n−1)·(α + d_f(a) + d + d_f(b) + 8·(S/n)/B_wan)``; with interleaved placement the
``n/k`` ring edges per WAN direction divide ``B_wan``. This is what gloo actually runs (read from
gloo's and torch's sources; ``g`` ranks in a group, ring order = rank order, root = lowest rank):

* all_reduce (gloo::allreduce): ring, reduce-scatter then all-gather, each rank sends to rank−1:
  ``2(g−1)`` steps of ``S/g``.
* all_gather (gloo::allgather): ring toward rank+1, ``g−1`` steps of ``S/g`` (S = total output).
* reduce_scatter (flat): torch's gloo backend implements ``reduce_scatter_tensor`` as an all_reduce
  of the whole input followed by a local slice, so it costs an all_reduce of S.
* broadcast (gloo::broadcast): binomial tree; round i (i = 0..⌈log2 g⌉−1) sends the whole buffer
  from virtual ranks v < 2^i to v + 2^i; the rounds run one after the other.
* reduce (gloo::reduce): ring reduce-scatter (``g−1`` steps of ``S/g``), then every rank sends its
  reduced chunk to the root at once (one step of ``S/g`` into the root's downlink).
* scatter / gather (gloo::scatter, gloo::gather): the root sends each rank its piece / receives
  each rank's piece, all at once (one step through the root's uplink / downlink).
* all_to_all (gloo::alltoall[v]): every rank sends ``S/g`` to every peer at once (one step), so a
  WAN direction carries ``S/g`` × (ordered rank pairs crossing it). traffic.collectives builds its
  "direct" reduce-scatter (hierarchical algorithms) from it: an all_to_all of S plus a local sum.

Flat = the collective over all n ranks. Hierarchical, as traffic.collectives runs it (k clusters,
leader = lowest rank of each): all_reduce = reduce in cluster → all_reduce among leaders →
broadcast in cluster; all_gather = gather to the leader → all_gather of cluster blocks among
leaders → broadcast in cluster; reduce_scatter = reduce in cluster → direct reduce-scatter among
leaders → scatter in cluster; broadcast = broadcast among leaders → broadcast in cluster.
hierarchical-2d all_reduce (m ranks in each cluster): direct reduce-scatter in cluster → m
concurrent all_reduces of S/m, one per local index across the clusters (they share the WAN: per
step each WAN direction carries m chunks of S/(mk)) → all_gather in cluster. Phases run one after
another; groups of one phase run concurrently (and share resources when they meet). With unequal
clusters the leaders' block exchange is modelled with the largest block for every transfer.

Not modelled: TCP slow start and window limits, loss, gloo's segment pipelining inside a step,
reduction arithmetic, the gateways' forwarding CPU, and a CPU shared by all namespaces (measure a
"CPU floor" run for that).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from analysis.metrics import COLLECTIVES

ALGORITHMS = ("flat", "hierarchical", "hierarchical-2d")
PLACEMENTS = ("by-cluster", "interleaved")


@dataclass(frozen=True)
class Link:
    """One direction of a WAN link between two clusters."""

    src: str
    dst: str
    goodput_bps: float  # TCP payload bit/s (rate × 1448/1514)
    delay_s: float  # one-way propagation delay


@dataclass(frozen=True)
class Topology:
    """What the model needs to know about a testbed; build it from a NetworkPlan."""

    clusters: tuple[tuple[str, int], ...]  # (cluster, ranks) in rank order for by-cluster placement
    links: tuple[Link, ...]  # every WAN direction; multi-hop paths use the fewest hops
    fabric_goodput_bps: dict[str, float | None]  # per cluster; None (or absent) = unshaped
    fabric_delay_s: dict[str, float]  # one-way host<->gateway delay per cluster (absent = 0)
    host_bw_bps: float = 20e9  # effective copy rate of an unshaped hop or a same-host transfer
    alpha_s: float = 50e-6  # per-message software latency (gloo + TCP stack)
    placement: str = "by-cluster"  # or "interleaved": round robin over clusters with ranks left
    ranks_per_host: int = 1  # consecutive local ranks of a cluster share a host

    def __post_init__(self) -> None:
        names = [c for c, _ in self.clusters]
        if len(set(names)) != len(names):
            raise ValueError(f"cluster names repeat: {names}")
        if any(m < 0 for _, m in self.clusters) or sum(m for _, m in self.clusters) < 1:
            raise ValueError(
                f"ranks per cluster must be >= 0, at least one in all: {self.clusters}"
            )
        if self.placement not in PLACEMENTS:
            allowed = ", ".join(PLACEMENTS)
            raise ValueError(f"unknown placement {self.placement!r}; allowed: {allowed}")
        if self.host_bw_bps <= 0 or self.alpha_s < 0 or self.ranks_per_host < 1:
            raise ValueError("host_bw_bps must be > 0, alpha_s >= 0 and ranks_per_host >= 1")
        for link in self.links:
            if link.src not in names or link.dst not in names or link.src == link.dst:
                raise ValueError(f"link {link.src}->{link.dst} must join two clusters of {names}")
            if link.goodput_bps <= 0 or link.delay_s < 0:
                raise ValueError(f"link {link.src}->{link.dst}: goodput must be > 0, delay >= 0")
        for c, bw in self.fabric_goodput_bps.items():
            if bw is not None and bw <= 0:
                raise ValueError(f"fabric goodput of cluster {c!r} must be > 0 or None, got {bw}")


def rank_clusters(topo: Topology) -> tuple[str, ...]:
    """The cluster of every rank, in rank order (same rule as testbed.layout.place_ranks)."""
    if topo.placement == "by-cluster":
        return tuple(c for c, m in topo.clusters for _ in range(m))
    left = dict(topo.clusters)
    out: list[str] = []
    while any(left.values()):
        for c, _ in topo.clusters:
            if left[c]:
                out.append(c)
                left[c] -= 1
    return tuple(out)


def wan_path(topo: Topology, src: str, dst: str) -> tuple[Link, ...]:
    """Directions crossed from cluster ``src`` to ``dst``: fewest hops (BFS, ties by link order)."""
    if src == dst:
        return ()
    prev: dict[str, Link] = {}
    queue = deque([src])
    while queue:
        here = queue.popleft()
        for link in topo.links:
            if link.src == here and link.dst != src and link.dst not in prev:
                prev[link.dst] = link
                queue.append(link.dst)
    if dst not in prev:
        raise ValueError(f"no WAN path from cluster {src!r} to {dst!r}")
    path = [prev[dst]]
    while path[-1].src != src:
        path.append(prev[path[-1].src])
    return tuple(reversed(path))


# --- the network: routes and one step of concurrent transfers --------------------------------

Where = tuple[tuple[str, int], ...]  # rank -> (cluster, host index in the cluster)
Edge = tuple[int, int]  # (sending rank, receiving rank)
Phase = tuple[tuple[Edge, ...], float, int]  # (concurrent transfers, bytes each, repetitions)


def _where(topo: Topology) -> Where:
    seen: Counter[str] = Counter()
    out = []
    for c in rank_clusters(topo):
        out.append((c, seen[c] // topo.ranks_per_host))
        seen[c] += 1
    return tuple(out)


def _fabric_bw(topo: Topology, cluster: str) -> float:
    bw = topo.fabric_goodput_bps.get(cluster)
    return topo.host_bw_bps if bw is None else min(bw, topo.host_bw_bps)


def _route(topo: Topology, where: Where, edge: Edge) -> tuple[float, list[tuple[tuple, float]]]:
    """(latency, [(resource, capacity bit/s)]) of one transfer."""
    (ca, ha), (cb, hb) = where[edge[0]], where[edge[1]]
    if (ca, ha) == (cb, hb):
        return 0.0, [(("loop", edge[0]), topo.host_bw_bps)]  # each sending process copies
    latency = topo.fabric_delay_s.get(ca, 0.0) + topo.fabric_delay_s.get(cb, 0.0)
    resources = [(("up", ca, ha), _fabric_bw(topo, ca)), (("down", cb, hb), _fabric_bw(topo, cb))]
    for link in wan_path(topo, ca, cb):
        latency += link.delay_s
        resources.append((("wan", link.src, link.dst), link.goodput_bps))
    return latency, resources


def _step(topo: Topology, where: Where, edges: Iterable[Edge], nbytes: float) -> float:
    """max over transfers of α + latency + 8·nbytes / (share of its tightest resource)."""
    routes = [_route(topo, where, e) for e in edges]
    if not routes:
        return 0.0
    users = Counter(key for _, res in routes for key, _ in res)
    return max(
        topo.alpha_s + lat + 8 * nbytes / min(cap / users[key] for key, cap in res)
        for lat, res in routes
    )


def _cost(topo: Topology, where: Where, schedules: list[list[Phase]]) -> float:
    """Time of concurrent groups' schedules: step i of every group runs at the same time."""
    schedules = [s for s in schedules if s]
    if not schedules:
        return 0.0
    if len({tuple((b, k) for _, b, k in s) for s in schedules}) > 1:
        # Differently shaped groups (unequal sizes) touch disjoint resources here: slowest wins.
        return max(_cost(topo, where, [s]) for s in schedules)
    total = 0.0
    for phases in zip(*schedules, strict=True):
        _, nbytes, reps = phases[0]
        total += reps * _step(topo, where, [e for p in phases for e in p[0]], nbytes)
    return total


# --- gloo's algorithms on one group (ordered ranks, root = group[0]) --------------------------


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


# --- public API ---------------------------------------------------------------------------------


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
    where = _where(topo)
    n, s = len(where), float(size_bytes)
    if algorithm == "flat":
        return _cost(topo, where, [_FLAT[collective](list(range(n)), s)])
    blocks = [[r for r in range(n) if where[r][0] == c] for c, m in topo.clusters if m]
    leaders = sorted(b[0] for b in blocks)
    widest = max(len(b) for b in blocks) * s / n  # a cluster's block (the largest if unequal)
    # One list of concurrent group schedules per phase; phases run one after another.
    if algorithm == "hierarchical-2d":
        m = len(blocks[0])
        columns = [sorted(b[j] for b in blocks) for j in range(m)]
        phases = [
            [_alltoall(b, s) for b in blocks],  # direct reduce-scatter
            [_allreduce(col, s / m) for col in columns],
            [_allgather(b, s) for b in blocks],
        ]
    elif collective == "all_reduce":
        phases = [
            [_reduce(b, s) for b in blocks],
            [_allreduce(leaders, s)],
            [_broadcast(b, s) for b in blocks],
        ]
    elif collective == "all_gather":
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
    return sum(_cost(topo, where, p) for p in phases)


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
