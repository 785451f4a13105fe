"""Benchmark: how long a bulk TCP flow stalls behind a silent blackhole, against the prediction
of analysis.faults (Linux's tail loss probe, then the RTO series; docs/faults.md).

    sudo .venv/bin/python -m benchmarks.rto_series [--durations 0.5 1 2 4] [--write]

One bulk TCP flow east-h0 -> west-h0 (Python sockets, 64 KiB writes, cubic) on a 100 Mbit/s,
40 ms one-way link (1-BDP buffer, the backend `auto` picks). After 4 s of sending, every packet
the east gateway forwards is dropped (iptables DROP in its FORWARD chain: a stand-in for the
blackhole of testbed.net.faults until that lands; both directions cross that gateway) for D
seconds. Per D: srtt and rto as `ss` showed them just before, the receiver's stall (the blackhole's
start to the first byte after the gap it caused), the TLP + RTO prediction (predict_stall with
tlp_timeout), the one without TLP, and measured / predicted. The window starts before the
`iptables -I` call (its duration is shown: the rule takes effect somewhere inside it), so the
measured stall also holds the one-way delay and that call. Goal: measured / predicted (TLP) within
1.0-1.2 for every D ("within 20%").
"""

from __future__ import annotations

import argparse
import io
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from analysis.tcp import linux_rto, predict_stall, tlp_timeout
from benchmarks._results import Tee, write_section
from testbed.config.loading import parse_scenario
from testbed.live.network import Network

PORT = 5999
RECEIVER = r"""
import json, socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[2]))); s.listen(1); print("READY", flush=True)
c, _ = s.accept(); seen = []
while True:
    b = c.recv(1 << 16)
    if not b:
        break
    seen.append(time.monotonic())
json.dump(seen, open(sys.argv[1], "w"))
"""
SENDER = r"""
import socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[3])))
buf, end = b"x" * (1 << 16), time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    c.sendall(buf)
c.close()
"""


def scenario() -> dict:
    return {
        "name": "bench-rto",
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": [
            {"between": ["east", "west"], "rate": "100mbit", "delay": "40ms", "buffer": "1bdp"}
        ],
    }


def one(tb: Network, d: float, work: Path) -> dict:
    path = work / f"recv-{d:g}.json"
    west = tb.hosts["west-h0"]
    recv = tb.popen(
        "west-h0", [sys.executable, "-c", RECEIVER, str(path), str(PORT)], stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert recv.stdout is not None and recv.stdout.readline().strip() == "READY"
    total = 4.0 + d + 10.0
    send = tb.popen("east-h0", [sys.executable, "-c", SENDER, west, str(total), str(PORT)])
    time.sleep(4.0)
    ss = tb.run("east-h0", ["ss", "-tin", "dst", west]).stdout
    rto = re.search(r"\brto:([\d.]+)", ss)
    rtt = re.search(r"\brtt:([\d.]+)/([\d.]+)", ss)
    t_on = time.monotonic()
    tb.run("east-gw", ["iptables", "-I", "FORWARD", "1", "-j", "DROP"], check=True)
    call = time.monotonic() - t_on
    time.sleep(max(0.0, t_on + d - time.monotonic()))
    tb.run("east-gw", ["iptables", "-D", "FORWARD", "-j", "DROP"], check=True)
    t_off = time.monotonic()
    send.wait(timeout=total + 60)
    recv.wait(timeout=60)
    seen = json.loads(path.read_text())
    after = [t for t in seen if t > t_on]
    last = max([t for t in seen if t <= t_on] or [t_on])
    gap, back = max((b - a, b) for a, b in zip([last, *after], after, strict=False))
    srtt = float(rtt.group(1)) / 1e3 if rtt else 0.08
    rttvar = float(rtt.group(2)) / 1e3 if rtt else 0.0
    rto0 = float(rto.group(1)) / 1e3 if rto else linux_rto(srtt, rttvar)
    dark = [(0.0, t_off - t_on, False)]
    tlp = predict_stall(dark, rto0, pto_s=tlp_timeout(srtt, rto0)).stall_s
    plain = predict_stall(dark, rto0).stall_s
    measured = back - t_on
    return {
        "D": t_off - t_on,
        "iptables_s": call,
        "srtt": srtt,
        "rto0": rto0,
        "measured": measured,
        "tlp": tlp,
        "plain": plain,
        "gap": gap,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--durations", type=float, nargs="+", default=[0.5, 1.0, 1.5, 2.0, 3.0, 5.0])
    ap.add_argument("--write", action="store_true", help="replace this section of RESULTS.md")
    args = ap.parse_args()
    out = io.StringIO()
    tee = Tee(sys.stdout, out)
    tb = Network(parse_scenario(scenario(), "bench-rto"))
    with tempfile.TemporaryDirectory() as tmp:
        try:
            tb.up()
            print(f"backend: {tb.backend.name if tb.backend else '?'}", file=tee)
            print(
                "| blackhole | iptables -I | srtt | rto | receiver stall | TLP+RTO | meas/pred "
                "| without TLP | meas/pred |\n|---|---|---|---|---|---|---|---|---|",
                file=tee,
            )
            for d in args.durations:
                r = one(tb, d, Path(tmp))
                print(
                    f"| {r['D']:.2f} s | {r['iptables_s'] * 1e3:.0f} ms | {r['srtt'] * 1e3:.0f} ms"
                    f" | {r['rto0'] * 1e3:.0f} ms | {r['measured']:.2f} s | {r['tlp']:.2f} s | "
                    f"{r['measured'] / r['tlp']:.2f} | {r['plain']:.2f} s | "
                    f"{r['measured'] / r['plain']:.2f} |",
                    file=tee,
                )
        finally:
            tb.down()
    if args.write:
        write_section("rto_series.py", out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
