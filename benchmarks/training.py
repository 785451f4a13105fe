"""Benchmark: training across the emulated WAN.

    sudo .venv/bin/python -m benchmarks.training [--write] [--quick]

1. The three ready scenarios end to end (scenarios/diloco-vs-ddp.yaml, hierarchical-training.yaml,
   streaming-overlap.yaml): per arm the step time, WAN bytes per step, final loss, time to DDP's
   final loss, compute and communication per step against the prediction, and the scenario's
   expectations. For streaming-overlap also the stall per fragment sync against
   max(0, T_fragment - tau * t_compute).
2. Harness overhead: a DDP step (char-mlp, 4 ranks, batch 32) under the testbed with an unshaped
   WAN (10 Gbit/s, no delay: 2 clusters x 2 hosts) against the same DDP loop in plain torch, 4
   processes on loopback in one namespace; step time p50, rounds interleaved. Goal: <= 3% slower.
   Two intermediate setups split the difference: plain torch on a loopback with the testbed's MTU
   (1500), and plain torch on the testbed's hosts with the network up but no harness.
``--quick`` runs 60 steps instead of 300 in part 1 (for trying the script, not for RESULTS.md).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from benchmarks._results import Tee, write_section
from testbed.config.loading import load_yaml, parse_scenario
from testbed.config.sweep import expand
from testbed.core.units import format_duration, format_size
from testbed.experiment.sweep import Experiment
from testbed.live.network import Network
from testbed.live.processes import rank_env

REPO = Path(__file__).resolve().parents[1]
OVERHEAD_STEPS = 100
ROUNDS = 5
SCENARIOS = {
    "diloco-vs-ddp": "2 x 2 hosts, 100 Mbit/s, 25 ms one-way, char-mlp",
    "hierarchical-training": "2 x 2 hosts, 100 Mbit/s, 25 ms one-way, char-mlp, H=30",
    "streaming-overlap": "2 x 2 hosts, 1 Gbit/s, 5 ms one-way, char-mlp-large, H=20, 4 fragments",
}


def part_scenario(name: str, quick: bool) -> None:
    data = load_yaml(REPO / "scenarios" / f"{name}.yaml")
    if quick:
        data["workload"]["steps"] = 60
    with tempfile.TemporaryDirectory() as out:
        exp = Experiment(expand(data, f"{name}.yaml"), "bench", out, resume=False)
        exp.run(selfcheck_seconds=1.0)
        print(
            "| arm | step p50 | WAN bytes/step | final loss | time to DDP's loss | compute/step | "
            "comm/step | DDP's own exposed comm | predicted | meas/pred | CPU flag |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        rows = pd.read_parquet(exp.results.path / "training.parquet")
        compute = rows.groupby("run_id")["compute_s"].median()
        for s in exp.summaries:
            arm = ", ".join(
                f"{k.removeprefix('workload.')}={v}"
                for k, v in s.items()
                if k.startswith("workload.") and v is not None
            )
            ttl = s.get("time_to_loss")
            ratio = s.get("comm_measured_over_predicted")
            own = s.get("ddp_exposed_comm_per_step")
            print(
                f"| {arm} | {format_duration(s['step_time_p50'])} | "
                f"{format_size(s['wan_bytes_per_step'])} | {s['final_loss']:.4f} | "
                f"{format_duration(ttl) if ttl else 'not reached'} | "
                f"{format_duration(compute[s['run_id']])} | "
                f"{format_duration(s['comm_per_step'])} | "
                f"{format_duration(own) if own is not None else '-'} | "
                f"{format_duration(s['predicted_comm_per_step'])} | "
                f"{f'{ratio:.2f}' if ratio else '-'} | {'yes' if s['cpu_saturated'] else 'no'} |"
            )
        for run_id, run in exp.manifest["runs"].items():
            if run["status"] != "ok":
                print(f"\n{run_id}: {run['status']}: {run['reason']}")
        for c in exp.check_expectations():
            print(f"\n- {c.text()}")
        if name == "streaming-overlap":
            streaming_stall(exp.summaries, rows, data["workload"])


def streaming_stall(summaries: list[dict], rows: pd.DataFrame, w: dict) -> None:
    """Stall per fragment sync (the ranks' mean time blocked in comm and wait) against the expected
    max(0, T_fragment - tau * t_compute), T_fragment from the prediction, t_compute measured."""
    syncs_per_run = w["steps"] * w["streaming"]["fragments"] // w["diloco"]["inner_steps"]
    print("\n| tau | T_fragment predicted | t_compute p50 | expected stall | measured stall/sync |")
    print("|---|---|---|---|---|")
    for s in summaries:
        tau = s.get("workload.streaming.overlap_steps")
        mine = rows[rows["run_id"] == s["run_id"]]
        t_frag = s["predicted_comm_per_step"] * s["steps"] / syncs_per_run
        t_comp = float(mine["compute_s"].median())
        # tau = 0 blocks in comm_s; tau > 0 posts in comm_s and blocks in wait_s
        blocked = mine["comm_s"] + mine["wait_s"]
        waited = float(blocked.groupby(mine["rank"]).sum().mean()) / syncs_per_run
        print(
            f"| {tau} | {format_duration(t_frag)} | {format_duration(t_comp)} | "
            f"{format_duration(max(0.0, t_frag - tau * t_comp))} | {format_duration(waited)} |"
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def plain_step_p50(prefix: Callable[[int], list[str]], master: str) -> float:
    """Plain torch DDP, 4 ranks; rank r runs under ``prefix(r)`` (e.g. ip netns exec)."""
    port = _free_port()
    argv = [sys.executable, "-m", "benchmarks._plain_ddp", "--world", "4", "--port", str(port)]
    argv += ["--steps", str(OVERHEAD_STEPS), "--master", master]
    env = {**rank_env(), "PYTHONPATH": str(REPO)}
    if master == "127.0.0.1":
        env["GLOO_SOCKET_IFNAME"] = "lo"
    procs = [
        subprocess.Popen(
            [*prefix(r), *argv, "--rank", str(r)], env=env, stdout=subprocess.PIPE, text=True
        )
        for r in range(4)
    ]
    outs = [p.communicate()[0] for p in procs]
    walls = json.loads(outs[0])
    return statistics.median(walls[5:])  # the first steps include DDP's bucket rebuild


def loopback(_: int) -> list[str]:
    return []


def in_mtu1500_namespace() -> float:
    ns = f"btr-{secrets.token_hex(3)}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "mtu", "1500", "up"], check=True)
        return plain_step_p50(lambda _: ["ip", "netns", "exec", ns], "127.0.0.1")
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


OVERHEAD_SCENARIO = {
    "name": "bench-train-overhead",
    "clusters": {"east": {"hosts": 2}, "west": {"hosts": 2}},
    "wan": [{"between": ["east", "west"], "rate": "10gbit", "delay": "0ms"}],
    "workload": {"kind": "training", "steps": OVERHEAD_STEPS, "eval_every": OVERHEAD_STEPS},
}


def on_testbed_hosts() -> float:
    with Network(parse_scenario(OVERHEAD_SCENARIO)) as tb:
        hosts = ["east-h0", "east-h1", "west-h0", "west-h1"]
        return plain_step_p50(lambda r: tb.command(hosts[r], []), tb.hosts[hosts[0]])


def testbed_step_p50(out: str) -> tuple[float, bool]:
    exp = Experiment(expand(OVERHEAD_SCENARIO, "bench"), "bench", out, resume=False)
    exp.run(selfcheck_seconds=0.5)
    df = pd.read_parquet(exp.results.path / "training.parquet")
    walls = df[df["rank"] == 0].sort_values("step")["wall_s"].tolist()
    return statistics.median(walls[5:]), bool(exp.summaries[0]["cpu_saturated"])


def part_overhead() -> None:
    setups = {
        "plain torch, 4 ranks on loopback (MTU 65536)": [],
        "plain torch, 4 ranks on a loopback with MTU 1500": [],
        "plain torch on the testbed's 4 hosts (network up, no harness)": [],
        "testbed run (launcher, trainer's timers, WAN counters)": [],
    }
    lists = list(setups.values())
    flags = []
    with tempfile.TemporaryDirectory() as out:
        for i in range(ROUNDS):
            lists[0].append(plain_step_p50(loopback, "127.0.0.1"))
            lists[1].append(in_mtu1500_namespace())
            lists[2].append(on_testbed_hosts())
            t, flag = testbed_step_p50(f"{out}/{i}")
            lists[3].append(t)
            flags.append(flag)
    base, hosts = statistics.median(lists[0]), statistics.median(lists[2])
    print(
        "| setup | DDP step p50 (median of rounds) | vs loopback | vs plain on the hosts | rounds |"
    )
    print("|---|---|---|---|---|")
    for label, xs in setups.items():
        m = statistics.median(xs)
        print(
            f"| {label} | {format_duration(m)} | {m / base - 1:+.1%} | {m / hosts - 1:+.1%} | "
            f"{', '.join(format_duration(x) for x in xs)} |"
        )
    u = statistics.median(lists[3])
    verdict = "met" if u <= 1.03 * hosts else "MISSED"
    mtu = statistics.median(lists[1])
    print(
        f"\nHarness overhead (testbed run against the same plain DDP on the same 4 hosts): "
        f"{u / hosts - 1:+.1%} (goal <= +3%: {verdict}); CPU flag in {sum(flags)}/{len(flags)} "
        f"testbed rounds.\nTerm by term against loopback: MTU 1500 {mtu / base - 1:+.1%}; the "
        f"hosts' network path (namespaces, veths, bridges, gateways, the WAN's shaper and delay "
        f"line) {hosts / mtu - 1:+.1%}: the emulation's own path, which plain DDP pays too; the "
        f"harness (launcher, the trainer's timers, WAN counters) {u / hosts - 1:+.1%}."
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    p.add_argument("--quick", action="store_true", help="60 steps in part 1 (trying it out)")
    p.add_argument("--overhead", action="store_true", help="only the harness overhead part")
    args = p.parse_args()
    buf = io.StringIO()
    sys.stdout = Tee(sys.__stdout__, buf)
    load = os.getloadavg()
    print(f"## Training across the WAN ({platform.release()}, {time.strftime('%Y-%m-%d')})\n")
    print(f"Load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (2 cores).\n")
    for name, what in {} if args.overhead else SCENARIOS.items():
        print(f"### scenarios/{name}.yaml ({what})\n")
        part_scenario(name, args.quick)
        print()
    print(f"\n### Harness overhead ({OVERHEAD_STEPS} DDP steps, {ROUNDS} rounds interleaved)\n")
    part_overhead()
    sys.stdout = sys.__stdout__
    if args.write and not args.quick:
        write_section("training.py --overhead" if args.overhead else "training.py", buf.getvalue())


if __name__ == "__main__":
    main()
