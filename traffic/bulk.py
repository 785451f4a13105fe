"""Bulk TCP sender and receiver run inside host namespaces (the link self-check's traffic).

    python -m traffic.bulk serve --port 5201 [--warmup 1.0]     # prints READY, then one JSON line
    python -m traffic.bulk send --host west-h0 --port 5201 --duration 3

The receiver accepts one connection, counts bytes until EOF and prints goodput over the time after
``warmup`` seconds (so slow start does not count) and over the whole transfer. Standard library
only, zero-copy friendly: ``recv_into`` a preallocated buffer, ``sendall`` of one memoryview.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time

CHUNK = 1 << 20


TCPI_BYTES_RECEIVED = 128  # offset of tcpi_bytes_received (u64) in struct tcp_info


def _bytes_received(conn: socket.socket, fallback: int) -> int:
    info = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    if len(info) < TCPI_BYTES_RECEIVED + 8:
        return fallback
    return int.from_bytes(info[TCPI_BYTES_RECEIVED : TCPI_BYTES_RECEIVED + 8], sys.byteorder)


def serve(port: int, warmup: float) -> dict:
    with socket.create_server(("0.0.0.0", port), reuse_port=False) as srv:
        print("READY", flush=True)
        conn, peer = srv.accept()
    with conn:
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        total = 0
        start = time.monotonic()
        mark_t, mark_b = None, 0
        last = start
        while True:
            n = conn.recv_into(view)
            if not n:
                break
            total += n
            last = time.monotonic()
            if mark_t is None and last - start >= warmup:
                # The kernel's count, not ours: bytes already waiting in the socket buffer
                # arrived before the mark and must not count toward the measured window.
                mark_t, mark_b = last, _bytes_received(conn, total)
        algo = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
    elapsed = max(last - start, 1e-9)
    steady = None
    if mark_t is not None and last > mark_t:
        steady = (total - mark_b) * 8 / (last - mark_t)
    return {
        "peer": peer[0],
        "bytes": total,
        "seconds": elapsed,
        "goodput_bps": total * 8 / elapsed,
        "steady_goodput_bps": steady,
        "receiver_congestion": algo.split(b"\0", 1)[0].decode(),
    }


def send(host: str, port: int, duration: float) -> dict:
    payload = memoryview(bytes(CHUNK))
    deadline = time.monotonic() + duration
    sent = 0
    with socket.create_connection((host, port), timeout=30) as s:
        algo = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
        while time.monotonic() < deadline:
            s.sendall(payload)
            sent += CHUNK
        s.shutdown(socket.SHUT_WR)
        s.recv(1)  # wait for the receiver to close: all data was delivered
    return {"bytes": sent, "congestion": algo.split(b"\0", 1)[0].decode()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m traffic.bulk")
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--warmup", type=float, default=1.0)
    c = sub.add_parser("send")
    c.add_argument("--host", required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--duration", type=float, default=3.0)
    args = p.parse_args(argv)
    if args.mode == "serve":
        result = serve(args.port, args.warmup)
    else:
        result = send(args.host, args.port, args.duration)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
