"""The pure per-packet model of one WAN direction: no sockets, no clock of its own.

This module owns a direction's state (:class:`Queue`) and the arithmetic applied to each packet:
:func:`decide` (loss, Gilbert-Elliott burst loss, reordering, delay and order-preserving jitter)
and the emulated bottleneck
queue (:func:`enqueue`, with :func:`wire_bytes` and the marking law of
:mod:`testbed.core.aqm`, decided on the queue a packet finds at its arrival or, with
:func:`dequeue_verdict`, on the queue it leaves behind at its departure).
The hot path (:meth:`testbed.link.delayline.loop.DelayLine._drain`) calls :func:`decide` once per
packet; the unit tests call it with made-up arrival times.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field

from testbed.core.aqm import mark_probability
from testbed.core.frames import ETH_HEADER, MSS, TCP_IP_HEADERS
from testbed.link.delayline.config import QueueConfig
from testbed.link.delayline.lateness import LatenessHistogram
from testbed.link.delayline.nfqueue import NF_ACCEPT, NF_DROP

HOLD = -1  # decide(): the packet is held; its release time was queued


@dataclass
class Queue:
    """State of one NFQUEUE (one WAN direction)."""

    cfg: QueueConfig
    rng: random.Random
    deadlines: deque[float] = field(default_factory=deque)  # non-decreasing
    ids: deque[int] = field(default_factory=deque)  # increasing packet ids
    last_release: float = -math.inf
    packets: int = 0
    nbytes: int = 0
    accepted: int = 0
    dropped_loss: int = 0  # random and burst losses
    dropped_burst: int = 0  # of which in the Gilbert-Elliott bad state
    ge_bad: bool = False  # the Gilbert-Elliott state (False: good)
    reordered: int = 0
    max_held: int = 0
    verdict_errors: int = 0
    last_verdict_errno: int = 0
    ts_fallbacks: int = 0
    kernel_queue_dropped: int = 0
    kernel_user_dropped: int = 0
    hist: LatenessHistogram = field(default_factory=LatenessHistogram)
    # bottleneck emulation
    busy_until: float = -math.inf  # when the last accepted packet leaves the emulated link
    departures: deque[float] = field(default_factory=deque)  # of packets still in the queue
    marked_ids: set[int] = field(default_factory=set)  # held packets to release with ce_mark
    # marking at dequeue (aqm "at": "dequeue"): per held packet (release - departure, accepted
    # bytes through it, its ECN bits), and the accepted bytes by arrival time since the oldest
    # held one (arrival, cumulative bytes after it): the queue it leaves behind is what arrived
    # by its departure minus what is ahead of it and itself
    at_dequeue: dict[int, tuple[float, float, int]] = field(default_factory=dict)
    arrived: deque[tuple[float, float]] = field(default_factory=deque)
    arrived_by_cursor: float = 0.0
    wire_bytes: int = 0  # arrived at the bottleneck (dropped ones too)
    queued_bytes: int = 0  # accepted into it (what leaves it, once served)
    dropped_queue: int = 0
    dropped_aqm: int = 0
    marked: int = 0
    ect: int = 0
    max_backlog: float = 0.0

    def backlog(self, now: float) -> tuple[float, int]:
        """(bytes, packets) in the emulated bottleneck queue at ``now``."""
        deps = self.departures
        while deps and deps[0] <= now:
            deps.popleft()
        if self.busy_until <= now:
            return 0.0, 0
        return (self.busy_until - now) * self.cfg.service_rate / 8, len(deps)

    def departed_bytes(self, now: float) -> float:
        """Wire bytes that left the emulated bottleneck by ``now``: what HTB's counter would
        say (it counts at dequeue), not what arrived (drops and the backlog are not delivered)."""
        return self.queued_bytes - self.backlog(now)[0]


def decide(q: Queue, pid: int, arrival: float, length: int, tos: int) -> int:
    """Apply ``q``'s model to packet ``pid`` (``length`` bytes, ECN bits in ``tos``) that arrived
    at ``arrival``: NF_DROP or NF_ACCEPT for a verdict to send now, or HOLD when its release time
    went to ``q.deadlines`` (and its id to ``q.ids``).

    Order: loss, then the bottleneck (which may drop or mark), then reordering (accept now), else
    release = max(departure + max(0, delay + N(0, jitter)), the previous release).

    Loss: with Gilbert-Elliott on (``ge_p``), the state moves first (good -> bad with ``ge_p``,
    bad -> good with ``ge_r``), then a packet in the bad state is lost; in the good state (and
    without the model) it is lost with ``loss``. Long-run loss is p/(p+r) (plus ``loss`` of
    the rest) and a burst lasts 1/r packets on average, as netem's ``loss gemodel p r 100%
    loss``."""
    q.packets += 1
    q.nbytes += length
    cfg = q.cfg
    if cfg.ge_p:
        if q.rng.random() < (cfg.ge_r if q.ge_bad else cfg.ge_p):
            q.ge_bad = not q.ge_bad
        if q.ge_bad:
            q.dropped_loss += 1
            q.dropped_burst += 1
            return NF_DROP
    if cfg.loss and q.rng.random() < cfg.loss:
        q.dropped_loss += 1
        return NF_DROP
    depart = arrival
    if cfg.bottleneck:
        depart = enqueue(q, pid, arrival, length, tos)
        if depart < 0:
            return NF_DROP
    if cfg.reorder and q.rng.random() < cfg.reorder:
        q.reordered += 1
        q.accepted += 1
        return NF_ACCEPT
    if cfg.jitter:
        d = cfg.delay + q.rng.gauss(0.0, cfg.jitter)
        rel = depart + (d if d > 0.0 else 0.0)
    else:
        rel = depart + cfg.delay
    if rel < q.last_release:
        rel = q.last_release
    q.last_release = rel
    q.deadlines.append(rel)
    q.ids.append(pid)
    if pid in q.at_dequeue:
        _, through, ect = q.at_dequeue[pid]
        q.at_dequeue[pid] = (rel - depart, through, ect)
    return HOLD


def wire_bytes(length: int) -> int:
    """Bytes a (GSO) IP packet of ``length`` occupies on the wire, as HTB would count them."""
    segs = max(1, -(-(length - TCP_IP_HEADERS) // MSS))
    return length + ETH_HEADER + (segs - 1) * (TCP_IP_HEADERS + ETH_HEADER)


def enqueue(q: Queue, pid: int, arrival: float, length: int, tos: int) -> float:
    """Put a packet into the emulated bottleneck: its departure time, or -1 if dropped.

    departure = max(arrival, previous departure) + wire size / rate; drop-tail when the
    queue would exceed the buffer; the marking decision is taken on the queue the packet
    finds on arrival (aqm ``at: arrival``) or, with ``at: dequeue``, recorded for
    :func:`dequeue_verdict` at its release. A GSO packet is one decision for all its bytes:
    marked (or dropped) whole with the profile's probability, so the expected share of marked
    *bytes* is the same as if each segment were decided alone (it only comes in larger
    chunks)."""
    cfg = q.cfg
    size = wire_bytes(length)
    q.wire_bytes += size
    backlog, _ = q.backlog(arrival)
    if backlog + size > cfg.buffer:
        q.dropped_queue += 1
        return -1.0
    ect = tos & 3
    if ect:
        q.ect += 1
    aqm = cfg.aqm
    if aqm is not None and aqm.get("at") == "dequeue":
        if aqm["kind"] != "droptail":
            q.arrived.append((arrival, q.queued_bytes + size))
            q.at_dequeue[pid] = (0.0, q.queued_bytes + size, ect)
    elif _marks(q, mark_probability(aqm, backlog)):
        if ect and aqm is not None and aqm.get("ecn", True):
            q.marked += 1
            q.marked_ids.add(pid)
        else:  # RED drops what it cannot mark
            q.dropped_aqm += 1
            return -1.0
    start = q.busy_until if q.busy_until > arrival else arrival
    q.busy_until = start + size * 8 / cfg.service_rate
    q.queued_bytes += size
    q.departures.append(q.busy_until)
    if backlog + size > q.max_backlog:
        q.max_backlog = backlog + size
    return q.busy_until


def _marks(q: Queue, p: float) -> bool:
    return p > 0.0 and (p >= 1.0 or q.rng.random() < p)


def dequeue_verdict(q: Queue, pid: int, release: float) -> int:
    """The marking decision for held packet ``pid`` released at ``release``, taken on the queue
    it leaves behind at its departure (aqm ``at: dequeue``, as DCQCN's simulators decide):
    NF_ACCEPT (unmarked), HOLD (to be released with the CE mark) or NF_DROP (RED drops what it
    cannot mark). Called in release order, which is departure order (the queue is FIFO)."""
    offset, through, ect = q.at_dequeue.pop(pid)
    departure = release - offset
    arrived = q.arrived
    while arrived and arrived[0][0] <= departure:
        q.arrived_by_cursor = arrived.popleft()[1]
    aqm = q.cfg.aqm
    if not _marks(q, mark_probability(aqm, q.arrived_by_cursor - through)):
        return NF_ACCEPT
    if ect and aqm is not None and aqm.get("ecn", True):
        q.marked += 1
        return HOLD
    q.dropped_aqm += 1
    return NF_DROP


def retime(q: Queue, now: float, old_rate: float) -> None:
    """The bottleneck's rate changed at ``now`` (a reload; ``q.cfg`` has the new one): what the
    emulated queue still holds leaves at the new rate from now on, as HTB's dequeue-time
    shaping does. :func:`enqueue` fixed each packet's departure at its arrival, at the rate
    then: without this, after a step down the queue built at the old rate would still leave
    at the old rate (up to ``buffer`` bytes above the new target), after a step up at the old
    slow one.

    The bytes ahead of a queued packet are (departure − now) × old rate; at the new rate they
    take that × old/new. Each held packet keeps its own delay and jitter (release − departure
    moves with its departure) and releases stay in order. The queued packets are the last
    ``len(departures)`` held ones: a bottleneck queue accepts nothing out of order (the backend
    refuses ``reorder`` with an ``aqm``), so only with reordering (a stray early accept) are
    fewer of them held, and the newest ones are retimed. A hold and its release are rate changes
    like the others (to and from ``HOLD_RATE``): what was queued keeps its bytes ahead of it."""
    new_rate = q.cfg.service_rate
    if not old_rate or not new_rate or old_rate == new_rate:
        return
    deps = q.departures
    while deps and deps[0] <= now:
        deps.popleft()
    if q.busy_until <= now:
        return
    factor = old_rate / new_rate
    moved = [now + (d - now) * factor for d in deps]
    q.busy_until = now + (q.busy_until - now) * factor
    k = min(len(moved), len(q.deadlines))
    if k:
        held = list(q.deadlines)
        first = len(held) - k
        prev = held[first - 1] if first else -math.inf
        for i in range(k):
            old_dep = deps[len(deps) - k + i]
            rel = held[first + i] + (moved[len(moved) - k + i] - old_dep)
            if rel < prev:
                rel = prev
            held[first + i] = prev = rel
        q.deadlines.clear()  # in place: the loop may hold the deque
        q.deadlines.extend(held)
        q.last_release = held[-1]
    deps.clear()
    deps.extend(moved)
