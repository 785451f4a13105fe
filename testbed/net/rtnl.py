"""Configuring links, addresses and routes inside namespaces with rtnetlink requests.

This module owns the rtnetlink messages the build and the faults (:mod:`testbed.net.faults`) send
(one per :mod:`testbed.plan.render` ``IpOp``: a link up or down, a bridge, a bridge port, an IPv4
address, ``gso_max_segs``, an IPv4 route), over the shared framing of :mod:`testbed.net.netlink`.
One worker thread enters each namespace in turn (``setns``), opens a ``NETLINK_ROUTE`` socket
there and sends that namespace's requests back to back, then reads their acks. It replaces an
``ip -n NS -batch`` process per namespace: at 8 clusters x 16 hosts (164 namespaces) those cost
~0.4 s of CPU, mostly process start-up.
A refused request raises NetError naming the namespace and the request as an ``ip`` command.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from collections.abc import Callable

from testbed.core.errors import NetError
from testbed.net import netlink, netns
from testbed.plan.render import (
    AddrAdd,
    BridgeAdd,
    GsoMaxSegs,
    IpOp,
    LinkDown,
    LinkUp,
    RouteAdd,
    SetMaster,
    ip_line,
)

NETLINK_ROUTE = 0
RTM_NEWLINK, RTM_NEWADDR, RTM_NEWROUTE = 16, 20, 24
NLM_F_REPLACE, NLM_F_EXCL, NLM_F_CREATE = 0x100, 0x200, 0x400
IFF_UP = 0x1
IFLA_IFNAME, IFLA_MASTER, IFLA_LINKINFO, IFLA_GSO_MAX_SEGS = 3, 10, 18, 40
IFLA_INFO_KIND, IFLA_INFO_DATA = 1, 2
IFLA_BR_FORWARD_DELAY, IFLA_BR_STP_STATE = 1, 5
IFA_ADDRESS, IFA_LOCAL = 1, 2
RTA_DST, RTA_GATEWAY, RTA_PREFSRC = 1, 5, 7
RT_TABLE_MAIN, RTPROT_BOOT, RT_SCOPE_UNIVERSE, RTN_UNICAST = 254, 3, 0, 1

IFINFOMSG = struct.Struct("=BxHiII")  # family, type, index, flags, change
IFADDRMSG = struct.Struct("=BBBBI")  # family, prefix length, flags, scope, index
RTMSG = struct.Struct("=BBBBBBBBI")  # family, dst len, src len, tos, table, proto, scope, type
U32 = struct.Struct("=I")

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


def _route(dst: str, via: str, src: str | None) -> bytes:
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
    attrs = netlink.nla(RTA_GATEWAY, ipaddress.IPv4Address(via).packed)
    if net.prefixlen:
        attrs = netlink.nla(RTA_DST, net.network_address.packed) + attrs
    if src:
        attrs += netlink.nla(RTA_PREFSRC, ipaddress.IPv4Address(src).packed)
    return head + attrs


def _index(dev: str) -> int:
    """``dev``'s index in the calling thread's namespace (the ioctl's socket is made there)."""
    try:
        return socket.if_nametoindex(dev)
    except OSError as e:
        raise OSError(e.errno, f"no interface {dev}") from None


def request(op: IpOp) -> tuple[int, int, bytes]:
    """(message type, flags, body) of ``op``; interface indexes are looked up in the calling
    thread's namespace."""
    match op:
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
        case RouteAdd(dst, via, src, replace):
            return RTM_NEWROUTE, REPLACE if replace else CREATE, _route(dst, via, src)
    raise TypeError(f"not an ip operation: {op!r}")


def _apply(ns: str, ops: list[IpOp]) -> None:
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
                raise NetError(
                    f"rtnetlink in {ns} failed at `{ip_line(op)}`: {e.strerror}"
                ) from None
            sock.send(netlink.message(kind, flags, seq, body))
            # Acks pile up in the receive buffer (36 bytes each): drain before it could fill.
            if seq % 512 == 0:
                _read_acks(sock, buf, seq - 511, seq, failed)
        done = len(ops) - len(ops) % 512
        _read_acks(sock, buf, done + 1, len(ops), failed)
    if failed:
        seq, err = min(failed)
        raise NetError(f"rtnetlink in {ns} failed at `{ip_line(ops[seq - 1])}`: {os.strerror(err)}")


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


def apply(per_ns: dict[str, list[IpOp]]) -> None:
    """Configure each namespace's links, addresses and routes (namespaces in turn, from one
    worker thread: the caller's thread never changes namespace)."""

    def work(ns: str, ops: list[IpOp]) -> Callable[[], None]:
        return lambda: _apply(ns, ops)

    netns.run_in([(ns, work(ns, ops)) for ns, ops in per_ns.items() if ops])
