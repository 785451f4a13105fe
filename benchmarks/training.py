"""Benchmark: training across the emulated WAN (issue 14).

    sudo .venv/bin/python -m benchmarks.training [--write] [--quick]

1. scenarios/diloco-vs-ddp.yaml end to end: per arm the step time, WAN bytes per step, final
   loss, time to DDP's final loss, and communication measured / predicted.
2. Harness overhead: a DDP step (char-mlp, 4 ranks, batch 32) under the testbed with an unshaped
   WAN (10 Gbit/s, no delay: 2 clusters x 2 hosts) against the same DDP loop in plain torch, 4
   processes on loopback in one namespace; step time p50, rounds interleaved. Goal: <= 3% slower.
``--quick`` runs 60 steps instead of 300 in part 1 (for trying the script, not for RESULTS.md).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._results import Tee, write_section
from testbed.config.scenario import load_yaml
from testbed.config.sweep import expand
from testbed.core.units import format_duration, format_size
from testbed.run.experiment import Experiment

REPO = Path(__file__).resolve().parents[1]
OVERHEAD_STEPS = 100
ROUNDS = 3


def part_diloco_vs_ddp(quick: bool) -> None:
    data = load_yaml(REPO / "scenarios" / "diloco-vs-ddp.yaml")
    if quick:
        data["workload"]["steps"] = 60
    with tempfile.TemporaryDirectory() as out:
        exp = Experiment(expand(data, "diloco-vs-ddp.yaml"), "bench", out, resume=False)
        exp.run(selfcheck_seconds=1.0)
        print(
            "| arm | step p50 | WAN bytes/step | final loss | time to DDP's loss | comm/step | "
            "predicted | meas/pred | CPU flag |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for s in exp.summaries:
            arm = ", ".join(
                f"{k.removeprefix('workload.')}={v}"
                for k, v in s.items()
                if k.startswith("workload.") and v is not None
            )
            ttl = s.get("time_to_loss")
            ratio = s.get("comm_measured_over_predicted")
            print(
                f"| {arm} | {format_duration(s['step_time_p50'])} | "
                f"{format_size(s['wan_bytes_per_step'])} | {s['final_loss']:.3f} | "
                f"{format_duration(ttl) if ttl else 'not reached'} | "
                f"{format_duration(s['comm_per_step'])} | "
                f"{format_duration(s['predicted_comm_per_step'])} | "
                f"{f'{ratio:.2f}' if ratio else '-'} | {'yes' if s['cpu_saturated'] else 'no'} |"
            )
        for run_id, run in exp.manifest["runs"].items():
            if run["status"] != "ok":
                print(f"\n{run_id}: {run['status']}: {run['reason']}")
        for c in exp.check_expectations():
            print(f"\n- {c.text()}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def plain_step_p50() -> float:
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "benchmarks._plain_ddp", "--world", "4", "--port", str(port)]
    argv += ["--steps", str(OVERHEAD_STEPS)]
    procs = [
        subprocess.Popen([*argv, "--rank", str(r)], env=env, stdout=subprocess.PIPE, text=True)
        for r in range(4)
    ]
    outs = [p.communicate()[0] for p in procs]
    walls = json.loads(outs[0])
    return statistics.median(walls[5:])  # the first steps include DDP's bucket rebuild


def testbed_step_p50(out: str) -> tuple[float, bool]:
    data = {
        "name": "bench-train-overhead",
        "clusters": {"east": {"hosts": 2}, "west": {"hosts": 2}},
        "wan": [{"between": ["east", "west"], "rate": "10gbit", "delay": "0ms"}],
        "workload": {"kind": "training", "steps": OVERHEAD_STEPS, "eval_every": OVERHEAD_STEPS},
    }
    exp = Experiment(expand(data, "bench"), "bench", out, resume=False)
    exp.run(selfcheck_seconds=0.5)
    import pandas as pd

    df = pd.read_parquet(exp.results.path / "training.parquet")
    walls = df[df["rank"] == 0].sort_values("step")["wall_s"].tolist()
    return statistics.median(walls[5:]), bool(exp.summaries[0]["cpu_saturated"])


def part_overhead() -> None:
    plain, under, flags = [], [], []
    with tempfile.TemporaryDirectory() as out:
        for i in range(ROUNDS):
            plain.append(plain_step_p50())
            t, flag = testbed_step_p50(f"{out}/{i}")
            under.append(t)
            flags.append(flag)
    p, u = statistics.median(plain), statistics.median(under)
    print("| setup | DDP step p50 (median of rounds) | rounds |")
    print("|---|---|---|")
    print(
        f"| plain torch, 4 ranks on loopback | {format_duration(p)} | "
        f"{', '.join(format_duration(x) for x in plain)} |"
    )
    print(
        f"| testbed, 2x2 hosts, WAN 10 Gbit/s 0 ms | {format_duration(u)} | "
        f"{', '.join(format_duration(x) for x in under)} |"
    )
    verdict = "met" if u <= 1.03 * p else "MISSED"
    print(
        f"\nOverhead {u / p - 1:+.1%} (goal <= +3%: {verdict}); CPU flag in "
        f"{sum(flags)}/{len(flags)} testbed rounds."
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    p.add_argument("--quick", action="store_true", help="60 steps in part 1 (trying it out)")
    args = p.parse_args()
    buf = io.StringIO()
    sys.stdout = Tee(sys.__stdout__, buf)
    load = os.getloadavg()
    print(f"## Training across the WAN ({platform.release()}, {time.strftime('%Y-%m-%d')})\n")
    print(f"Load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (2 cores).\n")
    print("### scenarios/diloco-vs-ddp.yaml (2 x 2 hosts, 100 Mbit/s, 25 ms one-way, char-mlp)\n")
    part_diloco_vs_ddp(args.quick)
    print(f"\n### Harness overhead ({OVERHEAD_STEPS} DDP steps, {ROUNDS} rounds interleaved)\n")
    part_overhead()
    sys.stdout = sys.__stdout__
    if args.write and not args.quick:
        write_section("training.py", buf.getvalue())


if __name__ == "__main__":
    main()
