"""The network the α-β model prices: clusters, WAN directions and where each rank sits. PURE.

One rank per host unless ``ranks_per_host`` > 1; hosts hang off their cluster's gateway. Between
two ranks on one host: a loopback copy at ``host_bw`` per sending process, no latency; between two
hosts of one cluster: latency ``2·d_f(c)``, bandwidth the fabric goodput (``host_bw`` when the
fabric is unshaped), capped at ``host_bw``; between clusters: the plan's WAN path, latency
``d_f(a) + Σ delay + d_f(b)``, bandwidth limited by every hop and by both hosts' fabric ports.
Concurrent transfers share what they cross (a host's uplink, a host's downlink, a WAN
direction): ``u`` transfers on a resource of capacity ``B`` get ``B/u`` each, and one step of
concurrent transfers of ``c`` bytes costs max over transfers e of (α + L_e + 8·c / min over e's
resources r of B_r/u_r). Units: bytes, bit/s, seconds. docs/model.md has the full reasoning.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise

from testbed.core.ranks import rank_order
from testbed.core.vocab import RANK_PLACEMENTS
from testbed.core.wanpaths import path

RINGS = ("gloo", "synchronous")


@dataclass(frozen=True)
class Link:
    """One direction of a WAN link between two clusters."""

    src: str
    dst: str
    goodput_bps: float  # TCP payload bit/s (rate × 1448/1514)
    delay_s: float  # one-way propagation delay
    # the bottleneck queue's size (bytes); what another connection's message can wait behind
    # (a gloo notify behind a data burst). None = as much as is queued ahead of it.
    buffer_bytes: float | None = None
    # congestion window (bytes) of connections sending this way when a collective starts; None =
    # Topology.cwnd_start_bytes
    cwnd_start_bytes: float | None = None
    # their slow-start threshold then (None = Topology.ssthresh_bytes)
    ssthresh_bytes: float | None = None
    # the round trip their ACKs take while data flows both ways (tcp_info srtt: the propagation
    # plus both directions' queues); None = twice the path's one-way latency
    srtt_s: float | None = None
    # the window at which its connections lost a burst (measured: the step's peak window when it
    # retransmitted), and the congestion control's cut then (cubic 0.7, reno 0.5); None = no
    # loss priced
    cwnd_loss_bytes: float | None = None
    loss_beta: float = 0.7


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
    # How a ring all_reduce is costed: "gloo" replays gloo's segmented ring (segments of at most
    # ``segment_bytes``, two in flight, each send waiting for the receiver's recv-ready notify);
    # "synchronous" is the plain α-β ring (2(g−1) lock-step steps of S/g), kept for comparison.
    ring: str = "gloo"
    segment_bytes: int = 1 << 20  # gloo's AllreduceOptions::kMaxSegmentSize
    element_bytes: int = 4  # float32: gloo rounds segments to whole elements
    # Congestion window (bytes) of every WAN connection when a collective starts (measured:
    # analysis.steps.wan_step_starts; after idle > RTO, cwnd_after_idle()); None = never the
    # limit. ssthresh_bytes: slow start below it (None = the start window: congestion avoidance).
    cwnd_start_bytes: float | None = None
    ssthresh_bytes: float | None = None

    def __post_init__(self) -> None:
        names = [c for c, _ in self.clusters]
        if len(set(names)) != len(names):
            raise ValueError(f"cluster names repeat: {names}")
        if any(m < 0 for _, m in self.clusters) or sum(m for _, m in self.clusters) < 1:
            raise ValueError(
                f"ranks per cluster must be >= 0, at least one in all: {self.clusters}"
            )
        if self.placement not in RANK_PLACEMENTS:
            allowed = ", ".join(RANK_PLACEMENTS)
            raise ValueError(f"unknown placement {self.placement!r}; allowed: {allowed}")
        if self.ring not in RINGS:
            raise ValueError(f"unknown ring model {self.ring!r}; allowed: {', '.join(RINGS)}")
        if self.segment_bytes < 1 or self.element_bytes < 1:
            raise ValueError("segment_bytes and element_bytes must be >= 1")
        if self.cwnd_start_bytes is not None and self.cwnd_start_bytes <= 0:
            raise ValueError("cwnd_start_bytes must be > 0 or None")
        if self.host_bw_bps <= 0 or self.alpha_s < 0 or self.ranks_per_host < 1:
            raise ValueError("host_bw_bps must be > 0, alpha_s >= 0 and ranks_per_host >= 1")
        for link in self.links:
            if link.src not in names or link.dst not in names or link.src == link.dst:
                raise ValueError(f"link {link.src}->{link.dst} must join two clusters of {names}")
            limits = (
                ("cwnd_start_bytes", 0),
                ("ssthresh_bytes", 0),
                ("srtt_s", 0),
                ("cwnd_loss_bytes", 0),
            )
            for name, low in (*limits, ("buffer_bytes", -1)):
                value = getattr(link, name)
                if value is not None and value <= low:
                    raise ValueError(f"link {link.src}->{link.dst}: {name} is out of range")
            if not 0 < link.loss_beta < 1:
                raise ValueError(f"link {link.src}->{link.dst}: loss_beta must be in (0, 1)")
            if link.goodput_bps <= 0 or link.delay_s < 0:
                raise ValueError(f"link {link.src}->{link.dst}: goodput must be > 0, delay >= 0")
        for c, bw in self.fabric_goodput_bps.items():
            if bw is not None and bw <= 0:
                raise ValueError(f"fabric goodput of cluster {c!r} must be > 0 or None, got {bw}")


def rank_clusters(topo: Topology) -> tuple[str, ...]:
    """The cluster of every rank, in rank order (the plan's rule: testbed.core.ranks)."""
    slots = [(c, range(m)) for c, m in topo.clusters]
    return tuple(c for c, _ in rank_order(slots, topo.placement))


def wan_path(topo: Topology, src: str, dst: str) -> tuple[Link, ...]:
    """Directions crossed from cluster ``src`` to ``dst``: the plan's route, hop by hop
    (testbed.core.wanpaths: fewest links, ties by link order); of several directions between
    the same two clusters, the first."""
    if src == dst:
        return ()
    ends = tuple((lk.src, lk.dst) for lk in topo.links)
    hops = _cluster_path(tuple(c for c, _ in topo.clusters), ends, src, dst)
    first: dict[tuple[str, str], Link] = {}
    for lk in topo.links:
        first.setdefault((lk.src, lk.dst), lk)
    if any(hop not in first for hop in pairwise(hops)):
        raise ValueError(f"no WAN path from cluster {src!r} to {dst!r}")
    return tuple(first[hop] for hop in pairwise(hops))


@lru_cache(maxsize=1024)
def _cluster_path(
    clusters: tuple[str, ...], links: tuple[tuple[str, str], ...], src: str, dst: str
) -> tuple[str, ...]:
    # cached: the gloo replay routes every message it sends
    return tuple(path(clusters, links, src, dst))


# --- the network: routes and one step of concurrent transfers --------------------------------

Where = tuple[tuple[str, int], ...]  # rank -> (cluster, host index in the cluster)
Edge = tuple[int, int]  # (sending rank, receiving rank)
Phase = tuple[tuple[Edge, ...], float, int]  # (concurrent transfers, bytes each, repetitions)


def rank_hosts(topo: Topology) -> Where:
    seen: Counter[str] = Counter()
    out = []
    for c in rank_clusters(topo):
        out.append((c, seen[c] // topo.ranks_per_host))
        seen[c] += 1
    return tuple(out)


def _fabric_bw(topo: Topology, cluster: str) -> float:
    bw = topo.fabric_goodput_bps.get(cluster)
    return topo.host_bw_bps if bw is None else min(bw, topo.host_bw_bps)


def route(topo: Topology, where: Where, edge: Edge) -> tuple[float, list[tuple[tuple, float]]]:
    """(latency, [(resource, capacity bit/s)]) of one transfer."""
    (ca, ha), (cb, hb) = where[edge[0]], where[edge[1]]
    if (ca, ha) == (cb, hb):
        return 0.0, [(("loop", edge[0]), topo.host_bw_bps)]  # each sending process copies
    latency = topo.fabric_delay_s.get(ca, 0.0) + topo.fabric_delay_s.get(cb, 0.0)
    resources: list[tuple[tuple, float]] = [
        (("up", ca, ha), _fabric_bw(topo, ca)),
        (("down", cb, hb), _fabric_bw(topo, cb)),
    ]
    for link in wan_path(topo, ca, cb):
        latency += link.delay_s
        resources.append((("wan", link.src, link.dst), link.goodput_bps))
    return latency, resources


def _step(topo: Topology, where: Where, edges: Iterable[Edge], nbytes: float) -> float:
    """max over transfers of α + latency + 8·nbytes / (share of its tightest resource)."""
    routes = [route(topo, where, e) for e in edges]
    if not routes:
        return 0.0
    users = Counter(key for _, res in routes for key, _ in res)
    return max(
        topo.alpha_s + lat + 8 * nbytes / min(cap / users[key] for key, cap in res)
        for lat, res in routes
    )


def cost(topo: Topology, where: Where, schedules: list[list[Phase]]) -> float:
    """Time of concurrent groups' schedules: step i of every group runs at the same time."""
    schedules = [s for s in schedules if s]
    if not schedules:
        return 0.0
    if len({tuple((b, k) for _, b, k in s) for s in schedules}) > 1:
        # Differently shaped groups (unequal sizes) touch disjoint resources here: slowest wins.
        return max(cost(topo, where, [s]) for s in schedules)
    total = 0.0
    for phases in zip(*schedules, strict=True):
        _, nbytes, reps = phases[0]
        total += reps * _step(topo, where, [e for p in phases for e in p[0]], nbytes)
    return total
