"""UDP round-trip probe with microsecond resolution (ping prints 3 significant digits: 101 ms).

    python -m traffic.udpping serve --port 5300            # prints READY, echoes until killed
    python -m traffic.udpping probe --host west-h0 --port 5300 --count 200 --interval 0.01

The prober prints one JSON line: ``rtts`` in seconds (lost probes omitted), ``sent``, ``lost``
and ``reordered`` (replies that arrived after a later probe's reply). Each probe carries its
sequence number and send time, so late replies are matched correctly. All namespaces share one
CLOCK_MONOTONIC, so the server's receive stamp also splits each RTT into one-way delays
(``forward``, ``reverse``), which is how asymmetric links are checked.
"""

from __future__ import annotations

import argparse
import itertools
import json
import select
import socket
import struct
import sys
import time

PROBE = struct.Struct("!IQ")  # sequence, send time (ns)
STAMP = struct.Struct("!Q")  # the echo server's receive time (ns), appended to the reply


def serve(port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("0.0.0.0", port))
        print("READY", flush=True)
        while True:
            data, peer = s.recvfrom(2048)
            s.sendto(data[: PROBE.size] + STAMP.pack(time.monotonic_ns()), peer)


def probe(host: str, port: int, count: int, interval: float, wait: float) -> dict:
    addr = (socket.gethostbyname(host), port)
    rtts: dict[int, tuple[float, float, float]] = {}
    order: list[int] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setblocking(False)
        start = time.monotonic()
        for seq in range(count):
            due = start + seq * interval
            while (now := time.monotonic()) < due:
                _drain(s, rtts, order, timeout=due - now)
            s.sendto(PROBE.pack(seq, time.monotonic_ns()), addr)
        deadline = time.monotonic() + wait
        while len(rtts) < count and (now := time.monotonic()) < deadline:
            _drain(s, rtts, order, timeout=deadline - now)
    reordered = sum(1 for a, b in itertools.pairwise(order) if b < a)
    return {
        "sent": count,
        "lost": count - len(rtts),
        "reordered": reordered,
        "rtts": [rtts[k][0] for k in sorted(rtts)],
        "forward": [rtts[k][1] for k in sorted(rtts)],
        "reverse": [rtts[k][2] for k in sorted(rtts)],
    }


def _drain(
    s: socket.socket, rtts: dict[int, tuple[float, float, float]], order: list[int], timeout: float
) -> None:
    ready, _, _ = select.select([s], [], [], max(0.0, timeout))
    while ready:
        try:
            data = s.recv(2048)
        except BlockingIOError:
            return
        now = time.monotonic_ns()
        seq, sent = PROBE.unpack_from(data)
        (echoed,) = STAMP.unpack_from(data, PROBE.size)
        rtts[seq] = ((now - sent) / 1e9, (echoed - sent) / 1e9, (now - echoed) / 1e9)
        order.append(seq)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m traffic.udpping")
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--port", type=int, required=True)
    c = sub.add_parser("probe")
    c.add_argument("--host", required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--count", type=int, default=100)
    c.add_argument("--interval", type=float, default=0.01)
    c.add_argument("--wait", type=float, default=2.0, help="seconds to wait for late replies")
    args = p.parse_args(argv)
    if args.mode == "serve":
        serve(args.port)
        return 0
    print(json.dumps(probe(args.host, args.port, args.count, args.interval, args.wait)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
