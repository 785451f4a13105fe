"""Benchmark: does the link self-check read what each link really carries, in bounded time?

    sudo .venv/bin/python -m benchmarks.selfcheck [--quick] [--note TEXT] [--write]

Every WAN direction of: the quickstart link (100 Mbit/s, 20 ms one-way), checked right after
`up` (the cold first point of a sweep) and again; the 3-cluster mesh (us-eu
500 Mbit/s 40 ms, eu-asia 200 Mbit/s 90 ms, us-asia 300 Mbit/s 75 ms); a 1 Gbit/s link at
300 ms RTT; 5 Gbit/s at 25 ms. Each row: the capacity probe (paced UDP) and the TCP probe as
shares of their ceilings, the RTT, and the wall time of the whole direction's check.

Then the evidence for the readings above 100%: on the quickstart link, the TCP probe's
five window-start candidates, each with the goodput it would read and the kernel's count of
out-of-order packets received so far (tcp_info rcv_ooopack): a start taken while a loss is being
repaired reads high, because the out-of-order data that arrived before it enters the in-order
count (and the window) when the hole fills.

Goals: capacity and TCP goodput within 97-101% of the ceiling for every link up to 5 Gbit/s and
300 ms RTT; <= 5 s per direction; nothing above 101% on a correct link.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import sys
import time

from benchmarks._results import Tee, write_section
from testbed.config.loading import parse_scenario
from testbed.live.network import Network
from testbed.live.selfcheck import (
    check_direction,
    configured_goodput,
    initial_window,
    measure_goodput,
    size_probes,
)

GOAL_LOW, GOAL_HIGH, GOAL_SECONDS = 0.97, 1.01, 5.0


def two(rate: str, delay: str) -> dict:
    return {
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": [{"between": ["east", "west"], "rate": rate, "delay": delay, "buffer": "1bdp"}],
    }


MESH = {
    "clusters": {"us": {"hosts": 1}, "eu": {"hosts": 1}, "asia": {"hosts": 1}},
    "wan": [
        {"between": ["us", "eu"], "rate": "500mbit", "delay": "40ms", "buffer": "1bdp"},
        {"between": ["eu", "asia"], "rate": "200mbit", "delay": "90ms", "buffer": "1bdp"},
        {"between": ["us", "asia"], "rate": "300mbit", "delay": "75ms", "buffer": "1bdp"},
    ],
}

CASES = [
    ("quickstart (pass 1: right after up)", two("100mbit", "20ms"), 2),
    ("3-cluster mesh", MESH, 1),
    ("1 Gbit/s, 150 ms one-way", two("1gbit", "150ms"), 1),
    ("5 Gbit/s, 25 ms one-way", two("5gbit", "25ms"), 1),
]


def _share(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def run(cases) -> list[str]:
    lines = [
        "| link | pass | direction | rate | RTT | capacity | TCP goodput | cc | time | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    worst = []
    for label, topo, passes in cases:
        sc = parse_scenario({"name": "bench-selfcheck", "tcp": {"congestion": "cubic"}, **topo})
        with Network(sc, name="bench-selfcheck") as tb:
            for k in range(passes):
                for d in tb.plan.wan:
                    c = check_direction(tb, d)
                    met = (
                        c.ok
                        and GOAL_LOW <= (c.capacity_ratio or 0) <= GOAL_HIGH
                        and GOAL_LOW <= (c.goodput_ratio or 0) <= GOAL_HIGH
                        and (c.seconds or 0) <= GOAL_SECONDS
                    )
                    worst.append(c)
                    verdict = "met" if met else f"NOT met: {c.problem or 'outside 97-101% / 5 s'}"
                    lines.append(
                        f"| {label} | {k + 1} | {d.name} | {d.rate / 1e6:g} Mbit/s | "
                        f"{c.rtt_configured_s * 1e3:.0f} ms | {_share(c.capacity_ratio)} | "
                        f"{_share(c.goodput_ratio)} | {c.congestion} | {c.seconds:.1f} s | "
                        f"{verdict} |"
                    )
                    print(lines[-1], flush=True)
    caps = [c.capacity_ratio for c in worst if c.capacity_ratio]
    goods = [c.goodput_ratio for c in worst if c.goodput_ratio]
    secs = [c.seconds for c in worst if c.seconds]
    print(
        f"\nRange over {len(worst)} directions: capacity {min(caps):.1%}-{max(caps):.1%}, "
        f"TCP {min(goods):.1%}-{max(goods):.1%}, time per direction "
        f"{min(secs):.1f}-{max(secs):.1f} s (goals 97-101%, <= 5 s)."
    )
    return lines


def window_starts(repeats: int) -> None:
    sc = parse_scenario({"name": "bench-selfcheck", "tcp": {"congestion": "cubic"}, **CASES[0][1]})
    head = "candidate starts: t (s) / goodput read / out-of-order packets so far"
    print(f"\n| flow | {head} | kept |")
    print("|---|---|---|")
    with Network(sc, name="bench-selfcheck") as tb:
        d = tb.plan.wan[0]
        sizes = size_probes(d.rate, 2 * d.delay)
        ceiling = configured_goodput(tb.plan, d)
        for k in range(repeats):
            with initial_window(tb, "east-h0", "west-h0", sizes.initcwnd):
                r = measure_goodput(
                    tb,
                    "east-h0",
                    "west-h0",
                    sizes.tcp_duration,
                    sizes.tcp_warmup,
                    sizes.buffer,
                    sizes.mark_spacing,
                )
            marks = ", ".join(
                f"{m['t']:.2f} / {m['goodput_bps'] / ceiling:.1%} / {m['ooo_packets']}"
                for m in r["marks"]
            )
            print(f"| {k + 1} | {marks} | {r['steady_goodput_bps'] / ceiling:.1%} |", flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="the quickstart link only")
    p.add_argument("--note", default="", help="a line on the conditions (e.g. a shared machine)")
    p.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = p.parse_args()
    buf = io.StringIO()
    with contextlib.redirect_stdout(Tee(sys.stdout, buf)):
        print(f"## Link self-check ({platform.release()}, {time.strftime('%Y-%m-%d')})\n")
        load = os.getloadavg()
        print(
            "Per WAN direction: paced UDP capacity against the HTB rate, one TCP flow (cubic, "
            "initial window one BDP) against rate x 1448/1514, the whole check's wall time. "
            f"Load average at start {load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}."
            + (f" {args.note}" if args.note else "")
            + "\n"
        )
        run(CASES[:1] if args.quick else CASES)
        window_starts(2 if args.quick else 4)
    if args.write:
        write_section("selfcheck.py", buf.getvalue())


if __name__ == "__main__":
    main()
