"""Benchmark: do real DCQCN flows here agree with DCQCN's fluid model (one flow's queue and
sawtooth, two flows' convergence, the queue across RTTs)?

    sudo .venv/bin/python -m benchmarks.dcqcn_model [--write] [--scenarios one,two,delay]

Runs the committed scenarios (userspace backend, the delay line marking at dequeue) and prints,
per run, the measured metrics over the settled half beside the fluid model's for the same
parameters, bottleneck, RTT and starts (analysis.dcqcn): ``dcqcn-one-flow.yaml`` (goal:
mean queue between Kmin and Kmax, the rate sawtooth's period (cut interval) and depth (the
rate a cut takes away) within 20% of the model),
``dcqcn-two-flows.yaml`` (goal: Jain >= 0.95 within 1.5 x the model's convergence time with
B = 10 MB, worse with 150 KB) and ``dcqcn-delay-sweep.yaml`` (production DCQCN, no
dilation, across 1-50 ms, and the long-haul recipe). Each scenario's own expectations are
checked too; a failed one is reported, not hidden.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from benchmarks._results import cell, section
from testbed.config.sweep import load_runs
from testbed.core.units import format_duration, format_rate, format_size
from testbed.experiment.sweep import Experiment

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = {
    "one": ROOT / "scenarios" / "dcqcn-one-flow.yaml",
    "two": ROOT / "scenarios" / "dcqcn-two-flows.yaml",
    "delay": ROOT / "scenarios" / "dcqcn-delay-sweep.yaml",
}


def rows_of(path: Path) -> tuple[list[str], list[str]]:
    """Run one scenario; its table rows and its expectations' verdicts."""
    with tempfile.TemporaryDirectory() as tmp:
        exp = Experiment(load_runs(str(path)), str(path), tmp, resume=False)
        exp.run(selfcheck_seconds=0.5)
        checks = exp.check_expectations()
    out = []
    for s in exp.summaries:
        if "dcqcn_flows" not in s:
            continue
        spec = next(r for r in exp.runs if r.run_id == s["run_id"])
        point = ", ".join(f"{k}={v}" for k, v in spec.params.items()) or "-"
        pct = lambda x: f"{x:.1%}"  # noqa: E731
        out.append(
            f"| {path.stem} | {point} | {s['dcqcn_flows']:.0f} | "
            f"{cell(s, 'dcqcn_rate_mean_bps', format_rate)} | "
            f"{cell(s, 'dcqcn_utilisation', pct)} / {cell(s, 'dcqcn_pred_utilisation', pct)} | "
            f"{cell(s, 'dcqcn_jain', lambda x: f'{x:.3f}')} / "
            f"{cell(s, 'dcqcn_pred_jain', lambda x: f'{x:.3f}')} | "
            f"{cell(s, 'dcqcn_queue_mean_bytes', format_size)} / "
            f"{cell(s, 'dcqcn_pred_queue_mean_bytes', format_size)} | "
            f"{cell(s, 'dcqcn_queue_amplitude_bytes', format_size)} / "
            f"{cell(s, 'dcqcn_pred_queue_amplitude_bytes', format_size)} | "
            f"{cell(s, 'dcqcn_cut_interval_s', format_duration)} / "
            f"{cell(s, 'dcqcn_pred_cut_interval_s', format_duration)} | "
            f"{cell(s, 'dcqcn_cut_depth_bps', format_rate)} / "
            f"{cell(s, 'dcqcn_pred_cut_depth_bps', format_rate)} | "
            f"{cell(s, 'dcqcn_convergence_s', format_duration)} / "
            f"{cell(s, 'dcqcn_pred_convergence_s', format_duration)} | "
            f"{s.get('dcqcn_lost', 0):.0f}{' LOSSY' if s.get('dcqcn_lossy') else ''} |"
        )
    verdicts = [f"- {path.stem}: {c.text()}" for c in checks]
    return out, verdicts


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    p.add_argument("--scenarios", default="one,two,delay", help="one,two,delay")
    args = p.parse_args()
    chosen = [k for k in args.scenarios.split(",") if SCENARIOS[k].exists()]
    with section(
        "dcqcn_model.py",
        args.write and args.scenarios == "one,two,delay",
        "DCQCN against its fluid model",
        "Measured / fluid model, over the settled half; rates are payload, queues wire bytes, "
        "in the testbed's (dilated) units; userspace backend, marking at dequeue.",
    ):
        print(
            "| scenario | point | flows | rate per flow | utilisation | Jain | queue mean | "
            "queue p95-p5 | cut every | cut by | convergence | lost |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        verdicts: list[str] = []
        for key in chosen:
            rows, checks = rows_of(SCENARIOS[key])
            verdicts += checks
            for row in rows:
                print(row)
        print("\nThe scenarios' expectations:\n")
        print("\n".join(verdicts))


if __name__ == "__main__":
    main()
