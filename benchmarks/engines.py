"""Engines side by side: the native engine, the Mininet engine (Mininet nodes and links, the
project's link backends) and plain Mininet (its own ``TCLink``, LinuxBridge switches in their own
namespaces, no controller).

1. Build and teardown, in-process, of 4 clusters x 8 hosts with a full WAN mesh at 1 Gbit/s and
   10 ms (plain Mininet: the same nodes, a switch per cluster, ``TCLink(bw=1000,
   delay='10ms')`` between the gateways), interleaved rounds. Goals: the Mininet engine within
   2x plain Mininet's build; the native engine <= 0.5 s up, <= 0.2 s down.
2. Link fidelity, one host per side of one link of 100 Mbit/s and 1 Gbit/s with 25 ms one way:
   ping RTT median against the configured 50 ms, and one iperf3 TCP flow's goodput (8 s, first
   3 s omitted) against the ceiling (rate x TCP payload per wire frame). Plain Mininet: two hosts
   joined by one ``TCLink(bw, delay='25ms')`` (its delay applies at each end: RTT 50 ms).
3. "Mininet + TestbedLink": plain Mininet's networks with ``TestbedLink(bw, delay)`` where they
   have TCLink (``delay`` is one way per direction: RTT 50 ms); it does not subtract the delay
   line's floor (``testbed up`` does).

    python -m benchmarks.engines [--repeat 5] [--write]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import statistics
import time

from benchmarks._results import section
from testbed.config.loading import parse_scenario
from testbed.core.frames import GOODPUT_FACTOR
from testbed.live.network import Network

CLUSTERS = ["east", "west", "north", "south"]
HOSTS = 8
PORT = 5231


def mesh(engine: str) -> dict:
    wan = [
        {"between": [a, b], "rate": "1gbit", "delay": "10ms"}
        for a, b in itertools.combinations(CLUSTERS, 2)
    ]
    return {
        "name": "bench-engines",
        "clusters": {c: {"hosts": HOSTS} for c in CLUSTERS},
        "wan": wan,
        "engine": engine,
    }


def plain_mininet(
    build_mesh: bool, rate_mbit: float = 1000, delay: str = "10ms", testbed_link: bool = False
):
    """Plain Mininet: the mesh (or two hosts on one TCLink; ``testbed_link``: on the project's
    TestbedLink instead, as a user's own script would). Returns the started network."""
    from mininet.link import TCLink
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.node import Node
    from mininet.nodelib import LinuxBridge

    from testbed.mininet import TestbedLink

    setLogLevel("critical")  # its "*** Error: ... qdisc kind is unknown" lines: see the table
    net = Mininet(topo=None, build=False, controller=None, autoSetMacs=False)
    link = TestbedLink if testbed_link else TCLink
    if not build_mesh:
        a = net.addHost("pa", ip="10.79.0.1/24")
        b = net.addHost("pb", ip="10.79.0.2/24")
        net.addLink(a, b, cls=link, bw=rate_mbit, delay=delay)
    else:
        gateways = []
        for c in range(len(CLUSTERS)):
            switch = net.addSwitch(f"pm{c}s", cls=LinuxBridge, inNamespace=True)
            gw = net.addHost(f"pm{c}gw", cls=Node, ip=None)
            net.addLink(gw, switch)
            for h in range(HOSTS):
                host = net.addHost(f"pm{c}h{h}", ip=f"10.78.{c}.{10 + h}/24")
                net.addLink(host, switch)
            gateways.append(gw)
        for a, b in itertools.combinations(gateways, 2):
            net.addLink(a, b, cls=link, bw=rate_mbit, delay=delay)
    net.build()
    net.start()
    return net


def build_times(repeat: int) -> dict[str, tuple[list[float], list[float]]]:
    times: dict[str, tuple[list[float], list[float]]] = {
        k: ([], []) for k in ("native", "mininet", "plain Mininet", "Mininet + TestbedLink")
    }
    for i in range(repeat):
        for engine in ("native", "mininet"):
            tb = Network(parse_scenario(mesh(engine)), name=f"bench-eng-{os.getpid()}-{i}")
            t0 = time.perf_counter()
            tb.up()
            t1 = time.perf_counter()
            tb.down()
            times[engine][0].append(t1 - t0)
            times[engine][1].append(time.perf_counter() - t1)
        for name, testbed_link in (("plain Mininet", False), ("Mininet + TestbedLink", True)):
            t0 = time.perf_counter()
            net = plain_mininet(build_mesh=True, testbed_link=testbed_link)
            t1 = time.perf_counter()
            net.stop()
            times[name][0].append(t1 - t0)
            times[name][1].append(time.perf_counter() - t1)
    return times


def rtt_median_ms(text: str) -> float:
    rtts = [float(x) for x in re.findall(r"time=([\d.]+) ms", text)]
    return statistics.median(rtts) if rtts else float("nan")


def goodput(run_server, run_client) -> float:
    server = run_server(["iperf3", "-s", "-1", "-p", str(PORT)])
    time.sleep(0.5)  # plain Mininet's popen has no readiness handshake: a fixed head start
    try:
        out = run_client(["iperf3", "-c", "DST", "-p", str(PORT), "-t", "11", "-O", "3", "-J"])
        return float(json.loads(out)["end"]["sum_received"]["bits_per_second"])
    finally:
        server.wait(timeout=30)


def fidelity_testbed(engine: str, rate: str) -> tuple[float, float]:
    data = {
        "name": "bench-fidelity",
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": [{"between": ["east", "west"], "rate": rate, "delay": "25ms"}],
        "engine": engine,
    }
    with Network(parse_scenario(data), name=f"bench-fid-{os.getpid()}") as tb:
        ping = tb.run("east-h0", ["ping", "-c", "20", "-i", "0.1", "west-h0"]).stdout
        rate_bps = goodput(
            lambda argv: tb.popen("west-h0", argv, stdout=open(os.devnull, "w")),  # noqa: SIM115
            lambda argv: tb.run("east-h0", [a.replace("DST", "west-h0") for a in argv]).stdout,
        )
    return rtt_median_ms(ping), rate_bps


def fidelity_plain(rate_mbit: float, testbed_link: bool = False) -> tuple[float, float]:
    net = plain_mininet(False, rate_mbit, "25ms", testbed_link)
    try:
        a, b = net.get("pa"), net.get("pb")
        ping = a.cmd("ping -c 20 -i 0.1 10.79.0.2")
        rate_bps = goodput(
            lambda argv: b.popen(argv, stdout=open(os.devnull, "w")),  # noqa: SIM115
            lambda argv: a.cmd(" ".join(x.replace("DST", "10.79.0.2") for x in argv)),
        )
    finally:
        net.stop()
    return rtt_median_ms(ping), rate_bps


def med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} s ({min(xs):.3f}-{max(xs):.3f})"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = p.parse_args()
    with section(
        "engines.py",
        args.write,
        "Engines: build, teardown and link fidelity",
        "Native engine, Mininet engine (the project's links), plain Mininet (TCLink), and "
        "plain Mininet with the project's TestbedLink on the WAN (a user's own script).",
    ):
        times = build_times(args.repeat)
        plain_up = statistics.median(times["plain Mininet"][0])
        print(f"{len(CLUSTERS)} clusters x {HOSTS} hosts, 6 WAN links of 1 Gbit/s, 10 ms; "
              f"in-process, {args.repeat} interleaved rounds, median (min-max).\n")  # fmt: skip
        print("| engine | up | down | goal |")
        print("|---|---|---|---|")
        for name, (up, down) in times.items():
            if name == "native":
                ok = statistics.median(up) <= 0.5 and statistics.median(down) <= 0.2
                goal = f"<= 0.5 s up, <= 0.2 s down: {'met' if ok else 'NOT met'}"
            elif name == "mininet":
                ratio = statistics.median(up) / plain_up
                verdict = "met" if ratio <= 2 else "NOT met"
                goal = f"<= 2x plain Mininet's up: {ratio:.2f}x, {verdict}"
            else:
                goal = "-"
            print(f"| {name} | {med(up)} | {med(down)} | {goal} |")
        print("\nLink fidelity: one link, 25 ms one way (RTT 50 ms configured).\n")
        print("| engine | rate | RTT median | RTT error | goodput | of ceiling |")
        print("|---|---|---|---|---|---|")
        for rate, mbit in (("100mbit", 100.0), ("1gbit", 1000.0)):
            ceiling = mbit * 1e6 * GOODPUT_FACTOR
            rows = [(e, *fidelity_testbed(e, rate)) for e in ("native", "mininet")]
            rows.append(("plain Mininet", *fidelity_plain(mbit)))
            rows.append(("Mininet + TestbedLink", *fidelity_plain(mbit, testbed_link=True)))
            for name, rtt, bps in rows:
                note = " (delay absent: no netem)" if rtt < 1 else ""
                print(f"| {name} | {rate} | {rtt:.2f} ms{note} | {rtt - 50:+.2f} ms | "
                      f"{bps / 1e6:.1f} Mbit/s | {bps / ceiling:.1%} |")  # fmt: skip


if __name__ == "__main__":
    main()
