"""Benchmark: bring-up and teardown as a user runs them, with and without WAN delays.

    sudo .venv/bin/python -m benchmarks.setup_speed [--repeat 5] [--write] [--no-inprocess]

Four topologies: 4 clusters x 8 hosts (full WAN mesh, 6 links) and 8 clusters x 16 hosts (28
links), each without WAN delay (no delay line starts) and with 10 ms on every WAN link (one delay
line per link). For each, ``testbed up FILE --name N`` and ``testbed down N`` run as subprocesses,
interleaved, as a user types them; "CLI start-up" is ``testbed --help`` (interpreter + imports
of the command), and "net" is a verb's median minus that median. Goals: 4 x 8 with
delays up <= 0.5 s and down <= 0.2 s net of CLI start-up; 8 x 16 with delays up <= 1 s net.
The in-process ``Network.up()`` / ``down()`` times (no interpreter start-up at all) are printed
beside them unless ``--no-inprocess``.

"up CPU" is the CPU seconds (user + system) that ``testbed up`` cost: the CLI process and every
process it started and reaped (``ip``, ``tc``, ``iptables-restore``, the delay-line launcher),
plus what the delay lines themselves (which outlive the CLI) had used when it returned. Unlike
wall time it hardly depends on how busy the machine is.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks._results import write_section
from testbed.config.loading import parse_scenario
from testbed.live.network import Network
from testbed.net import registry

CLUSTER_NAMES = ["east", "west", "north", "south", "alpha", "beta", "gamma", "delta"]
# (clusters, hosts per cluster, WAN delay) -> goals (up, down) net of CLI start-up, s
TOPOLOGIES: list[tuple[int, int, str | None, tuple[float | None, float | None]]] = [
    (4, 8, None, (None, None)),
    (4, 8, "10ms", (0.5, 0.2)),
    (8, 16, None, (None, None)),
    (8, 16, "10ms", (1.0, None)),
]
CLI = [sys.executable, "-m", "testbed.cli"]


def scenario_data(clusters: int, hosts: int, delay: str | None) -> dict:
    names = CLUSTER_NAMES[:clusters]
    wan = []
    for a, b in itertools.combinations(names, 2):
        link = {"between": [a, b], "rate": "1gbit"}
        if delay:
            link["delay"] = delay
        wan.append(link)
    return {
        "name": f"bench-{clusters}x{hosts}{'-delay' if delay else ''}",
        "clusters": {c: {"hosts": hosts} for c in names},
        "wan": wan,
    }


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def process_cpu(pid: int) -> float:
    """CPU seconds ``pid`` has used so far (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def lines_cpu(name: str) -> float:
    """CPU used so far by the delay lines of testbed ``name`` (not the CLI's children: they
    outlive it and PID 1 reaps them)."""
    rec = registry.find(name)
    return sum(process_cpu(pid) for pid, _, what in rec.processes if what.startswith("delay line"))


def timed(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (the process and its reaped descendants) of ``argv``."""
    c0 = children_cpu()
    t0 = time.perf_counter()
    r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()}")
    return elapsed, children_cpu() - c0


def load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def cell(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} s ({min(xs):.2f}-{max(xs):.2f})"


def cpu_cell(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} s"


def goal_text(net: float, goal: float | None) -> str:
    if goal is None:
        return "-"
    return f"<= {goal} s ({'met' if net <= goal else 'MISSED'})"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    p.add_argument("--no-inprocess", action="store_true", help="skip Network.up()/down() times")
    args = p.parse_args()
    load_before = load()
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for clusters, hosts, delay, _ in TOPOLOGIES:
            path = Path(tmp, f"t{clusters}x{hosts}{'d' if delay else ''}.yaml")
            path.write_text(yaml.safe_dump(scenario_data(clusters, hosts, delay)))
            files.append(path)
        # Warm-up: the kernel probe's cache, page cache of the interpreter and modules.
        timed([*CLI, "up", str(files[1]), "--name", "bench-warm"])
        timed([*CLI, "down", "bench-warm"])
        startup: list[float] = []
        startup_cpu: list[float] = []
        ups: list[list[float]] = [[] for _ in TOPOLOGIES]
        up_cpus: list[list[float]] = [[] for _ in TOPOLOGIES]
        downs: list[list[float]] = [[] for _ in TOPOLOGIES]
        for _ in range(args.repeat):  # interleaved: the machine's noise hits every case alike
            wall, cpu = timed([*CLI, "--help"])
            startup.append(wall)
            startup_cpu.append(cpu)
            for k, path in enumerate(files):
                name = f"bench-setup-{os.getpid()}-{k}"
                wall, cpu = timed([*CLI, "up", str(path), "--name", name])
                ups[k].append(wall)
                up_cpus[k].append(cpu + lines_cpu(name))
                downs[k].append(timed([*CLI, "down", name])[0])
        inproc: list[tuple[list[float], list[float], list[float]]] = []
        if not args.no_inprocess:
            for clusters, hosts, delay, _ in TOPOLOGIES:
                sc = parse_scenario(scenario_data(clusters, hosts, delay))
                u, d, ucpu = [], [], []
                for i in range(args.repeat):
                    tb = Network(sc, name=f"bench-inproc-{os.getpid()}-{i}")
                    c0 = children_cpu() + process_cpu(os.getpid())
                    t0 = time.perf_counter()
                    tb.up()
                    t1 = time.perf_counter()
                    ucpu.append(children_cpu() + process_cpu(os.getpid()) - c0 + lines_cpu(tb.name))
                    tb.down()
                    u.append(t1 - t0)
                    d.append(time.perf_counter() - t1)
                inproc.append((u, d, ucpu))
    base = statistics.median(startup)
    base_cpu = statistics.median(startup_cpu)
    lines = [
        f"## Setup speed as a user runs it ({platform.release()}, {time.strftime('%Y-%m-%d')})\n",
        f"`testbed up FILE --name N` / `testbed down N` as subprocesses, {args.repeat} rounds "
        "interleaved over the four topologies; median (min-max). WAN mesh at 1 Gbit/s; "
        '"delay" = 10 ms on every WAN link (one delay line per link, userspace backend). '
        f'CLI start-up (`testbed --help`): {cell(startup)}, CPU {cpu_cell(startup_cpu)}; "net" = '
        'median minus that. "up CPU": user + system seconds of `testbed up`, its reaped '
        "children and its delay lines (median), net of `--help`'s CPU. "
        f"Load average {load_before} before, {load()} after (2 cores, shared machine).\n",
        "| topology | WAN | up (CLI) | up net | goal | up CPU net | down (CLI) | down net | goal |"
        + (" up in-process | up CPU in-process | down in-process |" if inproc else ""),
        "|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if inproc else ""),
    ]
    for k, (clusters, hosts, delay, (gup, gdown)) in enumerate(TOPOLOGIES):
        n_links = clusters * (clusters - 1) // 2
        up_net = statistics.median(ups[k]) - base
        down_net = statistics.median(downs[k]) - base
        row = (
            f"| {clusters} x {hosts} ({clusters * hosts} hosts) | {n_links} links, "
            f"{delay + ' (' + str(n_links) + ' delay lines)' if delay else 'no delay'} | "
            f"{cell(ups[k])} | {up_net:.3f} s | {goal_text(up_net, gup)} | "
            f"{statistics.median(up_cpus[k]) - base_cpu:.3f} s | "
            f"{cell(downs[k])} | {down_net:.3f} s | {goal_text(down_net, gdown)} |"
        )
        if inproc:
            row += f" {cell(inproc[k][0])} | {cpu_cell(inproc[k][2])} | {cell(inproc[k][1])} |"
        lines.append(row)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        write_section("setup_speed.py", text)


if __name__ == "__main__":
    main()
