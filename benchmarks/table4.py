"""Benchmark: Streaming DiLoCo's Table 4 measured on the emulated WAN.

    sudo .venv/bin/python -m benchmarks.table4 [--write] [--results DIR]

Runs scenarios/streaming-diloco-table4.yaml (a synthetic 1B model, 0.1 s of emulated compute per
step, bytes and link rates scaled; docs/training.md) with `testbed run`, or reads the results
directory ``--results`` of such a run, and prints: each point's real link rate and settled compute
utilisation beside the paper's wall-clock model; the bandwidth each method needs for CU 50, 80, 90,
95 and 99% (interpolated between the bracketing points, in real Gbit/s) beside the paper's
simulated Table 4; whether the ordering DP > DiLoCo > Streaming > + overlap > + overlap FP4 holds
at each level; the ratios of neighbouring methods against the paper's (goal: within 25%); and the
scale-invariance pair (one DiLoCo point at 1/100 and 1/1000: goal CU within 5%). Goal for the
whole run: 15 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import itertools
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from analysis.compute_util import PAPER_TABLE4_1B, TABLE4_TARGETS, needed_table, table4_points
from analysis.loader import load
from analysis.run_summary import topology_from
from analysis.schedule_cu import explaining_term, schedule_model_cu
from benchmarks._results import section
from testbed.core.frames import goodput_factor

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "streaming-diloco-table4.yaml"
METHODS = list(PAPER_TABLE4_1B)
GOAL_RATIO = 0.25  # each neighbouring methods' ratio within 25% of the paper's
GOAL_SCALE = 0.05  # the scale-invariance pair's CU within 5%
GOAL_MODEL = 0.10  # measured CU within 10% of the paper's model where its assumptions hold
GOAL_SECONDS = 15 * 60


def run(out: Path) -> float:
    """`testbed run` of the scenario into ``out``; its wall seconds."""
    began = time.monotonic()
    cmd = [sys.executable, "-m", "testbed.cli", "run", str(SCENARIO), "--out", str(out)]
    subprocess.run(cmd, check=False)
    return time.monotonic() - began


def fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def report(results: Path, wall: float | None) -> None:
    res = load(results)
    summaries = [{str(k): v for k, v in r.items()} for r in res.training_summary.to_dict("records")]
    _fill_schedule_model(summaries, res.manifests)
    points = table4_points(summaries, goodput_factor())
    if wall is not None:
        met = "met" if wall <= GOAL_SECONDS else "not met"
        print(f"Whole run: {wall / 60:.1f} min (goal {GOAL_SECONDS // 60} min: {met}).\n")
    failed = [s for s in summaries if s.get("status") not in (None, "ok")]
    print(f"Runs: {len(summaries)} ({len(failed)} not ok).\n")
    print(
        "| method | scale | real Gbit/s | CU measured | CU paper model | CU schedule model "
        f"| a miss of the paper model (over {GOAL_MODEL:.0%}) explained by |"
    )
    print("|---|---|---|---|---|---|---|")
    for p in points.sort_values(["method", "bandwidth"], key=_method_order).to_dict("records"):
        term = explaining_term(
            p["method"],
            p["compute_utilisation"],
            p["cu_paper_model"],
            p["cu_schedule_model"],
            GOAL_MODEL,
        )
        print(
            f"| {p['method']} | {fmt(p['scale'], 'g')} | {fmt(p['bandwidth'], '.2f')} | "
            f"{fmt(p['compute_utilisation'], '.3f')} | {fmt(p['cu_paper_model'], '.3f')} | "
            f"{fmt(p['cu_schedule_model'], '.3f')} | {term} |"
        )
    table = needed_table(
        points[points["scale"] == points.groupby("method")["scale"].transform("max")]
        if not points.empty
        else points,
        TABLE4_TARGETS,
    )
    needed = {(r["method"], r["target"]): r["needed"] for r in table.to_dict("records")}
    print("\nGbit/s needed for CU >= x: measured (paper). '>' = beyond the swept range.\n")
    print("| method | " + " | ".join(f"CU {t:.0%}" for t in TABLE4_TARGETS) + " |")
    print("|---|" + "---|" * len(TABLE4_TARGETS))
    for m in METHODS:
        cells = []
        for t, paper in zip(TABLE4_TARGETS, PAPER_TABLE4_1B[m], strict=True):
            got = needed.get((m, t))
            row = table[(table["method"] == m) & (table["target"] == t)]
            if got is None or (isinstance(got, float) and math.isnan(got)):
                beyond = row["below_bw"].iloc[0] if not row.empty else None
                cells.append(f"> {fmt(beyond, '.2f')} ({paper})")
            else:
                cells.append(f"{got:.2f} ({paper})")
        print(f"| {m} | " + " | ".join(cells) + " |")
    print("\nOrdering DP > DiLoCo > Streaming > + overlap > + overlap FP4, per CU level:\n")
    for t in TABLE4_TARGETS:
        vals = [needed.get((m, t)) for m in METHODS]
        known = [v for v in vals if v is not None and not math.isnan(v)]
        holds = all(a > b for a, b in itertools.pairwise(known))
        print(f"- CU {t:.0%}: {'holds' if holds else 'does not hold'} over {len(known)} methods")
    print(f"\nRatios of neighbouring methods, measured / paper (goal within {GOAL_RATIO:.0%}):\n")
    print("| ratio | " + " | ".join(f"CU {t:.0%}" for t in TABLE4_TARGETS) + " |")
    print("|---|" + "---|" * len(TABLE4_TARGETS))
    for a, b in itertools.pairwise(METHODS):
        cells = []
        for i, t in enumerate(TABLE4_TARGETS):
            x, y = needed.get((a, t)), needed.get((b, t))
            if x is None or y is None or math.isnan(x) or math.isnan(y):
                cells.append("-")
                continue
            paper = PAPER_TABLE4_1B[a][i] / PAPER_TABLE4_1B[b][i]
            cells.append(f"{x / y:.2f} / {paper:.2f} = {x / y / paper:.2f}")
        print(f"| {a} / {b} | " + " | ".join(cells) + " |")
    twins = (
        points[points["method"] == "DiLoCo"]
        .groupby("bandwidth")
        .filter(lambda g: g["scale"].nunique() > 1)
    )
    if not twins.empty:
        cus = twins.groupby("scale")["compute_utilisation"].mean()
        spread = abs(cus.iloc[0] - cus.iloc[1]) / max(cus)
        met = "met" if spread <= GOAL_SCALE else "not met"
        pairs = ", ".join(f"{s:g}: {c:.3f}" for s, c in cus.items())
        print(
            f"\nScale invariance (DiLoCo, same real rate): CU {pairs}; {spread:.1%} apart "
            f"(goal {GOAL_SCALE:.0%}: {met})."
        )


def _fill_schedule_model(summaries: list[dict], manifests: dict) -> None:
    """Results written before the schedule model was in the summary: compute it from each
    run's resolved workload and topology (the same function the summary calls)."""
    runs = {rid: info for m in manifests.values() for rid, info in m.get("runs", {}).items()}
    for s in summaries:
        info = runs.get(s.get("run_id"))
        if s.get("cu_schedule_model") is None and info and "resolved" in info:
            topo = topology_from(info.get("topology"))
            s["cu_schedule_model"] = schedule_model_cu(info["resolved"]["workload"], topo)


def _method_order(col: pd.Series) -> pd.Series:
    return col.map(METHODS.index) if col.name == "method" else col


def main() -> int:
    p = argparse.ArgumentParser(description="Streaming DiLoCo's Table 4 on the emulated WAN")
    p.add_argument("--write", action="store_true", help="replace this script's RESULTS.md section")
    p.add_argument("--results", type=Path, help="read this results directory instead of running")
    args = p.parse_args()
    with section("table4.py", args.write, "Streaming DiLoCo's Table 4 on the emulated WAN"):
        if args.results:
            report(args.results, None)
        else:
            out = Path(tempfile.mkdtemp(prefix="table4-"))
            wall = run(out)
            print(f"Results: {out}\n")
            report(out, wall)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
