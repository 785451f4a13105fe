"""α-β cost model of torch.distributed's gloo collectives across emulated clusters. PURE.

This module owns the *predicted* time of every collective × algorithm the testbed measures, so a
report can show measured / predicted. It imports neither torch nor ``testbed``: the runner builds a
:class:`Topology` (plain data) from its NetworkPlan, with ``goodput = rate × plan.goodput_factor``.
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

Ring all_reduces (flat, the leaders' phase, hierarchical-2d's columns) are not costed as the
synchronous steps above but replayed as gloo runs them (``ring="gloo"``, the default; section
"gloo's segmented ring" below): segments of at most 1 MiB, two in flight, every send waiting for
the receiver's recv-ready notify, notifies queued behind data in the WAN buffer, and, when the
measured inputs are given, each WAN connection's congestion window (:class:`TcpWindow`, from the
window at step start and the srtt the tcp_info tracer saw). :func:`predict_terms` splits a
prediction into those terms, :func:`predict_phases` into the phases the ranks time, and
:func:`host_bw_from_phases` turns intra-cluster phases measured with an unshaped WAN into the copy
rate. docs/model.md lists every term, its measured input and its source.

Not modelled: loss and its recovery (drop-tail overflow when a two-segment burst exceeds the WAN
buffer: see docs/model.md on wan-asymmetry), gloo's segmenting inside reduce/broadcast/all_gather,
the gateways' forwarding CPU, and a CPU shared by all namespaces (``host_bw`` is one number,
measured on an unshaped WAN).
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from analysis.metrics import COLLECTIVES

ALGORITHMS = ("flat", "hierarchical", "hierarchical-2d")
SERVER_PLACEMENTS = ("first-cluster", "per-cluster")  # a parameter server's shards
PLACEMENTS = ("by-cluster", "interleaved")
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
        if self.placement not in PLACEMENTS:
            allowed = ", ".join(PLACEMENTS)
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
            limits = (("cwnd_start_bytes", 0), ("ssthresh_bytes", 0), ("srtt_s", 0))
            for name, low in (*limits, ("buffer_bytes", -1)):
                value = getattr(link, name)
                if value is not None and value <= low:
                    raise ValueError(f"link {link.src}->{link.dst}: {name} is out of range")
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


# --- gloo's segmented ring all_reduce (gloo/allreduce.cc ring(), gloo/transport/tcp/pair.cc) -----
#
# gloo cuts the buffer into numSegments = roundUp(max(⌈S/1 MiB⌉, 2g), g) segments and runs
# (g−1)·q of them (q = numSegments/g) through each ring edge per phase (reduce-scatter, then
# all-gather), keeping two in flight: iteration i waits for segment i−2's receive and send, then
# posts the receive and the send of segment i. A posted receive sends the peer a NOTIFY_RECV_READY
# message, and a send is written only once that notify has arrived (pair.cc: send() queues in
# localPendingSend_ until remotePendingRecv). So on an edge of one-way latency L a segment pair
# costs max(2·t_seg, t_seg + 2L): a ring over a long WAN is window-limited at two segments per
# round trip, and every phase starts with a notify crossing the WAN before any data moves.

MSS_BYTES = 1448  # TCP payload per segment with timestamps (testbed.core.frames)
INITIAL_CWND_SEGMENTS = 10  # Linux TCP_INIT_CWND
RTO_MIN_S = 0.2  # Linux TCP_RTO_MIN


def gloo_ring_segments(
    size_bytes: int, g: int, segment_bytes: int = 1 << 20, element_bytes: int = 4
) -> tuple[int, int]:
    """(numSegments, segmentBytes) of gloo's ring all_reduce of ``size_bytes`` over ``g`` ranks,
    exactly as gloo/allreduce.cc computes them (the last segments may be short or empty)."""
    if g < 2 or size_bytes < 1:
        raise ValueError(f"a ring needs g >= 2 ranks and a positive size, got g={g}, {size_bytes}")
    seg_max = element_bytes * max(1, segment_bytes // element_bytes)
    num = _round_up(max(-(-size_bytes // seg_max), 2 * g), g)
    seg = _round_up(-(-size_bytes // num), element_bytes)
    return num, seg


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def gloo_ring_lengths(
    size_bytes: int,
    g: int,
    rank: int,
    phase: int,
    segment_bytes: int = 1 << 20,
    element_bytes: int = 4,
) -> list[tuple[int, int]]:
    """(send bytes, receive bytes) of each iteration that posts I/O, for group member ``rank``
    in ``phase`` 0 (reduce-scatter) or 1 (all-gather); 0 = that side posts nothing."""
    num, seg = gloo_ring_segments(size_bytes, g, segment_bytes, element_bytes)
    q = num // g
    base = (rank + 1, rank + 2) if phase == 0 else (rank, rank + 1)
    out = []
    for i in range(num - q):
        lengths = []
        for b in base:
            offset = ((b * q + i) * seg) % (num * seg)
            lengths.append(max(0, min(seg, size_bytes - offset)))
        out.append((lengths[0], lengths[1]))
    return out


def linux_rto(srtt_s: float, rttvar_s: float, rto_min_s: float = RTO_MIN_S) -> float:
    """The retransmission timeout Linux keeps for a connection: srtt + max(4·rttvar, rto_min)
    (tcp_set_rto; the variance term is floored at TCP_RTO_MIN), at most 120 s."""
    return min(120.0, srtt_s + max(4 * rttvar_s, rto_min_s))


def window_at_step_start(
    cwnd_bytes: float, ssthresh_bytes: float | None, idle_s: float, srtt_s: float
) -> tuple[float, float | None]:
    """(cwnd, ssthresh) a connection sends a step with, from what the tcp_info tracer saw just
    before the step's first bytes (the kernel applies the idle restart only when it sends, so the
    sample still shows the window before it) and the idle time before the step: the restart of
    tcp_slow_start_after_idle when the idle time exceeds the RTO (:func:`linux_rto` with no
    variance term: srtt + 200 ms), else unchanged."""
    rto = linux_rto(srtt_s, 0.0)
    if idle_s <= rto:
        return cwnd_bytes, ssthresh_bytes
    return cwnd_after_idle(cwnd_bytes, idle_s, rto), ssthresh_after_idle(cwnd_bytes, ssthresh_bytes)


def ssthresh_after_idle(cwnd_bytes: float, ssthresh_bytes: float | None) -> float | None:
    """Linux's tcp_cwnd_restart keeps ssthresh at max(ssthresh, 3/4 cwnd) when it restarts the
    window, so the connection slow-starts back to three quarters of where it was (None: still
    the initial "infinite" ssthresh)."""
    return None if ssthresh_bytes is None else max(ssthresh_bytes, 0.75 * cwnd_bytes)


def cwnd_after_idle(
    cwnd_bytes: float,
    idle_s: float,
    rto_s: float,
    initial_bytes: float = INITIAL_CWND_SEGMENTS * MSS_BYTES,
) -> float:
    """Congestion window after ``idle_s`` without sending, as Linux's tcp_cwnd_restart does it
    with net.ipv4.tcp_slow_start_after_idle=1: nothing changes unless the idle time exceeds the
    RTO; then the window halves once per RTO elapsed, never below min(initial window, cwnd)."""
    if idle_s <= rto_s:
        return cwnd_bytes
    restart = min(initial_bytes, cwnd_bytes)
    cwnd, delta = cwnd_bytes, idle_s - rto_s
    while delta > 0 and cwnd > restart:
        cwnd /= 2
        delta -= rto_s
    return max(cwnd, restart)


def burst_overflow_bytes(
    burst_bytes: float,
    cwnd_bytes: float,
    buffer_bytes: float,
    rate_bps: float,
    arrival_bps: float,
) -> float:
    """Bytes a burst cannot queue at a drop-tail bottleneck (0 = no loss). A sender with window
    ``cwnd_bytes`` writes min(burst, cwnd) at ``arrival_bps`` (its host's copy rate) into a queue
    of ``buffer_bytes`` drained at ``rate_bps``, so the queue peaks at
    min(burst, cwnd) × (1 − rate/arrival). gloo's burst is its two segments in flight
    (2 × :func:`gloo_ring_segments`' segment) at the start of a phase."""
    if arrival_bps <= rate_bps:
        return 0.0
    peak = min(burst_bytes, cwnd_bytes) * (1 - rate_bps / arrival_bps)
    return max(0.0, peak - buffer_bytes)


class TcpWindow:
    """One connection's congestion window, as a fluid: bytes leave at the bottleneck's rate while
    fewer than ``cwnd`` are unacknowledged, and a chunk is acknowledged one round trip after it
    left. Each acknowledged byte grows the window by one byte below ``ssthresh`` (slow start) and
    by mss/cwnd above it (congestion avoidance), as Linux's Reno/CUBIC growth does to first order.
    Losses are not modelled."""

    def __init__(self, cwnd_bytes: float, ssthresh_bytes: float | None = None) -> None:
        if cwnd_bytes <= 0:
            raise ValueError(f"cwnd must be > 0, got {cwnd_bytes}")
        self.cwnd = float(cwnd_bytes)
        self.ssthresh = float(cwnd_bytes if ssthresh_bytes is None else ssthresh_bytes)
        self._unacked: list[tuple[float, float]] = []  # (acknowledged at, bytes)

    def _ack_until(self, t: float) -> float:
        """Apply the acknowledgements due by ``t``; returns the bytes still unacknowledged."""
        due = sorted(x for x in self._unacked if x[0] <= t)
        self._unacked = [x for x in self._unacked if x[0] > t]
        for _, nbytes in due:
            if self.cwnd < self.ssthresh:
                self.cwnd += nbytes
            else:
                self.cwnd += MSS_BYTES * nbytes / self.cwnd
        return sum(b for _, b in self._unacked)

    def send(self, t: float, nbytes: float, rate_bps: float, rtt_s: float) -> float:
        """Time the last of ``nbytes`` written at ``t`` leaves the bottleneck."""
        left = float(nbytes)
        while left > 0:
            room = self.cwnd - self._ack_until(t)
            if room <= 0:
                t = min(a for a, _ in self._unacked)  # wait for the next acknowledgement
                continue
            # ACKs come back as a stream, not one per burst: sending in 1/16-window chunks
            # keeps a window that covers the BDP from ever stalling (error < RTT/16)
            chunk = min(room, left, max(self.cwnd / 16, MSS_BYTES))
            t += 8 * chunk / rate_bps
            self._unacked.append((t + rtt_s, chunk))
            left -= chunk
        return t


def _queue_cap(topo: Topology, key: tuple, cap: float) -> float:
    """Seconds of data a small message can find queued ahead of it on resource ``key``: a WAN
    direction's buffer (when known) drained at its goodput; other resources (veth, loopback) keep
    no queue of their own, the backlog stays in the sender's socket."""
    if key[0] != "wan":
        return 0.0
    link = next(lk for lk in topo.links if (lk.src, lk.dst) == key[1:])
    return float("inf") if link.buffer_bytes is None else 8 * link.buffer_bytes / cap


def _window_inputs(
    topo: Topology, resources: list[tuple[tuple, float]]
) -> tuple[float | None, float | None, float | None]:
    """(start window, ssthresh, ACK round trip) of a connection crossing ``resources``: those of
    its WAN hop with the smallest window (else the topology's) and the largest srtt of its hops;
    all None off the WAN."""
    hops = [k[1:] for k, _ in resources if k[0] == "wan"]
    if not hops:
        return None, None, None
    links = [lk for lk in topo.links if (lk.src, lk.dst) in hops]
    given = [lk for lk in links if lk.cwnd_start_bytes is not None]
    rtts = [lk.srtt_s for lk in links if lk.srtt_s is not None]
    rtt = max(rtts) if rtts else None
    if not given:
        return topo.cwnd_start_bytes, topo.ssthresh_bytes, rtt
    tight = min(given, key=lambda lk: lk.cwnd_start_bytes or 0.0)
    return tight.cwnd_start_bytes, tight.ssthresh_bytes or topo.ssthresh_bytes, rtt


@dataclass(frozen=True)
class _Ring:
    """One gloo ring all_reduce of ``size`` bytes over ``group`` (a phase's group schedule)."""

    group: tuple[int, ...]
    size: float


def _gloo_rings(topo: Topology, where: Where, rings: list[_Ring]) -> float:
    """Seconds until every rank of the concurrent ``rings`` has finished gloo's ring all_reduce:
    an event replay of gloo's loop (above) on FIFO links. A message waits for the transfers queued
    ahead of it on its tightest resource (so a notify queues behind a data burst going the same
    way), then takes α + latency; data segments take 8·bytes/capacity on that resource, or longer
    when a WAN connection's window (``cwnd_start_bytes``, a :class:`TcpWindow`) runs out."""

    events: list[tuple[float, int, str, tuple]] = []
    seq = 0

    def push(t: float, kind: str, payload: tuple) -> None:
        nonlocal seq
        heapq.heappush(events, (t, seq, kind, payload))
        seq += 1

    plan: dict[int, tuple[int, int, list[list[tuple[int, int]]]]] = {}  # rank -> (up, down, io)
    for ring in rings:
        g, size = len(ring.group), int(ring.size)
        for k, r in enumerate(ring.group):
            io = [
                gloo_ring_lengths(size, g, k, p, topo.segment_bytes, topo.element_bytes)
                for p in (0, 1)
            ]
            # receives from group[k+1] (up), sends to group[k-1] (down)
            plan[r] = (ring.group[(k + 1) % g], ring.group[(k - 1) % g], io)
    state = {r: [0, 0, 0.0] for r in plan}  # phase, iteration, local time
    recv_done: dict[tuple, float] = {}
    send_done: dict[tuple, float] = {}
    notified: dict[tuple, float] = {}
    posted: dict[tuple, tuple[float, int]] = {}
    free: dict[tuple, float] = {}
    windows: dict[tuple[int, int], TcpWindow] = {}
    finish: dict[int, float] = {}

    def advance(r: int) -> None:
        up, down, io = plan[r]
        st = state[r]
        while st[0] < 2:
            p, i, t = st
            steps = io[p]
            if i >= 2:
                sent, recvd = steps[i - 2]
                waits = []
                if recvd:
                    waits.append(recv_done.get((r, p, i - 2)))
                if sent:
                    waits.append(send_done.get((r, p, i - 2)))
                if any(w is None for w in waits):
                    return  # woken again when the missing event happens
                t = max([t, *waits])
                if recvd and p == 0:
                    t += 8 * recvd / topo.host_bw_bps  # reduce the received segment
            if i < len(steps):
                sent, recvd = steps[i]
                if recvd:
                    push(t, "xmit", ("notify", r, up, p, i, 0))
                if sent:
                    posted[(r, p, i)] = (t, sent)
                    if (r, p, i) in notified:
                        push(max(t, notified[(r, p, i)]), "xmit", ("data", r, down, p, i, sent))
            i += 1
            if i == len(steps) + 2:
                p, i = p + 1, 0
            st[:] = [p, i, t]
        finish[r] = st[2]

    for r in plan:
        advance(r)
    while events:
        t, _, kind, (what, a, b, p, i, nbytes) = heapq.heappop(events)
        if kind == "xmit":
            latency, res = _route(topo, where, (a, b))
            key, cap = min(res, key=lambda kc: kc[1])
            start = max(t, free.get(key, 0.0))
            if what == "notify":  # queues behind data, at most the bottleneck's buffer
                start = t + min(start - t, _queue_cap(topo, key, cap))
                push(start + latency + topo.alpha_s, "arrive", (what, a, b, p, i, 0))
                continue
            done = start + 8 * nbytes / cap
            cwnd, ssthresh, srtt = _window_inputs(topo, res)
            if cwnd is not None:
                if (a, b) not in windows:
                    windows[(a, b)] = TcpWindow(cwnd, ssthresh)
                done = windows[(a, b)].send(start, nbytes, cap, srtt or 2 * latency)
            free[key] = done
            push(done, "sent", (what, a, b, p, i, nbytes))
            push(done + latency + topo.alpha_s, "arrive", (what, a, b, p, i, nbytes))
        elif kind == "sent":
            send_done[(a, p, i)] = t
            advance(a)
        elif what == "notify":  # arrived at b, the data sender for (p, i)
            notified[(b, p, i)] = t
            if (b, p, i) in posted:
                t_post, sent = posted[(b, p, i)]
                push(max(t, t_post), "xmit", ("data", b, a, p, i, sent))
        else:
            recv_done[(b, p, i)] = t
            advance(b)
    if len(finish) != len(plan):
        raise AssertionError("gloo ring replay stalled")  # a bug here, not bad input
    return max(finish.values())


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
        if collective in ("all_reduce", "reduce_scatter"):  # torch's gloo: both are all_reduces
            return _allreduce_phase(topo, where, [list(range(n))], s)
        return _cost(topo, where, [_FLAT[collective](list(range(n)), s)])
    blocks = [[r for r in range(n) if where[r][0] == c] for c, m in topo.clusters if m]
    leaders = sorted(b[0] for b in blocks)
    widest = max(len(b) for b in blocks) * s / n  # a cluster's block (the largest if unequal)
    # One list of concurrent group schedules per phase; phases run one after another.
    if algorithm == "hierarchical-2d":
        m = len(blocks[0])
        columns = [sorted(b[j] for b in blocks) for j in range(m)]
        return (
            _cost(topo, where, [_alltoall(b, s) for b in blocks])  # direct reduce-scatter
            + _allreduce_phase(topo, where, columns, s / m)
            + _cost(topo, where, [_allgather(b, s) for b in blocks])
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
    return sum(_cost(topo, where, p) for p in phases)


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
    where = _where(topo)
    n = len(where)
    blocks = [[r for r in range(n) if where[r][0] == c] for c, m in topo.clusters if m]
    srv = blocks[0] if servers == "first-cluster" else [b[0] for b in blocks]
    push = tuple((w, s) for s in srv for w in range(n) if w != s)
    pull = tuple((s, w) for w, s in push)
    piece = float(size_bytes) / len(srv)
    return _cost(topo, where, [[(push, piece, 1), (pull, piece, 1)]])


def _allreduce_phase(topo: Topology, where: Where, groups: list[list[int]], size: float) -> float:
    """Concurrent ring all_reduces of ``size`` bytes, one per group: gloo's segmented ring
    replayed (``topo.ring == "gloo"``) or the synchronous α-β ring."""
    rings = [g for g in groups if len(g) > 1]
    if topo.ring == "gloo" and rings:
        return _gloo_rings(topo, where, [_Ring(tuple(g), size) for g in rings])
    return _cost(topo, where, [_allreduce(g, size) for g in groups])


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
    where = _where(topo)
    n, s = len(where), float(size_bytes)
    blocks = [[r for r in range(n) if where[r][0] == c] for c, m in topo.clusters if m]
    leaders = sorted(b[0] for b in blocks)
    if algorithm == "hierarchical-2d":
        m = len(blocks[0])
        columns = [sorted(b[j] for b in blocks) for j in range(m)]
        return {
            "cluster_reduce_scatter": _cost(topo, where, [_alltoall(b, s) for b in blocks]),
            "column_all_reduce": _allreduce_phase(topo, where, columns, s / m),
            "cluster_all_gather": _cost(topo, where, [_allgather(b, s) for b in blocks]),
        }
    return {
        "cluster_reduce": _cost(topo, where, [_reduce(b, s) for b in blocks]),
        "leaders_all_reduce": _allreduce_phase(topo, where, [leaders], s),
        "cluster_broadcast": _cost(topo, where, [_broadcast(b, s) for b in blocks]),
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

    def cost(bw: float) -> float:
        got = predict_phases(collective, algorithm, size_bytes, replace(topo, host_bw_bps=bw))
        missing = [n for n in names if n not in got]
        if missing:
            raise ValueError(f"no phase(s) {missing} in {collective} {algorithm}: {list(got)}")
        return sum(got[n] for n in names)

    fixed = cost(1e30)
    bits = (cost(topo.host_bw_bps) - fixed) * topo.host_bw_bps
    if bits <= 0:
        raise ValueError(f"phases {names} move no bytes at the copy rate; nothing to calibrate")
    if measured_s <= fixed:
        raise ValueError(
            f"measured {measured_s:.6f} s is not above the phases' latency part {fixed:.6f} s"
        )
    return bits / (measured_s - fixed)


TERMS = ("alpha_beta", "segments_and_notify", "cwnd")


def predict_terms(
    collective: str, algorithm: str, size_bytes: float, topo: Topology
) -> dict[str, float]:
    """The prediction split into what each modelled effect adds, in seconds (they sum to
    :func:`predict`): ``alpha_beta`` the synchronous α-β steps; ``segments_and_notify`` what
    gloo's segmented ring adds (two segments in flight, a recv-ready notify before every send,
    a notify queued behind data); ``cwnd`` what a congestion window below the BDP at the start
    (``cwnd_start_bytes``) adds."""
    from dataclasses import replace

    unlimited = replace(
        topo,
        cwnd_start_bytes=None,
        links=tuple(replace(lk, cwnd_start_bytes=None) for lk in topo.links),
    )
    base = predict(collective, algorithm, size_bytes, replace(unlimited, ring="synchronous"))
    if topo.ring == "synchronous":
        return {"alpha_beta": base, "segments_and_notify": 0.0, "cwnd": 0.0}
    ring = predict(collective, algorithm, size_bytes, unlimited)
    windows = topo.cwnd_start_bytes is not None or any(lk.cwnd_start_bytes for lk in topo.links)
    full = predict(collective, algorithm, size_bytes, topo) if windows else ring
    return {"alpha_beta": base, "segments_and_notify": ring - base, "cwnd": full - ring}


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
