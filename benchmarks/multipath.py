"""Benchmark: multipath WAN links: how collectives use parallel paths, and how fast
traffic leaves a failed path under static routing, BGP and BGP + BFD.

    sudo .venv/bin/python -m benchmarks.multipath [--write] [--repeat 2] [--part util|failover]
        [--engine native|mininet]

Each part writes a section of its own to RESULTS.md (``multipath.py --part util``, ``...
--part failover``); on the Mininet engine (``--engine mininet``) a section of its own beside
the native one (``... --part failover --engine mininet``).

1. Path utilisation: 2 clusters x 4 hosts, 2 and 4 equal paths of 100 Mbit/s and 10 ms, the l4
   hash, all_reduce 16 MiB, flat vs hierarchical-2d, ``--repeat`` runs each (a run's ephemeral
   ports decide its hashes). Per case: time p50, and per WAN direction over the operation's
   window the paths that carried at least 5 % of its bytes and the largest path's share (the
   paths' shaper counters), the data flows and the distinct paths they used (flowpaths).
   Goal: flat uses at most as many paths as it has cross-WAN
   connections per direction; hierarchical-2d spreads over more; say when more paths do not
   speed a collective up.
2. Failover at 1 Gbit/s: 2 clusters x 4 hosts, 2 equal paths of 1 Gbit/s and 10 ms, a
   hierarchical-2d all_reduce of 32 MiB (four column connections each way: some are on path 1
   in practically every run; the table says how many flows were), 30 timed iterations (the run
   outlasts the fault), timeout 60 s; 300 ms into iteration 2 path 1 is
   blackholed for 15 s or taken down for 5 s, under static routing, BGP (hold 9 s) and BGP +
   BFD (50 ms x 3). Per case (``--repeat`` runs): detect (first BFD/BGP session down), moved
   (every gateway's route without the path), restored (after the fault's end), the stall of
   the all-reduce and whether it survived (analysis.routing, analysis.faults). Goals: BFD moves
   traffic within ~150 ms + BGP/FIB time; without BFD it takes the hold time (6-9 s: the last
   keepalive came up to 3 s before the fault).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from typing import Any

import pandas as pd

from analysis.faults import analyse
from analysis.loader import load
from analysis.multipath import operation_windows, path_utilisation
from analysis.routing import failover_table
from benchmarks._results import section
from testbed.config.sweep import expand
from testbed.experiment.sweep import Experiment

BFD = {"interval": "50ms", "multiplier": 3}
FAILOVER_CASES = {
    "static, blackhole 15 s": {"routing.mode": "static"},
    "bgp, blackhole 15 s": {"routing.mode": "bgp", "routing.bgp.hold": "9s"},
    "bgp + bfd, blackhole 15 s": {"routing.mode": "bgp", "routing.bgp.bfd.interval": "50ms"},
    "static, link_down 5 s": {"faults[0].kind": "link_down", "faults[0].duration": "5s"},
    "bgp + bfd, link_down 5 s": {
        "routing.mode": "bgp", "routing.bgp.bfd.interval": "50ms",
        "faults[0].kind": "link_down", "faults[0].duration": "5s",
    },
}  # fmt: skip


def paths(n: int, rate: str) -> list[dict[str, str]]:
    return [{"rate": rate, "delay": "10ms"} for _ in range(n)]


def utilisation_scenario(repeat: int) -> dict[str, Any]:
    return {
        "name": "bench-mp-util",
        "clusters": {"east": {"hosts": 4}, "west": {"hosts": 4}},
        "wan": [{"between": ["east", "west"], "paths": paths(2, "100mbit")}],
        "routing": {"ecmp": {"hash": "l4"}},
        "workload": {
            "collectives": ["all_reduce"], "algorithms": ["flat", "hierarchical-2d"],
            "sizes": ["16MiB"], "warmup": 1, "iterations": 4, "timeout": "60s",
        },
        "trace": {"queues": "50ms"},
        "sweep": {"wan[0].paths": [paths(2, "100mbit"), paths(4, "100mbit")]},
        "repeat": repeat,
    }  # fmt: skip


def failover_scenario(repeat: int, engine: str = "native") -> dict[str, Any]:
    return {
        "engine": engine,
        "name": "bench-mp-failover",
        "clusters": {"east": {"hosts": 4}, "west": {"hosts": 4}},
        "wan": [{"between": ["east", "west"], "paths": paths(2, "1gbit")}],
        "routing": {"ecmp": {"hash": "l4"}},
        "workload": {
            "collectives": ["all_reduce"], "algorithms": ["hierarchical-2d"],
            "sizes": ["32MiB"], "warmup": 1, "iterations": 30, "timeout": "60s",
        },
        "faults": [{"kind": "blackhole", "link": "east-west/1",
                    "after": {"iteration": 2, "offset": "300ms"}, "duration": "15s"}],
        "sweep": {"cases": list(FAILOVER_CASES.values())},
        "repeat": repeat,
    }  # fmt: skip


def run(data: dict[str, Any], out: str) -> Any:
    specs = expand(data, data["name"])
    exp = Experiment(specs, data["name"], out, resume=False)
    exp.run(on_done=lambda spec, r: print(f"{spec.run_id}: {r.status}", file=sys.__stderr__))
    return load(out)


def fmt(v: Any, unit: str = "s") -> str:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return "-"
    return f"{v:.3f} {unit}" if unit == "s" else f"{v}"


def utilisation(repeat: int, engine: str = "native") -> None:
    print("### Path utilisation: flat vs hierarchical-2d over 2 and 4 equal paths\n")
    print("2 x 4 hosts, paths of 100 Mbit/s and 10 ms, l4 hash, all_reduce 16 MiB, 4 timed")
    print(f"iterations, {repeat} run(s) per case. Per WAN direction over the operation's window:")
    print("paths carrying >= 5 % of its bytes, the largest path's share, data flows and the")
    print("distinct paths they used.\n")
    with tempfile.TemporaryDirectory() as tmp:
        res = run(utilisation_scenario(repeat) | {"engine": engine}, f"{tmp}/util")
        windows = operation_windows(res.collectives)
        util = path_utilisation(res.queues, res.flowpaths, windows)
        util = util[util["window"] != "run"]
        runs = res.runs.set_index("run_id")
        print("| paths | algorithm | run | time p50 | direction | carrying | largest share | "
              "data flows | paths they used |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|---|")
        times = res.summary.set_index(["run_id", "algorithm"])["time_p50"]
        for r in util.sort_values(["paths", "window", "run_id", "base"]).itertuples(index=False):
            algorithm = r.window.split()[1]
            shares = [float(x.split(": ")[1].rstrip("%")) for x in r.share_by_path.split(", ")]
            t = times.get((r.run_id, algorithm))
            print(
                f"| {r.paths} | {algorithm} | {r.run_id} | {fmt(t)} | {r.base} | "
                f"{r.paths_carrying} | {max(shares):.0f} % | {r.flows} | {r.flow_paths_used} |"
            )
        failed = runs[runs["status"] != "ok"]
        if not failed.empty:
            print(f"\nfailed runs: {', '.join(failed.index)}")
        print()


def failover(repeat: int, engine: str = "native") -> None:
    on = "" if engine == "native" else f" (engine: {engine})"
    print(f"### Failover of one of two 1 Gbit/s paths under an all-reduce{on}\n")
    print("2 x 4 hosts, 2 paths of 1 Gbit/s and 10 ms, l4 hash, hierarchical-2d all_reduce 32 MiB,")
    print("30 timed iterations, timeout 60 s; path 1 fails 300 ms into iteration 2. flows: data")
    print("flows on path 1 when it failed (flowpaths); detect: first BFD/BGP session down; moved:")
    print("every gateway's route without the path; restored: after the fault's end; stall: the")
    print("all-reduce's time beyond the no-fault median.\n")
    with tempfile.TemporaryDirectory() as tmp:
        res = run(failover_scenario(repeat, engine), f"{tmp}/failover")
        table = failover_table(res.events, res.routing)
        faults = analyse(res).faults.set_index("run_id")
        runs = res.runs.set_index("run_id")
        labels = list(FAILOVER_CASES)
        print("| case | run | flows | detected by | detect | moved | restored | stall | survived |")
        print("|---|---|---|---|---|---|---|---|---|")
        by_case: dict[str, list[dict[str, Any]]] = {}
        for r in table.sort_values("run_id").to_dict("records"):
            case = labels[int(runs.loc[r["run_id"], "point"])]
            f = faults.loc[r["run_id"]] if r["run_id"] in faults.index else {}
            stall = f.get("stall_s") if len(f) else None
            survived = f.get("survived") if len(f) else None
            by_case.setdefault(case, []).append(r | {"stall_s": stall})
            by = r["detected_by"] if isinstance(r["detected_by"], str) else "-"
            print(
                f"| {case} | {r['run_id']} | {flows_on(res.flowpaths, r)} | {by} | "
                f"{fmt(r['detect_s'])} | "
                f"{fmt(r['moved_s'])} | {fmt(r['restored_s'])} | {fmt(stall)} | "
                f"{'yes' if survived else 'no'} |"
            )
        print("\nMedians per case:\n")
        print("| case | detect | moved | restored | stall |")
        print("|---|---|---|---|---|")
        for case in labels:
            rows = by_case.get(case, [])

            def med(col: str, rows: list[dict[str, Any]] = rows) -> float | None:
                vals = [r[col] for r in rows if r[col] is not None and not pd.isna(r[col])]
                return statistics.median(vals) if vals else None

            print(
                f"| {case} | {fmt(med('detect_s'))} | {fmt(med('moved_s'))} | "
                f"{fmt(med('restored_s'))} | {fmt(med('stall_s'))} |"
            )
        print()


def flows_on(flowpaths: pd.DataFrame, fault: dict[str, Any]) -> int:
    """Data flows seen on the fault's path within the second before it started."""
    fp = flowpaths[flowpaths["run_id"] == fault["run_id"]]
    t = fault["start"]
    on = fp[
        fp["direction"].str.endswith("/" + fault["link"].rsplit("/", 1)[1])
        & (fp["time_to"] >= t - 1.0)
        & (fp["time_from"] <= t)
        & (fp["bytes"] > 100_000)
    ]
    return on[["src", "sport", "dst", "dport"]].drop_duplicates().shape[0]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    p.add_argument("--repeat", type=int, default=2, help="runs per case (default 2)")
    p.add_argument("--part", choices=["util", "failover"], help="one part only")
    p.add_argument("--engine", choices=["native", "mininet"], default="native")
    args = p.parse_args()
    # each part (and engine) has a section of its own in RESULTS.md: one can be re-run alone
    on = "" if args.engine == "native" else f" --engine {args.engine}"
    title_on = "" if args.engine == "native" else f" on the {args.engine.capitalize()} engine"
    for part, fn in (("util", utilisation), ("failover", failover)):
        if args.part in (None, part):
            title = f"Multipath WAN links: {part}{title_on}"
            with section(f"multipath.py --part {part}{on}", args.write, title):
                fn(args.repeat, args.engine)


if __name__ == "__main__":
    main()
