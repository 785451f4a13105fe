"""Queue traces of the WAN bottlenecks, as rows of ``queues.parquet``.

Where a direction's queue lives depends on the backend (docs/congestion.md): in the kernel, the
leaf qdisc under HTB on the sending gateway's egress (``bfifo`` for drop-tail, ``red`` for a
marking profile); on the userspace backend with an ``aqm``, inside the delay line, which writes its
own samples (JSONL, see :mod:`testbed.link.delayline`). This module samples the former
(:class:`QdiscSampler`, one rtnetlink dump per direction per period) and reads the latter
(:func:`testbed.link.userspace.line_trace_rows`), both into the same columns (docs/results.md,
``queues.parquet``): time, direction, source, backlog_bytes, backlog_packets, packets, bytes,
dropped, marked.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any

from testbed.net import netns
from testbed.net.netlink import (
    NLM_F_DUMP,
    NLM_F_REQUEST,
    NLMSG_DONE,
    NLMSG_ERROR,
    NLMSGHDR,
    attributes,
    error_code,
    messages,
)
from testbed.trace.sampler import PeriodicSampler

LEAF_HANDLE = 0x00100000  # "10:" (tc reads handles as hex): the HTB leaf of testbed.plan.render

# rtnetlink, linux/rtnetlink.h and linux/gen_stats.h
NETLINK_ROUTE = 0
RTM_NEWQDISC, RTM_GETQDISC = 36, 38
TCA_KIND, TCA_XSTATS, TCA_STATS2 = 1, 4, 7
TCA_STATS_BASIC, TCA_STATS_QUEUE = 1, 3
_TCMSG = struct.Struct("=BxxxiIII")  # family, ifindex, handle, parent, info
_BASIC = struct.Struct("=QI")  # bytes, packets
_QUEUE = struct.Struct("=IIIII")  # qlen, backlog, drops, requeues, overlimits
RED_XSTATS = struct.Struct("=IIII")  # struct tc_red_xstats: early, pdrop, other, marked


@dataclass(frozen=True)
class QdiscTarget:
    direction: str
    ns: str
    ifname: str


class QdiscReader:
    """One rtnetlink socket, opened inside the namespace (it stays bound to it), reading the
    statistics of one interface's qdiscs. Raw netlink: pyroute2's namespace support forks helper
    processes per socket, which a sampler started once per run must not leave behind."""

    def __init__(self, ifname: str) -> None:
        # Call inside the namespace (testbed.net.netns.run_in).
        self.index = socket.if_nametoindex(ifname)
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
        self.sock.bind((0, 0))
        self.sock.settimeout(1.0)
        self.seq = 0
        self.buf = bytearray(1 << 16)

    def read(self) -> list[dict[str, Any]]:
        """Every qdisc of the interface: handle, kind and counters (red: its marks too)."""
        self.seq += 1
        req = _TCMSG.pack(0, self.index, 0, 0, 0)
        hdr = NLMSGHDR.pack(
            NLMSGHDR.size + len(req), RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP, self.seq, 0
        )
        self.sock.send(hdr + req)
        out: list[dict[str, Any]] = []
        while True:
            n = self.sock.recv_into(self.buf)
            for mtype, seq, body in messages(memoryview(self.buf), n):
                if seq != self.seq:
                    continue
                if mtype == NLMSG_DONE:
                    return out
                if mtype == NLMSG_ERROR:
                    err = error_code(body)
                    if err:
                        raise OSError(err, os.strerror(err))
                    return out
                if mtype != RTM_NEWQDISC:
                    continue
                _fam, ifindex, handle, _parent, _info = _TCMSG.unpack_from(body)
                if ifindex == self.index:
                    out.append(_qdisc(handle, attributes(body, _TCMSG.size)))

    def close(self) -> None:
        self.sock.close()


def _qdisc(handle: int, attrs: dict[int, memoryview]) -> dict[str, Any]:
    kind = bytes(attrs.get(TCA_KIND, b"")).rstrip(b"\0").decode()
    q: dict[str, Any] = {"handle": handle, "kind": kind}
    stats = attributes(attrs[TCA_STATS2]) if TCA_STATS2 in attrs else {}
    if TCA_STATS_BASIC in stats and len(stats[TCA_STATS_BASIC]) >= _BASIC.size:
        q["bytes"], q["packets"] = _BASIC.unpack_from(stats[TCA_STATS_BASIC])
    if TCA_STATS_QUEUE in stats and len(stats[TCA_STATS_QUEUE]) >= _QUEUE.size:
        q["qlen"], q["backlog"], q["drops"], _req, _over = _QUEUE.unpack_from(
            stats[TCA_STATS_QUEUE]
        )
    xstats = attrs.get(TCA_XSTATS)
    if kind == "red" and xstats is not None and len(xstats) >= RED_XSTATS.size:
        q["marked"] = RED_XSTATS.unpack_from(xstats)[3]
    return q


def qdisc_row(direction: str, q: dict[str, Any], now: float) -> dict[str, Any]:
    return {
        "time": now,
        "direction": direction,
        "source": f"qdisc:{q['kind']}",
        "backlog_bytes": q.get("backlog"),
        "backlog_packets": q.get("qlen"),
        "packets": q.get("packets"),
        "bytes": q.get("bytes"),
        "dropped": q.get("drops"),
        "marked": q.get("marked"),
    }


class QdiscSampler(PeriodicSampler):
    """Samples the leaf qdisc of each target every ``period`` seconds in a background thread
    (:class:`testbed.trace.sampler.PeriodicSampler`: on the grid, missed ticks skipped and
    counted).

    One netlink socket per target, opened once inside its namespace; nothing raises: a target
    that cannot be opened, or whose namespace goes away mid-run, ends up in ``errors`` and stops
    being sampled.
    """

    thread_name = "qdisc-sampler"

    def __init__(self, targets: list[QdiscTarget], period: float) -> None:
        super().__init__(period)
        self.targets = targets
        self.rows: list[dict[str, Any]] = []
        self._readers: dict[QdiscTarget, QdiscReader] = {}

    def open(self) -> None:
        for t in self.targets:
            try:
                self._readers[t] = netns.run_in([(t.ns, lambda t=t: QdiscReader(t.ifname))])[0]
            except OSError as exc:
                self.error(f"queue trace {t.direction}: {t.ifname} in {t.ns}: {exc}")

    def sample(self) -> None:
        for t, reader in list(self._readers.items()):
            try:
                qdiscs = reader.read()
            except OSError as exc:  # a vanished namespace must not kill the run
                self.error(f"queue trace {t.direction}: {exc}")
                del self._readers[t]
                reader.close()
                continue
            now = time.time()
            self.rows += [
                qdisc_row(t.direction, q, now) for q in qdiscs if q["handle"] == LEAF_HANDLE
            ]

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()
