"""Which path of a multipath WAN link each TCP flow takes, and when it moves: sampled packet
headers on each path's gateway port, turned into the rows of ``flowpaths.parquet``.

    taps = path_taps(plan)                       # one per path of every multipath link
    with FlowPathSampler(taps, period=0.1, names={ip: host}) as s:
        ...                                      # the workload
    s.table()                                    # one row per flow x interval on one path

Observed on the path, not asked of the kernel (``ip route get``): the packets say where a flow
went, whatever decided it. One ``AF_PACKET`` socket per path on the first cluster's gateway sees
both directions of that path; a classic BPF filter samples TCP packets in proportion to their
length and cuts them to their headers, so the cost follows the link's rate, not its packet rate,
and each sample stands for ``max(len, sample_bytes)`` bytes (an unbiased estimate). Why and how,
and the limits: docs/multipath.md; the columns: docs/results.md.
"""

from __future__ import annotations

import ctypes
import socket
import struct
from dataclasses import dataclass, field
from typing import Any

from testbed.net import netns
from testbed.plan.model import NetworkPlan
from testbed.trace.sampler import PeriodicSampler

ETH_P_ALL, ETH_P_IP = 0x0003, 0x0800
ETH_HLEN = 14
PACKET_HOST, PACKET_OUTGOING = 0, 4
SO_ATTACH_FILTER = 26
SO_TIMESTAMPNS = 35
SO_RCVBUFFORCE = 33
SOL_PACKET, PACKET_STATISTICS = 263, 6
SKF_AD_RANDOM = -0x1000 + 56  # SKF_AD_OFF + SKF_AD_RANDOM: a random u32 per packet
SNAPLEN = 96  # Ethernet 14 + IPv4 up to 60 + the TCP ports
SAMPLES_PER_SECOND = 500  # per direction at the link's full rate
RCVBUF = 4 << 20
_TIMESPEC = struct.Struct("=qq")
_STATS = struct.Struct("=II")  # tpacket_stats: packets, drops (reset by each read)

# classic BPF opcodes (linux/bpf_common.h, linux/filter.h)
_LDB_ABS, _LDH_ABS, _LDW_ABS, _LDW_LEN = 0x30, 0x28, 0x20, 0x80
_JEQ_K, _JGE_K, _JGT_X = 0x15, 0x35, 0x2D
_MUL_K, _TAX, _RET_K = 0x24, 0x07, 0x06


def sampling_filter(sample_bytes: int) -> list[tuple[int, int, int, int]]:
    """The classic BPF program of a tap: TCP over IPv4 only; a packet of ``len`` bytes kept
    with probability ``len / sample_bytes`` (always when ``len >= sample_bytes``), cut to
    SNAPLEN. ``sample_bytes`` 1 keeps every TCP packet."""
    sample_bytes = max(1, sample_bytes)
    scale = (1 << 32) // sample_bytes  # len * scale < 2**32 below sample_bytes
    return [
        (_LDH_ABS, 0, 0, 12),  # ethertype
        (_JEQ_K, 0, 8, ETH_P_IP),  # not IPv4: drop
        (_LDB_ABS, 0, 0, ETH_HLEN + 9),  # IPv4 protocol
        (_JEQ_K, 0, 6, socket.IPPROTO_TCP),  # not TCP: drop
        (_LDW_LEN, 0, 0, 0),  # A = packet length
        (_JGE_K, 4, 0, sample_bytes),  # large: keep
        (_MUL_K, 0, 0, scale),
        (_TAX, 0, 0, 0),  # X = len / sample_bytes as a fraction of 2**32
        (_LDW_ABS, 0, 0, SKF_AD_RANDOM & 0xFFFFFFFF),
        (_JGT_X, 1, 0, 0),  # random above it: drop
        (_RET_K, 0, 0, SNAPLEN),
        (_RET_K, 0, 0, 0),
    ]


def _attach(sock: socket.socket, program: list[tuple[int, int, int, int]]) -> None:
    code = b"".join(struct.pack("=HBBI", *insn) for insn in program)
    buf = ctypes.create_string_buffer(code)
    fprog = struct.pack("HL", len(program), ctypes.addressof(buf))  # struct sock_fprog
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


@dataclass(frozen=True)
class PathTap:
    """One path of a multipath link, watched on the port of the link's first gateway."""

    link: str  # "east-west"
    path: int
    ns: str  # gateway namespace of the link's first cluster
    ifname: str  # its port of this path, p<j>-<peer>
    out_direction: str  # "east->west/j": packets the gateway sends on the port
    in_direction: str  # "west->east/j": packets arriving on it
    sample_bytes: int


def path_taps(plan: NetworkPlan) -> list[PathTap]:
    """One tap per path of every multipath link of ``plan`` (none without one)."""
    taps: list[PathTap] = []
    by_wire: dict[str, list[Any]] = {}
    for d in plan.wan:
        if d.multipath:
            by_wire.setdefault(d.impairment.ns, []).append(d)
    for fwd, rev in (pair for pair in by_wire.values() if len(pair) == 2):
        path = fwd.name.rsplit("/", 1)[1]
        rate = max(fwd.rate, rev.rate)
        taps.append(
            PathTap(
                link=f"{fwd.src}-{fwd.dst}",
                path=int(path),
                ns=fwd.shaper.ns,
                ifname=fwd.shaper.ifname,
                out_direction=fwd.name,
                in_direction=rev.name,
                sample_bytes=max(1, rate // 8 // SAMPLES_PER_SECOND),
            )
        )
    return taps


class _TapSocket:
    """The packet socket of one tap; create it inside the tap's namespace."""

    def __init__(self, tap: PathTap) -> None:
        # ETH_P_ALL: only such taps see the packets a device sends (dev_queue_xmit_nit)
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        try:
            # The filter goes on before the bind: nothing unfiltered is queued meanwhile.
            _attach(self.sock, sampling_filter(tap.sample_bytes))
            self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
            self.sock.bind((tap.ifname, ETH_P_ALL))
            self.sock.setblocking(False)
        except BaseException:
            self.sock.close()
            raise

    def drain(self) -> list[tuple[float, bool, bytes]]:
        """(kernel time, outgoing, headers) of every sample queued since the last call."""
        out: list[tuple[float, bool, bytes]] = []
        while True:
            try:
                data, anc, _flags, addr = self.sock.recvmsg(SNAPLEN, 64)
            except BlockingIOError:
                return out
            stamp = None
            for level, kind, value in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = _TIMESPEC.unpack_from(value)
                    stamp = sec + nsec * 1e-9
            if stamp is not None and addr[2] in (PACKET_HOST, PACKET_OUTGOING):
                out.append((stamp, addr[2] == PACKET_OUTGOING, data))

    def dropped(self) -> int:
        """Samples the kernel dropped (receive buffer full) since the last call."""
        raw = self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, _STATS.size)
        return _STATS.unpack(raw)[1]

    def close(self) -> None:
        self.sock.close()


def parse_headers(data: bytes) -> tuple[str, int, str, int, int] | None:
    """(src, sport, dst, dport, wire bytes) of an Ethernet + IPv4 + TCP header sample; the
    length is the IP header's (a GSO packet's whole length) plus Ethernet, as HTB counts it."""
    if len(data) < ETH_HLEN + 20:
        return None
    ip = ETH_HLEN
    ihl = (data[ip] & 0x0F) * 4
    if data[ip] >> 4 != 4 or len(data) < ip + ihl + 4:
        return None
    total = int.from_bytes(data[ip + 2 : ip + 4], "big")
    if int.from_bytes(data[ip + 6 : ip + 8], "big") & 0x1FFF:
        return None  # a later fragment has no ports
    sport, dport = struct.unpack_from(">HH", data, ip + ihl)
    src = socket.inet_ntoa(data[ip + 12 : ip + 16])
    dst = socket.inet_ntoa(data[ip + 16 : ip + 20])
    return src, sport, dst, dport, ETH_HLEN + total


@dataclass
class _Interval:
    path: int
    direction: str
    time_from: float
    time_to: float
    samples: int = 0
    bytes: float = 0.0


@dataclass
class FlowPaths:
    """Samples -> intervals of each flow on one path (pure; the sampler feeds it)."""

    names: dict[str, str] = field(default_factory=dict)
    done: list[dict[str, Any]] = field(default_factory=list)
    current: dict[tuple[str, str, int, str, int], _Interval] = field(default_factory=dict)

    def add(self, tap: PathTap, stamp: float, outgoing: bool, headers: bytes) -> None:
        parsed = parse_headers(headers)
        if parsed is None:
            return
        src, sport, dst, dport, length = parsed
        direction = tap.out_direction if outgoing else tap.in_direction
        key = (tap.link, src, sport, dst, dport)
        cur = self.current.get(key)
        if cur is not None and cur.direction != direction:
            self.done.append(self._row(key, cur))
            cur = None
        if cur is None:
            cur = self.current[key] = _Interval(tap.path, direction, stamp, stamp)
        cur.time_to = max(cur.time_to, stamp)
        cur.samples += 1
        cur.bytes += max(length, tap.sample_bytes)

    def _row(self, key: tuple[str, str, int, str, int], iv: _Interval) -> dict[str, Any]:
        link, src, sport, dst, dport = key
        return {
            "time_from": iv.time_from,
            "time_to": iv.time_to,
            "src_host": self.names.get(src),
            "dst_host": self.names.get(dst),
            "src": src,
            "sport": sport,
            "dst": dst,
            "dport": dport,
            "protocol": "tcp",
            "link": link,
            "path": iv.path,
            "direction": iv.direction,
            "samples": iv.samples,
            "bytes": round(iv.bytes),
        }

    def table(self) -> list[dict[str, Any]]:
        rows = self.done + [self._row(k, iv) for k, iv in self.current.items()]
        return sorted(
            rows, key=lambda r: (r["src"], r["sport"], r["dst"], r["dport"], r["time_from"])
        )


class FlowPathSampler(PeriodicSampler):
    """Drains every tap's samples each ``period`` seconds (:class:`PeriodicSampler`), in time
    order across taps, into :class:`FlowPaths`. ``names``: IPv4 address -> host label. A tap that
    cannot be opened, or whose namespace goes away, is an entry in ``errors``; so are samples the
    kernel dropped (a receive buffer that filled between two ticks)."""

    thread_name = "flowpath-sampler"

    def __init__(
        self, taps: list[PathTap], period: float, names: dict[str, str] | None = None
    ) -> None:
        super().__init__(period)
        self.taps = taps
        self.paths = FlowPaths(dict(names or {}))
        self.dropped = 0
        self._sockets: dict[PathTap, _TapSocket] = {}

    def open(self) -> None:
        for tap in self.taps:
            try:
                self._sockets[tap] = netns.run_in([(tap.ns, lambda t=tap: _TapSocket(t))])[0]
            except OSError as exc:
                self.error(f"flow paths {tap.link}/{tap.path}: {tap.ifname} in {tap.ns}: {exc}")

    def sample(self) -> None:
        batch: list[tuple[float, bool, bytes, PathTap]] = []
        for tap, sock in list(self._sockets.items()):
            try:
                batch += [(t, out, data, tap) for t, out, data in sock.drain()]
                self.dropped += sock.dropped()
            except OSError as exc:
                self.error(f"flow paths {tap.link}/{tap.path}: {exc}")
                del self._sockets[tap]
                sock.close()
        batch.sort(key=lambda s: s[0])
        for stamp, outgoing, data, tap in batch:
            self.paths.add(tap, stamp, outgoing, data)

    def close(self) -> None:
        self.sample()  # what is still queued belongs to the run
        for sock in self._sockets.values():
            sock.close()
        self._sockets.clear()
        if self.dropped:
            self.error(f"flow paths: the kernel dropped {self.dropped} samples (buffer full)")

    def table(self) -> list[dict[str, Any]]:
        return self.paths.table()
