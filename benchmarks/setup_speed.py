"""Benchmark: time to bring up and tear down 4 clusters x 8 hosts (32 hosts + 4 gateways + a
full WAN mesh of 6 wires), median of 5. Goal on a 2-core machine: up <= 0.5 s, down <= 0.2 s.

    sudo .venv/bin/python -m benchmarks.setup_speed [--repeat 5] [--write]

"up" is ``Testbed.up()`` as a user calls it (registry claim, plan, kernel probe on first use
excluded by a warm-up run, namespaces, veths, bridges, addresses, routes, HTB/bfifo, sysctls,
hosts files); "down" is ``Testbed.down()`` (process sweep, namespace deletion, files).
"""

from __future__ import annotations

import argparse
import itertools
import platform
import statistics
import time

from benchmarks._results import write_section
from testbed.config.scenario import parse_scenario
from testbed.run.testbed import Testbed

CLUSTERS = ["east", "west", "north", "south"]


def scenario():
    return parse_scenario(
        {
            "name": "bench-setup",
            "clusters": {c: {"hosts": 8} for c in CLUSTERS},
            "wan": [
                {"between": [a, b], "rate": "1gbit"} for a, b in itertools.combinations(CLUSTERS, 2)
            ],
        }
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = p.parse_args()
    sc = scenario()
    Testbed(sc, name="bench-warmup").up().down()  # kernel probe and imports out of the timing
    ups, downs = [], []
    for i in range(args.repeat):
        tb = Testbed(sc, name=f"bench-setup-{i}")
        t0 = time.perf_counter()
        tb.up()
        t1 = time.perf_counter()
        tb.down()
        t2 = time.perf_counter()
        ups.append(t1 - t0)
        downs.append(t2 - t1)
    n_ns = len(tb.plan.namespaces) if tb.plan else 0
    lines = [
        f"## Setup speed ({platform.release()}, {time.strftime('%Y-%m-%d')})\n",
        f"4 clusters x 8 hosts + 4 gateways + 6 WAN wires = {n_ns} namespaces; iproute2 batches "
        f"(FIELD-NOTES measured pyroute2 3-5x slower for the same work); median of "
        f"{args.repeat}.\n",
        "| phase | median | min | max | goal |",
        "|---|---|---|---|---|",
    ]
    for name, xs, goal in (("up", ups, 0.5), ("down", downs, 0.2)):
        med = statistics.median(xs)
        verdict = "met" if med <= goal else "MISSED"
        spread = f"{min(xs):.3f} s | {max(xs):.3f} s"
        lines.append(f"| {name} | {med:.3f} s | {spread} | <= {goal} s ({verdict}) |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        write_section("setup_speed.py", text)


if __name__ == "__main__":
    main()
