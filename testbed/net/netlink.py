"""Raw netlink framing shared by the tracers: splitting a receive buffer into messages and a
message body into its attributes. Standard library only (pyroute2 is not used for tracing: see
testbed.trace_tcp and testbed.trace_queues for why)."""

from __future__ import annotations

import struct
from collections.abc import Iterator

NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
RTA = struct.Struct("=HH")  # len, type


def messages(view: memoryview, n: int) -> Iterator[tuple[int, int, memoryview]]:
    """(type, seq, body) of each netlink message in the first ``n`` bytes of ``view``."""
    off = 0
    while off + NLMSGHDR.size <= n:
        length, kind, _flags, seq, _ = NLMSGHDR.unpack_from(view, off)
        if length < NLMSGHDR.size or off + length > n:
            raise OSError(f"malformed netlink message (length {length})")
        yield kind, seq, view[off + NLMSGHDR.size : off + length]
        off += (length + 3) & ~3


def attributes(body: memoryview, offset: int = 0) -> dict[int, memoryview]:
    """Type -> payload of the attributes of ``body`` that start at ``offset`` (after the
    message's fixed header); NLA_F_* flag bits are stripped from the types."""
    attrs = {}
    off = offset
    while off + RTA.size <= len(body):
        length, kind = RTA.unpack_from(body, off)
        if length < RTA.size:
            break
        attrs[kind & 0x3FFF] = body[off + RTA.size : off + length]
        off += (length + 3) & ~3
    return attrs
