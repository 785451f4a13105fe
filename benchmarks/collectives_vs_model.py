"""Benchmark: measured flat and hierarchical all_reduce against the α-β model, term by term.

    sudo .venv/bin/python -m benchmarks.collectives_vs_model [--write] [--iterations 3]

2 clusters x 2 hosts (``--hosts``), 1, 4, 16 and 64 MiB (``--sizes``), flat and hierarchical.
Two experiments on the same topology (docs/model.md, "Terms and their measured inputs"):

1. the *floor*: WAN unshaped (10 Gbit/s, 0 ms: no link emulation), so hierarchical all_reduce's
   intra-cluster phases (``cluster_reduce`` + ``cluster_broadcast``, leaders' timers) measure the
   copy rate ``host_bw`` (analysis.model.host_bw_from_phases), the median over sizes;
2. the *WAN*: 100 Mbit/s and 1 Gbit/s (``--rates``) at 10 ms one-way, with the tcp_info tracer
   (10 ms), whose samples give every WAN direction's congestion window at the start of each step
   and the srtt its ACKs saw (analysis.steps.wan_step_starts; medians per point).

For every point: measured p50 (slowest rank, median over iterations), the runner's prediction (as
recorded: the run's own tcp windows and host copy rate), the full prediction (with the floor's
``host_bw``) split into its terms (analysis.model.predict_terms), measured / predicted, and the CPU
flag. Then hierarchical's phases measured (leaders' timers) vs predicted, and the
hierarchical / flat ratio measured vs predicted. Goal: measured / predicted <= 1.10 and the
hierarchical / flat ratio within 10% on every run without the CPU flag.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from analysis.model import TERMS, Topology, host_bw_from_phases, predict_phases, predict_terms
from analysis.steps import measured_topology, phase_medians, wan_step_starts
from benchmarks._results import write_section
from testbed.config.sweep import RunSpec, expand
from testbed.core.units import parse_rate, parse_size
from testbed.experiment.execute import model_topology
from testbed.experiment.sweep import Experiment
from testbed.plan.ranks import place_ranks
from testbed.plan.topology import build_plan

DELAY = "10ms"
INTRA = ("cluster_reduce", "cluster_broadcast")


def scenario(
    name: str, hosts: int, sizes: list[str], iterations: int, rates: list[str] | None
) -> dict:
    """The WAN sweep over ``rates`` at 10 ms with the tcp_info tracer, or, for ``rates`` None,
    the floor: 10 Gbit/s and 0 ms, which the testbed does not emulate at all (backend none)."""
    shaped = bool(rates)
    rates = rates or ["10gbit"]
    return {
        "name": name,
        "clusters": {"east": {"hosts": hosts}, "west": {"hosts": hosts}},
        "wan": [
            {"between": ["east", "west"], "rate": rates[0], "delay": DELAY if shaped else "0ms"}
        ],
        "workload": {
            "collectives": ["all_reduce"],
            "algorithms": ["flat", "hierarchical"],
            "sizes": sizes,
            "warmup": 1,
            "iterations": iterations,
            "timeout": "900s",
        },
        **({"trace": {"tcp_info": "10ms"}, "sweep": {"wan[0].rate": rates}} if shaped else {}),
    }


def cold_scenario(sizes: list[str], delays: list[str]) -> dict:
    """Every run a fresh set of ranks (new connections: the initial window, no ssthresh) timing
    one iteration without warm-up at 100 Mbit/s, buffer 1 BDP, over ``delays``; the runner's own
    tcp_info sampling gives the model the window each step starts with."""
    return {
        "name": "bench-cold",
        "clusters": {"east": {"hosts": 2}, "west": {"hosts": 2}},
        "wan": [{"between": ["east", "west"], "rate": "100mbit", "delay": delays[0]}],
        "workload": {
            "collectives": ["all_reduce"],
            "algorithms": ["flat", "hierarchical"],
            "sizes": sizes,
            "warmup": 0,
            "iterations": 1,
            "timeout": "900s",
        },
        "sweep": {"wan[0].delay": delays},
    }


def cold(args: argparse.Namespace, emit: Callable[[str], None], tmp: str) -> None:
    """The cold sweep: measured against the runner's recorded prediction, term by term."""
    delays = args.cold_delays.split(",")
    exp = run(cold_scenario(args.cold_sizes.split(","), delays), tmp)
    emit("Cold start (warm-up 0, one iteration per run, fresh connections; 100 Mbit/s, buffer ")
    emit("1 BDP; the runner's prediction as recorded, its windows from the run's tcp_info):\n")
    emit("| one-way delay | algorithm | size | measured | α-β | + segments & notify | + cwnd | "
         "+ loss | + barrier skew | predicted | measured / predicted | CPU flag | "
         "goal 0.85-1.15 |")  # fmt: skip
    emit("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in exp.summaries:
        ratio = s["time_p50"] / s["predicted"]
        terms = " | ".join(f"{s['model_' + t]:+.3f} s" for t in TERMS[1:])
        emit(
            f"| {s['wan[0].delay']} | {s['algorithm']} | {s['size'] >> 20} MiB | "
            f"{s['time_p50']:.3f} s | {s['model_alpha_beta']:.3f} s | {terms} | "
            f"{s['predicted']:.3f} s | {ratio:.2f} | {'yes' if s['cpu_saturated'] else 'no'} | "
            f"{'met' if 0.85 <= ratio <= 1.15 else 'missed'} |"
        )


def run(spec: dict, out: str) -> Experiment:
    exp = Experiment(expand(spec, "bench"), "bench", out, resume=False)
    exp.run(selfcheck_seconds=1.0)
    for run_id, r in exp.manifest["runs"].items():
        if r["status"] != "ok":
            print(f"\n{spec['name']} {run_id}: {r['status']}: {r.get('reason', '')}\n")
    return exp


def table(exp: Experiment, name: str) -> pd.DataFrame:
    path = Path(exp.results.path) / f"{name}.parquet"
    return pd.read_parquet(path) if path.exists() else pd.DataFrame()


def topology(run: RunSpec) -> Topology:
    """The runner's model topology for this run (the same plan and placement code)."""
    plan = build_plan(run.scenario, "bench", 1)  # addresses do not matter here
    w = run.scenario.workload
    assert w is not None
    ranks = place_ranks(plan, w.ranks_per_host, w.placement)
    return model_topology(plan, ranks, w.placement, w.ranks_per_host)


def leaders(topo: Topology) -> list[int]:
    first, out = 0, []
    for _, m in topo.clusters:
        out.append(first)
        first += m
    return out


def measured_host_bw(exp: Experiment) -> tuple[float, list[str]]:
    """Median over sizes of the copy rate that makes the predicted intra-cluster phases equal
    the measured ones (unshaped WAN)."""
    coll = table(exp, "collectives")
    topo = topology(exp.runs[0])
    phases = phase_medians(coll, leaders(topo))
    lines, rates = [], []
    for r in phases[phases["algorithm"] == "hierarchical"].itertuples(index=False):
        seconds = sum(getattr(r, f"phases_{p}") for p in INTRA)
        bw = host_bw_from_phases(seconds, INTRA, "all_reduce", "hierarchical", r.size, topo)
        rates.append(bw)
        lines.append(f"| {r.size >> 20} MiB | {seconds * 1e3:.1f} ms | {bw / 1e9:.2f} Gbit/s |")
    return statistics.median(rates), lines


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    p.add_argument("--hosts", type=int, default=2, help="hosts per cluster (2 clusters)")
    p.add_argument("--sizes", default="1MiB,4MiB,16MiB,64MiB")
    p.add_argument("--rates", default="100mbit,1gbit")
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--keep", metavar="DIR", help="keep the results directories under DIR")
    p.add_argument("--cold", action="store_true", help="only the cold-start sweep")
    p.add_argument("--cold-sizes", default="1MiB,16MiB")
    p.add_argument("--cold-delays", default="5ms,10ms,20ms,40ms")
    args = p.parse_args()
    sizes, rates = args.sizes.split(","), args.rates.split(",")
    for s in sizes:
        parse_size(s)
    for r in rates:
        parse_rate(r)
    text: list[str] = []

    def emit(line: str = "") -> None:
        print(line, flush=True)
        text.append(line)

    emit(f"## Collectives vs the α-β model ({platform.release()}, {time.strftime('%Y-%m-%d')})\n")
    if args.cold:
        with tempfile.TemporaryDirectory() as scratch:
            cold(args, emit, args.keep or scratch)
        if args.write:
            write_section("collectives_vs_model.py --cold", "\n".join(text))
        return
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or scratch
        floor = run(scenario("bench-floor", args.hosts, sizes, args.iterations, None), tmp)
        host_bw, lines = measured_host_bw(floor)
        busy = [r.get("cpu_busy_mean") or 0 for r in floor.manifest["runs"].values()]
        emit(f"Floor (WAN unshaped, CPU busy {max(busy):.0%}): intra-cluster phases -> host_bw\n")
        emit("| size | cluster_reduce + cluster_broadcast | host_bw |")
        emit("|---|---|---|")
        for line in lines:
            emit(line)
        emit(f"\nhost_bw (median) = {host_bw / 1e9:.2f} Gbit/s\n")

        wan = run(scenario("bench-model", args.hosts, sizes, args.iterations, rates), tmp)
        coll, tcp = table(wan, "collectives"), table(wan, "tcp")
        steps = wan_step_starts(tcp, coll)
        by_run = {s.run_id: s for s in wan.runs}
        emit("| ranks | WAN | algorithm | size | measured p50 | runner's prediction | α-β | "
             "+ segments & notify | + cwnd | + loss | + barrier skew | predicted | "
             "measured / predicted | CPU flag | goal 0.90-1.10 |")  # fmt: skip
        emit("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        points: dict[tuple, tuple[float, float, Topology]] = {}
        for s in wan.summaries:
            spec = by_run[s["run_id"]]
            mine = steps[
                (steps["run_id"] == s["run_id"])
                & (steps["algorithm"] == s["algorithm"])
                & (steps["size"] == s["size"])
            ]
            topo = measured_topology(topology(spec), mine, host_bw)
            terms = predict_terms("all_reduce", s["algorithm"], s["size"], topo)
            pred = sum(terms.values())
            ratio = s["time_p50"] / pred
            rate = s["wan[0].rate"]
            points[(rate, s["algorithm"], s["size"])] = (s["time_p50"], pred, topo)
            emit(
                f"| {s['ranks']} | {rate} | {s['algorithm']} | {s['size'] >> 20} MiB | "
                f"{s['time_p50']:.3f} s | {s['predicted']:.3f} s | {terms['alpha_beta']:.3f} s | "
                f"{terms['segments_and_notify']:+.3f} s | {terms['cwnd']:+.3f} s | "
                f"{terms['loss']:+.3f} s | {terms['barrier_skew']:+.3f} s | {pred:.3f} s | "
                f"{ratio:.2f} | {'yes' if s['cpu_saturated'] else 'no'} | "
                f"{'met' if 0.9 <= ratio <= 1.10 else 'missed'} |"
            )
        emit("\nHierarchical phases, measured (leaders' timers, median) / predicted:\n")
        emit("| WAN | size | cluster_reduce | leaders_all_reduce | cluster_broadcast |")
        emit("|---|---|---|---|---|")
        phases = phase_medians(coll, leaders(topology(wan.runs[0])))
        for r in phases[phases["algorithm"] == "hierarchical"].to_dict("records"):
            point = points.get((r["wan[0].rate"], "hierarchical", r["size"]))
            if point is None:  # its run failed: reported above
                continue
            topo = point[2]
            pred = predict_phases("all_reduce", "hierarchical", r["size"], topo)
            cells = " | ".join(
                f"{r['phases_' + k] * 1e3:.1f} / {v * 1e3:.1f} ms" for k, v in pred.items()
            )
            emit(f"| {r['wan[0].rate']} | {r['size'] >> 20} MiB | {cells} |")
        emit("\nHierarchical / flat, measured vs predicted (goal: within 10%):\n")
        emit("| WAN | size | measured | predicted | measured / predicted |")
        emit("|---|---|---|---|---|")
        for (rate, algo, size), (meas, pred, _) in points.items():
            if algo == "hierarchical" and (rate, "flat", size) in points:
                fm, fp, _ = points[(rate, "flat", size)]
                m, q = meas / fm, pred / fp
                emit(f"| {rate} | {size >> 20} MiB | {m:.2f} | {q:.2f} | {m / q:.2f} |")
        emit("\nMeasured inputs per WAN direction (median over the steps of each point):\n")
        emit("| WAN | algorithm | size | direction | cwnd at step start | srtt | idle before "
             "(max) | retransmits |")  # fmt: skip
        emit("|---|---|---|---|---|---|---|---|")
        steps["direction"] = (
            steps["host"].str.rsplit("-h", n=1).str[0]
            + "->"
            + steps["peer_host"].str.rsplit("-h", n=1).str[0]
        )
        grouped = steps.groupby(["wan[0].rate", "algorithm", "size", "direction"])
        for (rate, algo, size, d), g in grouped:
            emit(
                f"| {rate} | {algo} | {size >> 20} MiB | {d} | "
                f"{g['cwnd_start'].median() / 1e3:.0f} kB | {g['srtt_ms'].median():.1f} ms | "
                f"{g['idle_before'].max() * 1e3:.0f} ms | {g['retransmits'].sum():.0f} |"
            )
        for run_id, r in wan.manifest["runs"].items():
            emit(f"\n{run_id}: CPU busy {r.get('cpu_busy_mean') or 0:.0%}")
    if args.write:
        write_section("collectives_vs_model.py", "\n".join(text))


if __name__ == "__main__":
    main()
