"""Benchmark: measured flat all-reduce time against the α-β model (analysis/model.py).

    sudo .venv/bin/python -m benchmarks.collectives_vs_model [--write]

Flat all-reduce of 16 and 64 MiB, 4 ranks (2 clusters x 2 hosts) and 8 ranks (2 x 4), WAN
100 Mbit/s and 1 Gbit/s at 10 ms one-way; 1 warm-up and 3 timed iterations; time = slowest rank,
median over iterations. Goal: measured / predicted <= 1.10.
"""

from __future__ import annotations

import argparse
import io
import platform
import sys
import tempfile
import time
from contextlib import redirect_stdout

from benchmarks._results import write_section
from testbed.config.sweep import expand
from testbed.run.experiment import Experiment


def scenario(hosts: int) -> dict:
    return {
        "name": f"bench-model-{hosts}",
        "clusters": {"east": {"hosts": hosts}, "west": {"hosts": hosts}},
        "wan": [{"between": ["east", "west"], "rate": "100mbit", "delay": "10ms"}],
        "workload": {
            "collectives": ["all_reduce"],
            "algorithms": ["flat"],
            "sizes": ["16MiB", "64MiB"],
            "warmup": 1,
            "iterations": 3,
            "timeout": "600s",
        },
        "sweep": {"wan[0].rate": ["100mbit", "1gbit"]},
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = p.parse_args()
    buf = io.StringIO()
    with redirect_stdout(buf):
        print(
            f"## Collectives vs the α-β model ({platform.release()}, {time.strftime('%Y-%m-%d')})\n"
        )
        print(
            "| ranks | WAN | size | measured p50 | predicted | measured / predicted | "
            "CPU busy | CPU flag | goal <= 1.10 |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
    sys.stdout.write(buf.getvalue())
    for hosts in (2, 4):
        with tempfile.TemporaryDirectory() as out:
            exp = Experiment(expand(scenario(hosts), "bench"), "bench", out, resume=False)
            exp.run(selfcheck_seconds=1.0)
            for s in exp.summaries:
                run = exp.manifest["runs"][s["run_id"]]
                ratio = s["measured_over_predicted"]
                line = (
                    f"| {s['ranks']} | {s['wan[0].rate']} | {s['size'] >> 20} MiB | "
                    f"{s['time_p50']:.3f} s | {s['predicted']:.3f} s | {ratio:.2f} | "
                    f"{run.get('cpu_busy_mean') or 0:.0%} | "
                    f"{'yes' if s['cpu_saturated'] else 'no'} | "
                    f"{'met' if ratio <= 1.10 else 'missed'} |"
                )
                print(line, flush=True)
                buf.write(line + "\n")
            for run_id, run in exp.manifest["runs"].items():
                if run["status"] != "ok":
                    line = f"\n{hosts * 2} ranks {run_id}: {run['status']}: {run['reason']}\n"
                    print(line)
                    buf.write(line)
    if args.write:
        write_section("collectives_vs_model.py", buf.getvalue())


if __name__ == "__main__":
    main()
