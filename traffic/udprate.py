"""Paced UDP capacity probe (the link self-check's measure of what the shaper lets through).

    python -m traffic.udprate serve --port 5297 --skip 0.2 --window 1.0  # READY, one JSON line
    python -m traffic.udprate send --host west-h0 --port 5297 --rate 105e6 --duration 1.5

The sender paces full-size datagrams (the interface MTU less 28) slightly above the link's rate,
so the shaper is always backlogged and drops the excess. The receiver counts the frame bytes that
arrive from ``skip`` seconds after the first datagram for ``window`` seconds, both edges from the
*kernel's* receive timestamps (SO_TIMESTAMPNS), so its own scheduling does not move them. Sends
are UDP GSO and the receiver asks for GRO, so both ends make few system calls even at Gbit/s
rates; the receiver reports the socket's own drops (SO_RXQ_OVFL: the probe, not the link, lost).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import struct
import sys
import time

from testbed.core.frames import ETH_HEADER, UDP_IP_HEADERS, UDP_PAYLOAD

SOL_UDP = 17
UDP_SEGMENT = 103
UDP_GRO = 104
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
SO_RXQ_OVFL = 40
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
SEGMENTS = 44  # per send: 44 x 1472 payload bytes + headers fit one 64 KB GSO packet
FRAME = UDP_PAYLOAD + UDP_IP_HEADERS + ETH_HEADER
TIMESPEC = struct.Struct("@qq")


def frame_bytes(payload: int, segment: int = UDP_PAYLOAD) -> int:
    """Frame bytes of ``payload`` bytes sent as full-size datagrams of ``segment`` payload
    bytes (the last may be short)."""
    segments = -(-payload // segment)
    return payload + segments * (UDP_IP_HEADERS + ETH_HEADER)


def serve(
    port: int, skip: float, window: float, idle: float = 3.0, segment: int = UDP_PAYLOAD
) -> dict:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        with contextlib.suppress(OSError):  # without GRO: one datagram per read, fine when slow
            s.setsockopt(SOL_UDP, UDP_GRO, 1)
        s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        s.setsockopt(socket.SOL_SOCKET, SO_RXQ_OVFL, 1)
        try:
            s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 32 << 20)
        except OSError:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 20)
        s.bind(("0.0.0.0", port))
        s.settimeout(idle * 4)  # until the first datagram
        print("READY", flush=True)
        space = socket.CMSG_SPACE(TIMESPEC.size) + socket.CMSG_SPACE(4) + socket.CMSG_SPACE(4)
        first = None
        begin = end = 0.0  # set at the first datagram
        t_a = t_b = None
        counted = received = last_bytes = 0
        drops = 0
        while True:
            try:
                data, anc, _, _ = s.recvmsg(1 << 16, space)
            except TimeoutError:
                break
            t = None
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = TIMESPEC.unpack_from(payload)
                    t = sec + nsec * 1e-9
                elif level == socket.SOL_SOCKET and kind == SO_RXQ_OVFL:
                    drops = int.from_bytes(payload[:4], sys.byteorder)
            if t is None:
                t = time.time()
            received += len(data)
            if first is None:
                first, begin, end = t, t + skip, t + skip + window
                s.settimeout(idle)
            if t < begin:
                continue
            if t > end:
                break
            # A GRO aggregate carries the kernel timestamp of its first datagram: its bytes
            # arrive from t on. Bytes between the first and the last counted timestamp are those
            # of every aggregate but the last.
            if t_a is None:
                t_a = t
            else:
                counted += last_bytes
            last_bytes = frame_bytes(len(data), segment)
            t_b = t
    seconds = (t_b - t_a) if t_a is not None and t_b is not None else 0.0
    return {
        "frame_bytes": counted,
        "seconds": seconds,
        "rate_bps": counted * 8 / seconds if seconds > 0 else None,
        "payload_received": received,
        "socket_drops": drops,
    }


def send(host: str, port: int, rate: float, duration: float, segment: int = UDP_PAYLOAD) -> dict:
    addr = (socket.gethostbyname(host), port)
    chunk = bytes(segment * SEGMENTS)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.setsockopt(SOL_UDP, UDP_SEGMENT, segment)
            per_send = chunk
        except OSError:
            per_send = chunk[:segment]
        bits = frame_bytes(len(per_send), segment) * 8
        gap = bits / rate
        start = time.monotonic()
        due = start
        sent = errors = 0
        while (now := time.monotonic()) - start < duration:
            if now < due:
                time.sleep(due - now)
            try:
                s.sendto(per_send, addr)
                sent += len(per_send)
            except OSError:
                errors += 1  # ENOBUFS and the like: the excess was going to be dropped anyway
            due += gap
        seconds = time.monotonic() - start
    return {
        "payload_sent": sent,
        "send_rate_bps": frame_bytes(sent, segment) * 8 / seconds,
        "send_errors": errors,
        "gso": len(per_send) > segment,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m traffic.udprate")
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--skip", type=float, default=0.2)
    s.add_argument("--window", type=float, default=1.0)
    s.add_argument("--payload", type=int, default=UDP_PAYLOAD, help="bytes per datagram")
    c = sub.add_parser("send")
    c.add_argument("--host", required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--rate", type=float, required=True, help="bit/s of Ethernet frames")
    c.add_argument("--duration", type=float, default=1.5)
    c.add_argument("--payload", type=int, default=UDP_PAYLOAD, help="bytes per datagram (MTU - 28)")
    args = p.parse_args(argv)
    if args.mode == "serve":
        result = serve(args.port, args.skip, args.window, segment=args.payload)
    else:
        result = send(args.host, args.port, args.rate, args.duration, args.payload)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
