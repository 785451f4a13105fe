"""gloo's segmented ring all_reduce, replayed message by message. PURE.

gloo (gloo/allreduce.cc ring(), gloo/transport/tcp/pair.cc) cuts the buffer into segments of at
most 1 MiB, keeps two in flight, and writes a send only once the receiver's recv-ready notify has
arrived; a notify queues behind data in the WAN buffer, and each WAN connection's congestion
window (:class:`analysis.tcp.TcpWindow`) may run out. A ring over a long WAN is therefore
window-limited, which the synchronous α-β ring (analysis.model.collectives) does not see.
docs/model.md, "gloo's segmented ring", lists every term and its source.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from analysis.model.topology import Topology, Where, route
from analysis.tcp import TcpWindow

# gloo cuts the buffer into numSegments = roundUp(max(⌈S/1 MiB⌉, 2g), g) segments and runs
# (g−1)·q of them (q = numSegments/g) through each ring edge per phase (reduce-scatter, then
# all-gather), keeping two in flight: iteration i waits for segment i−2's receive and send, then
# posts the receive and the send of segment i. A posted receive sends the peer a NOTIFY_RECV_READY
# message, and a send is written only once that notify has arrived (pair.cc: send() queues in
# localPendingSend_ until remotePendingRecv). So on an edge of one-way latency L a segment pair
# costs max(2·t_seg, t_seg + 2L): a ring over a long WAN is window-limited at two segments per
# round trip, and every phase starts with a notify crossing the WAN before any data moves.


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


def _queue_cap(topo: Topology, key: tuple, cap: float) -> float:
    """Seconds of data a small message can find queued ahead of it on resource ``key``: a WAN
    direction's buffer (when known) drained at its goodput; other resources (veth, loopback) keep
    no queue of their own, the backlog stays in the sender's socket."""
    if key[0] != "wan":
        return 0.0
    link = next(lk for lk in topo.links if (lk.src, lk.dst) == key[1:])
    return float("inf") if link.buffer_bytes is None else 8 * link.buffer_bytes / cap


def _window_inputs(topo: Topology, resources: list[tuple[tuple, float]]) -> _Inputs | None:
    """The window of a connection crossing ``resources``: that of its WAN hop with the smallest
    start window (else the topology's), the largest srtt and the smallest loss window of its
    hops; None off the WAN or when no window is given."""
    hops = [k[1:] for k, _ in resources if k[0] == "wan"]
    if not hops:
        return None
    links = [lk for lk in topo.links if (lk.src, lk.dst) in hops]
    given = [lk for lk in links if lk.cwnd_start_bytes is not None]
    rtts = [lk.srtt_s for lk in links if lk.srtt_s is not None]
    losses = [lk for lk in links if lk.cwnd_loss_bytes is not None]
    lost = min(losses, key=lambda lk: lk.cwnd_loss_bytes or 0.0) if losses else None
    loss = (lost.cwnd_loss_bytes, lost.loss_beta) if lost else (None, 0.7)
    if not given:
        if topo.cwnd_start_bytes is None:
            return None
        return _Inputs(topo.cwnd_start_bytes, topo.ssthresh_bytes, max(rtts, default=None), *loss)
    tight = min(given, key=lambda lk: lk.cwnd_start_bytes or 0.0)
    assert tight.cwnd_start_bytes is not None
    ssthresh = tight.ssthresh_bytes or topo.ssthresh_bytes
    return _Inputs(tight.cwnd_start_bytes, ssthresh, max(rtts, default=None), *loss)


@dataclass(frozen=True)
class _Inputs:
    cwnd: float
    ssthresh: float | None
    srtt: float | None
    loss_at: float | None
    beta: float


@dataclass(frozen=True)
class GlooRing:
    """One gloo ring all_reduce of ``size`` bytes over ``group`` (a phase's group schedule)."""

    group: tuple[int, ...]
    size: float


def gloo_rings(topo: Topology, where: Where, rings: list[GlooRing]) -> float:
    """Seconds until every rank of the concurrent ``rings`` has finished gloo's ring all_reduce,
    all ranks starting at 0 (:func:`gloo_ring_finishes`)."""
    return max(gloo_ring_finishes(topo, where, rings).values())


def gloo_ring_finishes(
    topo: Topology,
    where: Where,
    rings: list[GlooRing],
    starts: dict[int, float] | None = None,
) -> dict[int, float]:
    """When each rank of the concurrent ``rings`` finishes gloo's ring all_reduce, each starting
    at ``starts[rank]`` (default 0): an event replay of gloo's loop (above) on FIFO links. A
    message waits for the transfers queued ahead of it on its tightest resource (so a notify
    queues behind a data burst going the same way), then takes α + latency; data segments take
    8·bytes/capacity on that resource, or longer when a WAN connection's window
    (``cwnd_start_bytes``, a :class:`TcpWindow`) runs out. A rank that starts late finds the
    notifies of its earlier neighbours already there."""

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
    starts = starts or {}
    state = {r: [0, 0, float(starts.get(r, 0.0))] for r in plan}  # phase, iteration, local time
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
            latency, res = route(topo, where, (a, b))
            key, cap = min(res, key=lambda kc: kc[1])
            start = max(t, free.get(key, 0.0))
            if what == "notify":  # queues behind data, at most the bottleneck's buffer
                start = t + min(start - t, _queue_cap(topo, key, cap))
                push(start + latency + topo.alpha_s, "arrive", (what, a, b, p, i, 0))
                continue
            done = start + 8 * nbytes / cap
            got = _window_inputs(topo, res)
            if got is not None:
                if (a, b) not in windows:
                    windows[(a, b)] = TcpWindow(got.cwnd, got.ssthresh, got.loss_at, got.beta)
                done = windows[(a, b)].send(start, nbytes, cap, got.srtt or 2 * latency)
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
    return finish
