"""Benchmark: DCQCN beside DCTCP through the same marking switch.

    testbed vm -- python -m benchmarks.dcqcn_vs_dctcp [--write]

Runs ``scenarios/dcqcn-vs-dctcp.yaml`` (two flows, the second 10 s late, one RED/ECN
bottleneck; once DCQCN flows, once TCP DCTCP flows) and prints the two side by side over the
settled half: rate per flow, Jain's index, utilisation (payload over the bottleneck's payload
capacity), the queue's mean and p95 - p5, the time to a fair share after the join and what the
bottleneck dropped. DCTCP needs ``tcp_dctcp``: in ``testbed vm`` (Debian's stock kernel) both
run; on a kernel without it the DCTCP case says "unsupported on this kernel".
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from benchmarks._results import cell, section
from testbed.config.sweep import load_runs
from testbed.core.units import format_duration, format_rate, format_size
from testbed.experiment.sweep import Experiment

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "dcqcn-vs-dctcp.yaml"


def row(kind: str, s: dict, prefix: str) -> str:
    drops = prefix + ("lost" if prefix == "dcqcn_" else "dropped")
    return (
        f"| {kind} | {cell(s, prefix + 'rate_mean_bps', format_rate)} | "
        f"{cell(s, prefix + 'jain', lambda x: f'{x:.3f}')} | "
        f"{cell(s, prefix + 'utilisation', lambda x: f'{x:.1%}')} | "
        f"{cell(s, prefix + 'queue_mean_bytes', format_size)} | "
        f"{cell(s, prefix + 'queue_amplitude_bytes', format_size)} | "
        f"{cell(s, prefix + 'convergence_s', format_duration)} | "
        f"{cell(s, drops, lambda x: f'{x:.0f}')} |"
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = p.parse_args()
    with section(
        "dcqcn_vs_dctcp.py",
        args.write,
        "DCQCN beside DCTCP",
        f"`{SCENARIO.name}`: 20 Mbit/s, 85 ms one way, RED 5..200 KB 1% ECN at arrival, two "
        "flows (the second from 10 s); settled half; DCQCN at dilation 2000 (the paper's 40 "
        "Gbit/s, 85 us), DCTCP as the kernel has it.",
    ):
        print("| flows | rate per flow | Jain | utilisation | queue mean | queue p95-p5 | "
              "fair after join | lost / dropped |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|")
        with tempfile.TemporaryDirectory() as tmp:
            exp = Experiment(load_runs(str(SCENARIO)), str(SCENARIO), tmp, resume=False)
            exp.run(selfcheck_seconds=0.5)
            checks = exp.check_expectations()
            by_run = {s["run_id"]: s for s in exp.summaries}
            for spec in exp.runs:
                kind = spec.params.get("traffic[0].kind")
                s = by_run.get(spec.run_id)
                status = exp.manifest["runs"][spec.run_id]
                if s is None:
                    why = status.get("reason") or status.get("status")
                    print(f"| {kind} | {why} | | | | | | |")
                elif kind == "dcqcn":
                    print(row("DCQCN (paper, dilation 2000)", s, "dcqcn_"))
                else:
                    print(row("DCTCP (kernel)", s, "bulk_"))
        print("\nThe scenario's expectations:\n")
        print("\n".join(f"- {c.text()}" for c in checks))


if __name__ == "__main__":
    main()
