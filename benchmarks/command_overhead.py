"""Benchmark: what does running a user's program through the testbed cost?

    sudo .venv/bin/python -m benchmarks.command_overhead [--rounds 9] [--iters 300]

The same script (examples/comms-benchmark/comms_bench.py: 2 ranks, one host in each of two
clusters, a gloo all-reduce of 4 KiB to 4 MiB, 1 warm-up and 300 timed iterations per size:
17 s) run two ways on an unshaped WAN (the default link: 1 Gbit/s HTB, no delay, no emulated
propagation):

- ``testbed run`` of a ``kind: command`` scenario (its own network, link self-check, launcher
  with hostname and hosts file, stdout read for metrics, the WAN counters sampled);
- by hand: the same argv with the same environment (torchrun's variables, the socket
  interfaces, the testbed's rank environment) through ``ip netns exec`` in the namespaces of a
  network brought up once for the whole benchmark.

The two alternate, round after round, so that drift of the machine hits them alike. Wall time:
a process's start to its exit, the slowest rank's (the testbed's own record of its processes;
by hand, measured here the same way). Launch latency: to the last rank's first output line (the
script's ``init_time`` line, printed once it joined the process group), from ``testbed run``'s
start (bring-up and self-check included) and from the launcher's start (its hosts file, written
as it starts the processes), and by hand from the first process's start.
Goal: the testbed adds <= 3% to the wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
SCRIPT_DIR = ROOT / "examples" / "comms-benchmark"
ARGV = [
    "python", "comms_bench.py", "--dist-url", "tcp://{master_addr}:{master_port}",
    "--rank", "{rank}", "--world-size", "{world_size}",
    "--sizes", "4K,64K,1M,4M", "--warmup", "1", "--iters", "{iters}", "--json",
]  # fmt: skip
GOAL = 0.03


def argv(iters: int) -> list[str]:
    """The script's argv with ``iters`` timed iterations per size (the placeholders stay)."""
    return [a.replace("{iters}", str(iters)) for a in ARGV]


def scenario(name: str, iters: int) -> dict[str, Any]:
    return {
        "name": name,
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": [{"between": ["east", "west"]}],  # unshaped: 1 Gbit/s, no delay
        "workload": {
            "kind": "command",
            "per": "rank",
            "argv": argv(iters),
            "cwd": str(SCRIPT_DIR),
            "timeout": "300s",
            "metrics": "json-lines",
        },
    }


@dataclass
class Sample:
    wall: float  # the slowest rank's start-to-exit, s
    first_line: float  # the last rank's first line, s from the variant's origin
    launch_line: float | None = None  # the same from the launcher's start (testbed only)
    extra: dict[str, float] = field(default_factory=dict)


def through_testbed(work: Path, round_no: int, iters: int) -> Sample:
    """``testbed run`` of the scenario, as a user starts it."""
    path = work / f"overhead-{round_no}.yaml"
    path.write_text(yaml.safe_dump(scenario(f"h2-overhead-{round_no}", iters)))
    out = work / f"results-{round_no}"
    started = time.time()
    done = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "run", str(path), "--out", str(out)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        sys.exit(f"testbed run failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr}")
    (results,) = out.iterdir()
    manifest = json.loads((results / "manifest.json").read_text())
    (run,) = manifest["runs"].values()
    durations = [p["duration"] for p in run["processes"]]
    import pandas as pd

    metrics = pd.read_parquet(results / "metrics.parquet")
    joined = metrics[metrics["metric"] == "init_time"].groupby("rank")["time"].min()
    assert len(joined) == len(durations), joined
    hosts = next((results / "runs").iterdir()) / "hosts"
    launcher = hosts.stat().st_mtime if hosts.exists() else None
    last = float(joined.max())
    return Sample(
        wall=max(durations),
        first_line=last - started,
        launch_line=last - launcher if launcher is not None else None,
        extra={"cpu_busy_mean": run.get("cpu_busy_mean") or 0.0},
    )


def by_hand(tb: Any, work: Path, round_no: int, iters: int) -> Sample:
    """The same argv and environment through ``ip netns exec``, timed here."""
    from testbed.config.command import CommandWorkload, expand, search_path
    from testbed.experiment.workloads.command import command_slots
    from testbed.live.processes import master_port, rank_env
    from testbed.plan.ranks import place_ranks

    plan = tb.plan
    workload = CommandWorkload.model_validate(scenario("x", iters)["workload"])
    ranks = place_ranks(plan, workload.ranks_per_host, workload.placement)
    master = next(h for h in plan.hosts if h.name == ranks[0].host)
    port = master_port(tb.namespace(master.name))
    run_dir = work / f"by-hand-{round_no}"
    run_dir.mkdir()
    slots = command_slots(workload, list(plan.hosts), ranks, master.address, port, run_dir)
    begun: dict[int, float] = {}
    first: dict[int, float] = {}
    exited: dict[int, float] = {}
    procs: list[tuple[int, subprocess.Popen[bytes]]] = []
    readers = []

    def read(key: int, pipe: IO[bytes], log: IO[bytes]) -> None:
        for line in pipe:
            log.write(line)
            if key not in first and line.startswith(b'{"metric": "init_time"'):
                first[key] = time.monotonic()

    for slot in slots:
        env = rank_env()
        env["PATH"] = search_path(env.get("PATH"))
        env |= slot.env
        argv = [expand(a, slot.values) for a in workload.argv]
        log = open(run_dir / slot.log, "wb")  # noqa: SIM115 (closed after the process)
        begun[slot.key] = time.monotonic()
        proc = subprocess.Popen(
            tb.command(slot.host, argv), env=env, cwd=SCRIPT_DIR, stdout=subprocess.PIPE,
            stderr=log, start_new_session=True,
        )  # fmt: skip
        assert proc.stdout is not None
        reader = threading.Thread(target=read, args=(slot.key, proc.stdout, log), daemon=True)
        reader.start()
        readers.append((reader, log))
        procs.append((slot.key, proc))
    pending = dict(procs)
    while pending:  # the testbed looks every 50 ms; here every 5 ms
        for key, proc in list(pending.items()):
            if proc.poll() is not None:
                exited[key] = time.monotonic()
                del pending[key]
        time.sleep(0.005)
    for reader, log in readers:
        reader.join(timeout=5)
        log.close()
    codes = {key: proc.returncode for key, proc in procs}
    if any(codes.values()):
        sys.exit(f"by hand: exit codes {codes}; logs in {run_dir}")
    origin = min(begun.values())
    return Sample(
        wall=max(exited[k] - begun[k] for k in begun),
        first_line=max(first.values()) - origin,
    )


def spread(values: list[float], fmt: str = "{:.3f}") -> str:
    return f"{fmt.format(min(values))}-{fmt.format(max(values))}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument(
        "--iters", type=int, default=300,
        help="timed iterations per size: more makes a longer program, so that a difference of "
        "a few percent stands above the machine's round-to-round spread",
    )  # fmt: skip
    args = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces)")
    from testbed.config.loading import parse_scenario
    from testbed.live.network import Network

    load_before = os.getloadavg()
    samples: dict[str, list[Sample]] = {"testbed run": [], "by hand": []}
    with tempfile.TemporaryDirectory(prefix="h2-overhead-") as tmp:
        work = Path(tmp)
        sc = parse_scenario(scenario("h2-overhead-hand", args.iters), "<overhead>")
        with Network(sc, name="h2-overhead-hand") as tb:
            for r in range(args.rounds):
                samples["testbed run"].append(through_testbed(work, r, args.iters))
                samples["by hand"].append(by_hand(tb, work, r, args.iters))
                got = {k: round(v[-1].wall, 3) for k, v in samples.items()}
                print(f"round {r + 1}/{args.rounds}: wall {got}", file=sys.stderr, flush=True)
    load_after = os.getloadavg()

    tb_wall = [s.wall for s in samples["testbed run"]]
    hand_wall = [s.wall for s in samples["by hand"]]
    overhead = statistics.median(tb_wall) / statistics.median(hand_wall) - 1
    paired = [a / b - 1 for a, b in zip(tb_wall, hand_wall, strict=True)]
    print(f"## Command workload overhead ({platform.release()}, {time.strftime('%Y-%m-%d')})\n")
    print(
        f"Load average before: {' '.join(f'{x:.2f}' for x in load_before)}, after: "
        f"{' '.join(f'{x:.2f}' for x in load_after)} ({os.cpu_count()} cores). "
        "examples/comms-benchmark/comms_bench.py, 2 ranks (one host per cluster), gloo "
        f"all-reduce 4K-4M, 1 + {args.iters} iterations per size; unshaped WAN (1 Gbit/s HTB, "
        "no delay); "
        f"{args.rounds} interleaved rounds.\n"
    )
    print("| variant | runs | wall median (s) | wall spread (s) | last rank's first line (s) |")
    print("|---|---|---|---|---|")
    for name, got in samples.items():
        walls = [s.wall for s in got]
        lines = [s.first_line for s in got]
        origin = "from `testbed run`'s start" if name == "testbed run" else "from the first start"
        print(
            f"| {name} | {len(got)} | {statistics.median(walls):.3f} | {spread(walls)} | "
            f"{statistics.median(lines):.2f} ({spread(lines, '{:.2f}')}) {origin} |"
        )
    launch = [s.launch_line for s in samples["testbed run"] if s.launch_line is not None]
    if launch:
        print(
            f"| testbed run, from its launcher's start | {len(launch)} | | | "
            f"{statistics.median(launch):.2f} ({spread(launch, '{:.2f}')}) |"
        )
    print()
    print(
        f"Overhead (median wall, testbed / by hand - 1): {100 * overhead:+.1f}%; per round "
        f"{', '.join(f'{100 * x:+.1f}%' for x in paired)}."
    )
    met = "met" if overhead <= GOAL else "not met"
    print(f"Goal: the testbed adds <= {100 * GOAL:.0f}% to the wall time: **{met}**.")


if __name__ == "__main__":
    main()
