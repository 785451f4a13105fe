"""The nfnetlink_queue protocol, over the shared framing of :mod:`testbed.net.netlink`.

This module owns what the family knows (linux/netfilter/nfnetlink_queue.h): its message types,
attribute numbers, verdicts and the layout of a packet message; the one netlink socket of the
process (:class:`NfQueueSocket`: receive buffer, binding and configuring a queue with acked
requests); building verdicts (:func:`verdict_msg`). Packet messages are read by the hot path
itself (:meth:`testbed.link.delayline.loop.DelayLine._messages`), inline, with the offsets below.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time

from testbed.link.delayline.config import QueueConfig
from testbed.net.netlink import NLM_F_ACK, NLM_F_REQUEST, NLMSGHDR, message, nla, request

NETLINK_NETFILTER = 12
SO_RCVBUFFORCE = 33
SO_TIMESTAMPNS = 35

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
NFQA_MARK = 3
NFQA_TIMESTAMP = 4
NFQA_PAYLOAD = 10
NFQA_CAP_LEN = 13

NF_DROP = 0
NF_ACCEPT = 1

# A packet message: nlmsghdr (16 bytes), nfgenmsg (4: family, version, then the queue number,
# big endian, at +18), then the attributes from +20. The kernel always puts NFQA_PACKET_HDR
# first: length 11 at +20, type at +22, the packet id (big endian) at +24, next attribute at +32.
# The hot path (loop.DelayLine._messages) reads packets inline with these offsets.
NFGENMSG = struct.Struct(">BBH")  # family, version, res_id (the queue number)
QUEUE_NUM_AT = NLMSGHDR.size + 2
ATTRS_AT = NLMSGHDR.size + NFGENMSG.size
PACKET_HDR_LEN = 11  # nlattr (4) + struct nfqnl_msg_packet_hdr (id, hw_protocol, hook: 7)
PACKET_ID_AT = ATTRS_AT + 4
FIRST_ATTRS_END = ATTRS_AT + 12  # after the padded NFQA_PACKET_HDR
_BE16 = struct.Struct(">H")
_BE32 = struct.Struct(">I")


def nfq_msg(mtype: int, flags: int, seq: int, queue_num: int, attrs: bytes) -> bytes:
    """An nfnetlink_queue message for ``queue_num`` (nfgenmsg: AF_UNSPEC, version 0)."""
    return message(mtype, flags, seq, NFGENMSG.pack(socket.AF_UNSPEC, 0, queue_num) + attrs)


def verdict_msg(
    queue_num: int, packet_id: int, verdict: int, *, batch: bool = False, mark: int | None = None
) -> bytes:
    """One verdict (``batch``: for all ids <= packet_id still queued); ``mark`` sets skb->mark."""
    mtype = NFQNL_MSG_VERDICT_BATCH if batch else NFQNL_MSG_VERDICT
    attrs = nla(NFQA_VERDICT_HDR, struct.pack(">II", verdict, packet_id & 0xFFFFFFFF))
    if mark is not None:
        attrs += nla(NFQA_MARK, _BE32.pack(mark & 0xFFFFFFFF))
    return nfq_msg(mtype, NLM_F_REQUEST, 0, queue_num, attrs)


def queue_number_at(buf: bytearray, off: int) -> int:
    """The queue number of the message at ``off`` (an NFQNL_MSG_PACKET or a verdict)."""
    return _BE16.unpack_from(buf, off + QUEUE_NUM_AT)[0]


def timestamp_socket() -> tuple[socket.socket, str | None]:
    """A dummy UDP socket with SO_TIMESTAMPNS: while one exists, the kernel timestamps received
    packets, and NFQUEUE passes the stamp on (NFQA_TIMESTAMP). Returns it and a warning if the
    option was refused (the line then uses the time of recv)."""
    ts = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        ts.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError as e:
        return ts, f"SO_TIMESTAMPNS failed ({e}); using recv time"
    return ts, None


class NfQueueSocket:
    """The process's one NETLINK_NETFILTER socket (non-blocking), for all its queues."""

    def __init__(self, rcvbuf: int) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self.buf = bytearray(1 << 17)
        self._seq = int(time.time()) & 0xFFFF
        self.warning: str | None = None
        sock = self.sock
        try:
            # above the rmem_max sysctl: bursts of arrivals must not overflow it
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf)
        except OSError as e:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            self.warning = (
                f"SO_RCVBUFFORCE failed ({e}); netlink receive buffer limited "
                f"to {sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)} bytes"
            )
        self.rcvbuf = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        sock.bind((0, 0))
        sock.setblocking(False)

    def config(self, num: int, attrs: bytes) -> None:
        """One NFQNL_MSG_CONFIG request for queue ``num``, acked (OSError if refused)."""
        self._seq += 1
        msg = nfq_msg(NFQNL_MSG_CONFIG, NLM_F_REQUEST | NLM_F_ACK, self._seq, num, attrs)
        request(self.sock, msg, self._seq, self.buf)

    def bind(self, qc: QueueConfig) -> None:
        """Bind queue ``qc.num`` and set its copy mode, length and flags."""
        num = qc.num
        try:
            self.config(num, nla(NFQA_CFG_CMD, struct.pack(">BBH", NFQNL_CFG_CMD_BIND, 0, 0)))
        except OSError as e:
            raise OSError(e.errno, f"cannot bind NFQUEUE {num}: {e.strerror}") from e
        if qc.copy_mode == "meta":
            params = struct.pack(">IB", 0, NFQNL_COPY_META)
        else:  # 1 byte of payload: makes the kernel report NFQA_CAP_LEN (packet length);
            # 2 bytes for a bottleneck, which reads the ECN bits of the TOS byte
            params = struct.pack(">IB", 2 if qc.bottleneck else 1, NFQNL_COPY_PACKET)
        self.config(num, nla(NFQA_CFG_PARAMS, params))
        self.config(num, nla(NFQA_CFG_QUEUE_MAXLEN, _BE32.pack(qc.maxlen)))
        self.config(
            num,
            nla(NFQA_CFG_FLAGS, _BE32.pack(NFQA_CFG_F_GSO))  # and FAIL_OPEN cleared
            + nla(NFQA_CFG_MASK, _BE32.pack(NFQA_CFG_F_GSO | NFQA_CFG_F_FAIL_OPEN)),
        )

    def unbind(self, num: int) -> None:
        with contextlib.suppress(OSError):
            self.config(num, nla(NFQA_CFG_CMD, struct.pack(">BBH", NFQNL_CFG_CMD_UNBIND, 0, 0)))

    def close(self) -> None:
        self.sock.close()
