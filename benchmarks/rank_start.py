"""Benchmark: what does starting the ranks of a run cost, with and without the rank server?

    sudo .venv/bin/python -m benchmarks.rank_start [--rounds 3] [--note TEXT] [--write]

Four ranks on two clusters (a 1 Gbit/s 2 ms WAN) of two workloads: a DDP training of the
built-in model (one host per cluster, two ranks each, 30 steps) and a collectives run (two
hosts per cluster, one rank each, an all-reduce of 64 KiB). One network per workload is brought
up once; each round launches the ranks both ways, alternating which goes first, so that drift
of the machine's load hits them alike:

- ``ip netns exec``: one ``python -m MODULE`` per rank (each imports torch, and torch._dynamo
  at its first optimizer or DDP call);
- ``rank server``: :mod:`traffic.zygote` imports them once and forks each rank into its host;
- ``rank server, early``: the same server started before the launch and ready when it starts,
  as a run's is when its imports overlap the bring-up and the self-check (its CPU still counts).

Columns: ``joined``, the wall seconds from the launch's start (the rank server's start
included) to the last rank's join of torch.distributed (the launcher's own record of when it saw
each join, polled every 50 ms); ``cpu``, the CPU seconds until then of the rank processes and
the rank server (their /proc stat, sampled every 20 ms: up to 20 ms per process unseen);
``run``, the launch's wall seconds to the last rank's exit. Goal: the start's cost (wall and
CPU to joined) halved.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks._results import section
from testbed.config.loading import parse_scenario
from testbed.core.procstat import cpu_seconds
from testbed.experiment import ranks as rank_launch
from testbed.experiment.session import RankSession
from testbed.experiment.workloads import kind_of
from testbed.live.network import Network
from testbed.plan.ranks import place_ranks
from traffic.entry import has_joined

GOAL = 0.5
WAN = [{"between": ["east", "west"], "rate": "1gbit", "delay": "2ms"}]
SCENARIOS: dict[str, dict[str, Any]] = {
    "training (ddp)": {
        "name": "rs-train",
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": WAN,
        "workload": {
            "kind": "training",
            "algorithm": "ddp",
            "ranks_per_host": 2,
            "steps": 30,
            "timeout": "120s",
        },
    },
    "collectives": {
        "name": "rs-coll",
        "clusters": {"east": {"hosts": 2}, "west": {"hosts": 2}},
        "wan": WAN,
        "workload": {
            "collectives": ["all_reduce"],
            "sizes": ["64KiB"],
            "warmup": 1,
            "iterations": 2,
            "timeout": "60s",
        },
    },
}


class CpuUntilJoined(threading.Thread):
    """The CPU seconds of the launch's processes (the ranks, the rank server) until every rank
    has joined, sampled every 20 ms."""

    def __init__(self, launch: rank_launch.RankLaunch, run_dir: Path, world: int) -> None:
        super().__init__(daemon=True)
        self.launch, self.run_dir, self.world = launch, run_dir, world
        self.seen: dict[int, float] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            pids = [p.pid for p in list(self.launch.procs.values())]
            if self.launch.zygote is not None:
                pids.append(self.launch.zygote.pid)
            for pid in pids:
                cpu = cpu_seconds(pid)
                if cpu is not None:
                    self.seen[pid] = cpu
            if len(self.launch.procs) == self.world and all(
                has_joined(self.run_dir, r) for r in range(self.world)
            ):
                return
            time.sleep(0.02)

    def total(self) -> float:
        return sum(self.seen.values())


WAYS = {"exec": "ip netns exec", "server": "rank server", "early": "rank server, early"}


def launch_once(tb: Network, sc: Any, run_dir: Path, way: str) -> dict[str, float]:
    workload = sc.rank_workload
    assert tb.plan is not None and workload is not None
    ranks = place_ranks(tb.plan, workload.ranks_per_host, workload.placement)
    kind = kind_of(workload)
    rank_launch.PREFORK = way != "exec"
    server = rank_launch.rank_server(run_dir) if way == "early" else None
    if server is not None:
        server.wait_ready(timeout=120)
    session = RankSession(
        tb, ranks, run_dir, kind.rank_module, workload.timeout, kind.spec_keys(workload),
        server=server,
    )  # fmt: skip
    cpu = CpuUntilJoined(session.launch, run_dir, len(ranks))
    start = time.monotonic()
    cpu.start()
    problems = session.run(kind.deadlines(workload))
    end = time.monotonic()
    cpu.done.set()
    cpu.join()
    codes = session.launch.codes
    if problems or any(c != 0 for c in codes.values()):
        raise RuntimeError(f"launch failed: {problems} {codes} (see {run_dir})")
    joined = [t.joined for t in session.launch.times.values()]
    assert all(j is not None for j in joined), joined
    return {
        "joined": max(j for j in joined if j is not None) - start,
        "cpu": cpu.total(),
        "run": end - start,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--note", default="")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    title = "Rank start: one process per rank against the rank server"
    with section("rank_start.py", args.write, title, args.note), tempfile.TemporaryDirectory() as d:
        print("| workload | start | joined s (median, min-max) | cpu s to joined | run s |")
        print("|---|---|---|---|---|")
        summary: dict[tuple[str, str], dict[str, float]] = {}
        for label, data in SCENARIOS.items():
            sc = parse_scenario(data)
            samples: dict[str, list[dict[str, float]]] = {way: [] for way in WAYS}
            with Network(sc, name=data["name"]) as tb:
                for r in range(args.rounds):
                    order = list(WAYS)[r % len(WAYS) :] + list(WAYS)[: r % len(WAYS)]
                    for way in order:
                        run_dir = Path(d) / f"{data['name']}-{r}-{way}"
                        run_dir.mkdir()
                        samples[way].append(launch_once(tb, sc, run_dir, way))
            for way, rows in samples.items():
                med = {k: statistics.median(row[k] for row in rows) for k in rows[0]}
                summary[(label, way)] = med
                lo = min(row["joined"] for row in rows)
                hi = max(row["joined"] for row in rows)
                print(
                    f"| {label} | {WAYS[way]} | {med['joined']:.2f} ({lo:.2f}-{hi:.2f}) "
                    f"| {med['cpu']:.2f} | {med['run']:.2f} |"
                )
        print()
        for label in SCENARIOS:
            before = summary[(label, "exec")]
            for way in ("server", "early"):
                after = summary[(label, way)]
                wall = after["joined"] / before["joined"]
                cpu = after["cpu"] / before["cpu"]
                run = after["run"] / before["run"]
                met = "met" if wall <= GOAL and cpu <= GOAL else "missed"
                print(
                    f"- {label}, {WAYS[way]}: {wall:.0%} of the wall and {cpu:.0%} of the CPU "
                    f"to joined, {run:.0%} of the launch's wall (goal <= {GOAL:.0%} to joined: "
                    f"{met}); {args.rounds} rounds, medians."
                )


if __name__ == "__main__":
    main()
