"""The project's one raw netlink framing, standard library only.

This module owns what every netlink family shares (linux/netlink.h): the message header, the
common message types and flags, splitting a receive buffer into messages and a body into its
attributes, building an attribute, and a request that waits for the kernel's ack. What one family
knows (its protocol number, message types, attribute numbers) stays with its one user: sock_diag
in :mod:`testbed.trace.tcp`, rtnetlink qdiscs in :mod:`testbed.trace.queues`, nfnetlink_queue in
:mod:`testbed.link.delayline.nfqueue`.

Why not pyroute2: the tracers' reasons are in those modules; the delay line is a separate process
that must start fast and import nothing beyond the standard library.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import time
from collections.abc import Iterator

NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
RTA = struct.Struct("=HH")  # len, type (struct nlattr / struct rtattr)
_ERRNO = struct.Struct("=i")  # struct nlmsgerr starts with the (negative) error

NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLM_F_DUMP = 0x300  # NLM_F_ROOT | NLM_F_MATCH
NLA_TYPE_MASK = 0x3FFF  # strips NLA_F_NESTED and NLA_F_NET_BYTEORDER


def align(length: int) -> int:
    """``length`` rounded up to the 4-byte netlink alignment (NLMSG_ALIGN, NLA_ALIGN)."""
    return (length + 3) & ~3


def message(kind: int, flags: int, seq: int, body: bytes) -> bytes:
    """One netlink message: header (port id 0: the kernel) and ``body``."""
    return NLMSGHDR.pack(NLMSGHDR.size + len(body), kind, flags, seq, 0) + body


def nla(kind: int, payload: bytes) -> bytes:
    """One attribute, padded to the 4-byte alignment."""
    length = RTA.size + len(payload)
    return RTA.pack(length, kind) + payload + b"\0" * ((-length) & 3)


def error_code(body: bytes | bytearray | memoryview, offset: int = 0) -> int:
    """The errno of an NLMSG_ERROR body starting at ``offset`` (0: an ack)."""
    return -_ERRNO.unpack_from(body, offset)[0]


def messages(view: memoryview, n: int) -> Iterator[tuple[int, int, memoryview]]:
    """(type, seq, body) of each netlink message in the first ``n`` bytes of ``view``."""
    off = 0
    while off + NLMSGHDR.size <= n:
        length, kind, _flags, seq, _ = NLMSGHDR.unpack_from(view, off)
        if length < NLMSGHDR.size or off + length > n:
            raise OSError(f"malformed netlink message (length {length})")
        yield kind, seq, view[off + NLMSGHDR.size : off + length]
        off += align(length)


def attributes(body: memoryview, offset: int = 0) -> dict[int, memoryview]:
    """Type -> payload of the attributes of ``body`` that start at ``offset`` (after the
    message's fixed header); NLA_F_* flag bits are stripped from the types."""
    attrs = {}
    off = offset
    while off + RTA.size <= len(body):
        length, kind = RTA.unpack_from(body, off)
        if length < RTA.size:
            break
        attrs[kind & NLA_TYPE_MASK] = body[off + RTA.size : off + length]
        off += align(length)
    return attrs


def request(
    sock: socket.socket, msg: bytes, seq: int, buf: bytearray, timeout: float = 5.0
) -> None:
    """Send ``msg`` (built with NLM_F_ACK and sequence number ``seq``) and wait for its ack.

    Other messages read meanwhile are skipped: on a socket that also receives events (the delay
    line's packets) the ack may come after some of them. Raises OSError with the kernel's errno
    if the request was refused, ETIMEDOUT if no ack came within ``timeout`` seconds. The socket's
    blocking mode is restored afterwards."""
    saved = sock.gettimeout()
    deadline = time.monotonic() + timeout
    view = memoryview(buf)
    try:
        sock.send(msg)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise OSError(errno.ETIMEDOUT, "no netlink ack")
            sock.settimeout(max(0.01, left))
            try:
                n = sock.recv_into(buf)
            except TimeoutError as e:
                raise OSError(errno.ETIMEDOUT, "no netlink ack") from e
            for kind, mseq, body in messages(view, n):
                if kind == NLMSG_ERROR and mseq == seq:
                    err = error_code(body)
                    if err:
                        raise OSError(err, os.strerror(err))
                    return
    finally:
        sock.settimeout(saved)
