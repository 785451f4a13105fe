"""Benchmark: a sweep on a Ray cluster against the same sweep run locally.

    sudo .venv/bin/python -m benchmarks.scale_out [--write] [--points 8] [--part sweep|span|events]

An 8-point sweep (2 clusters x 1 host, one WAN link whose rate the sweep sets, a 3 s bulk TCP
flow per point, 0.5 s self-check per direction) three ways: locally (``Experiment.run``), on a
Ray cluster of one node and on one of two nodes (``ray.cluster_utils.Cluster`` on this machine:
a head without resources and nodes with one ``testbed`` each, separate raylets). Per way: the
wall time of the sweep (the cluster's start excluded, reported apart), per point, and Ray's
overhead per point (one node against local). Two nodes on one 2-core machine share its CPUs:
their speed-up says what Ray's scheduling allows here, not what two machines give.
Goal: Ray's overhead per point well under a point's own time (< 10 %).

``--part span``: the link fidelity of one topology over two machines against the
same scenario on one machine: 2 clusters x 1 host, one WAN link per case, the link self-check
(RTT, capacity, TCP goodput per direction) both ways. The two machines are stand-ins on this
kernel (testbed.testing.machines: namespaces on a veth underlay, MTU 1500, so every interface
runs at 1450, a Ray node each). Goal: across machines within the self-check's tolerance (10 %)
of one machine.

``--part events``: event lateness across machines against one machine: the same timeline (a
schedule step every 100 ms for 10 s, alternating rate and delay, and a 200 ms blackhole every
second) applied by the event runner to a link of 2 clusters x 1 host, on one machine and over two
stand-in machines (the driver hands each event to the agents 50 ms ahead; they apply it at its
time on their clocks). Lateness is when the operation returned, on the driver's timeline, minus
when it was due; across machines its bound is the clock offset's. Goal: p99 <= 20 ms on the
stand-in machines.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from benchmarks._results import section
from testbed.config.sweep import expand
from testbed.experiment.sweep import Experiment

RATES = ["50mbit", "100mbit", "150mbit", "200mbit", "250mbit", "300mbit", "350mbit", "400mbit"]


def scenario(points: int) -> dict:
    return {
        "name": "bench-scale-out",
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": [{"between": ["east", "west"], "rate": "100mbit", "delay": "5ms"}],
        "traffic": [{"kind": "bulk", "from": "east-h0", "to": "west-h0", "duration": "3s"}],
        "sweep": {"wan[0].rate": RATES[:points]},
    }


def sweep(points: int, out: str, address: str | None) -> tuple[float, bool]:
    from testbed.distributed.ray_sweep import run_on_ray

    exp = Experiment(expand(scenario(points), "bench"), "bench", out, resume=False)
    t0 = time.monotonic()
    ok = run_on_ray(exp, address, 0.5) if address else exp.run(0.5)
    wall = time.monotonic() - t0
    for run_id, run in exp.manifest["runs"].items():
        if run["status"] != "ok":
            print(f"<!-- {'ray' if address else 'local'} {run_id} {run['status']}: "
                  f"{run['reason'][:300]} -->")  # fmt: skip
    return wall, ok


def on_cluster(nodes: int, points: int, out: str) -> tuple[float, float, bool]:
    from ray.cluster_utils import Cluster

    t0 = time.monotonic()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        for _ in range(nodes):
            c.add_node(num_cpus=0, resources={"testbed": 1})
        c.wait_for_nodes()
        start = time.monotonic() - t0
        wall, ok = sweep(points, out, c.address)
    finally:
        c.shutdown()
    return start, wall, ok


SPAN_CASES = [("100mbit", "10ms"), ("1gbit", "5ms"), ("500mbit", "25ms")]


def span_scenario(rate: str, delay: str, placed: bool) -> dict:
    return {
        "name": "bench-span",
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": [{"between": ["east", "west"], "rate": rate, "delay": delay}],
        **({"placement": {"machines": {"east": "node-a", "west": "node-b"}}} if placed else {}),
    }


def span() -> None:
    from testbed.config.loading import parse_scenario
    from testbed.live.network import Network
    from testbed.live.selfcheck import check_links
    from testbed.live.spanned import SpannedNetwork
    from testbed.testing.machines import stand_in_machines

    print("| link | direction | where | bring-up | RTT (configured) | capacity | goodput | ok |")
    print("|---|---|---|---|---|---|---|---|")
    underlay: list[float] = []
    with stand_in_machines(["node-a", "node-b"]) as (address, _):
        for rate, delay in SPAN_CASES:
            for placed in (False, True):
                sc = parse_scenario(span_scenario(rate, delay, placed), "bench")
                tb = SpannedNetwork(sc, address=address) if placed else Network(sc)
                t0 = time.monotonic()
                tb.up()
                up = time.monotonic() - t0
                try:
                    checks = check_links(tb, duration=1.0)
                    if placed:
                        underlay += list(tb.underlay_rtt.values())
                finally:
                    tb.down()
                for c in checks:
                    where = "2 machines" if placed else "1 machine"
                    print(
                        f"| {rate} {delay} | {c.direction} | {where} | {up:.1f} s | "
                        f"{c.rtt_median_s * 1e3:.2f} ms ({c.rtt_configured_s * 1e3:.0f}) | "
                        f"{c.capacity_ratio or 0:.3f} | {c.goodput_ratio or 0:.3f} | {c.ok} |"
                    )
    print(
        f"\nUnderlay RTT between the stand-ins (median per pair): "
        f"{min(underlay) * 1e3:.3f}-{max(underlay) * 1e3:.3f} ms. Capacity and goodput are "
        "ratios to the configured rate and to the HTB ceiling (rate x 1448/1514, 1398/1464 "
        "at MTU 1450)."
    )


EVENT_SECONDS, STEP_S, FAULT_EVERY_S, FAULT_S = 10.0, 0.1, 1.0, 0.2


def events_scenario(placed: bool) -> dict:
    steps = [
        {"at": f"{i * STEP_S:.1f}s", **({"rate": "50mbit", "delay": "15ms"} if i % 2 else
                                        {"rate": "100mbit", "delay": "10ms"})}
        for i in range(1, round(EVENT_SECONDS / STEP_S))
    ]  # fmt: skip
    faults = [
        {"kind": "blackhole", "link": "east-west", "at": f"{t + 0.55:.2f}s",
         "duration": f"{FAULT_S}s"}
        for t in range(round(EVENT_SECONDS / FAULT_EVERY_S) - 1)
    ]  # fmt: skip
    return {
        **span_scenario("100mbit", "10ms", placed),
        "name": "bench-events",
        "faults": faults,
        # what the schema wants beside dynamics; the benchmark runs the timeline alone
        "traffic": [{"kind": "bulk", "from": "east-h0", "to": "west-h0", "duration": "10s"}],
        "wan": [{"between": ["east", "west"], "rate": "100mbit", "delay": "10ms",
                 "schedule": steps}],
    }  # fmt: skip


def events() -> None:
    import pandas as pd

    from testbed.config.loading import parse_scenario
    from testbed.experiment.clock import OriginClock
    from testbed.experiment.dynamics import timeline_for
    from testbed.experiment.events import EventRunner
    from testbed.experiment.spanned_events import SpannedTarget
    from testbed.live.network import Network
    from testbed.live.spanned import SpannedNetwork
    from testbed.testing.machines import stand_in_machines

    def q(s: pd.Series, p: float) -> str:
        return f"{s.quantile(p) * 1e3:.1f} ms"

    print("| where | events | late p50 | late p99 | late max | operation p50 | p99 | "
          "late less operation p99 | clock bound p50 | max | failed |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    verdict = ""
    with stand_in_machines(["node-a", "node-b"]) as (address, _):
        for placed in (False, True):
            sc = parse_scenario(events_scenario(placed), "bench")
            tb = SpannedNetwork(sc, address=address) if placed else Network(sc)
            tb.up()
            try:
                assert tb.plan is not None
                timeline = timeline_for(sc, tb.plan, None)
                clock = OriginClock(from_iterations=False)
                target = SpannedTarget(tb) if isinstance(tb, SpannedNetwork) else None
                runner = EventRunner(timeline, tb, clock, target=target).start()
                clock.set_origin()
                time.sleep(EVENT_SECONDS + 0.5)
                clock.end()
                runner.stop()
                clock.close()
            finally:
                tb.down()
            rows = pd.DataFrame(runner.rows).drop_duplicates("event")
            done = rows[rows["status"] == "applied"]
            late, op = done["late_s"], done["apply_s"]
            bound = done["clock_bound_s"].dropna()
            bounds = f"{q(bound, 0.5)} | {q(bound, 1.0)}" if len(bound) else "- | -"
            where = "2 machines" if placed else "1 machine"
            print(
                f"| {where} | {len(done)} | {q(late, 0.5)} | {q(late, 0.99)} | {q(late, 1.0)} | "
                f"{q(op, 0.5)} | {q(op, 0.99)} | {q(late - op, 0.99)} | {bounds} | "
                f"{(rows['status'] == 'failed').sum()} |"
            )
            if placed:
                p99 = late.quantile(0.99)
                verdict = f"Across machines p99 lateness {p99 * 1e3:.1f} ms: goal (<= 20 ms) " + (
                    "met." if p99 <= 0.020 else "not met."
                )
    print(
        f"\n{verdict} Lateness counts the operation (set_rate/set_impairments, the fault's "
        "netlink request) as on one machine; less the operation it is the wake-up (across "
        "machines: the agent's, at the due time on its clock). An event is one row here (a set "
        "of both directions, a blackhole's start and end). The machine was shared with other "
        "work (load average above): timing numbers are noisy."
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    p.add_argument("--points", type=int, default=8, choices=range(2, 9))
    p.add_argument("--part", choices=("sweep", "span", "events"), default="sweep")
    args = p.parse_args()
    if args.part == "events":
        note = (
            f"2 x 1 host, one link: a schedule step every {STEP_S * 1e3:.0f} ms and a "
            f"{FAULT_S * 1e3:.0f} ms blackhole every {FAULT_EVERY_S:.0f} s for "
            f"{EVENT_SECONDS:.0f} s, on one machine and over two stand-in machines."
        )
        with section("scale_out.py --part events", args.write, "Event lateness across machines",
                     note):  # fmt: skip
            events()
        return
    if args.part == "span":
        note = "2 x 1 host, one link per case, the link self-check (1 s TCP window) both ways."
        with section("scale_out.py --part span", args.write, "Topology across machines", note):
            span()
        return
    note = f"{args.points} points: 1 x 1 host, a 3 s bulk flow each, self-check 0.5 s/direction."
    with section("scale_out.py", args.write, "Sweeps on Ray", note):
        print("| way | cluster start | sweep wall | per point | all ok |")
        print("|---|---|---|---|---|")
        with tempfile.TemporaryDirectory() as tmp:
            local, ok = sweep(args.points, f"{tmp}/local", None)
            print(f"| local | - | {local:.1f} s | {local / args.points:.2f} s | {ok} |")
            rows = {}
            for nodes in (1, 2):
                start, wall, ok = on_cluster(nodes, args.points, f"{tmp}/ray{nodes}")
                rows[nodes] = wall
                print(
                    f"| Ray, {nodes} node(s) | {start:.1f} s | {wall:.1f} s | "
                    f"{wall / args.points:.2f} s | {ok} |"
                )
        over = (rows[1] - local) / args.points
        print(
            f"\nRay's overhead per point (1 node against local): {over:.2f} s "
            f"({over / (local / args.points):.0%} of a local point); 2 nodes against 1: "
            f"{rows[1] / rows[2]:.2f}x faster."
        )


if __name__ == "__main__":
    main()
