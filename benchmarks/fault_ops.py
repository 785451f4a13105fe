"""Benchmark: how long one WAN change or fault action takes to apply (the event runner's budget
is 20 ms from schedule to applied).

    sudo .venv/bin/python -m benchmarks.fault_ops [--repeat 50] [--write]

One testbed (east - mid - west, one host each, 100 Mbit/s links with 10 and 5 ms, the backend
``auto`` picks), idle links, each operation applied ``--repeat`` times alternating between two
states (on/off, 100/30 Mbit/s, 10/30 ms), the kinds interleaved round by round so that the
machine's load hits them alike: wall time per application (p50, p99, max) and the CPU seconds
this process and its children spent per application (rates, links, routes and the device
groups that switch the blackhole and reset rules are rtnetlink requests from this process; the
delay line's reload is a SIGHUP and its acknowledgement in the stats file). Two more rows time,
interleaved with the others, what those replaced: the same rate change as a ``tc -batch``
process, and a blackhole as an ``iptables-restore`` process adding and deleting a DROP rule.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import resource
import sys
import time
from collections.abc import Callable

from benchmarks._results import Tee, write_section
from testbed.config.loading import parse_scenario
from testbed.core.stats import quantile
from testbed.live.network import Network
from testbed.net.batches import run_batches
from testbed.net.faults import FaultOps, restore_text, run_restore
from testbed.plan.render import rate_change_lines

SCENARIO = {
    "name": "fault-ops",
    "clusters": {"east": {"hosts": 1}, "mid": {"hosts": 1}, "west": {"hosts": 1}},
    "wan": [
        {"between": ["east", "mid"], "rate": "100mbit", "delay": "10ms"},
        {"between": ["mid", "west"], "rate": "100mbit", "delay": "5ms"},
    ],
}


def cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def operations(tb: Network) -> dict[str, Callable[[bool], object]]:
    """Name -> apply(state): each alternates between two states of one link."""
    ops = FaultOps(tb.plan)
    ops.prepare()  # as the event runner does before the clock origin
    backend = tb.backend
    assert backend is not None
    d = next(d for d in tb.plan.wan if d.name == "east->mid")
    imp = d.impairment
    slow = dataclasses.replace(imp, delay=imp.delay + 0.020)
    return {
        "set_rate (rtnetlink: HTB class + bfifo limit)": lambda s: backend.set_rate(
            {d.name: (30_000_000 if s else d.rate, d.buffer)}
        ),
        "set_impairments (delay step)": lambda s: backend.set_impairments(
            {d.name: slow if s else imp}
        ),
        "set_rate by a tc process (replaced)": lambda s: run_batches(
            [
                (
                    ["tc", "-n", d.shaper.ns],
                    rate_change_lines(d, 30_000_000 if s else d.rate, d.buffer),
                )
            ]
        ),
        "blackhole (both directions)": lambda s: ops.blackhole(["east->mid", "mid->east"], s),
        "blackhole by iptables-restore (replaced)": lambda s: run_restore(
            {imp.ns: restore_text("raw", [f"PREROUTING -i {imp.ingress_if} -j DROP"], s)}
        ),
        "reset": lambda s: ops.reset("east-mid", s),
        "link down/up (+routes)": lambda s: ops.link("east-mid", not s),
        "gateway down/up (+routes)": lambda s: ops.gateway("west", not s),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeat", type=int, default=50)
    p.add_argument("--write", action="store_true", help="replace this script's RESULTS.md section")
    args = p.parse_args()
    out = io.StringIO()
    tee = Tee(sys.stdout, out)
    with Network(
        parse_scenario(SCENARIO, "fault-ops"), name=f"bench-faultops-{time.time_ns() % 10**6}"
    ) as tb:
        ops = operations(tb)
        walls: dict[str, list[float]] = {k: [] for k in ops}
        cpus: dict[str, float] = dict.fromkeys(ops, 0.0)
        for i in range(2 * args.repeat):  # on, off, on, off ...: every state change timed
            for name, apply in ops.items():
                c0, t0 = cpu(), time.perf_counter()
                apply(i % 2 == 0)
                walls[name].append(time.perf_counter() - t0)
                cpus[name] += cpu() - c0
        print(
            f"backend {tb.backend.name if tb.backend else '?'}, {2 * args.repeat} "
            f"applications each, idle links; wall ms p50 / p99 / max, CPU ms per application",
            file=tee,
        )
        print("| operation | p50 | p99 | max | CPU |", file=tee)
        print("|---|---:|---:|---:|---:|", file=tee)
        for name, ws in walls.items():
            ms = [w * 1e3 for w in ws]
            print(
                f"| {name} | {quantile(ms, 0.5):.1f} | {quantile(ms, 0.99):.1f} | "
                f"{max(ms):.1f} | {cpus[name] * 1e3 / len(ws):.1f} |",
                file=tee,
            )
    if args.write:
        write_section("fault_ops.py", out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
