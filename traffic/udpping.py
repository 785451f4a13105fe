"""UDP round-trip probe with microsecond resolution (ping prints 3 significant digits: 101 ms).

    python -m traffic.udpping serve --port 5300            # prints READY, echoes until killed
    python -m traffic.udpping probe --host west-h0 --port 5300 --count 200 --interval 0.01

The prober prints one JSON line: ``rtts`` in seconds (lost probes omitted), ``sent``, ``lost``,
``reordered``, and the one-way split (``forward``, ``reverse``: all namespaces share one clock).
``one_way`` is the same probe without the echo, for a caller holding both ends' sockets
(``testbed.live.calibrate`` measures every WAN direction's floor that way at bring-up).

What is timed is the network, not the two Python processes: both ends take the *kernel's*
receive timestamp (SO_TIMESTAMPNS), and the echo server reports how long the packet sat with it,
which is subtracted, as NTP does; otherwise two process wake-ups would count as link delay.
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
from collections.abc import Sequence

PROBE = struct.Struct("!IQ")  # sequence, send time (ns, CLOCK_REALTIME)
# Appended by the echo server: its kernel receive time and how long it held the probe (ns).
STAMP = struct.Struct("!QQ")
SCM_TIMESTAMPNS = getattr(socket, "SCM_TIMESTAMPNS", 35)
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
TIMESPEC = struct.Struct("@qq")


def timestamped_socket() -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    return s


def _recv(s: socket.socket) -> tuple[bytes, tuple, int]:
    """(data, peer, kernel receive time in ns, CLOCK_REALTIME; now if the kernel gave none)."""
    data, ancillary, _, peer = s.recvmsg(2048, socket.CMSG_SPACE(TIMESPEC.size))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS:
            sec, nsec = TIMESPEC.unpack_from(payload)
            return data, peer, sec * 1_000_000_000 + nsec
    return data, peer, time.time_ns()


def serve(port: int) -> None:
    with timestamped_socket() as s:
        s.bind(("0.0.0.0", port))
        print("READY", flush=True)
        while True:
            data, peer, received = _recv(s)
            held = time.time_ns() - received
            s.sendto(data[: PROBE.size] + STAMP.pack(received, held), peer)


def probe(host: str, port: int, count: int, interval: float, wait: float) -> dict:
    addr = (socket.gethostbyname(host), port)
    rtts: dict[int, tuple[float, float, float]] = {}
    order: list[int] = []
    with timestamped_socket() as s:
        s.setblocking(False)
        start = time.monotonic()
        for seq in range(count):
            due = start + seq * interval
            while (now := time.monotonic()) < due:
                _drain(s, rtts, order, timeout=due - now)
            s.sendto(PROBE.pack(seq, time.time_ns()), addr)
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


def one_way(
    pairs: Sequence[tuple[socket.socket, socket.socket]],
    count: int,
    interval: float,
    wait: float,
) -> list[dict[int, float]]:
    """One-way delays (s) of ``count`` probes per (sender, receiver) pair, all pairs at once: the
    receiver (a :func:`timestamped_socket` bound to its host's address) takes the kernel's
    receive stamp, the sender's send time is in the probe, as ``forward`` in :func:`probe`.
    Returns, per pair, sequence -> delay of the probes that arrived within ``wait`` s of the
    last send."""
    got: list[dict[int, float]] = [{} for _ in pairs]
    index = {recv.fileno(): i for i, (_, recv) in enumerate(pairs)}
    addrs = [recv.getsockname() for _, recv in pairs]
    for _, recv in pairs:
        recv.setblocking(False)

    def drain(timeout: float) -> None:
        ready, _, _ = select.select([r for _, r in pairs], [], [], max(0.0, timeout))
        for r in ready:
            while True:
                try:
                    data, _, received = _recv(r)
                except BlockingIOError:
                    break
                seq, sent = PROBE.unpack_from(data)
                got[index[r.fileno()]][seq] = (received - sent) / 1e9

    # The pairs take turns, spread evenly over each interval: with the interval longer than the
    # path's own latency, every probe crosses an otherwise idle path, as an idle ping does.
    start = time.monotonic()
    step = interval / len(pairs) if pairs else interval
    for seq in range(count):
        for (send, _), addr, i in zip(pairs, addrs, itertools.count(), strict=False):
            due = start + seq * interval + i * step
            while (now := time.monotonic()) < due:
                drain(due - now)
            send.sendto(PROBE.pack(seq, time.time_ns()), addr)
    deadline = time.monotonic() + wait
    while any(len(g) < count for g in got) and (now := time.monotonic()) < deadline:
        drain(deadline - now)
    return got


def _drain(
    s: socket.socket, rtts: dict[int, tuple[float, float, float]], order: list[int], timeout: float
) -> None:
    ready, _, _ = select.select([s], [], [], max(0.0, timeout))
    while ready:
        try:
            data, _, now = _recv(s)
        except BlockingIOError:
            return
        seq, sent = PROBE.unpack_from(data)
        echoed, held = STAMP.unpack_from(data, PROBE.size)
        rtts[seq] = (
            (now - sent - held) / 1e9,
            (echoed - sent) / 1e9,
            (now - echoed - held) / 1e9,
        )
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
