"""Configuring links, addresses, routes and bottleneck rates inside namespaces with rtnetlink
requests.

This module owns the rtnetlink messages the build, the faults (:mod:`testbed.net.faults`) and a rate
change (``LinkBackend.set_rate``) send: one per :mod:`testbed.plan.render` ``IpOp`` (a link up or
down, its device group or MTU, a bridge, a bridge port, an IPv4 address, ``gso_max_segs``, an IPv4
route) or ``TcOp`` (an HTB class's rate, a bfifo's limit, a plug's action), over the shared framing
of :mod:`testbed.net.netlink`. One worker thread enters each namespace in turn (``setns``), opens a
``NETLINK_ROUTE`` socket there and sends that namespace's requests back to back, then reads their
acks. It replaces an ``ip -n NS -batch`` (or ``tc``) process per namespace, whose cost is mostly
process start-up: that adds up over a large topology's namespaces, and a ``tc`` process per rate
change has a tail beyond an event's 20 ms budget on a busy machine (docs/faults.md, application
times). A refused request raises NetError naming the namespace and the request as an ``ip`` or
``tc`` command.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import socket
import struct
from collections.abc import Callable, Mapping, Sequence

from testbed.core.errors import NetError
from testbed.net import netlink, netns
from testbed.plan.render import (
    DEAD_MAC,
    AddrAdd,
    BridgeAdd,
    FifoLimit,
    GsoMaxSegs,
    HtbChange,
    IpOp,
    LinkDown,
    LinkGroup,
    LinkUp,
    NeighDel,
    NeighLearn,
    NeighPin,
    PlugCtl,
    RouteAdd,
    SetMaster,
    SetMtu,
    TcOp,
    ip_line,
    tc_line,
)

Op = IpOp | TcOp

NETLINK_ROUTE = 0
RTM_NEWLINK, RTM_NEWADDR, RTM_NEWROUTE, RTM_NEWQDISC, RTM_NEWTCLASS = 16, 20, 24, 36, 40
RTM_NEWNEIGH, RTM_DELNEIGH = 28, 29
NDA_DST, NDA_LLADDR, NUD_STALE, NUD_PERMANENT = 1, 2, 0x04, 0x80
NLM_F_REPLACE, NLM_F_EXCL, NLM_F_CREATE = 0x100, 0x200, 0x400
IFF_UP = 0x1
IFLA_MTU = 4
IFLA_IFNAME, IFLA_MASTER, IFLA_LINKINFO, IFLA_GROUP, IFLA_GSO_MAX_SEGS = 3, 10, 18, 27, 40
IFLA_INFO_KIND, IFLA_INFO_DATA = 1, 2
IFLA_BR_FORWARD_DELAY, IFLA_BR_STP_STATE = 1, 5
IFA_ADDRESS, IFA_LOCAL = 1, 2
RTA_DST, RTA_GATEWAY, RTA_PREFSRC, RTA_MULTIPATH = 1, 5, 7, 9
RTNEXTHOP = struct.Struct("=HBBi")  # len, flags, hops (weight - 1), ifindex
RT_TABLE_MAIN, RTPROT_BOOT, RT_SCOPE_UNIVERSE, RTN_UNICAST = 254, 3, 0, 1

TCA_KIND, TCA_OPTIONS = 1, 2
TCA_HTB_PARMS, TCA_HTB_RATE64, TCA_HTB_CEIL64 = 1, 6, 7
TC_LINKLAYER_ETHERNET = 1
PSCHED = "/proc/net/psched"

IFINFOMSG = struct.Struct("=BxHiII")  # family, type, index, flags, change
TCMSG = struct.Struct("=BxxxiIII")  # family, index, handle, parent, info
# struct tc_ratespec: cell_log, linklayer, overhead, cell_align, mpu, rate (bytes/s)
RATESPEC = struct.Struct("=BBHhHI")
HTB_OPT = struct.Struct("=12s12sIIIII")  # rate, ceil, buffer, cbuffer (ticks), quantum, level, prio
U64 = struct.Struct("=Q")
IFADDRMSG = struct.Struct("=BBBBI")  # family, prefix length, flags, scope, index
RTMSG = struct.Struct("=BBBBBBBBI")  # family, dst len, src len, tos, table, proto, scope, type
U32 = struct.Struct("=I")
PLUG_QOPT = struct.Struct("=iI")  # action, limit
NDMSG = struct.Struct("=BxxxiHBB")  # family, index, state, flags, type

ACK = netlink.NLM_F_REQUEST | netlink.NLM_F_ACK
CREATE = ACK | NLM_F_CREATE | NLM_F_EXCL
REPLACE = ACK | NLM_F_CREATE | NLM_F_REPLACE


def _name(name: str) -> bytes:
    return netlink.nla(IFLA_IFNAME, name.encode() + b"\0")


def _link(name: str, attrs: bytes = b"", up: bool | None = None) -> bytes:
    """RTM_NEWLINK on the existing link ``name`` (found by name: no index needed); ``up``
    True/False sets the administrative state, None leaves it."""
    change = 0 if up is None else IFF_UP
    return IFINFOMSG.pack(0, 0, 0, IFF_UP if up else 0, change) + _name(name) + attrs


def _bridge(name: str) -> bytes:
    data = netlink.nla(IFLA_BR_FORWARD_DELAY, U32.pack(0)) + netlink.nla(
        IFLA_BR_STP_STATE, U32.pack(0)
    )
    info = netlink.nla(IFLA_INFO_KIND, b"bridge\0") + netlink.nla(IFLA_INFO_DATA, data)
    return IFINFOMSG.pack(0, 0, 0, 0, 0) + _name(name) + netlink.nla(IFLA_LINKINFO, info)


def _addr(cidr: str, dev: str) -> bytes:
    iface = ipaddress.IPv4Interface(cidr)
    packed = iface.ip.packed
    head = IFADDRMSG.pack(socket.AF_INET, iface.network.prefixlen, 0, 0, _index(dev))
    return head + netlink.nla(IFA_LOCAL, packed) + netlink.nla(IFA_ADDRESS, packed)


def _route(
    dst: str, via: str, src: str | None, nexthops: tuple[tuple[str, int], ...] = ()
) -> bytes:
    net = ipaddress.IPv4Network("0.0.0.0/0" if dst == "default" else dst)
    head = RTMSG.pack(
        socket.AF_INET,
        net.prefixlen,
        0,
        0,
        RT_TABLE_MAIN,
        RTPROT_BOOT,
        RT_SCOPE_UNIVERSE,
        RTN_UNICAST,
        0,
    )
    if nexthops:  # RTA_MULTIPATH: one rtnexthop (+ its gateway) per hop; the kernel finds
        # each hop's interface from its gateway
        hops = b""
        for gw, weight in nexthops:
            gateway = netlink.nla(RTA_GATEWAY, ipaddress.IPv4Address(gw).packed)
            hops += RTNEXTHOP.pack(RTNEXTHOP.size + len(gateway), 0, weight - 1, 0) + gateway
        attrs = netlink.nla(RTA_MULTIPATH, hops)
    else:
        attrs = netlink.nla(RTA_GATEWAY, ipaddress.IPv4Address(via).packed)
    if net.prefixlen:
        attrs = netlink.nla(RTA_DST, net.network_address.packed) + attrs
    if src:
        attrs += netlink.nla(RTA_PREFSRC, ipaddress.IPv4Address(src).packed)
    return head + attrs


def _neigh(ip: str, dev: str, mac: str | None, state: int = 0) -> bytes:
    """ndmsg for ``ip`` on ``dev``: at ``mac`` in ``state`` (NUD_*; RTM_NEWNEIGH), or to
    delete (no ``mac``)."""
    head = NDMSG.pack(socket.AF_INET, _index(dev), state, 0, 0)
    attrs = netlink.nla(NDA_DST, ipaddress.IPv4Address(ip).packed)
    if mac:
        attrs += netlink.nla(NDA_LLADDR, bytes.fromhex(mac.replace(":", "")))
    return head + attrs


_tick_in_usec: float | None = None


def tick_in_usec() -> float:
    """Scheduler ticks per microsecond, as ``tc`` computes them from ``/proc/net/psched``
    (tc_core_init): HTB's buffers are given in these ticks."""
    global _tick_in_usec
    if _tick_in_usec is None:
        with open(PSCHED) as f:
            t2us, us2t, clock_res = (int(x, 16) for x in f.read().split()[:3])
        if clock_res == 1_000_000_000:
            t2us = us2t
        _tick_in_usec = t2us / us2t * (clock_res / 1_000_000)
    return _tick_in_usec


def _xmittime(rate_bytes: int, size: int) -> int:
    """Ticks to send ``size`` bytes at ``rate_bytes`` per second (tc_calc_xmittime)."""
    return int(1_000_000 * (size / rate_bytes) * tick_in_usec())


def _htb_class(dev: str, rate: int, burst: int, quantum: int) -> bytes:
    """RTM_NEWTCLASS changing class 1:1 of ``dev``, as ``tc class change ... htb rate R ceil R
    burst B cburst B quantum Q`` sends it. The rate tables tc adds are left out: the kernel
    reads them only for a link layer of "unaware", and this one says Ethernet."""
    per_s = rate // 8
    spec = RATESPEC.pack(0, TC_LINKLAYER_ETHERNET, 0, -1, 0, min(per_s, 0xFFFFFFFF))
    ticks = _xmittime(per_s, burst)
    attrs = netlink.nla(TCA_HTB_PARMS, HTB_OPT.pack(spec, spec, ticks, ticks, quantum, 0, 0))
    if per_s >= 1 << 32:  # above ~34 Gbit/s the 32-bit field saturates; the 64-bit one counts
        attrs += netlink.nla(TCA_HTB_RATE64, U64.pack(per_s))
        attrs += netlink.nla(TCA_HTB_CEIL64, U64.pack(per_s))
    head = TCMSG.pack(0, _index(dev), 0x00010001, 0x00010000, 0)
    return head + netlink.nla(TCA_KIND, b"htb\0") + netlink.nla(TCA_OPTIONS, attrs)


def _fifo_limit(dev: str, limit: int) -> bytes:
    """RTM_NEWQDISC changing the bfifo 10: under class 1:1 of ``dev`` (``tc qdisc change``)."""
    head = TCMSG.pack(0, _index(dev), 0x00100000, 0x00010001, 0)  # tc handles are hex: 10:
    return head + netlink.nla(TCA_KIND, b"bfifo\0") + netlink.nla(TCA_OPTIONS, U32.pack(limit))


def _plug(dev: str, action: int, limit: int) -> bytes:
    """RTM_NEWQDISC changing the plug 10: under class 1:1 of ``dev`` (struct tc_plug_qopt)."""
    head = TCMSG.pack(0, _index(dev), 0x00100000, 0x00010001, 0)
    opt = PLUG_QOPT.pack(action, limit)
    return head + netlink.nla(TCA_KIND, b"plug\0") + netlink.nla(TCA_OPTIONS, opt)


def _index(dev: str) -> int:
    """``dev``'s index in the calling thread's namespace (the ioctl's socket is made there)."""
    try:
        return socket.if_nametoindex(dev)
    except OSError as e:
        raise OSError(e.errno, f"no interface {dev}") from None


SIOCGIFHWADDR = 0x8927
IFREQ = struct.Struct("16sH6s8x")  # name, then struct sockaddr: family, the address


def hw_address(dev: str) -> str:
    """``dev``'s MAC address in the calling thread's namespace, as ``ip`` prints it."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            got = fcntl.ioctl(s, SIOCGIFHWADDR, IFREQ.pack(dev.encode(), 0, b""))
        except OSError as e:
            raise OSError(e.errno, f"no interface {dev}") from None
    return IFREQ.unpack(got)[2].hex(":")


def request(op: Op) -> tuple[int, int, bytes]:
    """(message type, flags, body) of ``op``; interface indexes are looked up in the calling
    thread's namespace."""
    match op:
        case HtbChange(dev, rate, burst, quantum):
            return RTM_NEWTCLASS, ACK, _htb_class(dev, rate, burst, quantum)
        case FifoLimit(dev, limit):
            return RTM_NEWQDISC, ACK, _fifo_limit(dev, limit)
        case PlugCtl(dev, action, limit):
            return RTM_NEWQDISC, ACK, _plug(dev, action, limit)
        case LinkUp(dev):
            return RTM_NEWLINK, ACK, _link(dev, up=True)
        case LinkDown(dev):
            return RTM_NEWLINK, ACK, _link(dev, up=False)
        case BridgeAdd(name):
            return RTM_NEWLINK, CREATE, _bridge(name)
        case SetMaster(port, master):
            return RTM_NEWLINK, ACK, _link(port, netlink.nla(IFLA_MASTER, U32.pack(_index(master))))
        case AddrAdd(cidr, dev):
            return RTM_NEWADDR, CREATE, _addr(cidr, dev)
        case GsoMaxSegs(dev, segs):
            return RTM_NEWLINK, ACK, _link(dev, netlink.nla(IFLA_GSO_MAX_SEGS, U32.pack(segs)))
        case LinkGroup(dev, group):
            return RTM_NEWLINK, ACK, _link(dev, netlink.nla(IFLA_GROUP, U32.pack(group)))
        case SetMtu(dev, mtu):
            return RTM_NEWLINK, ACK, _link(dev, netlink.nla(IFLA_MTU, U32.pack(mtu)))
        case RouteAdd(dst, via, src, replace, nexthops):
            return RTM_NEWROUTE, REPLACE if replace else CREATE, _route(dst, via, src, nexthops)
        case NeighPin(ip, dev):
            return RTM_NEWNEIGH, REPLACE, _neigh(ip, dev, DEAD_MAC, NUD_PERMANENT)
        case NeighLearn(ip, dev, mac):
            return RTM_NEWNEIGH, REPLACE, _neigh(ip, dev, mac, NUD_STALE)
        case NeighDel(ip, dev):
            return RTM_DELNEIGH, ACK, _neigh(ip, dev, None)
    raise TypeError(f"not an ip operation: {op!r}")


def line(op: Op) -> str:
    """The command ``op`` is the request of (``ip ...`` or ``tc ...``), for messages."""
    return f"tc {tc_line(op)}" if isinstance(op, HtbChange | FifoLimit | PlugCtl) else ip_line(op)


def _apply(ns: str, ops: Sequence[Op]) -> None:
    """Send ``ops`` in order (the kernel handles each before ``send`` returns), then read
    their acks; the first refusal raises NetError."""
    buf = bytearray(1 << 16)
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE) as sock:
        sock.settimeout(5.0)
        failed: list[tuple[int, int]] = []  # seq, errno
        for seq, op in enumerate(ops, 1):
            try:
                kind, flags, body = request(op)
            except OSError as e:
                raise NetError(f"rtnetlink in {ns} failed at `{line(op)}`: {e.strerror}") from None
            sock.send(netlink.message(kind, flags, seq, body))
            # Acks pile up in the receive buffer (36 bytes each): drain before it could fill.
            if seq % 512 == 0:
                _read_acks(sock, buf, seq - 511, seq, failed)
        done = len(ops) - len(ops) % 512
        _read_acks(sock, buf, done + 1, len(ops), failed)
    if failed:
        seq, err = min(failed)
        raise NetError(f"rtnetlink in {ns} failed at `{line(ops[seq - 1])}`: {os.strerror(err)}")


def _read_acks(
    sock: socket.socket, buf: bytearray, first: int, last: int, failed: list[tuple[int, int]]
) -> None:
    want = set(range(first, last + 1))
    view = memoryview(buf)
    while want:
        try:
            n = sock.recv_into(buf)
        except TimeoutError:
            raise NetError(f"rtnetlink: no ack for {len(want)} requests") from None
        for kind, seq, body in netlink.messages(view, n):
            if kind == netlink.NLMSG_ERROR and seq in want:
                want.discard(seq)
                err = netlink.error_code(body)
                if err:
                    failed.append((seq, err))


def apply(per_ns: Mapping[str, Sequence[Op]]) -> None:
    """Configure each namespace's links, addresses and routes (namespaces in turn, from one
    worker thread: the caller's thread never changes namespace)."""

    def work(ns: str, ops: Sequence[Op]) -> Callable[[], None]:
        return lambda: _apply(ns, ops)

    netns.run_in([(ns, work(ns, ops)) for ns, ops in per_ns.items() if ops])
