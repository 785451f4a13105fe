"""Benchmark: compute utilisation of emulated hierarchical training against its models.

    sudo .venv/bin/python -m benchmarks.hierarchical_cu [--write] [--repeat N]

Two clusters of two ranks, a synthetic 1B model (24 layers, bf16) at scale 1/1000, 0.1 s of
emulated compute per step (docs/training.md, "Emulated compute and scale"): DDP's buckets
all-reduced inside each cluster every step, overlapped with the backward wait; every H = 10 steps
the two leaders all-reduce the bf16 pseudo-gradients across the WAN (1 ms one way) and broadcast
the parameters in their cluster. At each WAN rate it prints the settled CU beside the paper's
wall-clock model (DiLoCo with M = the clusters, analysis.model.diloco_wallclock) and the α-β
model of the schedule, the slowest rank's steps with and without a sync, and the CPU flag.
Goal: measured CU within 10% of the models wherever their assumptions hold.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import pandas as pd

from benchmarks._results import section
from testbed.config.sweep import expand
from testbed.core.frames import goodput_factor
from testbed.experiment.sweep import Experiment

RATES = ("8mbit", "16mbit", "48mbit")  # x 1000 real: 8, 16, 48 Gbit/s
H = 10
STEPS = 25  # 5 warm-up steps, then two sync periods


def scenario(repeat: int) -> dict:
    return {
        "name": f"hiercu-{int(time.time()) % 100000}",
        "clusters": {"east": {"hosts": 2}, "west": {"hosts": 2}},
        "wan": [{"between": ["east", "west"], "rate": RATES[0], "delay": "1ms"}],
        "workload": {
            "kind": "training",
            "model": {"synthetic": {"params": 1e9, "dtype": "bf16", "layers": 24}},
            "compute": {"step": "0.1s"},
            "scale": "1/1000",
            "algorithm": "hierarchical",
            "steps": STEPS,
            "diloco": {"inner_steps": H, "dtype": "bf16"},
            "timeout": "120s",
        },
        "sweep": {"wan[0].rate": list(RATES)},
        "repeat": repeat,
    }


def report(results: Path) -> None:
    """The table of one run's results directory (its manifest.json and training.parquet)."""
    manifest = json.loads((results / "manifest.json").read_text())
    for run_id, r in manifest["runs"].items():
        if r["status"] != "ok":
            print(f"{run_id}: {r['status']}: {r.get('reason', '')}\n")
    rows = pd.read_parquet(results / "training.parquet")
    print(
        "2 clusters x 2 ranks, 1B bf16 at 1/1000, 0.1 s steps, H = 10, 1 ms one way; "
        "CU over steps 5-24 (two sync periods).\n"
    )
    print(
        "| WAN emulated (real) | CU measured | paper model (M = 2) | α-β model | "
        "steps without sync, slowest rank | sync step | paper + their excess | CPU flag |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for s in sorted(manifest["summary"], key=lambda s: (s["wan_goodput_bps"], s["repeat"])):
        run = rows[(rows["run_id"] == s["run_id"]) & (rows["step"] >= 5)]
        slowest = run.groupby("step")["wall_s"].max()
        synced = slowest.index % H == H - 1
        mbit = s["wan_goodput_bps"] / goodput_factor() / 1e6
        # the paper model plus what neither model has: the steps without a sync measured over
        # their compute (the emulator's CPU, the in-cluster exchange's exposed tail)
        step_s, paper = 0.1, s["cu_paper_model"]
        excess = (slowest[~synced].mean() - step_s) * (H - 1) / H
        with_excess = step_s / (step_s / paper + excess)
        print(
            f"| {mbit:.0f} Mbit/s ({mbit:.0f} Gbit/s) | "
            f"{s['compute_utilisation_settled']:.3f} | {s['cu_paper_model']:.3f} | "
            f"{s['cu_alpha_beta']:.3f} | {1e3 * slowest[~synced].mean():.1f} ms | "
            f"{1e3 * slowest[synced].mean():.0f} ms | {with_excess:.3f} | "
            f"{'yes' if s['cpu_saturated'] else 'no'} |"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description="CU of emulated hierarchical training vs its models")
    ap.add_argument("--write", action="store_true", help="replace this script's RESULTS section")
    ap.add_argument("--repeat", type=int, default=1, help="runs per rate")
    ap.add_argument("--results", type=Path, help="report this results directory, run nothing")
    args = ap.parse_args()
    title = "Emulated hierarchical training: CU against the models"
    with section("hierarchical_cu.py", args.write, title):
        if args.results:
            report(args.results)
            return
        out = Path(tempfile.mkdtemp(prefix="hiercu-"))
        exp = Experiment(expand(scenario(args.repeat), "bench"), "bench", out, resume=False)
        exp.run(selfcheck_seconds=0.3)
        print(f"(results: {exp.results.path})\n")
        report(Path(exp.results.path))


if __name__ == "__main__":
    main()
