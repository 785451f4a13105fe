"""Benchmark: how faithfully the emulated WAN delivers its configuration.

    sudo .venv/bin/python -m benchmarks.link_fidelity [--quick] [--write]

1. Idle RTT for one-way delays of 10/25/50/100 ms: configured vs measured median and p99 (UDP
   probes with microsecond timestamps, 200 at 10 ms spacing, host to host across the WAN), plus
   a 0 ms row without any delay line: the floor of the path and the probe itself (two veth
   crossings and a bridge per side, a Python echo server). Each delay is measured with the RTT
   compensation (the default: each direction's floor, measured at bring-up, is subtracted from
   its emulated delay; the floors are shown) and without it ("raw", the floor included),
   interleaved, so that both see the same machine.
2. Bulk TCP goodput (iperf3, one flow, 8 s, first 3 s excluded) for 100 Mbit/s, 1 Gbit/s and
   5 Gbit/s at 25 ms and 50 ms one-way, cubic and bbr, as a ratio to the HTB-only ceiling
   measured in the same run (same rate and congestion control, no delay), and the delay
   process's CPU (% of one core).
Each backend available on this kernel gets its own columns: the userspace delay line always,
kernel netem where the kernel has it.

Goals (2 cores): RTT median error within +-0.10 ms, p99 <= configured + 0.5 ms, idle (compensated);
goodput >= 97%
of the HTB-only ceiling at 1 Gbit/s and 50 ms RTT; >= 5 Gbit/s carried at <= 50% of one core.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import platform
import statistics
import subprocess
import sys
import time

from benchmarks._results import Tee, write_section
from testbed.config.loading import parse_scenario
from testbed.live.network import Network
from testbed.live.selfcheck import measure_rtt
from testbed.net import probe as kernel
from testbed.net import procs

PORT = 5301
CONGESTION = ("cubic", "bbr")


def scenario(rate: str, delay: str, congestion: str, backend: str) -> dict:
    return {
        "name": "bench-fidelity",
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": [{"between": ["east", "west"], "rate": rate, "delay": delay, "buffer": "1bdp"}],
        "tcp": {"congestion": congestion},
        "backend": backend,
    }


def iperf(tb: Network, seconds: int = 8, omit: int = 3) -> tuple[float, int]:
    """Receiver-side goodput of one iperf3 flow east-h0 -> west-h0 (bit/s) and the segments the
    sender retransmitted (a bbr flow stuck in STARTUP overflows a 1-BDP buffer: thousands)."""
    # --forceflush: iperf3 block-buffers its stdout into a pipe, and "Server listening" would
    # only arrive when it exits; the readiness handshake needs the line at once.
    argv = ["iperf3", "-s", "-1", "-p", str(PORT), "--forceflush"]
    server = tb.popen("west-h0", argv, stdout=subprocess.PIPE, text=True)
    with procs.ready(server, "iperf3 server on west-h0", "Server listening", substring=True):
        r = tb.run(
            "east-h0",
            [
                "iperf3",
                "-c",
                "west-h0",
                "-p",
                str(PORT),
                "-t",
                str(seconds + omit),
                "-O",
                str(omit),
                "-J",
            ],
            timeout=seconds + omit + 30,
        )
        data = json.loads(r.stdout)
        end = data["end"]
        return float(end["sum_received"]["bits_per_second"]), int(end["sum_sent"]["retransmits"])


def cpu_percent(tb: Network) -> float | None:
    rows = tb.link_stats()
    values = [r.get("process_cpu_percent_avg") for r in rows if r.get("process_cpu_percent_avg")]
    return max(values) if values else None


def run_rtt(backends: list[str], delays: list[str]) -> list[str]:
    lines = [
        "| one-way delay | configured RTT | backend | compensation | floor (1-way) | median | "
        "error | p99 | p99 - conf |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for delay in delays:
        for backend in backends:
            # 0 ms: no propagation to emulate, so no delay line (backend none): the floor.
            sc = parse_scenario(
                scenario("1gbit", delay, "cubic", "auto" if delay == "0ms" else backend)
            )
            for compensate in (True, False) if delay != "0ms" else (False,):
                lines.append(rtt_row(sc, backend, compensate))
                print(lines[-1], flush=True)
            if delay == "0ms":
                break  # the same row for every backend
    return lines


def rtt_row(sc, backend: str, compensate: bool) -> str:
    with Network(sc, name=f"bench-rtt-{backend}", compensate_rtt=compensate) as tb:
        samples = measure_rtt(tb, "east-h0", "west-h0", 200, interval=0.01)
        problems = tb.problems()
    conf = 2 * sc.wan[0].delay
    med = statistics.median(samples)
    p99 = sorted(samples)[int(0.99 * (len(samples) - 1))]
    note = f" ({'; '.join(problems)})" if problems else ""
    used = tb.backend.name if tb.backend else backend
    floors = " / ".join(f"{c.floor_s * 1e3:.3f}" for c in tb.compensation if c.floor_s is not None)
    return (
        f"| {sc.wan[0].delay * 1e3:g}ms | {conf * 1e3:.1f} ms | {used}{note} | "
        f"{'on' if compensate else 'raw'} | {floors + ' ms' if floors else '-'} | "
        f"{med * 1e3:.2f} ms | {(med - conf) * 1e3:+.2f} ms | {p99 * 1e3:.2f} ms | "
        f"{(p99 - conf) * 1e3:+.2f} ms |"
    )


def run_goodput(backends: list[str], rates: list[str], delays: list[str]) -> list[str]:
    lines = [
        "| rate | one-way delay | cc | backend | HTB-only ceiling (same cc) | goodput | ratio | "
        "retransmits | delay-line CPU |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for rate in rates:
        # The ceiling per congestion control: bbr's own pacing leaves a few % on plain HTB, and
        # that is not the delay line's doing.
        ceilings = {}
        for cc in CONGESTION:
            sc = parse_scenario(scenario(rate, "0ms", cc, "auto"))
            with Network(sc, name="bench-ceil") as tb:
                ceilings[cc] = iperf(tb)[0]
        for delay in delays:
            for cc in CONGESTION:
                ceiling = ceilings[cc]
                for backend in backends:
                    sc = parse_scenario(scenario(rate, delay, cc, backend))
                    with Network(sc, name=f"bench-gp-{backend}") as tb:
                        goodput, retransmits = iperf(tb)
                        cpu = cpu_percent(tb)
                        problems = tb.problems()
                    note = f" ({'; '.join(problems)})" if problems else ""
                    cpu_text = f"{cpu:.0f}%" if cpu is not None else "-"
                    lines.append(
                        f"| {rate} | {delay} | {cc} | {backend}{note} | {ceiling / 1e6:.0f} Mbit/s"
                        f" | {goodput / 1e6:.0f} Mbit/s | {goodput / ceiling:.1%} | {retransmits} |"
                        f" {cpu_text} |"
                    )
                    print(lines[-1], flush=True)
    return lines


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="one delay and rate of each kind")
    p.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    p.add_argument("--only", choices=["rtt", "goodput"], help="run one part")
    args = p.parse_args()
    if args.only and args.write:
        p.error("--write needs both parts (it replaces the whole section)")
    buf = io.StringIO()
    with contextlib.redirect_stdout(Tee(sys.stdout, buf)):
        _run(args)
    if args.write:
        write_section("link_fidelity.py", buf.getvalue())


def _run(args: argparse.Namespace) -> None:
    feats = kernel.probe()
    backends = ["userspace"] + (["kernel"] if feats.has_qdisc("netem") else [])
    delays_rtt = ["10ms", "50ms"] if args.quick else ["10ms", "25ms", "50ms", "100ms"]
    rates = ["1gbit"] if args.quick else ["100mbit", "1gbit", "5gbit"]
    delays_gp = ["25ms"] if args.quick else ["25ms", "50ms"]
    print(f"## Link fidelity ({platform.release()}, {time.strftime('%Y-%m-%d')})\n")
    if "kernel" not in backends:
        print(
            "Kernel netem: unsupported on this kernel (no sch_netem); userspace delay line only.\n"
        )
    if args.only in (None, "rtt"):
        print("### Idle RTT (UDP probes, 200, 10 ms apart)\n")
        run_rtt(backends, ["0ms", *delays_rtt])
    if args.only in (None, "goodput"):
        print("\n### Bulk TCP goodput (iperf3, 1 flow, 8 s after 3 s warm-up, buffer 1 BDP)\n")
        print("CPU: the delay-line process, average over its life (about the 11 s transfer).\n")
        run_goodput(backends, rates, delays_gp)


if __name__ == "__main__":
    main()
