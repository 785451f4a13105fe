"""Benchmark: how many DCQCN datagrams a second sender + delay line + receiver sustain on this
machine (measured first: it decides which dilation factors are honest here).

    sudo .venv/bin/python -m benchmarks.dcqcn [--write] [--seconds 5]

2 clusters x 1 host, a WAN of 10 Gbit/s (so the link never limits), 1 ms one way, the userspace
backend (the delay line handles every datagram: UDP has no GSO here). One traffic.dcqcn.flow
sender asks for each line rate with 1400-byte datagrams and no congestion (no marks, so the RP
stays at its line rate); the receiver counts what arrives. Per case: asked and achieved rate,
datagrams per second sent and received, and the share that arrived. The highest rate a flow
holds within 5% is the ceiling a dilated scenario must stay under (all flows together).
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks._results import Tee, heading, write_section
from testbed.config.scenario import Scenario
from testbed.core.dcqcn import defaults, dilate
from testbed.live.network import Network
from testbed.net import procs
from traffic.dcqcn.flow import params_to_json

RATES = [50e6, 100e6, 200e6, 400e6, 800e6]
SIZE = 1400


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    p.add_argument("--seconds", type=float, default=5.0, help="per case")
    args = p.parse_args()
    buf = io.StringIO()
    sys.stdout = Tee(sys.__stdout__, buf)
    heading(
        "DCQCN datagram rate",
        f"{args.seconds:g} s per case, {SIZE}-byte datagrams, userspace backend.",
    )
    sc = Scenario.model_validate(
        {
            "name": "bench-dcqcn",
            "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
            "wan": [{"between": ["east", "west"], "rate": "10gbit", "delay": "1ms"}],
            "backend": "userspace",
        }
    )
    params = params_to_json(dilate(defaults("paper"), 100))
    print("| asked | achieved | sent/s | received/s | arrived | sent below 95% of asked? |")
    print("|---|---|---|---|---|---|")
    with Network(sc, name="bench-dcqcn") as tb, tempfile.TemporaryDirectory() as tmp:
        dst = tb.plan.host("west-h0")
        for i, rate in enumerate(RATES):
            out = Path(tmp) / f"c{i}"
            common = ["--port", str(6100 + i), "--params", params, "--out", str(out)]
            recv = tb.python(
                "west-h0", "traffic.dcqcn.flow", "recv", "--bind", dst.address, *common,
                stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            try:
                if not procs.wait_ready(recv):
                    raise SystemExit("the receiver did not start")
                send = tb.python(
                    "east-h0", "traffic.dcqcn.flow", "send", "--to", dst.address, "--flow",
                    "0", "--line-rate", f"{rate:g}", "--duration", f"{args.seconds:g}",
                    "--size", str(SIZE), *common, stdout=subprocess.PIPE, text=True,
                )  # fmt: skip
                sent = json.loads(send.communicate(timeout=120)[0].strip().splitlines()[-1])
                got = json.loads(recv.communicate(timeout=120)[0].strip().splitlines()[-1])
            finally:
                procs.stop(recv)
            secs = sent["seconds"]
            achieved = got["datagrams"] * SIZE * 8 / secs
            print(
                f"| {rate / 1e6:g} Mbit/s | {achieved / 1e6:.1f} Mbit/s | "
                f"{sent['sent'] / secs:,.0f} | {got['datagrams'] / secs:,.0f} | "
                f"{got['datagrams'] / max(sent['sent'], 1):.1%} | "
                f"{'yes' if sent['sent'] * SIZE * 8 / secs < 0.95 * rate else 'no'} |"
            )
    sys.stdout = sys.__stdout__
    if args.write:
        write_section("dcqcn.py", buf.getvalue())


if __name__ == "__main__":
    main()
