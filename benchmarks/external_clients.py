"""One link measured four ways, on both engines: the project's self-check, iperf3, flent and irtt
(testbed.testing.clients). The link: 100 Mbit/s, 10 ms east -> west and 30 ms west -> east
(asymmetric, so that one-way delays are told apart), the userspace (or kernel) backend.

    python -m benchmarks.external_clients [--write]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from benchmarks._results import section
from testbed.config.loading import parse_scenario
from testbed.core.frames import GOODPUT_FACTOR
from testbed.live.network import Network
from testbed.live.selfcheck import check_direction
from testbed.testing.clients import (
    flent,
    iperf2_udp_server,
    iperf3_goodput,
    irtt,
    irtt_server,
    series_median,
)

ENGINES = ("native", "mininet")
CEILING = 100e6 * GOODPUT_FACTOR


def scenario(engine: str) -> dict:
    return {
        "name": "bench-clients",
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": [{"between": ["east", "west"], "rate": "100mbit", "delay": "10ms",
                 "reverse": {"delay": "30ms"}}],
        "engine": engine,
    }  # fmt: skip


def measure(engine: str, tmp: Path) -> dict[str, str]:
    got: dict[str, str] = {}
    with Network(parse_scenario(scenario(engine)), name=f"bench-clients-{engine}") as tb:
        fwd = tb.plan.wan[0]
        check = check_direction(tb, fwd, duration=3.0)
        got["self-check RTT p50"] = f"{check.rtt_median_s * 1e3:.2f} ms"
        got["self-check TCP goodput"] = f"{check.goodput_ratio:.1%}"
        rate = iperf3_goodput(tb, "east-h0", "west-h0", 6, omit=2)
        got["iperf3 TCP goodput"] = f"{rate / CEILING:.1%}"
        one = irtt(tb, "east-h0", "west-h0", tmp / f"irtt-{engine}.json")
        got["irtt RTT p50"] = f"{one['rtt']:.2f} ms"
        got["irtt one way east->west p50"] = f"{one['send']:.2f} ms"
        got["irtt one way west->east p50"] = f"{one['receive']:.2f} ms"
        out = tmp / engine
        out.mkdir()
        with irtt_server(tb, "west-h0"):
            ping = flent(tb, "east-h0", "west-h0", "ping", out)
        got["flent ping ICMP p50"] = f"{series_median(ping, 'Ping (ms) ICMP'):.2f} ms"
        got["flent ping UDP p50"] = f"{series_median(ping, 'Ping (ms) UDP'):.2f} ms"
        with iperf2_udp_server(tb, "west-h0"):
            flood = flent(tb, "east-h0", "west-h0", "udp_flood", out)
        got["flent udp_flood: ping under load p50"] = (
            f"{series_median(flood, 'Ping (ms) ICMP'):.2f} ms"
        )
    return got


EXPECTED = {
    "self-check RTT p50": "40 ms",
    "self-check TCP goodput": ">= 90% (of 95.6 Mbit/s)",
    "iperf3 TCP goodput": ">= 90%",
    "irtt RTT p50": "40 ms",
    "irtt one way east->west p50": "10 ms",
    "irtt one way west->east p50": "30 ms",
    "flent ping ICMP p50": "40 ms",
    "flent ping UDP p50": "40 ms",
    "flent udp_flood: ping under load p50": "~80 ms (40 + the 1-BDP buffer)",
}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = p.parse_args()
    with section(
        "external_clients.py",
        args.write,
        "One link, four tools, two engines",
        "100 Mbit/s, 10 ms east->west, 30 ms west->east; one run each.",
    ):
        with tempfile.TemporaryDirectory() as tmp:
            results = {e: measure(e, Path(tmp)) for e in ENGINES}
        print("| measurement | configured | native engine | Mininet engine |")
        print("|---|---|---|---|")
        for key, want in EXPECTED.items():
            print(f"| {key} | {want} | {results['native'][key]} | {results['mininet'][key]} |")
        print("\nflent's TCP tests (tcp_1up, tcp_nup, rrul_be) need netperf (Debian non-free):"
              " not run here.")  # fmt: skip


if __name__ == "__main__":
    main()
