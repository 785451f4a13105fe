"""Benchmark: the delay line's per-packet CPU cost in userspace, without a kernel.

    .venv/bin/python -m benchmarks.delayline_hotpath [--packets 100000] [--rounds 7] [--write]

Feeds synthetic NFQNL_MSG_PACKET messages (laid out as the kernel sends them) through
``DelayLine._drain`` over a fake socket, then releases everything with ``_release_due``, and
reports CPU nanoseconds per packet (``time.process_time``, garbage collector off as in the line;
the minimum over the rounds: the least disturbed one) for a plain delay, jitter, 1% loss and a
RED bottleneck, reading 64 messages per recv and one per recv (what the kernel does: each packet
is its own netlink datagram, so a recv mostly returns one). It measures only the Python hot path:
the kernel's share (queueing, the verdict syscalls, forwarding) is in link_fidelity's CPU column.
Compare runs on the same machine only, and on a quiet one.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import random
import struct
import time

from benchmarks._results import write_section
from testbed.link.delayline.config import Config
from testbed.link.delayline.loop import DelayLine
from testbed.link.delayline.model import Queue
from testbed.net.netlink import message, nla

CASES = {
    "delay 25 ms": {"delay": 0.025},
    "+ jitter 1 ms": {"delay": 0.025, "jitter": 0.001},
    "+ loss 1%": {"delay": 0.025, "loss": 0.01},
    "RED bottleneck": {
        "delay": 0.025,
        "rate": 1e12,
        "buffer": 1 << 30,
        "aqm": {"kind": "red", "kmin": 1e9, "kmax": 2e9, "pmax": 0.1},
    },
}
PER_RECV = 64


def packet(num: int, pid: int, length: int, stamp: float) -> bytes:
    sec = int(stamp)
    attrs = (
        nla(1, struct.pack(">IHB", pid, 0x0800, 0))  # NFQA_PACKET_HDR
        + nla(5, struct.pack(">I", 3))  # NFQA_IFINDEX_INDEV
        + nla(4, struct.pack(">QQ", sec, int((stamp - sec) * 1e6)))  # NFQA_TIMESTAMP
        + nla(13, struct.pack(">I", length))  # NFQA_CAP_LEN
        + nla(10, bytes([0x45, 0x02]))  # NFQA_PAYLOAD: 2 bytes, ECT(0)
    )
    return message(3 << 8, 0, 0, struct.pack(">BBH", 0, 0, num) + attrs)


class FakeSocket:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.i = 0

    def recv_into(self, buf: bytearray) -> int:
        if self.i >= len(self.chunks):
            raise BlockingIOError
        chunk = self.chunks[self.i]
        self.i += 1
        buf[: len(chunk)] = chunk
        return len(chunk)

    def send(self, data: bytes) -> int:
        return len(data)


def one_round(queue: dict, packets: int, per_recv: int = PER_RECV) -> tuple[float, float]:
    """(drain, release) nanoseconds per packet, ``per_recv`` messages per recv."""
    cfg = Config.from_dict({"queues": [{"num": 1, "seed": 1, **queue}]})
    line = DelayLine(cfg)
    q = Queue(cfg.queues[0], random.Random(1))
    line.queues.append(q)
    line.by_num[1] = q
    length = 1500 if q.cfg.rate else 65000
    now = time.time()
    msgs = [packet(1, pid, length, now) for pid in range(1, packets + 1)]
    line.sock = FakeSocket(  # type: ignore[assignment]
        [b"".join(msgs[i : i + per_recv]) for i in range(0, packets, per_recv)]
    )
    gc.collect()
    gc.disable()
    try:
        t0 = time.process_time()
        while line._drain(1024):
            pass
        t1 = time.process_time()
        line._release_due(float("inf"))
        t2 = time.process_time()
    finally:
        gc.enable()
    return (t1 - t0) / packets * 1e9, (t2 - t1) / packets * 1e9


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--packets", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = p.parse_args()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print("## Delay line hot path (userspace only, fake socket)\n")
        print(f"CPU ns per packet, minimum of {args.rounds} rounds of {args.packets} packets.\n")
        print(
            f"| queue | read + decide (`_drain`), {PER_RECV} per recv | same, 1 per recv | "
            "release (`_release_due`) |"
        )
        print("|---|---|---|---|")
        for name, queue in CASES.items():
            rounds = [one_round(queue, args.packets) for _ in range(args.rounds)]
            singles = [one_round(queue, args.packets, 1) for _ in range(args.rounds)]
            drain = min(r[0] for r in rounds)
            single = min(r[0] for r in singles)
            rel = min(r[1] for r in rounds)
            print(f"| {name} | {drain:.0f} | {single:.0f} | {rel:.0f} |")
    print(buf.getvalue(), end="")
    if args.write:
        write_section("delayline_hotpath.py", buf.getvalue())


if __name__ == "__main__":
    main()
