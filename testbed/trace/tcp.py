"""TCP state of live connections inside host namespaces: a one-off read and a periodic sampler.

This module owns reading ``struct tcp_info`` (plus the congestion-control name and BBR/DCTCP info)
of every ESTABLISHED TCP socket of a namespace through NETLINK_SOCK_DIAG and turning it into the
rows of ``tcp.parquet``: :func:`read_tcp_info` (one read, one namespace) and
:class:`TcpInfoSampler` (many namespaces, periodically). ``struct tcp_info`` is parsed with
``struct`` from the raw attribute, up to the length the kernel sent, because pyroute2's decoder
stops short of today's struct and is slower. A diag socket stays in the namespace it was created
in, so each namespace gets one, once, and a tick dumps the socket table only when the
namespace's TCP counters moved (else it asks for the known sockets by id): a dump can walk the
host-wide table. Where each column comes from, the cost design and the namespace lifetime:
docs/traces.md; the columns: docs/results.md; measured costs: benchmarks/RESULTS.md.
"""

from __future__ import annotations

import bisect
import errno
import ipaddress
import math
import os
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

from testbed.core.errors import NetError
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

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20

# enum of INET_DIAG_* attribute types (include/uapi/linux/inet_diag.h)
INET_DIAG_INFO = 2
INET_DIAG_VEGASINFO = 3
INET_DIAG_CONG = 4
INET_DIAG_DCTCPINFO = 9
INET_DIAG_BBRINFO = 16
# idiag_ext is a u8 bitmask of (1 << (type - 1)): BBRINFO/DCTCPINFO do not fit in it, so the
# kernel's cc get_info() hands out its own info when the VEGASINFO bit is asked for.
EXTENSIONS = (
    (1 << (INET_DIAG_INFO - 1)) | (1 << (INET_DIAG_VEGASINFO - 1)) | (1 << (INET_DIAG_CONG - 1))
)
TCP_ESTABLISHED, TCP_SYN_SENT, TCP_SYN_RECV = 1, 2, 3
# Handshaking sockets are dumped too (not reported): seeing one means "dump again next tick".
DUMP_STATES = (1 << TCP_ESTABLISHED) | (1 << TCP_SYN_SENT) | (1 << TCP_SYN_RECV)
SNMP_KEYS = (b"ActiveOpens", b"PassiveOpens", b"CurrEstab")
REDISCOVER_SECONDS = 10.0  # a full dump at least this often, whatever the counters say
LOOKUP_BATCH = 128  # exact requests per send; their replies must fit the receive buffer
RECV_TIMEOUT = 1.0
SMALL_EHASH = 1 << 16  # buckets of a namespace-owned table below which dumps are cheap

TCPI_OPT_ECN = 8
TCPI_OPT_ECN_SEEN = 16
TCP_INFINITE_SSTHRESH = 0x7FFFFFFF
U32_MAX = 0xFFFFFFFF
U64_MAX = 0xFFFFFFFFFFFFFFFF

_REQ = struct.Struct("=BBBxI")  # inet_diag_req_v2 up to its inet_diag_sockid
SOCKID_LEN = 48  # struct inet_diag_sockid: ports, addresses, interface, cookie
_PORTS = struct.Struct(">HH")
DIAG_MSG_LEN = 72  # struct inet_diag_msg
_BBR = struct.Struct("=IIIII")  # bw_lo, bw_hi (bytes/s), min_rtt (us), pacing_gain, cwnd_gain
_DCTCP = struct.Struct("=HHIII")  # enabled, ce_state, alpha (/1024), ab_ecn, ab_tot

# struct tcp_info of include/uapi/linux/tcp.h, in order, one line per run of same-typed fields:
# 6.7+ ends at total_rto_time (248 bytes); 6.18 appends the AccECN counters (276 bytes) and 4
# bytes of AccECN mode bits, not parsed: their layout differs between kernel releases. Every
# field is naturally aligned, so a packed "=" layout has the kernel's offsets. wscale_bits =
# snd_wscale:4, rcv_wscale:4; app_limited_bits = delivery_rate_app_limited:1,
# fastopen_client_fail:2.
_TCP_INFO_LAYOUT = """
B state ca_state retransmits probes backoff options wscale_bits app_limited_bits
I rto ato snd_mss rcv_mss unacked sacked lost retrans fackets
I last_data_sent last_ack_sent last_data_recv last_ack_recv
I pmtu rcv_ssthresh rtt rttvar snd_ssthresh snd_cwnd advmss reordering rcv_rtt rcv_space
I total_retrans
Q pacing_rate max_pacing_rate bytes_acked bytes_received
I segs_out segs_in notsent_bytes min_rtt data_segs_in data_segs_out
Q delivery_rate busy_time rwnd_limited sndbuf_limited
I delivered delivered_ce
Q bytes_sent bytes_retrans
I dsack_dups reord_seen rcv_ooopack snd_wnd rcv_wnd rehash
H total_rto total_rto_recoveries
I total_rto_time
I received_ce delivered_e1_bytes delivered_e0_bytes delivered_ce_bytes
I received_e1_bytes received_e0_bytes received_ce_bytes
"""
TCP_INFO_FIELDS: tuple[tuple[str, str], ...] = tuple(
    (name, line[0]) for line in _TCP_INFO_LAYOUT.strip().splitlines() for name in line.split()[1:]
)
TCP_INFO_NAMES = tuple(n for n, _ in TCP_INFO_FIELDS)
# End offset of each field: a struct of length L carries the first bisect_right(_ENDS, L) fields.
_ENDS = [
    struct.calcsize("=" + "".join(f for _, f in TCP_INFO_FIELDS[: i + 1]))
    for i in range(len(TCP_INFO_FIELDS))
]
_PREFIX_STRUCTS: dict[int, struct.Struct] = {}
assert _ENDS[TCP_INFO_NAMES.index("bytes_received")] == 136  # starts at 128, as traffic/bulk.py
assert _ENDS[TCP_INFO_NAMES.index("total_rto_time")] == 248
assert _ENDS[-1] == 276


def parse_tcp_info(data: bytes | memoryview) -> dict[str, int | None]:
    """``struct tcp_info`` -> {field: value}; fields beyond what the kernel sent are None."""
    count = bisect.bisect_right(_ENDS, len(data))
    st = _PREFIX_STRUCTS.get(count)
    if st is None:
        st = struct.Struct("=" + "".join(f for _, f in TCP_INFO_FIELDS[:count]))
        _PREFIX_STRUCTS[count] = st
    values: list[int | None] = list(st.unpack_from(data))
    values.extend([None] * (len(TCP_INFO_FIELDS) - count))
    return dict(zip(TCP_INFO_NAMES, values, strict=True))


def _address(family: int, raw: bytes, port: int) -> tuple[str, str]:
    """("ip", "ip:port") of an inet_diag_sockid address (16 bytes, IPv4 in the first 4)."""
    if family == socket.AF_INET:
        ip = socket.inet_ntop(socket.AF_INET, raw[:4])
        return ip, f"{ip}:{port}"
    v6 = ipaddress.IPv6Address(raw)
    if v6.ipv4_mapped is not None:
        ip = str(v6.ipv4_mapped)
        return ip, f"{ip}:{port}"
    ip = str(v6)
    return ip, f"[{ip}]:{port}"


_ENDPOINTS: dict[tuple[int, bytes], tuple[str, str, str]] = {}


def _endpoints(family: int, ports_and_addresses: bytes) -> tuple[str, str, str]:
    """(local, peer, peer ip) of the first 36 bytes of an inet_diag_sockid; cached, because the
    same sockets are reported every tick and formatting IPv6 addresses is slow."""
    key = (family, ports_and_addresses)
    found = _ENDPOINTS.get(key)
    if found is None:
        sport, dport = _PORTS.unpack_from(ports_and_addresses)
        _, local = _address(family, ports_and_addresses[4:20], sport)
        peer_ip, peer = _address(family, ports_and_addresses[20:36], dport)
        if len(_ENDPOINTS) >= 4096:  # bounded: connections come and go
            _ENDPOINTS.clear()
        found = _ENDPOINTS[key] = (local, peer, peer_ip)
    return found


def _ms(usec: int | None, unset: int | None = None) -> float | None:
    return None if usec is None or usec == unset else usec / 1000.0


def _row(
    now: float,
    host: str,
    names: dict[str, str],
    family: int,
    msg: memoryview,
    attrs: dict[int, memoryview],
) -> dict:
    local, peer, peer_ip = _endpoints(family, bytes(msg[4:40]))
    raw = attrs.get(INET_DIAG_INFO)
    ti = parse_tcp_info(raw) if raw is not None else dict.fromkeys(TCP_INFO_NAMES)
    cong = attrs.get(INET_DIAG_CONG)
    options = ti["options"]
    ssthresh = ti["snd_ssthresh"]
    pacing = ti["pacing_rate"]
    delivery = ti["delivery_rate"]
    row = {
        "time": now,
        "host": host,
        "local": local,
        "peer": peer,
        "peer_host": names.get(peer_ip),
        "state": "ESTABLISHED" if msg[1] == TCP_ESTABLISHED else str(msg[1]),
        "algorithm": bytes(cong).split(b"\0", 1)[0].decode() if cong is not None else None,
        "cwnd": ti["snd_cwnd"],
        "ssthresh": None if ssthresh is None or ssthresh >= TCP_INFINITE_SSTHRESH else ssthresh,
        "mss": ti["snd_mss"],
        "srtt_ms": _ms(ti["rtt"]),
        "rttvar_ms": _ms(ti["rttvar"]),
        "min_rtt_ms": _ms(ti["min_rtt"], unset=U32_MAX),
        "retransmits": ti["total_retrans"],
        "lost": ti["lost"],
        "delivery_rate_bps": None if delivery is None else delivery * 8,
        "pacing_rate_bps": None if pacing is None or pacing == U64_MAX else pacing * 8,
        "bytes_acked": ti["bytes_acked"],
        "bytes_received": ti["bytes_received"],
        "bytes_sent": ti["bytes_sent"],
        "delivered": ti["delivered"],
        "delivered_ce": ti["delivered_ce"],
        "ecn": None if options is None else bool(options & TCPI_OPT_ECN),
        "ecn_seen": None if options is None else bool(options & TCPI_OPT_ECN_SEEN),
        "bbr_bw_bps": None,
        "bbr_min_rtt_ms": None,
        "dctcp_alpha": None,
        "dctcp_ce_state": None,
    }
    bbr = attrs.get(INET_DIAG_BBRINFO)
    if bbr is not None and len(bbr) >= _BBR.size:
        bw_lo, bw_hi, min_rtt, _, _ = _BBR.unpack_from(bbr)
        row["bbr_bw_bps"] = ((bw_hi << 32) | bw_lo) * 8
        row["bbr_min_rtt_ms"] = _ms(min_rtt, unset=U32_MAX)
    dctcp = attrs.get(INET_DIAG_DCTCPINFO)
    if dctcp is not None and len(dctcp) >= _DCTCP.size:
        enabled, ce_state, alpha, _, _ = _DCTCP.unpack_from(dctcp)
        if enabled:
            row["dctcp_alpha"] = alpha / 1024.0
            row["dctcp_ce_state"] = ce_state
    return row


class DiagReader:
    """One NETLINK_SOCK_DIAG socket (and the namespace's TCP counters), bound to the namespace it
    was created in: create it inside the namespace (``netns.run_in``), then use it from any thread.

    ``read`` is a full dump. ``sample`` is the cheap periodic read: a dump only when the set of
    connections may have changed, otherwise one exact lookup per known socket (see module doc)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
        try:
            self.sock.bind((0, 0))
            # Replies to a batch of lookups queue up before we read them.
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            # A reply that never comes must not hang the sampler (stop() has to be prompt).
            self.sock.settimeout(RECV_TIMEOUT)
            # Which namespace this socket belongs to, to notice the name being deleted or reused.
            self.netns_inode = os.stat("/proc/thread-self/ns/net").st_ino
            # /proc/net files show the namespace of the opener for as long as they stay open.
            self._snmp: int | None = os.open("/proc/thread-self/net/snmp", os.O_RDONLY)
            buckets = _ehash_buckets()
        except BaseException:
            self.sock.close()
            raise
        self._buf = bytearray(1 << 16)  # dump batches are at most 32 KiB
        self._seq = 0
        self._known: set[bytes] = set()  # family byte + inet_diag_sockid of each socket
        self._counters: tuple[int, ...] | None = None
        self._must_dump = True
        self._last_dump = -math.inf
        # A small table of its own is walked in microseconds: then a dump every tick is cheaper
        # than exact lookups, and simpler.
        self.dump_every_tick = 0 < buckets <= SMALL_EHASH
        self.dumps = 0
        self.lookups = 0

    def close(self) -> None:
        self.sock.close()
        if self._snmp is not None:
            os.close(self._snmp)
            self._snmp = None

    def read(self, host: str, names: dict[str, str] | None = None) -> list[dict]:
        """Rows of every ESTABLISHED TCP socket (one dump per address family)."""
        rows: list[dict] = []
        known: set[bytes] = set()
        self._must_dump = True  # until this dump completes
        handshakes = False
        for family in (socket.AF_INET, socket.AF_INET6):
            handshakes |= self._dump(family, host, names or {}, rows, known)
        self._known, self._must_dump = known, handshakes
        self._last_dump = time.monotonic()
        self.dumps += 1
        return rows

    def sample(self, host: str, names: dict[str, str] | None = None) -> list[dict]:
        """Like ``read``, but a dump only when connections may have come or gone."""
        if self.dump_every_tick:
            return self.read(host, names)
        counters = self._tcp_counters()
        if (
            counters is None
            or counters != self._counters
            or self._must_dump
            or time.monotonic() - self._last_dump >= REDISCOVER_SECONDS
        ):
            # Counters are read before the dump: a connection that the dump misses changed them
            # after this point, so the next tick dumps again.
            self._counters = counters
            return self.read(host, names)
        return self._lookup(host, names or {})

    # -- requests -----------------------------------------------------------------------------
    def _next_seq(self) -> int:
        self._seq = (self._seq + 1) & U32_MAX
        return self._seq

    def _tcp_counters(self) -> tuple[int, ...] | None:
        """(ActiveOpens, PassiveOpens, CurrEstab) of this namespace: every connection that becomes
        ESTABLISHED moves one of them (CurrEstab counts ESTABLISHED + CLOSE_WAIT)."""
        if self._snmp is None:
            return None
        try:
            text = os.pread(self._snmp, 8192, 0)  # offset 0 regenerates the seq_file
            _, _, rest = text.partition(b"\nTcp: ")  # first "Tcp:" line: names
            names_line, _, rest = rest.partition(b"\nTcp: ")  # second: values
            keys = names_line.split()
            values = rest.split(b"\n", 1)[0].split()
            return tuple(int(values[keys.index(k)]) for k in SNMP_KEYS)
        except (OSError, ValueError, IndexError):
            return None  # fall back to a dump every tick

    def _dump(
        self,
        family: int,
        host: str,
        names: dict[str, str],
        rows: list[dict],
        known: set[bytes],
    ) -> bool:
        """Dump ``family``'s sockets; ESTABLISHED ones become rows (and known sockets). Returns
        whether a connection was still in its handshake (it may be ESTABLISHED by next tick)."""
        seq = self._next_seq()
        req = _REQ.pack(family, socket.IPPROTO_TCP, EXTENSIONS, DUMP_STATES)
        hdr = NLMSGHDR.pack(
            NLMSGHDR.size + len(req) + SOCKID_LEN,
            SOCK_DIAG_BY_FAMILY,
            NLM_F_REQUEST | NLM_F_DUMP,
            seq,
            0,
        )
        now = time.time()  # the kernel fills the first batch during this send
        self.sock.send(hdr + req + bytes(SOCKID_LEN))  # a zero sockid is a wildcard
        handshakes = False
        for kind, body in self._replies({seq}):
            if kind == NLMSG_DONE:
                break
            if body[1] != TCP_ESTABLISHED:
                handshakes = True
                continue
            rows.append(_row(now, host, names, body[0], body, attributes(body, DIAG_MSG_LEN)))
            known.add(bytes(body[0:1]) + bytes(body[4 : 4 + SOCKID_LEN]))
        return handshakes

    def _lookup(self, host: str, names: dict[str, str]) -> list[dict]:
        """One exact request per known socket (batched into few syscalls); sockets that are gone
        or no longer ESTABLISHED are forgotten."""
        rows: list[dict] = []
        keys = sorted(self._known)
        failures: list[int] = []
        for start in range(0, len(keys), LOOKUP_BATCH):
            batch: dict[int, bytes] = {}
            out = bytearray()
            for key in keys[start : start + LOOKUP_BATCH]:
                seq = self._next_seq()
                batch[seq] = key
                req = _REQ.pack(key[0], socket.IPPROTO_TCP, EXTENSIONS, DUMP_STATES)
                out += NLMSGHDR.pack(
                    NLMSGHDR.size + len(req) + SOCKID_LEN,
                    SOCK_DIAG_BY_FAMILY,
                    NLM_F_REQUEST,
                    seq,
                    0,
                )
                out += req
                out += key[1:]
            now = time.time()
            self.sock.send(out)
            self.lookups += len(batch)
            for seq, (kind, body) in self._replies_by_seq(set(batch)):
                key = batch[seq]
                if kind == NLMSG_ERROR:
                    err = error_code(body)
                    if err not in (errno.ENOENT, errno.ESTALE):  # gone; 4-tuple reused
                        failures.append(err)
                    self._known.discard(key)
                elif kind != SOCK_DIAG_BY_FAMILY or len(body) < DIAG_MSG_LEN:
                    continue
                elif body[1] != TCP_ESTABLISHED:
                    self._known.discard(key)  # closing: no longer reported
                else:
                    rows.append(
                        _row(now, host, names, body[0], body, attributes(body, DIAG_MSG_LEN))
                    )
        if failures:
            self._must_dump = True  # forgotten sockets must be found again
            raise OSError(failures[0], f"sock_diag lookup: {os.strerror(failures[0])}")
        return rows

    # -- replies ------------------------------------------------------------------------------
    def _replies_by_seq(self, seqs: set[int]) -> Iterator[tuple[int, tuple[int, memoryview]]]:
        """One reply per sequence number in ``seqs``: (seq, (kind, body)). An error reply comes
        as (seq, (NLMSG_ERROR, body)); it is the caller's to interpret."""
        waiting = set(seqs)
        view = memoryview(self._buf)
        while waiting:
            n = self.sock.recv_into(self._buf)
            for kind, mseq, body in messages(view, n):
                if mseq in waiting:
                    waiting.discard(mseq)
                    yield mseq, (kind, body)

    def _replies(self, seqs: set[int]) -> Iterator[tuple[int, memoryview]]:
        """Messages of a dump until NLMSG_DONE (yielded last); raises the dump's error."""
        view = memoryview(self._buf)
        while True:
            n = self.sock.recv_into(self._buf)
            for kind, mseq, body in messages(view, n):
                if mseq not in seqs:  # leftover of an earlier, interrupted request
                    continue
                if kind == NLMSG_ERROR:
                    err = error_code(body)
                    if err:
                        raise OSError(err, f"sock_diag dump: {os.strerror(err)}")
                    return
                if kind == NLMSG_DONE:
                    yield kind, body
                    return
                if kind == SOCK_DIAG_BY_FAMILY and len(body) >= DIAG_MSG_LEN:
                    yield kind, body


def _ehash_buckets() -> int:
    """Buckets of the calling thread's namespace's established-socket table; negative when it
    shares the init namespace's table (the default), -1 if unknown (kernels before 6.1)."""
    try:
        return int(Path("/proc/sys/net/ipv4/tcp_ehash_entries").read_text())
    except (OSError, ValueError):
        return -1


def _open_in(ns: str) -> DiagReader:
    if netns.netns_inode(ns) is None:
        raise NetError(f"no network namespace {ns!r} (is the testbed up?)")
    try:
        return netns.run_in([(ns, DiagReader)])[0]
    except OSError as exc:
        raise NetError(f"cannot read TCP state in namespace {ns!r}: {exc}") from exc


def read_tcp_info(ns: str) -> list[dict]:
    """Every ESTABLISHED TCP socket (AF_INET and AF_INET6) of namespace ``ns``, one row each
    (columns in the module docstring; ``host`` is ``ns``, ``peer_host`` None)."""
    reader = _open_in(ns)
    try:
        return reader.read(ns)
    finally:
        reader.close()


class TcpInfoSampler(PeriodicSampler):
    """Samples ``read_tcp_info`` of several namespaces every ``period`` seconds in one thread
    (:class:`testbed.trace.sampler.PeriodicSampler`: on the grid, missed ticks skipped and
    counted in ``missed_ticks``, problems in ``errors``).

    ``targets``: host label -> namespace; ``names``: IP address -> host label (for peer_host).
    ``start`` opens one diag socket per namespace (raises NetError if one does not exist)."""

    thread_name = "tcp-info-sampler"

    def __init__(
        self, targets: dict[str, str], period: float, names: dict[str, str] | None = None
    ) -> None:
        super().__init__(period)
        self.targets = dict(targets)
        self.names = dict(names or {})
        self.rows: list[dict] = []
        self._readers: dict[str, tuple[str, DiagReader]] = {}

    def open(self) -> None:
        for host, ns in self.targets.items():
            self._readers[host] = (ns, _open_in(ns))

    def sample(self) -> None:
        for host, (ns, reader) in list(self._readers.items()):
            if netns.netns_inode(ns) != reader.netns_inode:
                self.error(f"namespace {ns} of {host} vanished; no longer sampled")
                # Our socket holds the namespace alive: close it so the namespace can go.
                self._drop(host)
                continue
            try:
                self.rows.extend(reader.sample(host, self.names))
            except OSError as exc:
                self.error(f"reading TCP info of {host} ({ns}) failed: {exc}")

    def close(self) -> None:
        for host in list(self._readers):
            self._drop(host)

    def _drop(self, host: str) -> None:
        _, reader = self._readers.pop(host)
        reader.close()
