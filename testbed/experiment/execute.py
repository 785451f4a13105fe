"""One run of a sweep (:func:`execute`): build the network, self-check the links, run the
workload's ranks or the traffic with the run's dynamics and traces around them, read back what
the ranks wrote, tear down; a :class:`RunResult` in every case (a failed run is a result, not an
exception; only Ctrl-C and SIGTERM end the sweep). The network is a
:class:`testbed.live.LiveNetwork`: on this machine, or across the machines of a Ray cluster for
a scenario with ``placement:`` (the self-check and the ranks run there; nothing is traced).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
from pathlib import Path
from typing import Any

from analysis.model import Link, Topology
from testbed.config.scenario import Trace
from testbed.config.sweep import RunSpec
from testbed.core.errors import TestbedError, UnsupportedError
from testbed.experiment.dynamics import RunDynamics
from testbed.experiment.ranks import RankLaunch, RankSpec
from testbed.experiment.results import RunResult
from testbed.experiment.workloads import kind_of
from testbed.live.network import Network, Terminated
from testbed.live.protocol import LiveNetwork
from testbed.live.selfcheck import check_links
from testbed.live.spanned import SpannedNetwork
from testbed.plan.model import NetworkPlan
from testbed.plan.ranks import RankSlot, place_ranks
from testbed.plan.resolved import network_rows
from testbed.trace.cpu import CpuMonitor
from testbed.trace.routing import RoutingEvents
from testbed.trace.routing import wanted as routing_wanted
from testbed.trace.run_traces import RunTraces, with_wan_counters
from traffic.exit_codes import EXIT_WRONG

# s: until every rank has joined (torch's import, then the join's own timeout,
# traffic.context.SETUP_TIMEOUT_S = 120 s, whatever the operations' timeout).
# TESTBED_SETUP_DEADLINE overrides it: in a TCG guest (`testbed vm`, no KVM) with one vCPU, two
# ranks importing torch side by side did not join within 180 s.
SETUP_DEADLINE = 180.0


def setup_deadline() -> float:
    """SETUP_DEADLINE, or the TESTBED_SETUP_DEADLINE environment variable (s) when set."""
    value = os.environ.get("TESTBED_SETUP_DEADLINE", "")
    try:
        return float(value) if value else SETUP_DEADLINE
    except ValueError:
        raise TestbedError(f"TESTBED_SETUP_DEADLINE={value!r}: not a number of seconds") from None


# s beyond workload.timeout without any rank writing anything: the ranks are stopped as hung.
# Every operation is bounded by the timeout itself (gloo's), so this only catches what it
# does not bound (a hang outside an operation, gloo#520's lazy connect).
STALL_GRACE = 60.0


# -- model inputs from the plan ----------------------------------------------------------------
def model_topology(
    plan: NetworkPlan, ranks: list[RankSlot], placement: str, ranks_per_host: int
) -> Topology:
    """The α-β model's view of this run: ranks per cluster, WAN goodput/delay, fabric."""
    counts: dict[str, int] = {}
    for r in ranks:
        counts[r.cluster] = counts.get(r.cluster, 0) + 1
    fabric_rate: dict[str, float | None] = {c: None for c in counts}
    fabric_delay: dict[str, float] = {c: 0.0 for c in counts}
    host_cluster = {h.ns: h.cluster for h in plan.hosts}
    for port in plan.fabric:
        cluster = host_cluster.get(port.ns)
        if cluster:
            fabric_rate[cluster] = port.rate * plan.goodput_factor if port.rate else None
            fabric_delay[cluster] = port.delay
    links = tuple(
        Link(d.src, d.dst, d.rate * plan.goodput_factor, d.delay, d.buffer) for d in plan.wan
    )
    return Topology(
        clusters=tuple(counts.items()),
        links=links,
        fabric_goodput_bps=fabric_rate,
        fabric_delay_s=fabric_delay,
        placement=placement,
        ranks_per_host=ranks_per_host,
    )


# -- one run -----------------------------------------------------------------------------------
class _NoTraces(contextlib.nullcontext):
    """What a run across machines records of its traces: nothing (the samplers read the
    namespaces of one machine)."""

    pcap_stats: tuple[dict, ...] = ()

    def tables(self) -> dict[str, list[dict]]:
        return {}

    def in_effect(self) -> dict[str, Any]:
        return {}

    def problems(self) -> list[str]:
        return []


Traces = RunTraces | _NoTraces


def run_traces(tb: LiveNetwork, trace: Trace, run_dir: Path, hosts: list[str]) -> Traces:
    """The run's traces of ``hosts`` (their sockets) and of the WAN; none across machines."""
    return RunTraces(tb, trace, run_dir, hosts) if isinstance(tb, Network) else _NoTraces()


def tcp_sysctls_in_effect(tb: LiveNetwork) -> dict[str, dict[str, str]]:
    """Per cluster, the namespace defaults the kernel holds (not what the scenario asked)."""
    assert tb.plan is not None
    out = {}
    for cluster in dict.fromkeys(h.cluster for h in tb.plan.hosts):
        host = next(h for h in tb.plan.hosts if h.cluster == cluster)
        got = tb.sysctls(host.name, ["net.ipv4.tcp_congestion_control", "net.ipv4.tcp_ecn"])
        out[cluster] = {
            "congestion": got["net.ipv4.tcp_congestion_control"],
            "ecn": got["net.ipv4.tcp_ecn"],
        }
    return out


def rank_problems(launch: RankLaunch, timeout: float) -> list[str]:
    """One line per rank that did not finish well: ranks that failed by themselves first, then
    the ones stopped at the deadline, then the ones stopped because another failed."""
    failed, late, stopped = [], [], []
    for slot in launch.ranks:
        label = f"rank {slot.rank} ({slot.host})"
        why = launch.stopped.get(slot.rank)
        code = launch.codes.get(slot.rank)
        if why == "timeout":
            late.append(f"{label} did not finish within {timeout:.0f}s")
        elif why == "setup-timeout":
            late.append(f"{label} did not join within {setup_deadline():.0f}s")
        elif why == "stalled":
            late.append(
                f"{label} made no progress for {timeout + STALL_GRACE:.0f}s (workload.timeout "
                f"+ {STALL_GRACE:.0f}s) and was stopped as hung"
            )
        elif why == "stopped":
            stopped.append(f"{label} stopped after another rank failed")
        elif why is None and code not in (None, 0):
            what = "produced a wrong result" if code == EXIT_WRONG else f"exited with code {code}"
            failed.append(f"{label} {what}")
    return failed + late + stopped


def _rank_detail(run_dir: Path, problem: str, rows: list[dict]) -> str:
    """What a failed rank said: its failed operation's error (the exception's last line, e.g.
    gloo's "Timed out waiting 10000ms for recv operation to complete"), else its log's tail."""
    rank = int(problem.split()[1])
    failed = [r for r in rows if r.get("rank") == rank and r.get("outcome", "ok") != "ok"]
    if failed:
        r = failed[0]
        op = r.get("op", r.get("iteration"))
        where = f"step {r['step']}" if "step" in r else f"operation {op}"
        lines = [x for x in str(r.get("error", "")).splitlines() if x.strip()]
        return f"{r['outcome']} at {where}: {lines[-1].strip() if lines else r.get('error_type')}"
    return _log_tail(run_dir, rank)


def _log_tail(run_dir: Path, rank: int, lines: int = 5) -> str:
    with contextlib.suppress(OSError):
        text = (run_dir / f"rank-{rank}.log").read_text().strip().splitlines()
        return " | ".join(text[-lines:])
    return ""


def read_rank_rows(run_dir: Path) -> tuple[list[dict], list[dict]]:
    rows, skips = [], []
    for path in sorted(run_dir.glob("rank-*.jsonl")):
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                item = json.loads(line)
                (skips if "skipped" in item else rows).append(_flat(item))
    return rows, skips


def _flat(item: dict) -> dict:
    """Table-friendly row: nested mappings become ``key_sub`` columns, lists become JSON text."""
    out: dict[str, Any] = {}
    for key, value in item.items():
        if isinstance(value, dict):
            out.update({f"{key}_{k}": v for k, v in value.items()})
        elif isinstance(value, list):
            out[key] = json.dumps(value)
        else:
            out[key] = value
    return out


def execute(
    spec: RunSpec,
    run_dir: Path,
    selfcheck_seconds: float,
    source: Path | None = None,
    ray_address: str | None = None,
) -> RunResult:
    """Run one point of the sweep. Never raises for a failed run (only for Ctrl-C and SIGTERM:
    :class:`RunInterrupted`). A scenario placed on several machines spans the Ray cluster at
    ``ray_address`` (testbed.live.spanned)."""
    sc = spec.scenario
    counters = (sc.workload is not None and kind_of(sc.workload).wan_counters) or sc.flows
    if counters or any(link.trace or link.paths for link in sc.wan):
        # WAN byte counters for every step, also from a delay line that holds a queue; a trace
        # replay's achieved rate per bin is what its bottleneck passed (the flows' goodput is
        # the receiver's in-order bytes: what waited behind a lost segment shows up later);
        # flows' queue (a DCQCN run's against Kmin/Kmax and the fluid model); each path's
        # bytes over time (a multipath link's balance)
        sc = sc.model_copy(update={"trace": with_wan_counters(sc.trace)})
    run_dir.mkdir(parents=True, exist_ok=True)
    result = RunResult(spec.run_id, "failed")
    name = f"{sc.name[:30]}-{spec.run_id}-{random.randrange(16**4):04x}"
    tb: LiveNetwork
    if sc.placement is not None:
        tb = SpannedNetwork(sc, name=name, address=ray_address or "auto")
    else:
        tb = Network(sc, name=name)
    try:
        with tb:
            result.info["backend"] = tb.backend.name if tb.backend else None
            result.info["engine"] = tb.engine.name
            result.info["backend_reason"] = tb.backend.reason if tb.backend else None
            result.info["prefix"] = tb.record.prefix if tb.record else None
            result.info["rtt_compensation"] = [c.row() for c in tb.compensation]
            result.info["tcp_sysctls"] = tcp_sysctls_in_effect(tb)
            result.info |= tb.across_machines()
            checks = check_links(tb, duration=selfcheck_seconds, pings=20)
            result.links = [{"run_id": spec.run_id, **c.row()} for c in checks]
            floors = {c.direction: c.floor_s for c in tb.compensation}
            result.network = [
                {"run_id": spec.run_id, **row, "floor_s": floors.get(row["direction"])}
                for row in network_rows(tb.plan, sc)
            ]
            workload = sc.rank_workload
            dynamics = RunDynamics(tb, sc, run_dir, source, result)
            routing = (
                RoutingEvents(tb.plan, tb.record, run_dir)
                if tb.plan is not None and tb.record is not None and routing_wanted(tb.plan)
                else None
            )
            if workload is None:
                # the traffic's hosts stand for the ranks' (their sockets' tcp_info)
                hosts = sorted({h for f in sc.flows for h in (f.from_, f.to)})
                traces = run_traces(tb, sc.trace, run_dir, hosts)
                with traces, routing or contextlib.nullcontext(), dynamics:
                    dynamics.wait_traffic()
                problems = tb.problems() + dynamics.errors
            else:
                ranks = place_ranks(tb.plan, workload.ranks_per_host, workload.placement)
                result.ranks = [{"run_id": spec.run_id, **r.as_dict()} for r in ranks]
                master = next(h for h in tb.plan.hosts if h.name == ranks[0].host)
                kind = kind_of(workload)
                keys, module = kind.spec_keys(workload), kind.rank_module
                rank_spec = RankSpec.build(
                    tb,
                    master.address,
                    ranks,
                    run_dir,
                    workload.timeout,
                    **keys,
                    **dynamics.spec_keys(),
                )
                joined: set[int] = set()

                def has_joined(rank: int) -> bool:
                    # every rank module logs "joined: ..." once torch.distributed is set up
                    if rank not in joined and "joined:" in launch.log(rank):
                        joined.add(rank)
                    return rank in joined

                launch = RankLaunch(tb, ranks, rank_spec, run_dir, module, joined=has_joined)
                traces = run_traces(tb, sc.trace, run_dir, [r.host for r in ranks])
                with CpuMonitor() as cpu, traces, routing or contextlib.nullcontext(), dynamics:
                    # workload.timeout bounds every operation (the ranks' process group
                    # timeout), not the run: the ranks are stopped when they make no progress
                    # for longer. After a rank failed, the others get 10 s to report their own
                    # error.
                    problems = launch.run(
                        None,
                        setup_timeout=setup_deadline(),
                        failure_grace=10.0,
                        stall=workload.timeout + STALL_GRACE,
                    )
                    problems += rank_problems(launch, workload.timeout)
                problems += dynamics.errors
                result.info.update(cpu.summary())
                result.info["world_size"] = len(ranks)
                result.info["topology"] = model_topology(
                    tb.plan, ranks, workload.placement, workload.ranks_per_host
                )
            # a link that carries more than its plan invalidates every number of the run
            problems += [f"link {c.direction}: {c.problem}" for c in checks if c.leak]
        # After teardown: the delay line's final counters and samples.
        result.delayline = [{"run_id": spec.run_id, **r} for r in tb.link_stats()]
        result.traces = {
            name: [{"run_id": spec.run_id, **r} for r in rows]
            for name, rows in traces.tables().items()
        }
        if routing is not None:
            result.traces["routing"] = [{"run_id": spec.run_id, **r} for r in routing.rows]
        result.info["tcp_in_effect"] = traces.in_effect()
        result.info["trace_warnings"] = traces.problems()
        if traces.pcap_stats:
            result.info["pcap"] = traces.pcap_stats
        result.rows, result.skips = read_rank_rows(run_dir)
        if problems:
            details = [
                p + (f": {_rank_detail(run_dir, p, result.rows)}" if p.startswith("rank ") else "")
                for p in problems
            ]
            result.reason = "; ".join(details)
        else:
            result.status = "ok"
    except (KeyboardInterrupt, Terminated) as stop:
        # Ctrl-C or SIGTERM ends the whole sweep, not just this run
        result.status = "interrupted"
        result.reason = (
            "terminated by SIGTERM" if isinstance(stop, Terminated) else "interrupted by the user"
        )
        result.rows, result.skips = read_rank_rows(run_dir)
        raise RunInterrupted(result) from None
    except TestbedError as exc:
        result.status = "skipped" if isinstance(exc, UnsupportedError) else "failed"
        result.reason = str(exc)
        result.rows, result.skips = read_rank_rows(run_dir)
    return result


class RunInterrupted(Exception):
    """Ctrl-C or SIGTERM during a run: the sweep ends, its ``result`` recorded first."""

    def __init__(self, result: RunResult) -> None:
        super().__init__(result.reason)
        self.result = result
