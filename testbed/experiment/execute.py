"""One run of a sweep (:func:`execute`): build the network, self-check the links, run the
workload's ranks (a :class:`testbed.experiment.session.RankSession`) or the traffic with the
run's dynamics and traces around them, read back what the ranks wrote, tear down; a
:class:`RunResult` in every case (a failed run is a result, not an exception; only Ctrl-C and
SIGTERM end the sweep). The network is a :class:`testbed.live.LiveNetwork`: on this machine, or
across the machines of a Ray cluster for a scenario with ``placement:`` (the self-check, the
ranks and the traces run there, each machine's part through its agent).
"""

from __future__ import annotations

import contextlib
import random
from pathlib import Path

from analysis.model import Link, Topology
from testbed.config.scenario import Trace
from testbed.config.sweep import RunSpec
from testbed.core.errors import TestbedError, UnsupportedError
from testbed.experiment import ranks as ranks_mod
from testbed.experiment.dynamics import RunDynamics
from testbed.experiment.results import RunResult
from testbed.experiment.session import RankSession, rank_detail, read_rank_rows
from testbed.experiment.workloads import kind_of
from testbed.live.network import Network, Terminated
from testbed.live.protocol import LiveNetwork
from testbed.live.selfcheck import check_links
from testbed.live.spanned import SpannedNetwork
from testbed.live.spanned.routing import SpannedRoutingEvents
from testbed.live.spanned.traces import SpannedTraces
from testbed.plan.model import NetworkPlan
from testbed.plan.ranks import RankSlot, place_ranks
from testbed.plan.resolved import network_rows
from testbed.trace.cpu import CpuMonitor
from testbed.trace.routing import RoutingEvents
from testbed.trace.routing import wanted as routing_wanted
from testbed.trace.run_traces import RunTraces, with_tcp_windows, with_wan_counters


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
Traces = RunTraces | SpannedTraces


def run_traces(tb: LiveNetwork, trace: Trace, run_dir: Path, hosts: list[str]) -> Traces:
    """The run's traces of ``hosts`` (their sockets) and of the WAN; across machines each
    machine samples its part (testbed.live.spanned.traces)."""
    if isinstance(tb, SpannedNetwork):
        return SpannedTraces(tb, trace, run_dir, hosts)
    assert isinstance(tb, Network)
    return RunTraces(tb, trace, run_dir, hosts)


def routing_events(tb: LiveNetwork, run_dir: Path) -> RoutingEvents | SpannedRoutingEvents | None:
    """The run's routing events (a multipath link or BGP), on every machine of the network."""
    if tb.plan is None or tb.record is None or not routing_wanted(tb.plan):
        return None
    if isinstance(tb, SpannedNetwork):
        return tb.routing_events(run_dir)
    return RoutingEvents(tb.plan, tb.record, run_dir)


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
    rank_workload = sc.rank_workload
    counters = (rank_workload is not None and kind_of(rank_workload).wan_counters) or sc.flows
    if counters or any(link.trace or link.paths for link in sc.wan):
        # WAN byte counters for every step, also from a delay line that holds a queue; a trace
        # replay's achieved rate per bin is what its bottleneck passed (the flows' goodput is
        # the receiver's in-order bytes: what waited behind a lost segment shows up later);
        # flows' queue (a DCQCN run's against Kmin/Kmax and the fluid model); each path's
        # bytes over time (a multipath link's balance)
        sc = sc.model_copy(update={"trace": with_wan_counters(sc.trace)})
    if rank_workload is not None and kind_of(rank_workload).tcp_windows and not sc.trace.tcp_info:
        sc = sc.model_copy(update={"trace": with_tcp_windows(sc.trace)})
    run_dir.mkdir(parents=True, exist_ok=True)
    result = RunResult(spec.run_id, "failed")
    name = f"{sc.name[:30]}-{spec.run_id}-{random.randrange(16**4):04x}"
    tb: LiveNetwork
    if sc.placement is not None:
        tb = SpannedNetwork(sc, name=name, address=ray_address or "auto")
    else:
        tb = Network(sc, name=name)
    # the rank server imports torch beside the bring-up and the self-check (closed with the run)
    server = None
    if rank_workload is not None and ranks_mod.forks_ranks(
        sc.placement is None, kind_of(rank_workload).runs_rank_module
    ):
        server = ranks_mod.rank_server(run_dir)
    try:
        with contextlib.closing(server) if server else contextlib.nullcontext(), tb:
            assert tb.plan is not None, "up() built the plan"
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
            routing = routing_events(tb, run_dir)
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
                kind = kind_of(workload)
                keys = {**kind.spec_keys(workload), **dynamics.spec_keys(ranks[0].host)}
                described = kind.processes(workload, tb.plan, ranks, run_dir, source)
                session = RankSession(
                    tb, ranks, run_dir, kind.rank_module, workload.timeout, keys,
                    processes=described, server=server,
                )  # fmt: skip
                traces = run_traces(tb, sc.trace, run_dir, [r.host for r in ranks])
                with CpuMonitor() as cpu, traces, routing or contextlib.nullcontext(), dynamics:
                    problems = session.run(kind.deadlines(workload))
                    problems += kind.problems(session, workload)
                problems += dynamics.errors
                result.info.update(kind.run_info(session))
                result.info.update(cpu.summary())
                result.info["world_size"] = len(ranks)
                result.info["topology"] = model_topology(
                    tb.plan, ranks, workload.placement, workload.ranks_per_host
                )
            # a link that carries more than its plan invalidates every number of the run
            problems += [f"link {c.direction}: {c.problem}" for c in checks if c.leak]
        # After teardown: the delay line's final counters and samples.
        result.delayline = [{"run_id": spec.run_id, **r} for r in tb.link_stats()]
        if isinstance(tb, SpannedNetwork):  # each machine's clock offset, through the run
            result.dynamics["clock_offsets"] = [
                {"run_id": spec.run_id, **r} for r in tb.clock_rows()
            ]
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
                p + (f": {rank_detail(run_dir, p, result.rows)}" if p.startswith("rank ") else "")
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
