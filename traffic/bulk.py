"""Bulk TCP sender and receivers run inside host namespaces: the link self-check's traffic and a
scenario's `traffic:` flows.

    python -m traffic.bulk serve --port 5201 [--warmup 1.0] [--buffer BYTES]  # READY, one JSON line
    python -m traffic.bulk send --host west-h0 --port 5201 --duration 3 [--buffer BYTES]
                                [--congestion cubic]
    python -m traffic.bulk sink --port 5201 --out FILE [--interval 0.1]       # READY, samples

``serve`` counts one connection's bytes until EOF and reports goodput after ``warmup`` (so slow
start does not count) and over the whole transfer; ``sink`` (testbed.experiment.flows) writes one
JSON line per ``interval`` window. ``--buffer`` fixes both socket buffers instead of letting
autotuning grow them a round trip at a time, so the link, not the receive window, holds the flow
back. Standard library only, zero-copy friendly (``recv_into``, ``sendall`` of a memoryview).
The window starts at the lowest-reading of ``MARKS`` candidate marks ``--spacing`` apart (see
``serve``); ``mark_buffered_bytes`` is what sat unread in the receive buffer at the mark.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time

CHUNK = 1 << 20


# offsets in struct tcp_info (linux/tcp.h)
TCPI_BYTES_RECEIVED = 128  # u64: in-order payload bytes (rcv_nxt), what the app can read
TCPI_RCV_OOOPACK = 224  # u32: out-of-order packets received so far
MARKS = 5  # window-start candidates


def _bytes_received(conn: socket.socket, fallback: int) -> tuple[int, int | None]:
    """(in-order bytes received, out-of-order packets so far) from the kernel."""
    info = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    if len(info) < TCPI_BYTES_RECEIVED + 8:
        return fallback, None
    received = int.from_bytes(info[TCPI_BYTES_RECEIVED : TCPI_BYTES_RECEIVED + 8], sys.byteorder)
    ooo = None
    if len(info) >= TCPI_RCV_OOOPACK + 4:
        ooo = int.from_bytes(info[TCPI_RCV_OOOPACK : TCPI_RCV_OOOPACK + 4], sys.byteorder)
    return received, ooo


TCP_NOTSENT_LOWAT = getattr(socket, "TCP_NOTSENT_LOWAT", 25)
SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)


def _force_buffer(s: socket.socket, force: int, plain: int, size: int) -> None:
    try:
        s.setsockopt(socket.SOL_SOCKET, force, size)
    except OSError:  # not root: the sysctl maximum caps it
        s.setsockopt(socket.SOL_SOCKET, plain, size)


def serve(port: int, warmup: float, buffer: int = 0, spacing: float = 0.05) -> dict:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if buffer:  # before listen: the window scale is chosen at the handshake
        _force_buffer(srv, SO_RCVBUFFORCE, socket.SO_RCVBUF, buffer)
    with srv:
        srv.bind(("0.0.0.0", port))
        srv.listen(1)
        print("READY", flush=True)
        conn, peer = srv.accept()
    with conn:
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        total = 0
        start = time.monotonic()
        marks: list[dict] = []
        last = start
        while True:
            n = conn.recv_into(view)
            if not n:
                break
            total += n
            last = time.monotonic()
            if len(marks) < MARKS and last - start >= warmup + len(marks) * spacing:
                # The kernel's count, not ours: bytes already waiting in the socket buffer
                # arrived before the mark and must not count toward the measured window.
                received, ooo = _bytes_received(conn, total)
                marks.append({"t": last - start, "bytes": received, "buffered": received - total})
                marks[-1]["ooo_packets"] = ooo
                marks[-1]["_t"] = last
        algo = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
    elapsed = max(last - start, 1e-9)
    for m in marks:
        t = m.pop("_t")
        m["goodput_bps"] = (total - m["bytes"]) * 8 / (last - t) if last > t else None
    rates = [m["goodput_bps"] for m in marks if m["goodput_bps"]]
    # Data that arrived out of order before a mark (a loss being repaired) is not yet in the
    # in-order count, so it lands inside the window when the hole fills: that start reads
    # high. Never low: so the lowest of marks a round trip apart is the honest one.
    steady = min(rates) if rates else None
    return {
        "peer": peer[0],
        "bytes": total,
        "seconds": elapsed,
        "goodput_bps": total * 8 / elapsed,
        "steady_goodput_bps": steady,
        "first_mark_goodput_bps": rates[0] if rates else None,
        "mark_buffered_bytes": marks[0]["buffered"] if marks else 0,
        "marks": marks,
        "receiver_congestion": algo.split(b"\0", 1)[0].decode(),
    }


def sink(port: int, out: str, interval: float = 0.1) -> dict:
    """Receive one connection until EOF, writing its goodput every ``interval`` s to ``out``."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    with srv:
        srv.bind(("0.0.0.0", port))
        srv.listen(1)
        print("READY", flush=True)
        conn, peer = srv.accept()
    view = memoryview(bytearray(CHUNK))
    total = window = 0
    samples = 0
    with conn, open(out, "w") as f:
        start = last = time.monotonic()
        tick = last + interval

        def sample(now: float) -> None:
            nonlocal window, last, samples
            rate = window * 8 / (now - last) if now > last else 0.0
            row = {"t": time.time(), "seconds": now - last, "bytes": window, "goodput_bps": rate}
            f.write(json.dumps(row) + "\n")
            f.flush()
            window, last, samples = 0, now, samples + 1

        while True:
            now = time.monotonic()
            if now >= tick:
                sample(now)
                while tick <= now:  # a late wake-up: the next window still ends on the grid
                    tick += interval
            conn.settimeout(max(tick - now, 1e-3))
            try:
                n = conn.recv_into(view)
            except TimeoutError:
                continue
            if not n:
                break
            window += n
            total += n
        end = time.monotonic()
        if end > last:
            sample(end)
    return {"peer": peer[0], "bytes": total, "seconds": end - start, "samples": samples}


def send(
    host: str, port: int, duration: float, buffer: int = 0, congestion: str | None = None
) -> dict:
    payload = memoryview(bytes(CHUNK))
    sent = 0
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if congestion:  # before connect: the handshake already runs under the flow's algorithm
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, congestion.encode())
    if buffer:
        _force_buffer(s, SO_SNDBUFFORCE, socket.SO_SNDBUF, buffer)
        # keep little unsent data queued: after the deadline only what is in flight drains,
        # not a send buffer of several BDPs (seconds on a long fat link)
        s.setsockopt(socket.IPPROTO_TCP, TCP_NOTSENT_LOWAT, 2 * CHUNK)
    s.settimeout(30)
    s.connect((socket.gethostbyname(host), port))
    s.settimeout(None)
    deadline = time.monotonic() + duration
    with s:
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
    s.add_argument("--buffer", type=int, default=0, help="fixed receive buffer, bytes")
    s.add_argument("--spacing", type=float, default=0.05, help="seconds between window starts")
    c = sub.add_parser("send")
    c.add_argument("--host", required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--duration", type=float, default=3.0)
    c.add_argument("--buffer", type=int, default=0, help="fixed send buffer, bytes")
    c.add_argument("--congestion", default=None, help="TCP_CONGESTION of the flow")
    k = sub.add_parser("sink")
    k.add_argument("--port", type=int, required=True)
    k.add_argument("--out", required=True, help="file of the goodput samples (JSON lines)")
    k.add_argument("--interval", type=float, default=0.1, help="seconds per sample")
    args = p.parse_args(argv)
    if args.mode == "serve":
        result = serve(args.port, args.warmup, args.buffer, args.spacing)
    elif args.mode == "sink":
        result = sink(args.port, args.out, args.interval)
    else:
        result = send(args.host, args.port, args.duration, args.buffer, args.congestion)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
