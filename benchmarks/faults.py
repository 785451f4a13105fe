"""Benchmark: what each WAN fault does to a running all-reduce.

    sudo .venv/bin/python -m benchmarks.faults [--write] [--quick]

2 clusters x 1 host, gloo all_reduce sized to take about a second at the link's rate (8 MiB at
100 Mbit/s, 64 MiB at 1 Gbit/s), 6 timed iterations, operation timeout 10 s; each fault kind
starts 100 ms into timed iteration 2, at 100 Mbit/s and 1 Gbit/s, 10 and 40 ms one way, on the
backend ``auto`` picks (this kernel: the userspace delay line; the kernel backend needs
``testbed vm``). Per case: the time to detect (first error, if any), the stall of the operation
against the run's no-fault operations and against the TLP + RTO series prediction, the time to
recover and whether the group survived (analysis.faults; the prediction with the slow start
after an RTO, from the sockets' tcp_info sampled every 100 ms, which also gives the
retransmissions around the fault), then the events' lateness over every
case and the three latest. ``--quick``: 100 Mbit/s and 10 ms only.

On the kernel backend (netem), where this kernel has no sch_netem, in a ``testbed vm`` guest
(one command line):

    testbed vm --cpus 1 --env PYTHONPATH=$PWD --env TESTBED_SETUP_DEADLINE=900 --timeout 3600
        -- python -m benchmarks.faults --backend kernel --quick --name vk-faults
        --faults blackhole,link_down,reset,partition,gateway_crash --out $PWD/out-faults

``--faults`` runs a subset of the kinds, ``--out`` keeps the results (the current directory is
shared with the guest); the two ranks' torch imports on one emulated CPU outlast the runner's
180 s join deadline, hence TESTBED_SETUP_DEADLINE. Under TCG (no KVM) a case took 7.6 min with
one vCPU, 5.5 of them until the ranks joined, and the guest's TCP carried 20-40 Mbit/s, not
100: its durations say what the kernel mechanisms do (detected, survived, events applied), not
how fast.
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import sys
import tempfile
import time

import pandas as pd

from analysis.faults import analyse
from analysis.loader import load
from benchmarks._results import Tee, write_section
from testbed.config.sweep import expand
from testbed.core.stats import quantile
from testbed.core.units import format_duration
from testbed.experiment.sweep import Experiment

AT = {"after": {"iteration": 2, "offset": "100ms"}}
FAULTS = {
    "blackhole 2 s": {"kind": "blackhole", "link": "east-west", "duration": "2s"},
    "link_down 2 s": {"kind": "link_down", "link": "east-west", "duration": "2s"},
    "reset": {"kind": "reset", "link": "east-west", "duration": "1s"},
    "flap 2 x (0.5 s down, 1 s up)": {
        "kind": "flap", "link": "east-west", "down": "500ms", "up": "1s", "count": 2,
    },
    "burst_loss 3 s p 1% r 25%": {
        "kind": "burst_loss", "link": "east-west", "duration": "3s", "p": "1%", "r": "25%",
    },
    "partition 2 s": {"kind": "partition", "groups": [["east"], ["west"]], "duration": "2s"},
    "gateway_crash west 2 s": {"kind": "gateway_crash", "cluster": "west", "restore_after": "2s"},
}  # fmt: skip
SIZES = {"100mbit": "8MiB", "1gbit": "64MiB"}


def scenario(
    rates: list[str],
    delays: list[str],
    backend: str = "auto",
    faults: dict | None = None,
    name: str = "bench-faults",
    size: str | None = None,
    tcp_info: str | None = None,
) -> dict:
    faults = FAULTS if faults is None else faults
    return {
        "name": name,
        **({"trace": {"tcp_info": tcp_info}} if tcp_info and tcp_info != "off" else {}),
        "backend": backend,
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": [{"between": ["east", "west"], "rate": rates[0], "delay": delays[0]}],
        "workload": {"collectives": ["all_reduce"], "iterations": 6, "warmup": 1, "timeout": "10s"},
        "faults": [],
        "sweep": {
            "cases": [{"wan[0].rate": r, "workload.sizes": [size or SIZES[r]]} for r in rates],
            "wan[0].delay": delays,
            "faults": [[{**f, **AT}] for f in faults.values()],
        },
    }


def label_of(fault: dict) -> str:
    for name, f in FAULTS.items():
        if {**f, **AT} == fault:
            return name
    return str(fault)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    p.add_argument("--quick", action="store_true", help="100 Mbit/s and 10 ms only")
    p.add_argument(
        "--backend",
        choices=["auto", "kernel", "userspace"],
        default="auto",
        help="link backend of every case (kernel: netem, e.g. inside `testbed vm`)",
    )
    p.add_argument(
        "--faults",
        default="",
        help="comma-separated fault kinds to run (blackhole,link_down,...); default all",
    )
    p.add_argument("--name", default="bench-faults", help="scenario (and testbed) name")
    p.add_argument("--size", help="all-reduce size of every case (default: 8MiB, 64MiB at 1gbit)")
    # the RTO series from the sockets' own srtt (with the queue the all-reduce builds), and
    # their retransmissions around each fault
    p.add_argument(
        "--tcp-info",
        default="100ms",
        help="sample the sockets' tcp_info this often (default 100ms; off to disable)",
    )
    p.add_argument("--out", help="keep the results in this directory (default: a temporary one)")
    args = p.parse_args()
    kinds = {k.strip() for k in args.faults.split(",") if k.strip()}
    unknown = kinds - {f["kind"] for f in FAULTS.values()}
    if unknown:
        p.error(f"unknown fault kinds {sorted(unknown)}")
    faults = {n: f for n, f in FAULTS.items() if not kinds or f["kind"] in kinds}
    rates, delays = (
        (["100mbit"], ["10ms"]) if args.quick else (["100mbit", "1gbit"], ["10ms", "40ms"])
    )
    buf = io.StringIO()
    sys.stdout = Tee(sys.__stdout__, buf)
    load_avg = os.getloadavg()
    accel = os.environ.get("TESTBED_VM_ACCEL")  # set inside a `testbed vm` guest
    where = f", a testbed vm guest ({accel}, {os.cpu_count()} vCPU)" if accel else ""
    print(
        f"## WAN faults during an all-reduce ({platform.release()}{where}, backend "
        f"{args.backend}, {time.strftime('%Y-%m-%d')})\n"
    )
    if accel == "tcg":
        print("Software emulation: durations are the emulator's, not the backend's.\n")
    print(
        f"Load average before: {load_avg[0]:.2f} {load_avg[1]:.2f} {load_avg[2]:.2f} "
        f"({os.cpu_count()} cores).\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or tmp
        t0 = time.monotonic()
        exp = Experiment(
            expand(
                scenario(rates, delays, args.backend, faults, args.name, args.size, args.tcp_info),
                "bench-faults",
            ),
            "bench",
            out,
            resume=False,
        )
        exp.run(selfcheck_seconds=0.5)
        took = time.monotonic() - t0
        res = load(exp.results.path)
        f = analyse(res)
        backend = {r.run_id: r.backend for r in res.runs.itertuples()}
        params = {s.run_id: s.params for s in exp.runs}
        print(
            "| rate | one way | fault | backend | op outcome | detect | stall | predicted "
            "(of which slow start) | stall/pred | recover | survived | retransmits |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")

        def dur(v: object) -> str:
            return "-" if v is None or pd.isna(v) else format_duration(float(v))  # type: ignore[arg-type]

        def num(v: object) -> str:
            return "-" if v is None or pd.isna(v) else f"{float(v):g}"  # type: ignore[arg-type]

        for row in f.faults.sort_values("run_id").itertuples(index=False):
            prm = params[row.run_id]
            ratio = row.stall_over_predicted
            print(
                f"| {prm['wan[0].rate']} | {prm['wan[0].delay']} | {label_of(prm['faults'][0])} | "
                f"{backend.get(row.run_id, '-')} | {row.op_outcome} | {dur(row.detect_s)} | "
                f"{dur(row.stall_s)} | {dur(row.predicted_stall_s)} "
                f"({dur(row.predicted_slowstart_s)}) | "
                f"{'-' if pd.isna(ratio) else f'{ratio:.2f}'} | {dur(row.recover_s)} | "
                f"{'-' if pd.isna(row.survived) else ('yes' if row.survived else 'no')} | "
                f"{num(getattr(row, 'tcp_retransmits', None))} |"
            )
        ev = res.events.drop_duplicates(["run_id", "event", "status"])
        late = ev[(ev["status"] == "applied") & ev["late_s"].notna()]["late_s"].tolist()
        if late:
            print(
                f"\nEvent lateness over {len(late)} applied events: "
                f"p50 {format_duration(quantile(late, 0.5))}, "
                f"p99 {format_duration(quantile(late, 0.99))}, "
                f"max {format_duration(max(late))}; over 20 ms: {sum(x > 0.02 for x in late)} "
                "(goal: none at <= 1 Gbit/s)."
            )
            slow = ev[ev["status"] == "applied"].nlargest(3, "late_s")
            print(
                "Slowest: "
                + "; ".join(
                    f"{e.action} ({params[e.run_id]['wan[0].rate']}, "
                    f"{label_of(params[e.run_id]['faults'][0])}) late "
                    f"{format_duration(e.late_s)}, of which applying {format_duration(e.apply_s)}"
                    for e in slow.itertuples(index=False)
                )
                + "."
            )
        n = max(len(exp.runs), 1)
        print(f"\n{len(exp.runs)} cases in {took:.0f} s ({took / n:.0f} s a case).")
        errors = ev[ev["error"].notna() & (ev["error"] != "")]
        for e in errors.itertuples(index=False):
            print(f"\n- event error {e.run_id} {e.what}: {e.error}")
    sys.stdout = sys.__stdout__
    if args.write and not args.quick and not kinds and args.backend == "auto":
        write_section("faults.py", buf.getvalue())


if __name__ == "__main__":
    main()
