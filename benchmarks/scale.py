"""Benchmark: a 32-rank run on 2 cores. 4 clusters x 8 hosts (full WAN mesh, 1 Gbit/s, 10 ms),
16 MiB all-reduce, flat and hierarchical, 1 warm-up + 3 iterations. Reports the wall time of the
whole run (build, self-check, ranks, teardown; goal <= 3 minutes) and whether the CPU flag fired.

    sudo .venv/bin/python -m benchmarks.scale [--write]
"""

from __future__ import annotations

import argparse
import itertools
import platform
import tempfile
import time

from benchmarks._results import write_section
from testbed.config.sweep import expand
from testbed.experiment.sweep import Experiment

CLUSTERS = ["east", "west", "north", "south"]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = p.parse_args()
    data = {
        "name": "bench-scale",
        "clusters": {c: {"hosts": 8} for c in CLUSTERS},
        "wan": [
            {"between": [a, b], "rate": "1gbit", "delay": "10ms"}
            for a, b in itertools.combinations(CLUSTERS, 2)
        ],
        "workload": {
            "collectives": ["all_reduce"],
            "algorithms": ["flat", "hierarchical"],
            "sizes": ["16MiB"],
            "warmup": 1,
            "iterations": 3,
            "timeout": "600s",
        },
    }
    with tempfile.TemporaryDirectory() as out:
        exp = Experiment(expand(data, "bench"), "bench", out, resume=False)
        t0 = time.monotonic()
        ok = exp.run(selfcheck_seconds=1.0)
        wall = time.monotonic() - t0
        run = exp.manifest["runs"]["p000-r0"]
        lines = [
            f"## Scale: 32 ranks ({platform.release()}, {time.strftime('%Y-%m-%d')})\n",
            "4 clusters x 8 hosts, 6 WAN links (1 Gbit/s, 10 ms one-way, delay line), "
            "16 MiB all-reduce.\n",
            f"Whole run (build, 12 link self-checks, 32 torch ranks, teardown): **{wall:.0f} s** "
            f"(goal <= 180 s: {'met' if wall <= 180 else 'missed'}); status {run['status']}"
            + (f" ({run['reason']})" if run["reason"] else "")
            + f"; host CPU busy {run.get('cpu_busy_mean') or 0:.0%} on average, CPU flag "
            f"{'fired' if run.get('cpu_saturated') else 'did not fire'}.\n",
            "| algorithm | p50 | p95 | predicted | measured / predicted |",
            "|---|---|---|---|---|",
        ]
        for s in exp.summaries:
            lines.append(
                f"| {s['algorithm']} | {s['time_p50']:.3f} s | {s['time_p95']:.3f} s | "
                f"{s['predicted']:.3f} s | {s['measured_over_predicted']:.2f} |"
            )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        write_section("scale.py", text)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
