"""Userspace WAN delay line: NFQUEUE + raw nfnetlink, standard library only.

This kernel has no ``sch_netem``, so one-way delay, jitter, loss and reordering on the emulated WAN
come from this process. It runs inside the router (wire) namespace (``ip netns exec NS python -m
testbed.delayline --config FILE.json``), binds one NFQUEUE per WAN direction, holds every queued
packet *inside the kernel* and issues its verdict when the packet is due. Rate limiting is not done
here: the kernel's HTB (with a bfifo leaf) on the router's egress does that.

What this module owns
    * the delay-line process: binding queues, holding packets, verdicts, statistics file;
    * the argv of the iptables rules that feed it (:func:`iptables_rules`,
      :func:`iptables_delete_rules`) and the stats reader (:func:`read_stats`).
    It does not create namespaces, qdiscs or rules, and never touches interface offloads; the
    supervisor does.

Config (JSON)::

    {"queues": [{"num": 1001, "name": "east->west", "delay": 0.025, "jitter": 0.0,
                 "loss": 0.0, "reorder": 0.0, "seed": 1}],
     "stats_file": "/run/.../stats.json", "stats_interval": 0.5}

    delay/jitter in seconds, loss/reorder as fractions 0..1, seed optional (None = random).
    Optional per queue: ``maxlen`` (kernel queue length, default 262144), ``copy_mode``
    ("header", default, or "meta"). Optional top level: ``rcvbuf`` (bytes, default 64 MiB),
    ``rt_priority`` (SCHED_FIFO priority, default 10, 0 = don't ask), ``flush_grace`` (s, default
    1.0), ``release_gap`` (s, default 0.0002, see below). Unknown keys are rejected (exit 2).

Protocol with the supervisor
    1. start the process inside the namespace; wait for the single line ``READY`` on stdout
       (nothing else is ever written to stdout; diagnostics go to stderr). Exit 2 before READY:
       bad config; exit 1: a queue could not be bound (e.g. EBUSY: that queue number is already
       bound in this namespace) or the socket setup failed.
    2. add the rules (:func:`iptables_rules`, run inside the namespace); only then is traffic
       queued.
    3. to stop: delete the rules first (:func:`iptables_delete_rules`), then SIGTERM (or SIGINT).
       The process keeps delaying what it still holds (and what was queued before the rules went)
       until the deadlines, or accepts at once if a deadline is more than ``flush_grace`` away,
       writes the final stats (``"final": true``) and exits 0.
    If the process dies while the rules are installed, the kernel drops every packet for those
    queues (no ``--queue-bypass``, no fail-open): traffic stops instead of silently flowing
    undelayed.
    With loss > 0, the supervisor should turn GSO/TSO/GRO off (``ethtool -K IF gso off tso off
    gro off``) on the interfaces the WAN traffic crosses - the senders' and the router's - so that
    a queued packet is one wire packet (see Loss below).

Design choices
    * Copy mode: no payload goes to userspace. The kernel reports a packet's length
      (``NFQA_CAP_LEN``) only when a copy range is set, so the default ``copy_mode: "header"`` is
      ``NFQNL_COPY_PACKET`` with a 1-byte copy range: same cost as META (measured), but the bytes
      counter works. ``copy_mode: "meta"`` is true ``NFQNL_COPY_META`` (``bytes`` is then null).
    * ``NFQA_CFG_F_GSO`` is set and ``NFQA_CFG_F_FAIL_OPEN`` explicitly cleared: without GSO the
      kernel segments 64 KB super-packets before queueing and throughput collapses.
    * Kernel arrival timestamps (``NFQA_TIMESTAMP``): a dummy UDP socket with ``SO_TIMESTAMPNS``
      turns on kernel RX timestamping (a host-wide switch); a packet's deadline is
      arrival + delay, not recv time + delay. Falls back to recv time when absent
      (``timestamp_fallbacks`` counts it).
    * Order-preserving jitter: release = max(arrival + max(0, delay + N(0, jitter)), previous
      release of the same queue); never before arrival. The one-way delay distribution is
      therefore skewed upwards (std below ``jitter``, mean above ``delay``) when packets are closer
      together than a few jitter standard deviations; with sparse packets the std is ``jitter``.
    * Reordering only when ``reorder`` > 0: with that probability a packet skips the delay and is
      accepted at once (netem-like), overtaking the held ones.
    * Loss: ``NF_DROP`` at arrival with probability ``loss`` per *queued packet*. With GSO/GRO on,
      a queued packet can be a 64 KB super-packet (up to ~45 wire packets), hence the
      offloads-off rule above for netem-like per-wire-packet loss.
    * Each queue's deadlines are non-decreasing, so a queue is a FIFO (deque). Due packets are
      released with one ``NFQNL_MSG_VERDICT_BATCH`` ("accept all ids <= N") per queue per wakeup;
      per-packet verdicts only for drops and reordered packets, always sent before a batch that
      covers their ids.
    * One netlink socket for all queues, 64 MiB receive buffer (``SO_RCVBUFFORCE``), queue maxlen
      262144. ``select`` with a microsecond timeout to the next deadline (learning the VM's timer
      oversleep and waking up that much earlier); all pending messages are read at every
      wakeup. While every queue holds packets, arrivals don't wake the process (a new packet is
      never due before its queue's head); idle queues and reordering ones do.
    * ``release_gap``: under load the process wakes (and sends verdicts) at most about every
      ``release_gap`` seconds. That roughly halves the CPU at 5 Gbit/s and adds at most
      ``release_gap`` of lateness to packets closer together than that; sparse traffic is not
      affected. SCHED_FIFO if allowed; the garbage collector is frozen after setup.
    * Overflow is never silent: kernel ``queue_dropped``/``user_dropped`` (read from
      ``/proc/net/netfilter/nfnetlink_queue``, which is per namespace), ENOBUFS on the socket and
      rejected verdicts are reported in the stats' ``errors`` list and on stderr.

Stats file (JSON, replaced atomically every ``stats_interval`` s and at exit)::

    {"version": 1, "pid", "time" (unix), "uptime_s", "cpu_seconds", "cpu_user_seconds",
     "cpu_system_seconds", "cpu_percent" (since the previous write), "cpu_percent_avg",
     "sched_fifo", "rcvbuf", "enobufs", "wakeups", "verdict_sends", "final",
     "errors": [str, ...],
     "queues": {"1001": {"num", "name", "delay", "jitter", "loss", "reorder", "copy_mode",
                         "packets", "bytes", "accepted", "dropped_loss", "reordered", "held",
                         "max_held", "lateness_us": {"p50", "p99", "max", "count"},
                         "queue_dropped", "user_dropped", "verdict_errors",
                         "timestamp_fallbacks"}}}

    lateness = time the batch verdict was built - intended release time, over delayed packets
    (1 us resolution below 1 ms, 100 us above). CPU includes the kernel's forwarding of released
    packets, which runs inside the verdict syscall (system time).
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import errno
import gc
import itertools
import json
import math
import os
import random
import resource
import select
import signal
import socket
import struct
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.core.files import atomic_write_text
from testbed.core.frames import ETH_HEADER, MSS, TCP_IP_HEADERS

# --- netlink / nfnetlink_queue constants (linux/netlink.h, linux/netfilter/nfnetlink_queue.h) ---
NETLINK_NETFILTER = 12
SO_RCVBUFFORCE = 33
SO_TIMESTAMPNS = 35

NLMSG_HDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 1
NLM_F_ACK = 4

NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = (NFNL_SUBSYS_QUEUE << 8) | 0
NFQNL_MSG_VERDICT = (NFNL_SUBSYS_QUEUE << 8) | 1
NFQNL_MSG_CONFIG = (NFNL_SUBSYS_QUEUE << 8) | 2
NFQNL_MSG_VERDICT_BATCH = (NFNL_SUBSYS_QUEUE << 8) | 3

NFQNL_CFG_CMD_BIND = 1
NFQNL_CFG_CMD_UNBIND = 2
NFQNL_COPY_META = 1
NFQNL_COPY_PACKET = 2

NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQA_CFG_QUEUE_MAXLEN = 3
NFQA_CFG_MASK = 4
NFQA_CFG_FLAGS = 5
NFQA_CFG_F_FAIL_OPEN = 1
NFQA_CFG_F_GSO = 4

NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NFQA_TIMESTAMP = 4
NFQA_MARK = 3
NFQA_PAYLOAD = 10
NFQA_CAP_LEN = 13

NF_DROP = 0
NF_ACCEPT = 1

PROC_QUEUE_FILE = "/proc/net/netfilter/nfnetlink_queue"

_U16x2 = struct.Struct("=HH")
_NLHDR2 = struct.Struct("=IH")  # nlmsg_len, nlmsg_type
_BE16 = struct.Struct(">H")
_BE32 = struct.Struct(">I")
_BE64x2 = struct.Struct(">QQ")
_I32 = struct.Struct("=i")

DEFAULT_CE_MARK = 0x1
CE_TARGET = ("-j", "TOS", "--set-tos", "0x03/0x03")  # clear the ECN bits, then set 11 (CE)

DEFAULT_MAXLEN = 262144
DEFAULT_RCVBUF = 64 << 20
# Under load, wake up (and send batch verdicts) at most every this many seconds: halves the CPU at
# 5 Gbit/s, at the price of up to this much extra lateness for packets closer together than it.
DEFAULT_RELEASE_GAP = 0.0002
RECV_BUDGET = 1024  # messages per socket per wakeup before deadlines are checked again
EARLY_SLACK = 0.0  # release packets due within this many seconds (0: never early)
STALE_TS = 2.0  # kernel timestamps older than this (s) are treated as bogus
LONG_SLEEP = 0.0005  # sleeps longer than this (s) are shortened by the learnt timer oversleep
MAX_WAKE_EARLY = 0.0003  # cap of that correction (s)
STATS_QUIET = 0.002  # write stats only when no deadline is due within this (s), if possible


# --------------------------------------------------------------------------- pure helpers


def iptables_rules(
    in_iface: str,
    queue_num: int,
    *,
    iptables: str = "iptables",
    ce_iface: str | None = None,
    ce_mark: int = DEFAULT_CE_MARK,
) -> list[list[str]]:
    """argv lists that send every packet entering ``in_iface`` to NFQUEUE ``queue_num``.

    Run them inside the router namespace. No ``--queue-bypass``: without a listener the kernel
    drops the packets instead of forwarding them undelayed. Pass ``iptables="ip6tables"`` for IPv6.
    With ``ce_iface`` (a bottleneck queue that marks), packets the line released with ``ce_mark``
    get CE in their ECN bits on leaving through ``ce_iface``: the TOS target (mask 0x03) rewrites
    the IP header and its checksum, in POSTROUTING because an NFQUEUE verdict resumes at the next
    hook, not at the next rule. No payload goes through userspace.
    """
    mangle = [iptables, "-w", "-t", "mangle", "-A"]
    rules = [
        [*mangle, "PREROUTING", "-i", in_iface, "-j", "NFQUEUE", "--queue-num", str(int(queue_num))]
    ]
    if ce_iface is not None:
        mark = f"{int(ce_mark):#x}/{int(ce_mark):#x}"
        rules.append(
            [*mangle, "POSTROUTING", "-o", ce_iface, "-m", "mark", "--mark", mark, *CE_TARGET]
        )
    return rules


def iptables_delete_rules(in_iface: str, queue_num: int, **options: Any) -> list[list[str]]:
    """argv lists deleting the rules of :func:`iptables_rules` (same arguments)."""
    rules = iptables_rules(in_iface, queue_num, **options)
    return [[("-D" if a == "-A" else a) for a in rule] for rule in rules]


def read_stats(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Load a stats file written by the delay line (always complete: it is replaced atomically)."""
    with open(path, encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


def read_kernel_queue_counters(path: str = PROC_QUEUE_FILE) -> dict[int, dict[str, int]]:
    """Parse ``/proc/net/netfilter/nfnetlink_queue`` of the caller's network namespace."""
    out: dict[int, dict[str, int]] = {}
    try:
        with open(path, encoding="ascii") as f:
            lines = f.read().splitlines()
    except OSError:
        return out
    for line in lines:
        cols = line.split()
        if len(cols) < 8:
            continue
        try:
            vals = [int(c) for c in cols[:8]]
        except ValueError:
            continue
        out[vals[0]] = {
            "peer_portid": vals[1],
            "queue_total": vals[2],
            "copy_mode": vals[3],
            "copy_range": vals[4],
            "queue_dropped": vals[5],
            "user_dropped": vals[6],
            "id_sequence": vals[7],
        }
    return out


# --------------------------------------------------------------------------- config


class ConfigError(ValueError):
    """The delay-line config is invalid."""


@dataclass(frozen=True)
class QueueConfig:
    num: int
    name: str = ""
    delay: float = 0.0
    jitter: float = 0.0
    loss: float = 0.0
    reorder: float = 0.0
    seed: int | None = None
    maxlen: int = DEFAULT_MAXLEN
    copy_mode: str = "header"
    # Bottleneck emulation (rate > 0): the line is then the WAN bottleneck queue itself.
    rate: float = 0.0  # bit/s
    buffer: int = 0  # bytes, drop-tail limit
    aqm: dict[str, Any] | None = None  # {"kind": droptail|red|step, kmin, kmax, pmax, k, ecn}
    ce_mark: int = DEFAULT_CE_MARK

    @property
    def bottleneck(self) -> bool:
        return self.rate > 0

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> QueueConfig:
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(d) - known
        if unknown:
            raise ConfigError(f"unknown queue keys: {sorted(unknown)}")
        if "num" not in d:
            raise ConfigError("queue without 'num'")
        q = cls(
            num=int(d["num"]),
            name=str(d.get("name", "")) or f"q{int(d['num'])}",
            delay=float(d.get("delay", 0.0)),
            jitter=float(d.get("jitter", 0.0)),
            loss=float(d.get("loss", 0.0)),
            reorder=float(d.get("reorder", 0.0)),
            seed=None if d.get("seed") is None else int(d["seed"]),
            maxlen=int(d.get("maxlen", DEFAULT_MAXLEN)),
            copy_mode=str(d.get("copy_mode", "header")),
            rate=float(d.get("rate", 0.0)),
            buffer=int(d.get("buffer", 0)),
            aqm=d.get("aqm"),
            ce_mark=int(d.get("ce_mark", DEFAULT_CE_MARK)),
        )
        if not 0 <= q.num <= 0xFFFF:
            raise ConfigError(f"queue num {q.num} outside 0..65535")
        for key in ("delay", "jitter"):
            v = getattr(q, key)
            if not (math.isfinite(v) and 0.0 <= v <= 60.0):
                raise ConfigError(f"queue {q.num}: {key}={v} must be within 0..60 seconds")
        for key in ("loss", "reorder"):
            v = getattr(q, key)
            if not (math.isfinite(v) and 0.0 <= v <= 1.0):
                raise ConfigError(f"queue {q.num}: {key}={v} must be a fraction 0..1")
        if q.maxlen < 1:
            raise ConfigError(f"queue {q.num}: maxlen must be >= 1")
        if q.copy_mode not in ("header", "meta"):
            raise ConfigError(f"queue {q.num}: copy_mode must be 'header' or 'meta'")
        if q.bottleneck:
            _check_bottleneck(q)
        elif q.aqm is not None:
            raise ConfigError(f"queue {q.num}: aqm needs a bottleneck rate")
        return q


def _check_bottleneck(q: QueueConfig) -> None:
    if not (math.isfinite(q.rate) and q.rate >= 1000):
        raise ConfigError(f"queue {q.num}: rate={q.rate} must be >= 1000 bit/s")
    if q.buffer < 2 * 65536:
        raise ConfigError(f"queue {q.num}: buffer={q.buffer} must be >= 131072 bytes")
    if q.copy_mode == "meta":
        raise ConfigError(f"queue {q.num}: a bottleneck needs copy_mode 'header' (lengths, ECN)")
    if q.reorder:
        raise ConfigError(f"queue {q.num}: reorder cannot be combined with a bottleneck")
    if not 0 < q.ce_mark <= 0xFFFFFFFF:
        raise ConfigError(f"queue {q.num}: ce_mark must be a non-zero 32-bit mark")
    aqm = q.aqm or {"kind": "droptail"}
    kind = aqm.get("kind")
    needs = {"droptail": (), "red": ("kmin", "kmax", "pmax"), "step": ("k",)}.get(kind)
    if needs is None:
        raise ConfigError(f"queue {q.num}: aqm kind {kind!r} not in droptail, red, step")
    unknown = set(aqm) - {"kind", "kmin", "kmax", "pmax", "k", "ecn"}
    missing = [k for k in needs if aqm.get(k) is None]
    if unknown or missing:
        raise ConfigError(f"queue {q.num}: aqm unknown {sorted(unknown)} / missing {missing}")
    if kind == "red" and not (0 <= aqm["kmin"] < aqm["kmax"] and 0 < aqm["pmax"] <= 1):
        raise ConfigError(f"queue {q.num}: red needs 0 <= kmin < kmax and 0 < pmax <= 1")


def wire_bytes(length: int) -> int:
    """Bytes a (GSO) IP packet of ``length`` occupies on the wire, as HTB would count them."""
    segs = max(1, -(-(length - TCP_IP_HEADERS) // MSS))
    return length + ETH_HEADER + (segs - 1) * (TCP_IP_HEADERS + ETH_HEADER)


def mark_probability(aqm: dict[str, Any] | None, backlog: float) -> float:
    """Probability that a packet arriving at ``backlog`` queued bytes is marked (or dropped).

    red: 0 below kmin, rising linearly to pmax at kmax, 1 above kmax (DCQCN's ramp); step: 1 above
    k (DCTCP's). On the instantaneous queue, as those switches do."""
    if aqm is None:
        return 0.0
    kind = aqm["kind"]
    if kind == "step":
        return 1.0 if backlog > aqm["k"] else 0.0
    if kind == "red":
        kmin, kmax = aqm["kmin"], aqm["kmax"]
        if backlog <= kmin:
            return 0.0
        if backlog > kmax:
            return 1.0
        return aqm["pmax"] * (backlog - kmin) / (kmax - kmin)
    return 0.0


@dataclass(frozen=True)
class Config:
    queues: tuple[QueueConfig, ...]
    stats_file: str | None = None
    stats_interval: float = 0.5
    rcvbuf: int = DEFAULT_RCVBUF
    rt_priority: int = 10
    flush_grace: float = 1.0
    release_gap: float = DEFAULT_RELEASE_GAP
    trace_file: str | None = None  # JSONL samples of the bottleneck queues
    trace_interval: float = 0.01

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Config:
        known = {
            "trace_file",
            "trace_interval",
            "queues",
            "stats_file",
            "stats_interval",
            "rcvbuf",
            "rt_priority",
            "flush_grace",
            "release_gap",
        }
        unknown = set(d) - known
        if unknown:
            raise ConfigError(f"unknown config keys: {sorted(unknown)}")
        raw = d.get("queues")
        if not isinstance(raw, list) or not raw:
            raise ConfigError("'queues' must be a non-empty list")
        queues = tuple(QueueConfig.from_dict(q) for q in raw)
        nums = [q.num for q in queues]
        if len(set(nums)) != len(nums):
            raise ConfigError(f"duplicate queue numbers: {nums}")
        cfg = cls(
            queues=queues,
            stats_file=None if d.get("stats_file") is None else str(d["stats_file"]),
            stats_interval=float(d.get("stats_interval", 0.5)),
            rcvbuf=int(d.get("rcvbuf", DEFAULT_RCVBUF)),
            rt_priority=int(d.get("rt_priority", 10)),
            flush_grace=float(d.get("flush_grace", 1.0)),
            release_gap=float(d.get("release_gap", DEFAULT_RELEASE_GAP)),
            trace_file=None if d.get("trace_file") is None else str(d["trace_file"]),
            trace_interval=float(d.get("trace_interval", 0.01)),
        )
        if not cfg.trace_interval >= 0.001:
            raise ConfigError("trace_interval must be >= 0.001 seconds")
        if not 0.0 <= cfg.release_gap <= 0.01:
            raise ConfigError("release_gap must be within 0..0.01 seconds")
        if not cfg.stats_interval > 0:
            raise ConfigError("stats_interval must be > 0")
        if cfg.flush_grace < 0:
            raise ConfigError("flush_grace must be >= 0")
        if cfg.rcvbuf < 4096:
            raise ConfigError("rcvbuf must be >= 4096 bytes")
        if not 0 <= cfg.rt_priority <= 99:
            raise ConfigError("rt_priority must be within 0..99 (0: no SCHED_FIFO)")
        return cfg

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Config:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise ConfigError(f"cannot read config {path}: {e}") from e
        if not isinstance(data, dict):
            raise ConfigError("config must be a JSON object")
        return cls.from_dict(data)


# --------------------------------------------------------------------------- netlink messages


def _nla(atype: int, payload: bytes) -> bytes:
    n = 4 + len(payload)
    return _U16x2.pack(n, atype) + payload + b"\0" * ((-n) & 3)


def _nfq_msg(mtype: int, flags: int, seq: int, queue_num: int, attrs: bytes) -> bytes:
    # nlmsghdr + nfgenmsg {family AF_UNSPEC, version 0, res_id (big endian) = queue number}
    body = struct.pack(">BBH", socket.AF_UNSPEC, 0, queue_num) + attrs
    return NLMSG_HDR.pack(16 + len(body), mtype, flags, seq, 0) + body


def verdict_msg(
    queue_num: int, packet_id: int, verdict: int, *, batch: bool = False, mark: int | None = None
) -> bytes:
    """One verdict (``batch``: for all ids <= packet_id still queued); ``mark`` sets skb->mark."""
    mtype = NFQNL_MSG_VERDICT_BATCH if batch else NFQNL_MSG_VERDICT
    attrs = _nla(NFQA_VERDICT_HDR, struct.pack(">II", verdict, packet_id & 0xFFFFFFFF))
    if mark is not None:
        attrs += _nla(NFQA_MARK, _BE32.pack(mark & 0xFFFFFFFF))
    return _nfq_msg(mtype, NLM_F_REQUEST, 0, queue_num, attrs)


# --------------------------------------------------------------------------- lateness histogram


class LatenessHistogram:
    """Microsecond histogram: 1 us bins below 1 ms, 100 us bins up to 1 s, then one overflow bin."""

    FINE = 1000
    COARSE = 100
    NBINS = FINE + (1_000_000 - FINE) // COARSE + 2

    def __init__(self) -> None:
        self.counts = [0] * self.NBINS
        self.count = 0
        self.max_us = 0

    @classmethod
    def bin_of(cls, us: int) -> int:
        if us < cls.FINE:
            return us if us > 0 else 0
        if us < 1_000_000:
            return cls.FINE + (us - cls.FINE) // cls.COARSE
        return cls.NBINS - 1

    @classmethod
    def bin_value(cls, b: int) -> float:
        if b < cls.FINE:
            return float(b)
        return float(cls.FINE + (b - cls.FINE) * cls.COARSE)

    def add_us(self, us: int) -> None:
        self.counts[self.bin_of(us)] += 1
        self.count += 1
        if us > self.max_us:
            self.max_us = us

    def percentile(self, p: float) -> float | None:
        if self.count == 0:
            return None
        rank = max(1, math.ceil(p / 100.0 * self.count))
        b = bisect.bisect_left(list(itertools.accumulate(self.counts)), rank)
        return min(self.bin_value(b), float(self.max_us))

    def summary(self) -> dict[str, float | int | None]:
        return {
            "p50": self.percentile(50),
            "p99": self.percentile(99),
            "max": self.max_us if self.count else None,
            "count": self.count,
        }


# --------------------------------------------------------------------------- the delay line


class NetlinkError(OSError):
    pass


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
    dropped_loss: int = 0
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
    wire_bytes: int = 0
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
        return (self.busy_until - now) * self.cfg.rate / 8, len(deps)


class DelayLine:
    """All queues of one process, served through one netlink socket."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.queues: list[Queue] = []
        self.by_num: dict[int, Queue] = {}
        self.sock: socket.socket | None = None
        self.errors: dict[str, str] = {}
        self._reported: dict[str, str] = {}
        self._buf = bytearray(1 << 17)
        self._seq = int(time.time()) & 0xFFFF
        self._ts_sock: socket.socket | None = None
        self.sched_fifo = False
        self.rcvbuf = 0
        self.enobufs = 0
        self.verdict_errors_other = 0
        self.wakeups = 0
        self.verdict_sends = 0
        self.stopping = False
        self._t0 = time.monotonic()
        self._cpu_last = (self._t0, self._cpu())
        self.cpu_percent = 0.0
        self._trace: Any = None
        self._rt_off = time.time() - time.monotonic()

    # ---- setup

    @staticmethod
    def _cpu() -> float:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return ru.ru_utime + ru.ru_stime

    def _request(self, mtype: int, queue_num: int, attrs: bytes) -> None:
        """Send a config request with NLM_F_ACK and wait for its ack."""
        sock = self.sock
        assert sock is not None
        self._seq += 1
        seq = self._seq
        sock.send(_nfq_msg(mtype, NLM_F_REQUEST | NLM_F_ACK, seq, queue_num, attrs))
        deadline = time.monotonic() + 5.0
        while True:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                n = sock.recv_into(self._buf)
            except TimeoutError as e:
                raise NetlinkError(errno.ETIMEDOUT, "no netlink ack") from e
            finally:
                sock.setblocking(False)
            off = 0
            while off + 16 <= n:
                mlen, mt, _fl, mseq, _pid = NLMSG_HDR.unpack_from(self._buf, off)
                if mlen < 16:
                    break
                if mt == NLMSG_ERROR and mseq == seq:
                    err = -_I32.unpack_from(self._buf, off + 16)[0]
                    if err:
                        raise NetlinkError(err, os.strerror(err))
                    return
                off += (mlen + 3) & ~3

    def _config(self, num: int, attrs: bytes) -> None:
        self._request(NFQNL_MSG_CONFIG, num, attrs)

    def setup(self) -> None:
        # Any socket with SO_TIMESTAMPNS enables kernel RX timestamps -> NFQA_TIMESTAMP.
        ts = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            ts.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        except OSError as e:
            print(f"delayline: SO_TIMESTAMPNS failed ({e}); using recv time", file=sys.stderr)
        self._ts_sock = ts

        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self.sock = sock
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, self.cfg.rcvbuf)
        except OSError as e:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.cfg.rcvbuf)
            self._error(
                "rcvbuf",
                f"SO_RCVBUFFORCE failed ({e}); netlink receive buffer limited "
                f"to {sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)} bytes",
            )
        self.rcvbuf = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        sock.bind((0, 0))
        sock.setblocking(False)

        for qc in self.cfg.queues:
            num = qc.num
            try:
                self._config(num, _nla(NFQA_CFG_CMD, struct.pack(">BBH", NFQNL_CFG_CMD_BIND, 0, 0)))
            except NetlinkError as e:
                raise NetlinkError(e.errno, f"cannot bind NFQUEUE {num}: {e.strerror}") from e
            q = Queue(cfg=qc, rng=random.Random(qc.seed))
            self.queues.append(q)
            self.by_num[num] = q
            if qc.copy_mode == "meta":
                params = struct.pack(">IB", 0, NFQNL_COPY_META)
            else:  # 1 byte of payload: makes the kernel report NFQA_CAP_LEN (packet length);
                # 2 bytes for a bottleneck, which reads the ECN bits of the TOS byte
                params = struct.pack(">IB", 2 if qc.bottleneck else 1, NFQNL_COPY_PACKET)
            self._config(num, _nla(NFQA_CFG_PARAMS, params))
            self._config(num, _nla(NFQA_CFG_QUEUE_MAXLEN, _BE32.pack(qc.maxlen)))
            self._config(
                num,
                _nla(NFQA_CFG_FLAGS, _BE32.pack(NFQA_CFG_F_GSO))  # and FAIL_OPEN cleared
                + _nla(NFQA_CFG_MASK, _BE32.pack(NFQA_CFG_F_GSO | NFQA_CFG_F_FAIL_OPEN)),
            )

        if self.cfg.rt_priority > 0:
            try:
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(self.cfg.rt_priority))
                self.sched_fifo = True
            except (OSError, AttributeError):
                self.sched_fifo = False

    def unbind(self) -> None:
        if self.sock is not None:
            for q in self.queues:
                with contextlib.suppress(OSError):
                    self._config(
                        q.cfg.num,
                        _nla(NFQA_CFG_CMD, struct.pack(">BBH", NFQNL_CFG_CMD_UNBIND, 0, 0)),
                    )
            self.sock.close()
            self.sock = None
        if self._ts_sock is not None:
            self._ts_sock.close()
            self._ts_sock = None

    # ---- errors and stats

    def _error(self, key: str, msg: str) -> None:
        self.errors[key] = msg

    def _report_errors(self) -> None:
        for key, msg in self.errors.items():
            if self._reported.get(key) != msg:
                print(f"delayline: ERROR: {msg}", file=sys.stderr, flush=True)
                self._reported[key] = msg

    def stats(self, final: bool = False) -> dict[str, Any]:
        now = time.monotonic()
        ru = resource.getrusage(resource.RUSAGE_SELF)
        cpu = ru.ru_utime + ru.ru_stime
        t_last, cpu_last = self._cpu_last
        if now - t_last > 0.05:
            self.cpu_percent = 100.0 * (cpu - cpu_last) / (now - t_last)
            self._cpu_last = (now, cpu)
        uptime = now - self._t0
        kern = read_kernel_queue_counters()
        if self.enobufs:
            self._error(
                "enobufs",
                f"ENOBUFS on the netlink socket {self.enobufs} times "
                "(receive buffer overflow; packets were lost)",
            )
        if self.verdict_errors_other:
            self._error(
                "verdict",
                f"kernel rejected {self.verdict_errors_other} messages of unknown queue",
            )
        queues: dict[str, Any] = {}
        for q in self.queues:
            qc = q.cfg
            k = kern.get(qc.num)
            if k is not None:  # gone after unbind: keep the last values seen
                q.kernel_queue_dropped = k["queue_dropped"]
                q.kernel_user_dropped = k["user_dropped"]
            qd, ud = q.kernel_queue_dropped, q.kernel_user_dropped
            label = f"queue {qc.num} ({qc.name})"
            if qd:
                self._error(
                    f"qd{qc.num}",
                    f"{label}: kernel queue_dropped={qd} "
                    f"(queue full at maxlen {qc.maxlen}); packets were lost",
                )
            if ud:
                self._error(
                    f"ud{qc.num}",
                    f"{label}: kernel user_dropped={ud} "
                    "(netlink receive buffer full); packets were lost",
                )
            if q.verdict_errors:
                self._error(
                    f"verdict{qc.num}",
                    f"{label}: kernel rejected {q.verdict_errors} "
                    f"verdicts (last: {os.strerror(q.last_verdict_errno)})",
                )
            queues[str(qc.num)] = {
                "num": qc.num,
                "name": qc.name,
                "delay": qc.delay,
                "jitter": qc.jitter,
                "loss": qc.loss,
                "reorder": qc.reorder,
                "copy_mode": qc.copy_mode,
                "packets": q.packets,
                "bytes": q.nbytes if qc.copy_mode != "meta" else None,
                "accepted": q.accepted,
                "dropped_loss": q.dropped_loss,
                "reordered": q.reordered,
                "held": len(q.ids),
                "max_held": q.max_held,
                "lateness_us": q.hist.summary(),
                "queue_dropped": qd,
                "user_dropped": ud,
                "verdict_errors": q.verdict_errors,
                "timestamp_fallbacks": q.ts_fallbacks,
            }
            if qc.bottleneck:
                backlog, packets = q.backlog(now)
                queues[str(qc.num)].update(
                    rate=qc.rate,
                    buffer=qc.buffer,
                    aqm=(qc.aqm or {"kind": "droptail"})["kind"],
                    wire_bytes=q.wire_bytes,
                    ect_packets=q.ect,
                    marked=q.marked,
                    dropped_queue=q.dropped_queue,
                    dropped_aqm=q.dropped_aqm,
                    backlog_bytes=round(backlog),
                    backlog_packets=packets,
                    max_backlog_bytes=round(q.max_backlog),
                )
        self._report_errors()
        return {
            "version": 1,
            "pid": os.getpid(),
            "time": time.time(),
            "uptime_s": round(uptime, 3),
            "cpu_seconds": round(cpu, 3),
            # user = this program; system includes the kernel's forwarding work done inside our
            # verdict syscalls (reinjected packets are routed, shaped and delivered there)
            "cpu_user_seconds": round(ru.ru_utime, 3),
            "cpu_system_seconds": round(ru.ru_stime, 3),
            "cpu_percent": round(self.cpu_percent, 1),
            "cpu_percent_avg": round(100.0 * cpu / uptime, 1) if uptime > 0 else 0.0,
            "sched_fifo": self.sched_fifo,
            "rcvbuf": self.rcvbuf,
            "enobufs": self.enobufs,
            "wakeups": self.wakeups,
            "verdict_sends": self.verdict_sends,
            "final": final,
            "errors": list(self.errors.values()),
            "queues": queues,
        }

    def write_stats(self, final: bool = False) -> None:
        data = self.stats(final)
        path = self.cfg.stats_file
        if not path:
            return
        p = Path(path)
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(p, json.dumps(data, indent=1) + "\n")
        except OSError as e:
            msg = f"delayline: cannot write stats {path}: {e}"
            if self._reported.get("stats_write") != msg:  # say it once, not every interval
                print(msg, file=sys.stderr, flush=True)
                self._reported["stats_write"] = msg

    # ---- queue trace

    def _open_trace(self) -> None:
        if self.cfg.trace_file and any(q.cfg.bottleneck for q in self.queues):
            self._trace = open(self.cfg.trace_file, "a", encoding="utf-8", buffering=1 << 16)  # noqa: SIM115

    def _sample(self, now: float) -> None:
        """One line per bottleneck queue: occupancy now, cumulative counters (unix time)."""
        if self._trace is None:
            return
        t = now + self._rt_off
        for q in self.queues:
            if not q.cfg.bottleneck:
                continue
            backlog, packets = q.backlog(now)
            self._trace.write(
                json.dumps(
                    {
                        "time": round(t, 6),
                        "direction": q.cfg.name,
                        "backlog_bytes": round(backlog),
                        "backlog_packets": packets,
                        "packets": q.packets,
                        "bytes": q.wire_bytes,
                        "dropped": q.dropped_queue + q.dropped_aqm + q.dropped_loss,
                        "dropped_queue": q.dropped_queue,
                        "dropped_aqm": q.dropped_aqm,
                        "dropped_loss": q.dropped_loss,
                        "marked": q.marked,
                    }
                )
                + "\n"
            )

    # ---- hot path

    def _drain(self, budget: int) -> int:
        """Read up to ``budget`` packet messages (all queues); returns the number read.

        Drops and reordered packets get their per-packet verdicts here, sent before any batch
        verdict that could cover their ids.
        """
        sock = self.sock
        assert sock is not None
        buf = self._buf
        by_num = self.by_num
        out = bytearray()
        unpack_hdr = _NLHDR2.unpack_from
        unpack_attr = _U16x2.unpack_from
        unpack_be16 = _BE16.unpack_from
        unpack_be32 = _BE32.unpack_from
        unpack_ts = _BE64x2.unpack_from
        monotonic = time.monotonic
        now = monotonic()
        rt_off = time.time() - now  # realtime -> monotonic
        oldest_ok = now - STALE_TS
        newest_ok = now + STALE_TS
        got = 0
        qnum = -1
        q: Queue | None = None
        while got < budget:
            try:
                n = sock.recv_into(buf)
            except BlockingIOError:
                break
            except InterruptedError:
                continue
            except OSError as e:
                if e.errno == errno.ENOBUFS:
                    self.enobufs += 1
                    continue
                raise
            off = 0
            while off + 16 <= n:
                mlen, mtype = unpack_hdr(buf, off)
                if mlen < 16 or off + mlen > n:
                    break
                if mtype == NFQNL_MSG_PACKET:
                    got += 1
                    num = unpack_be16(buf, off + 18)[0]
                    if num != qnum:
                        qnum = num
                        q = by_num.get(num)
                    if q is None:
                        off += (mlen + 3) & ~3
                        continue
                    arrival = -1.0
                    length = 0
                    tos = 0
                    end = off + mlen
                    # the kernel always puts NFQA_PACKET_HDR (len 11) first
                    if buf[off + 22] == NFQA_PACKET_HDR and buf[off + 20] == 11 and mlen >= 32:
                        pid = unpack_be32(buf, off + 24)[0]
                        a = off + 32
                    else:
                        pid = -1
                        a = off + 20
                    while a + 4 <= end:
                        alen, atype = unpack_attr(buf, a)
                        if alen < 4:
                            break
                        atype &= 0x3FFF
                        if atype == NFQA_TIMESTAMP:
                            sec, usec = unpack_ts(buf, a + 4)
                            arrival = sec + usec * 1e-6 - rt_off
                        elif atype == NFQA_CAP_LEN:
                            length = unpack_be32(buf, a + 4)[0]
                            if not q.cfg.rate:
                                break  # comes after the timestamp; nothing else needed
                        elif atype == NFQA_PAYLOAD:
                            tos = buf[a + 5] if alen >= 6 else 0
                            break
                        elif atype == NFQA_PACKET_HDR:
                            pid = unpack_be32(buf, a + 4)[0]
                        a += (alen + 3) & ~3
                    if pid < 0:
                        off += (mlen + 3) & ~3
                        continue
                    if arrival < oldest_ok or arrival > newest_ok:
                        arrival = monotonic()  # no (sane) kernel timestamp: time of recv
                        q.ts_fallbacks += 1
                    q.packets += 1
                    q.nbytes += length
                    cfg = q.cfg
                    depart = arrival
                    if cfg.loss and q.rng.random() < cfg.loss:
                        q.dropped_loss += 1
                        out += verdict_msg(num, pid, NF_DROP)
                        off += (mlen + 3) & ~3
                        continue
                    if cfg.rate:
                        depart = self._enqueue(q, pid, arrival, length, tos)
                        if depart < 0:
                            out += verdict_msg(num, pid, NF_DROP)
                            off += (mlen + 3) & ~3
                            continue
                    if cfg.reorder and q.rng.random() < cfg.reorder:
                        q.reordered += 1
                        q.accepted += 1
                        out += verdict_msg(num, pid, NF_ACCEPT)
                    else:
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
                elif mtype == NLMSG_ERROR and off + 20 <= n:
                    err = -_I32.unpack_from(buf, off + 16)[0]
                    if err:
                        # nlmsgerr carries the offending request: its nfgenmsg names the queue
                        eq = by_num.get(unpack_be16(buf, off + 38)[0]) if mlen >= 40 else None
                        if eq is None:
                            self.verdict_errors_other += 1
                        else:
                            eq.verdict_errors += 1
                            eq.last_verdict_errno = err
                off += (mlen + 3) & ~3
        if got:
            for qq in self.queues:
                held = len(qq.ids)
                if held > qq.max_held:
                    qq.max_held = held
        if out:
            self._send(out)
        return got

    @staticmethod
    def _enqueue(q: Queue, pid: int, arrival: float, length: int, tos: int) -> float:
        """Put a packet into the emulated bottleneck: its departure time, or -1 if dropped.

        departure = max(arrival, previous departure) + wire size / rate; drop-tail when the
        queue would exceed the buffer; the marking decision is taken on the queue the packet
        finds on arrival. A GSO packet is one decision for all its bytes: marked (or dropped)
        whole with the profile's probability, so the expected share of marked *bytes* is the
        same as if each segment were decided alone (it only comes in larger chunks)."""
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
        p = mark_probability(cfg.aqm, backlog)
        if p and (p >= 1.0 or q.rng.random() < p):
            if ect and cfg.aqm is not None and cfg.aqm.get("ecn", True):
                q.marked += 1
                q.marked_ids.add(pid)
            else:  # RED drops what it cannot mark
                q.dropped_aqm += 1
                return -1.0
        start = q.busy_until if q.busy_until > arrival else arrival
        q.busy_until = start + size * 8 / cfg.rate
        q.departures.append(q.busy_until)
        if backlog + size > q.max_backlog:
            q.max_backlog = backlog + size
        return q.busy_until

    def _send(self, data: bytes | bytearray) -> None:
        sock = self.sock
        assert sock is not None
        self.verdict_sends += 1
        while True:
            try:
                sock.send(data)
                return
            except InterruptedError:
                continue
            except BlockingIOError:
                select.select([], [sock], [], 0.01)
            except OSError as e:
                self.verdict_errors_other += 1
                self._error("send", f"sending verdicts failed: {e}")
                return

    @staticmethod
    def _release(q: Queue, limit: float, out: bytearray) -> None:
        """Append one batch verdict accepting every held packet of ``q`` due by ``limit``."""
        deadlines, ids = q.deadlines, q.ids
        if not deadlines or deadlines[0] > limit:
            return
        now = time.monotonic()
        counts = q.hist.counts
        fine, coarse = LatenessHistogram.FINE, LatenessHistogram.COARSE
        last_bin = LatenessHistogram.NBINS - 1
        max_us = q.hist.max_us
        n = 0
        pid = prev = -1
        popd, popi = deadlines.popleft, ids.popleft
        marked = q.marked_ids
        num = q.cfg.num
        while deadlines and deadlines[0] <= limit:
            us = int((now - popd()) * 1e6)
            pid = popi()
            n += 1
            if marked and pid in marked:
                # the batch "accept all ids <= N" before it, then this one with the CE mark
                marked.discard(pid)
                if prev >= 0:
                    out += verdict_msg(num, prev, NF_ACCEPT, batch=True)
                out += verdict_msg(num, pid, NF_ACCEPT, mark=q.cfg.ce_mark)
                pid = -1
            prev = pid
            if us < fine:
                counts[us if us > 0 else 0] += 1
            elif us < 1_000_000:
                counts[fine + (us - fine) // coarse] += 1
            else:
                counts[last_bin] += 1
            if us > max_us:
                max_us = us
        q.hist.max_us = max_us
        q.hist.count += n
        q.accepted += n
        if pid >= 0:
            out += verdict_msg(num, pid, NF_ACCEPT, batch=True)

    def _release_due(self, limit: float) -> bool:
        out = bytearray()
        for q in self.queues:
            if q.deadlines and q.deadlines[0] <= limit:
                self._release(q, limit, out)
        if out:
            self._send(out)
            return True
        return False

    # ---- main loop

    def run(self, ready_stream: Any = None) -> int:
        sock = self.sock
        assert sock is not None
        rfd, wfd = socket.socketpair()
        rfd.setblocking(False)
        wfd.setblocking(False)

        def _on_signal(signum: int, frame: Any) -> None:
            self.stopping = True

        signal.signal(signal.SIGTERM, _on_signal)
        signal.signal(signal.SIGINT, _on_signal)
        signal.set_wakeup_fd(wfd.fileno(), warn_on_full_buffer=False)

        gc.collect()
        gc.freeze()
        gc.set_threshold(50_000, 50, 50)

        self.write_stats()
        stream = ready_stream if ready_stream is not None else sys.stdout
        stream.write("READY\n")
        stream.flush()

        queues = self.queues
        interval = self.cfg.stats_interval
        next_stats = time.monotonic() + interval
        self._open_trace()
        trace_every = self.cfg.trace_interval
        next_sample = time.monotonic() if self._trace is not None else math.inf
        stop_at: float | None = None
        monotonic = time.monotonic
        sel = select.select
        # While every queue holds packets, arrivals need not wake us: with kernel arrival
        # timestamps and order-preserving deadlines a new packet is never due before the held
        # head of its queue, so its message can wait in the socket until the next deadline
        # wakeup (every wakeup reads all pending messages). An idle queue, or reordering
        # (immediate verdicts), needs the socket watched.
        watch_always = any(q.cfg.reorder > 0 for q in queues)
        gap = self.cfg.release_gap
        last_release = -math.inf
        wake_early = 0.0  # learnt select() oversleep (s); we ask to wake up this much earlier
        while True:
            now = monotonic()
            if self._release_due(now + EARLY_SLACK):
                last_release = now
            nxt = math.inf  # next deadline of any queue
            for q in queues:
                if q.deadlines and q.deadlines[0] < nxt:
                    nxt = q.deadlines[0]
            if gap and nxt < last_release + gap:
                nxt = last_release + gap  # coalesce releases under load (bounded lateness)
            # stats: postponed (up to one interval) while a deadline is imminent
            if now >= next_stats and (nxt - now > STATS_QUIET or now >= next_stats + interval):
                self.write_stats()
                now = monotonic()
                next_stats = max(next_stats + interval, now + interval * 0.5)
            nxt = min(nxt, next_stats if next_stats > now else now + STATS_QUIET)
            if now >= next_sample:
                self._sample(now)
                next_sample = max(next_sample + trace_every, now + trace_every / 2)
            nxt = min(nxt, next_sample)
            if self.stopping:
                if stop_at is None:
                    stop_at = now
                    # deadlines further away than flush_grace: accept everything now
                    if any(
                        q.deadlines and q.deadlines[-1] > now + self.cfg.flush_grace for q in queues
                    ):
                        self._release_due(math.inf)
                if now > stop_at + self.cfg.flush_grace + 0.5:
                    break
                # nothing held: stop once the socket is empty too (messages queued before
                # the rules were removed are still delayed normally)
                if all(not q.deadlines for q in queues) and not self._drain(RECV_BUDGET):
                    break
            timeout = nxt - now
            if timeout > LONG_SLEEP:
                # timer wakeups in a VM come ~50-150 us late; wake up a bit earlier and finish
                # with a short sleep (short sleeps overshoot much less)
                timeout -= wake_early
            elif timeout < 0:
                timeout = 0.0
            watch = watch_always or not all(q.deadlines for q in queues)
            try:
                ready = sel([sock, rfd] if watch else [rfd], [], [], timeout)[0]
            except InterruptedError:
                continue
            self.wakeups += 1
            if not ready and timeout > LONG_SLEEP - MAX_WAKE_EARLY:
                over = monotonic() - now - timeout
                over = min(max(over, 0.0), 2 * MAX_WAKE_EARLY)
                wake_early = min(MAX_WAKE_EARLY, 0.9 * wake_early + 0.1 * 0.8 * over)
            now = monotonic()
            # due packets first: reading takes a while
            if now >= last_release + gap and self._release_due(now + EARLY_SLACK):
                last_release = now
            if ready and rfd in ready:
                with contextlib.suppress(OSError):
                    rfd.recv(4096)
            self._drain(RECV_BUDGET)

        # final: pick up stragglers, release everything, unbind, final stats
        while self._drain(RECV_BUDGET):
            pass
        self._release_due(math.inf)
        self.stats()  # last look at the kernel's counters while the queues still exist
        self.unbind()
        if self._trace is not None:
            self._sample(time.monotonic())
            self._trace.close()
        signal.set_wakeup_fd(-1)
        rfd.close()
        wfd.close()
        self.write_stats(final=True)
        return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m testbed.delayline",
        description="NFQUEUE delay line (run inside the router namespace).",
    )
    ap.add_argument("--config", required=True, help="JSON config file")
    args = ap.parse_args(argv)
    try:
        cfg = Config.load(args.config)
    except ConfigError as e:
        print(f"delayline: config error: {e}", file=sys.stderr)
        return 2
    line = DelayLine(cfg)
    try:
        line.setup()
    except OSError as e:
        print(f"delayline: setup failed: {e}", file=sys.stderr)
        return 1
    return line.run()


if __name__ == "__main__":
    sys.exit(main())
