"""Benchmark: does tracing distort the measurement? Collective time with and without traces.

    sudo .venv/bin/python -m benchmarks.tracing_overhead [--rounds 3] [--write]

Flat all-reduce of 16 MiB, 4 ranks (2 clusters x 2 hosts), WAN 1 Gbit/s at 5 ms one-way (where the
host's CPU matters most), 1 warm-up and 5 timed iterations per run. Trace settings: off;
tcp_info every 100 ms + queues every 10 ms; the same + pcap. The variants run interleaved, round
after round, so that drift of the machine hits them alike. Time = slowest rank, median over the
iterations of all rounds. Goal: tracing adds <= 5% to the collective time.
"""

from __future__ import annotations

import argparse
import io
import platform
import statistics
import sys
import tempfile
import time
from contextlib import redirect_stdout

from benchmarks._results import write_section
from testbed.config.sweep import expand
from testbed.experiment.sweep import Experiment

VARIANTS = {
    "off": {},
    "tcp_info 100ms + queues 10ms": {"tcp_info": "100ms", "queues": "10ms"},
    "tcp_info + queues + pcap": {"tcp_info": "100ms", "queues": "10ms", "pcap": "64MiB"},
}


def scenario(trace: dict) -> dict:
    return {
        "name": "bench-trace",
        "clusters": {"east": {"hosts": 2}, "west": {"hosts": 2}},
        "wan": [{"between": ["east", "west"], "rate": "1gbit", "delay": "5ms"}],
        "workload": {
            "collectives": ["all_reduce"],
            "algorithms": ["flat"],
            "sizes": ["16MiB"],
            "warmup": 1,
            "iterations": 5,
        },
        "trace": trace,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = p.parse_args()
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
    rows: dict[str, int] = {v: 0 for v in VARIANTS}
    for r in range(args.rounds):
        for name, trace in VARIANTS.items():
            with tempfile.TemporaryDirectory() as out:
                exp = Experiment(expand(scenario(trace), "bench"), "bench", out, resume=False)
                exp.run(selfcheck_seconds=0.5)
                run = exp.manifest["runs"]["p000-r0"]
                if run["status"] != "ok":
                    sys.exit(f"{name}: run {run['status']}: {run['reason']}")
                per_iter: dict[int, float] = {}
                for row in exp.tables["collectives"]:
                    i = row["iteration"]
                    per_iter[i] = max(per_iter.get(i, 0.0), row["seconds"])
                times[name] += per_iter.values()
                cpu[name].append(run.get("cpu_busy_mean") or 0.0)
                rows[name] += sum(len(exp.tables[t]) for t in ("tcp", "queues", "flows"))
            print(f"round {r + 1}/{args.rounds} {name}: done", file=sys.stderr, flush=True)
    base = statistics.median(times["off"])
    buf = io.StringIO()
    with redirect_stdout(buf):
        print(f"## Tracing overhead ({platform.release()}, {time.strftime('%Y-%m-%d')})\n")
        print(
            f"16 MiB flat all-reduce, 4 ranks, 1 Gbit/s 5 ms WAN, {args.rounds} interleaved "
            "rounds x 5 iterations per variant.\n"
        )
        print("| trace | time p50 | vs off | CPU busy | trace rows per run | goal <= +5% |")
        print("|---|---|---|---|---|---|")
        for name in VARIANTS:
            t = statistics.median(times[name])
            delta = t / base - 1
            print(
                f"| {name} | {t:.3f} s | {delta:+.1%} | {statistics.mean(cpu[name]):.0%} | "
                f"{rows[name] // args.rounds} | {'met' if delta <= 0.05 else 'missed'} |"
            )
    sys.stdout.write(buf.getvalue())
    if args.write:
        write_section("tracing_overhead.py", buf.getvalue())


if __name__ == "__main__":
    main()
