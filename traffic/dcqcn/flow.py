"""A DCQCN flow over UDP, run inside host namespaces: the sender is the reaction point (RP), the
receiver the notification point (NP).

    python -m traffic.dcqcn.flow recv --bind ADDR --port P --params JSON --out DIR   # READY
    python -m traffic.dcqcn.flow send --to ADDR --port P --flow I --line-rate BPS \
        --duration S --params JSON --out DIR [--size 1400] [--tick 0.0002]

``--params`` is :class:`testbed.core.dcqcn.DcqcnParams` as JSON (already in emulated units). The
sender paces ECT(0) datagrams in userspace at the RP's rate (no UDP GSO, so the bottleneck marks
each datagram), reading CNPs and advancing the RP's timers every tick; the receiver hands each CE
to the NP and sends the CNPs it asks for. Both write their events to DIR (``rp-<flow>.jsonl``,
the replay's ``.npy`` inputs, ``np.jsonl``, ``rx.jsonl``) on this host's CLOCK_MONOTONIC, with
the unix time of monotonic zero in each file's first line (docs/congestion.md, "DCQCN").
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import json
import select
import signal
import socket
import struct
import sys
import time
from pathlib import Path
from typing import cast

import numpy as np

from testbed.core.dcqcn import DcqcnParams
from traffic.dcqcn.np import NotificationPoint
from traffic.dcqcn.rp import ReactionPoint

ECT0 = 0x02
CE = 0x03
HEADER = struct.Struct("!IQd")  # flow, sequence, send time (monotonic)
CNP = struct.Struct("!Id")  # flow, time the receiver sent it
CNP_MAGIC = b"CNP1"
INTERVAL = 0.1  # s per receiver window
IP_RECVTOS = getattr(socket, "IP_RECVTOS", 13)
IP_TOS = getattr(socket, "IP_TOS", 1)
PR_SET_TIMERSLACK = 29


def params_from_json(text: str) -> DcqcnParams:
    return DcqcnParams(**json.loads(text))


def params_to_json(p: DcqcnParams) -> str:
    return json.dumps(dataclasses.asdict(p))


def _clock_line() -> str:
    return json.dumps({"monotonic_zero_unix": time.time() - time.monotonic()})


def _fine_timer_slack() -> None:
    """1 µs timer slack for this process: the default 50 µs lengthens every short pacing sleep
    (asked 200 Mbit/s, a 1400-byte datagram every 56 µs, the sender managed 158-178)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0)


# -- sender (RP) ----------------------------------------------------------------------------------
def send(
    to: str,
    port: int,
    flow: int,
    line_rate: float,
    duration: float,
    params: DcqcnParams,
    out: Path,
    size: int = 1400,
    tick: float = 200e-6,
    linger: float = 0.3,
) -> dict:
    """Send for ``duration`` seconds at the RP's rate (or until SIGTERM: a run that stops the flow
    early still gets its records), then take the CNPs still coming back until none came for
    ``linger`` seconds."""
    _fine_timer_slack()
    stopped: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopped.append(signum))
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, IP_TOS, ECT0)
    s.setblocking(False)
    payload = bytearray(size)
    start = time.monotonic()
    rp = ReactionPoint(params, line_rate, t0=start, record_calls=False)
    sends: list[float] = []
    cnps: list[float] = []
    seq = 0
    next_send = start
    end = start + duration
    errors = 0

    def take_cnps() -> None:
        while True:
            try:
                data = s.recv(64)
            except BlockingIOError:
                return
            if data[:4] == CNP_MAGIC:
                t = time.monotonic()
                rp.on_cnp(t)
                cnps.append(t)

    while True:
        now = time.monotonic()
        if now >= end or stopped:
            break
        take_cnps()
        now = time.monotonic()
        rp.advance(now)
        next_send = max(next_send, now - tick)  # no catch-up burst beyond one tick
        while next_send <= now:
            HEADER.pack_into(payload, 0, flow, seq, now)
            try:
                s.sendto(payload, (to, port))
            except (BlockingIOError, OSError):
                errors += 1  # a full socket buffer or no route: the datagram is not sent
            else:
                rp.on_sent(now, size)
                sends.append(now)
                seq += 1
            next_send += size * 8 / rp.rate
        wait = min(next_send, now + tick) - time.monotonic()
        if wait > 0:
            time.sleep(wait)
    seconds = time.monotonic() - start
    # the datagrams still queued at the bottleneck are marked and answered after the last send:
    # take those CNPs too, so that every CNP this flow caused is in its log
    quiet_until = time.monotonic() + linger
    while (now := time.monotonic()) < quiet_until:
        before = len(cnps)
        select.select([s], [], [], quiet_until - now)
        take_cnps()
        if len(cnps) > before:
            quiet_until = time.monotonic() + linger
    s.close()
    with (out / f"rp-{flow}.jsonl").open("w") as f:
        head = json.loads(_clock_line()) | {"t0": start, "line_rate_bps": line_rate}
        f.write(json.dumps(head) + "\n")
        for e in rp.events:
            f.write(json.dumps(e._asdict()) + "\n")
    np.save(out / f"rp-{flow}-sends.npy", np.asarray(sends))
    np.save(out / f"rp-{flow}-cnps.npy", np.asarray(cnps))
    return {
        "flow": flow,
        "sent": seq,
        "cnps": len(cnps),
        "send_errors": errors,
        "seconds": seconds,  # sending, without the linger
        "final_rate_bps": rp.rate,
    }


# -- receiver (NP) --------------------------------------------------------------------------------
def recv(bind: str, port: int, params: DcqcnParams, out: Path, until: float | None = None) -> dict:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, IP_RECVTOS, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.bind((bind, port))
    s.settimeout(INTERVAL / 4)
    npoint = NotificationPoint(params, record=False)
    senders: dict[int, tuple[str, int]] = {}
    windows: dict[int, list[int]] = {}  # flow -> [bytes, datagrams, ce]
    total = {"datagrams": 0, "ce": 0, "cnps": 0}
    np_log = (out / "np.jsonl").open("w")
    rx_log = (out / "rx.jsonl").open("w")
    np_log.write(_clock_line() + "\n")
    rx_log.write(_clock_line() + "\n")
    print("READY", flush=True)
    window_end = time.monotonic() + INTERVAL
    idle_since = time.monotonic()

    def cnp(t: float, flow: int) -> None:
        addr = senders.get(flow)
        if addr is None:
            return
        s.sendto(CNP_MAGIC + CNP.pack(flow, t), addr)
        total["cnps"] += 1
        np_log.write(json.dumps({"t": t, "flow": flow}) + "\n")

    try:
        while until is None or time.monotonic() < until:
            try:
                data, anc, _, addr = s.recvmsg(2048, socket.CMSG_SPACE(4))
            except TimeoutError:
                data = b""
            now = time.monotonic()
            if data and len(data) >= HEADER.size:
                idle_since = now
                flow = HEADER.unpack_from(data)[0]
                senders[flow] = addr
                tos = next(
                    (d[0] for lvl, typ, d in anc if lvl == socket.IPPROTO_IP and typ == IP_TOS),
                    0,
                )
                ce = tos & 3 == CE
                w = windows.setdefault(flow, [0, 0, 0])
                w[0] += len(data)
                w[1] += 1
                w[2] += ce
                total["datagrams"] += 1
                total["ce"] += ce
                if npoint.on_packet(now, flow, ce):
                    cnp(now, flow)
            for f in npoint.due(now):
                cnp(now, cast(int, f))  # the flows it was given: ints
            if now >= window_end:
                for flow, (nbytes, n, marked) in windows.items():
                    row = {"t": window_end, "seconds": INTERVAL, "flow": flow}
                    row |= {"bytes": nbytes, "datagrams": n, "ce": marked}
                    rx_log.write(json.dumps(row) + "\n")
                windows = {f: [0, 0, 0] for f in windows}
                window_end += INTERVAL * max(1, int((now - window_end) / INTERVAL) + 1)
                rx_log.flush()
                np_log.flush()
            if until is None and total["datagrams"] and now - idle_since > 2.0:
                break  # every sender has been quiet for 2 s: done
    finally:
        np_log.close()
        rx_log.close()
        s.close()
    return total


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m traffic.dcqcn.flow")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("recv")
    r.add_argument("--bind", required=True)
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--params", required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--until", type=float, default=None, help="monotonic time to stop at")
    w = sub.add_parser("send")
    w.add_argument("--to", required=True)
    w.add_argument("--port", type=int, required=True)
    w.add_argument("--flow", type=int, required=True)
    w.add_argument("--line-rate", type=float, required=True)
    w.add_argument("--duration", type=float, required=True)
    w.add_argument("--params", required=True)
    w.add_argument("--out", type=Path, required=True)
    w.add_argument("--size", type=int, default=1400)
    w.add_argument("--tick", type=float, default=200e-6)
    a = p.parse_args(argv)
    params = params_from_json(a.params)
    a.out.mkdir(parents=True, exist_ok=True)
    if a.cmd == "recv":
        got = recv(a.bind, a.port, params, a.out, a.until)
    else:
        got = send(a.to, a.port, a.flow, a.line_rate, a.duration, params, a.out, a.size, a.tick)
    print(json.dumps(got), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
