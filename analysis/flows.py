"""TCP flows from pcap files: per-flow, per-time-bin throughput, retransmissions and ECN. PURE.

This module owns turning a headers-only capture (``testbed.trace.pcap`` writes them) into pandas
tables: :func:`flows_from_pcap` (one row per TCP flow direction per time bin, every bin from a
flow's first to its last packet present, so a throughput series has no silent gaps) and
:func:`flow_summary` (one row per capture and flow). It reads files only and never imports the
network layer. Records are read with scapy's raw readers and the IPv4/TCP headers parsed with
``struct`` (scapy's dissection is far slower), one packet at a time into per-flow state.
The columns and how each is counted: docs/traces.md; the parse rate: benchmarks/RESULTS.md.
"""

from __future__ import annotations

import math
import socket
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import cast

import numpy as np
import pandas as pd
from scapy.utils import RawPcapNgReader, RawPcapReader

COLUMNS = [
    "capture", "flow", "src", "sport", "dst", "dport", "time", "bin_seconds",
    "packets", "wire_packets", "payload_bytes", "throughput_bps",
    "retransmissions", "retransmitted_bytes", "ce_packets", "ect_packets", "ce_bytes",
    "ce_share", "ece", "cwr",
]  # fmt: skip
SUMMARY_COLUMNS = [
    "capture", "flow", "src", "sport", "dst", "dport", "start", "duration",
    "packets", "wire_packets", "payload_bytes", "mean_throughput_bps",
    "retransmissions", "retransmitted_bytes", "retransmission_share",
    "ce_packets", "ce_share", "ece", "cwr",
]  # fmt: skip
# Counters accumulated per (flow, bin), in this order.
_COUNTERS = [
    "packets", "wire_packets", "payload_bytes", "retransmissions", "retransmitted_bytes",
    "ce_packets", "ect_packets", "ce_bytes", "ece", "cwr",
]  # fmt: skip

# Link types (pcap LINKTYPE_*) -> how to find the IPv4 header.
ETHERNET, RAW, RAW_IPV4, LINUX_SLL, LINUX_SLL2, BSD_RAW = 1, 101, 228, 113, 276, 12
ETH_IPV4, ETH_VLAN, ETH_QINQ = 0x0800, 0x8100, 0x88A8
TCP_PROTO = 6
SYN, ECE, CWR = 0x02, 0x40, 0x80
MASK32 = 0xFFFFFFFF
HALF32 = 1 << 31

_IPV4 = struct.Struct("!BBH2xHxB2xII")  # ver_ihl, tos, total length, frag field, proto, src, dst
_TCP = struct.Struct("!HHI4xBB")  # sport, dport, seq, data offset byte, flags
# Ethertype + both of them at once (Ethernet, IP header without options: the common case).
_ETH_IP_TCP = struct.Struct("!HBBH2xHxB2xIIHHI4xBB")
_U16 = struct.Struct("!H")


def _records(path: Path) -> Iterator[tuple[bytes, int, int, int]]:
    """(packet bytes, time in ns, link type, length on the wire) of every record in the file."""
    reader = RawPcapReader(str(path))  # the metaclass falls back to RawPcapNgReader by magic
    try:
        if isinstance(reader, RawPcapNgReader):
            # scapy types the iterator it inherits with RawPcapReader's metadata; it yields
            # RawPcapNgReader's
            blocks = cast(Iterable[tuple[bytes, RawPcapNgReader.PacketMetadata]], reader)
            for data, meta in blocks:
                if meta.tshigh is None:
                    continue  # a Simple Packet Block: no time stamp, so no bin
                ts = (meta.tshigh << 32) | meta.tslow
                yield data, ts * 1_000_000_000 // meta.tsresol, meta.linktype, meta.wirelen
        else:
            scale = 1 if reader.nano else 1000
            link = reader.linktype
            # PacketMetadata(sec, usec, wirelen, caplen): unpacked, not looked up (hot loop)
            for data, (sec, usec, wirelen, _) in reader:
                yield data, sec * 1_000_000_000 + usec * scale, link, wirelen
    finally:
        reader.close()


def _ip_offset(data: bytes, link: int) -> int:
    """Offset of the IPv4 header in ``data``, or -1 if the packet is not IPv4."""
    if link == ETHERNET:
        off, etype = 14, _U16.unpack_from(data, 12)[0] if len(data) >= 14 else 0
        while etype in (ETH_VLAN, ETH_QINQ) and len(data) >= off + 4:
            etype = _U16.unpack_from(data, off + 2)[0]
            off += 4
        return off if etype == ETH_IPV4 else -1
    if link in (RAW, RAW_IPV4, BSD_RAW):
        return 0 if data and data[0] >> 4 == 4 else -1
    if link == LINUX_SLL:
        return 16 if len(data) >= 16 and _U16.unpack_from(data, 14)[0] == ETH_IPV4 else -1
    if link == LINUX_SLL2:
        return 20 if len(data) >= 20 and _U16.unpack_from(data, 0)[0] == ETH_IPV4 else -1
    return -1


def _headers(data: bytes, link: int) -> tuple[int, ...] | None:
    """The general case of ``_segments``: any link type, VLAN tags, IP options. (IP offset, then
    the fields of ``_ETH_IP_TCP`` after the ethertype), or None if this is not IPv4 + TCP fields."""
    ip = _ip_offset(data, link)
    size = len(data)
    if ip < 0 or size < ip + 34:  # IPv4 without options (20) + the TCP fields read (14)
        return None
    ver_ihl, tos, ip_len, frag, proto, src, dst = _IPV4.unpack_from(data, ip)
    if ver_ihl >> 4 != 4:
        return None
    tcp = ip + (ver_ihl & 0x0F) * 4
    if size < tcp + 14:
        return None
    return (ip, ver_ihl, tos, ip_len, frag, proto, src, dst, *_TCP.unpack_from(data, tcp))


def _syn_mss(data: bytes, start: int, end: int) -> int | None:
    """The MSS option in the TCP options ``data[start:end]``, if any."""
    i = start
    while i < end:
        kind = data[i]
        if kind == 0:
            break
        if kind == 1:
            i += 1
            continue
        if i + 1 >= end:
            break
        length = data[i + 1]
        if kind == 2 and length == 4 and i + 4 <= end:
            return _U16.unpack_from(data, i + 2)[0]
        if length < 2:
            break
        i += length
    return None


# One parsed TCP packet: time (ns), flow key (src, sport, dst, dport; addresses as ints), sequence
# number, payload bytes, IP TOS byte, TCP flags, TCP header bytes, MSS announced by a SYN (0: none).
_Segment = tuple[int, tuple[int, int, int, int], int, int, int, int, int, int]


def _segments(path: Path) -> Iterator[_Segment]:
    """Every IPv4 TCP packet of the capture (first fragments only), parsed; the rest skipped."""
    unpack_eth_ip_tcp = _ETH_IP_TCP.unpack_from
    for data, ts, link, wirelen in _records(path):
        size = len(data)
        ip = -1
        # Ethernet + IPv4 without options (the veth case, nearly every packet): one unpack.
        if link == ETHERNET and size >= 54:
            etype, ver_ihl, tos, ip_len, frag, proto, src, dst, sport, dport, seq, off, flags = (
                unpack_eth_ip_tcp(data, 12)
            )
            if etype == ETH_IPV4 and ver_ihl == 0x45:
                ip = 14
        if ip < 0:
            headers = _headers(data, link)
            if headers is None:
                continue
            ip, ver_ihl, tos, ip_len, frag, proto, src, dst, sport, dport, seq, off, flags = headers
        if proto != TCP_PROTO or frag & 0x1FFF:
            continue
        ihl = (ver_ihl & 0x0F) * 4
        thl = (off >> 4) * 4
        if ip_len == 0:  # BIG TCP / TSO: total length 0 means "ask the frame", i.e. wirelen
            ip_len = wirelen - ip
        mss = 0
        if flags & SYN:
            tcp = ip + ihl
            mss = _syn_mss(data, tcp + 20, min(tcp + thl, size)) or 0
        yield ts, (src, sport, dst, dport), seq, ip_len - ihl - thl, tos, flags, thl, mss


def flows_from_pcap(
    path: str | Path, bin_seconds: float = 0.1, label: str | None = None, mtu: int = 1500
) -> pd.DataFrame:
    """Per-flow, per-bin TCP counters of one capture (columns: see the module docstring).

    ``mtu`` gives the segment size of flows whose SYN was not captured (for ``wire_packets``).
    """
    path = Path(path)
    if bin_seconds <= 0:
        raise ValueError(f"bin_seconds must be positive, got {bin_seconds}")
    bin_ns = round(bin_seconds * 1e9)
    label = path.stem if label is None else label
    bins, flow_keys = _accumulate(_segments(path), bin_ns, mtu)
    return _table(bins, flow_keys, bin_ns, bin_seconds, label)


def _accumulate(
    segments: Iterable[_Segment], bin_ns: int, mtu: int
) -> tuple[dict[tuple[int, int], list[int]], list[tuple[int, int, int, int]]]:
    """Counters per (flow number, bin) in ``_COUNTERS`` order, and the flow keys by number.

    Per flow it keeps the highest sequence end sent (for retransmissions) and the bin being
    filled; per flow key the MSS its SYN announced (the peer's segment size).
    """
    flow_index: dict[tuple[int, int, int, int], int] = {}
    flow_keys: list[tuple[int, int, int, int]] = []
    peers: list[tuple[int, int, int, int]] = []  # per flow: the key of the opposite direction
    highest: list[int] = []  # per flow: highest sequence end sent, unwrapped (-1: none yet)
    current: list[tuple[int, list[int]]] = []  # per flow: (bin, its counters), the hot entry
    mss: dict[tuple[int, int, int, int], int] = {}  # MSS announced in the SYN *sent* by a flow
    bins: dict[tuple[int, int], list[int]] = {}
    n_counters = len(_COUNTERS)

    for ts, key, seq, payload, tos, flags, thl, announced in segments:
        fi = flow_index.get(key)
        if fi is None:
            fi = flow_index[key] = len(flow_keys)
            flow_keys.append(key)
            peers.append((key[2], key[3], key[0], key[1]))
            highest.append(-1)
            current.append((-1, []))
        if announced:
            mss[key] = announced

        b = ts // bin_ns
        cur_bin, acc = current[fi]
        if cur_bin != b:  # packets of a flow arrive in time order: the dict is rarely needed
            acc = bins.get((fi, b))
            if acc is None:
                acc = bins[(fi, b)] = [0] * n_counters
            current[fi] = (b, acc)
        acc[0] += 1
        ecn = tos & 3
        if ecn:
            if ecn == 3:
                acc[5] += 1
            else:
                acc[6] += 1
        if flags & 0xC0:
            if flags & ECE:
                acc[8] += 1
            if flags & CWR:
                acc[9] += 1
        if payload <= 0:
            acc[1] += 1
            continue

        # Segment size on a real wire: what the peer allows (its SYN MSS) minus our options.
        segment = mss.get(peers[fi], mtu - 40) - (thl - 20)
        acc[1] += -(-payload // segment) if segment > 0 else 1
        acc[2] += payload
        if ecn == 3:
            acc[7] += payload
        hi = highest[fi]
        if hi < 0:
            highest[fi] = seq + payload
            continue
        # Unwrap seq next to the highest end: the signed 32-bit distance handles wraparound.
        delta = (seq - hi) & MASK32
        if delta >= HALF32:
            delta -= 1 << 32
        end = hi + delta + payload
        if end <= hi:
            acc[3] += 1
            acc[4] += payload
        else:
            highest[fi] = end

    return bins, flow_keys


def _table(
    bins: dict[tuple[int, int], list[int]],
    flow_keys: list[tuple[int, int, int, int]],
    bin_ns: int,
    bin_seconds: float,
    label: str,
) -> pd.DataFrame:
    if not bins:
        return _empty(COLUMNS)
    keys = np.array(list(bins.keys()), dtype=np.int64)
    counts = pd.DataFrame(list(bins.values()), columns=_COUNTERS, dtype=np.int64)
    counts.index = pd.MultiIndex.from_arrays([keys[:, 0], keys[:, 1]], names=["fi", "bin"])
    # Every bin from a flow's first to its last packet, so idle bins show as zeros, not gaps.
    span = (
        pd.DataFrame({"fi": keys[:, 0], "bin": keys[:, 1]}).groupby("fi")["bin"].agg(["min", "max"])
    )
    full = pd.MultiIndex.from_arrays(
        [
            np.repeat(span.index.to_numpy(), span["max"] - span["min"] + 1),
            np.concatenate(
                [np.arange(lo, hi + 1) for lo, hi in zip(span["min"], span["max"], strict=True)]
            ),
        ],
        names=["fi", "bin"],
    )
    df = counts.reindex(full, fill_value=0).reset_index()

    names = {
        fi: (socket.inet_ntoa(s.to_bytes(4, "big")), sp, socket.inet_ntoa(d.to_bytes(4, "big")), dp)
        for fi, (s, sp, d, dp) in enumerate(flow_keys)
    }
    fi = df["fi"].to_numpy()
    df.insert(0, "capture", label)
    df.insert(1, "flow", [f"{names[i][0]}:{names[i][1]}>{names[i][2]}:{names[i][3]}" for i in fi])
    df["src"] = [names[i][0] for i in fi]
    df["sport"] = np.array([names[i][1] for i in fi], dtype=np.int64)
    df["dst"] = [names[i][2] for i in fi]
    df["dport"] = np.array([names[i][3] for i in fi], dtype=np.int64)
    df["time"] = df["bin"].to_numpy() * bin_ns / 1e9
    df["bin_seconds"] = float(bin_seconds)
    df["throughput_bps"] = df["payload_bytes"] * 8 / bin_seconds
    # NaN, not 0, where there is no payload: "no data" is not "nothing marked".
    df["ce_share"] = df["ce_bytes"] / df["payload_bytes"].where(df["payload_bytes"] > 0)
    return df.sort_values(["fi", "bin"], kind="stable")[COLUMNS].reset_index(drop=True)


def _empty(columns: list[str]) -> pd.DataFrame:
    text = {"capture", "flow", "src", "dst"}
    real = {"time", "bin_seconds", "throughput_bps", "ce_share", "start", "duration"}
    real |= {"mean_throughput_bps", "retransmission_share"}
    return pd.DataFrame(
        {
            c: pd.Series(dtype=object if c in text else "float64" if c in real else "int64")
            for c in columns
        }
    )


def flow_summary(flows: pd.DataFrame) -> pd.DataFrame:
    """One row per capture + flow of a ``flows_from_pcap`` table (columns: module docstring)."""
    if flows.empty:
        return _empty(SUMMARY_COLUMNS)
    rows = []
    keys = ["capture", "flow", "src", "sport", "dst", "dport"]
    for key, g in flows.groupby(keys, sort=False):
        width = float(g["bin_seconds"].iloc[0])
        active = g[g["payload_bytes"] > 0]
        if active.empty:
            active = g[g["packets"] > 0]
        start = float(active["time"].min())
        duration = float(active["time"].max()) + width - start
        payload = int(g["payload_bytes"].sum())
        retrans_bytes = int(g["retransmitted_bytes"].sum())
        rows.append(
            {
                **dict(zip(keys, key, strict=True)),
                "start": start,
                "duration": duration,
                "packets": int(g["packets"].sum()),
                "wire_packets": int(g["wire_packets"].sum()),
                "payload_bytes": payload,
                "mean_throughput_bps": payload * 8 / duration,
                "retransmissions": int(g["retransmissions"].sum()),
                "retransmitted_bytes": retrans_bytes,
                "retransmission_share": retrans_bytes / payload if payload else math.nan,
                "ce_packets": int(g["ce_packets"].sum()),
                "ce_share": int(g["ce_bytes"].sum()) / payload if payload else math.nan,
                "ece": int(g["ece"].sum()),
                "cwr": int(g["cwr"].sum()),
            }
        )
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
