"""Experiments: every sweep point x repeat is one run: build the network, self-check the links,
run the ranks, record, tear down; a failed run is recorded and the sweep goes on.

Results layout (one directory per invocation)::

    <out>/<scenario>-<time>/
        manifest.json           scenario file, environment, one entry per run (params, status, ...)
        collectives.parquet     one row per rank x timed iteration, sweep params as columns
        training.parquet        one row per rank x training step (workload kind: training)
        links.parquet           the link self-check of every run
        delayline.parquet       delay-line counters per run and WAN direction (userspace backend)
        tcp.parquet             tcp_info samples of the ranks' sockets (trace.tcp_info)
        queues.parquet          WAN bottleneck occupancy, drops, marks over time (trace.queues)
        flows.parquet           per-flow timelines from the headers-only pcaps (trace.pcap)
        flowpaths.parquet       which path of a multipath link each TCP flow took, and when
        events.parquet          every schedule step and fault applied (or not) and when
        routing.parquet         FIB, BFD and BGP events in the gateways (multipath or bgp runs)
        flows_goodput.parquet   goodput every 100 ms of the scenario's `traffic:` flows
        runs/<run_id>/          spec.json, rank-<r>.jsonl, rank-<r>.log, flow-<i>.jsonl of that run

A run whose WAN changes (schedule, trace, faults) or that has ``traffic:`` gets a clock origin
(testbed.run.events.OriginClock: the ranks announce their iterations on a socket named in the
spec), an EventRunner applying its timeline and its flows (testbed.run.flows) around
the workload; they stop when the workload ends (events still to come are recorded as skipped,
faults still in force undone) and before the testbed goes down.

Tables are rewritten after every run (atomically), so an interrupted sweep keeps what it
measured and ``--resume`` skips the runs whose status is final.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import pandas as pd

from analysis import dcqcn
from analysis.faults import summarize_faults
from analysis.model import Link, Topology
from analysis.network import reference
from analysis.operations import rank_operations
from analysis.routing import failover_metrics
from analysis.upgrade import upgrade
from testbed.config.expect import Check, check
from testbed.config.scenario import Scenario
from testbed.config.sweep import RunSpec
from testbed.core.dcqcn import DcqcnParams
from testbed.core.errors import NetError, TestbedError, UnsupportedError
from testbed.core.results import DYNAMICS_TABLES, FORMAT_VERSION, TRACE_TABLES
from testbed.plan.model import NetworkPlan
from testbed.plan.ranks import RankSlot, place_ranks
from testbed.plan.resolved import network_rows
from testbed.plan.timeline import Timeline, build_timeline
from testbed.run.events import EventRunner, OriginClock
from testbed.run.flows import Flows
from testbed.run.ranks import RankLaunch, RankSpec, require_torch
from testbed.run.results import ResultsDir, versions
from testbed.run.selfcheck import check_links
from testbed.run.spanned import SpannedTestbed
from testbed.run.testbed import Terminated, Testbed
from testbed.run.workloads import KINDS, RunRows, kind_of
from testbed.trace.cpu import CpuMonitor
from testbed.trace.routing import RoutingEvents
from testbed.trace.routing import wanted as routing_wanted
from testbed.trace.run_traces import RunTraces, with_wan_counters
from traffic.exit_codes import EXIT_WRONG

FINAL = ("ok", "failed", "skipped")
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
# s of a looping trace the timeline expands when the run's length is not known beforehand
HORIZON = 3600.0


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
@dataclass
class RunResult:
    run_id: str
    status: str  # ok | failed | skipped | interrupted
    reason: str = ""
    rows: list[dict] = field(default_factory=list)  # rank-iteration rows
    skips: list[dict] = field(default_factory=list)
    links: list[dict] = field(default_factory=list)
    network: list[dict] = field(default_factory=list)  # the WAN as built, per direction
    ranks: list[dict] = field(default_factory=list)  # where each rank ran
    delayline: list[dict] = field(default_factory=list)
    traces: dict[str, list[dict]] = field(default_factory=dict)  # tcp, queues, flows
    dynamics: dict[str, list[dict]] = field(default_factory=dict)  # events, flows_goodput
    info: dict[str, Any] = field(default_factory=dict)


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


def tcp_sysctls_in_effect(tb: Testbed | SpannedTestbed) -> dict[str, dict[str, str]]:
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


# -- a changing WAN and bulk traffic around the workload ---------------------------------------
def timeline_for(sc: Scenario, plan: NetworkPlan, source: Path | None) -> Timeline:
    """The run's timeline of WAN changes and faults: traces (relative to the scenario file
    ``source``) looped up to the traffic's end, or up to HORIZON beside a workload (whose
    length is not known in advance)."""
    horizon = max((f.start + f.duration for f in sc.flows), default=0.0)
    return build_timeline(
        sc,
        plan,
        source.parent if source else Path.cwd(),
        horizon if sc.rank_workload is None else HORIZON,
        source=str(source) if source else "<scenario>",
    )


def fault_summary(spec: RunSpec, result: RunResult) -> dict[str, Any]:
    """The run's fault metrics (analysis.faults.summarize_faults) for its summary rows, so that
    expectations can test them; empty for a run without events."""
    events = result.dynamics.get("events", [])
    if not events:
        return {}
    rows = pd.DataFrame([{"run_id": spec.run_id, **r} for r in result.rows])
    workload = spec.scenario.workload
    ops = kind_of(workload).operations(rows) if workload is not None else rank_operations(rows)
    sc = spec.scenario
    # the run's reference direction as built, the same the report reads (analysis.network)
    network = reference(result.network)
    tables = {
        name: (pd.DataFrame(rows) if rows else None)
        for name, rows in (
            ("tcp", result.traces.get("tcp", [])),
            ("queues", result.traces.get("queues", [])),
            ("goodput", result.dynamics.get("flows_goodput", [])),
        )
    }
    metrics = summarize_faults(
        pd.DataFrame(events),
        ops,
        sc.model_dump(mode="json"),
        network.get("rtt_s") or 0.0,
        **tables,
        rate_bps=network.get("wan_rate_bps"),
    )
    if routing := result.traces.get("routing"):
        metrics |= failover_metrics(pd.DataFrame(events), pd.DataFrame(routing))
    return metrics


def dcqcn_summary(spec: RunSpec, result: RunResult) -> dict[str, Any]:
    """The run's DCQCN metrics, measured and predicted by the fluid model (analysis.dcqcn), for
    its summary rows; empty for a run without DCQCN flows."""
    setups = result.info.get("dcqcn") or {}
    events = result.dynamics.get("dcqcn", [])
    if not setups or not events:
        return {}
    ev = pd.DataFrame(events)
    rx = pd.DataFrame(result.dynamics.get("dcqcn_rx", []))
    queues = pd.DataFrame(result.traces.get("queues", []))
    first = setups[min(setups, key=int)]
    ends = ev[ev["kind"] == "end"].set_index("flow")
    sent = {int(f): int(n) for f, n in ends["sent"].items()} if "sent" in ends else {}
    size = next(f.size for f in spec.scenario.flows if getattr(f, "kind", "") == "dcqcn")
    capacity = dcqcn.payload_capacity(first["bottleneck_bps"], size)
    out = dcqcn.measure(ev, rx, queues, first["direction"], capacity, sent) if not rx.empty else {}
    starts = ev[ev["kind"] == "start"].set_index("flow")["t"]
    if out and first["aqm"] and first["aqm"].get("kind") in ("red", "step"):
        origin = float(starts.min())
        flows = [int(f) for f in sorted(setups, key=int)]
        params = DcqcnParams(**first["params"])
        res = dcqcn.predict(
            params,
            line_rate_bps=first["line_rate_bps"],
            bottleneck_bps=first["bottleneck_bps"],
            rtt_s=first["rtt_s"],
            aqm=first["aqm"],
            size=size,
            starts_s=[float(starts.get(f, origin) - origin) for f in flows],
            duration_s=float(ends["t"].max() - origin) if not ends.empty else 10.0,
            buffer_bytes=first["buffer_bytes"],
        )
        out |= dcqcn.predicted(res)
        out |= dcqcn.ratios(out)
    return out


def bulk_summary(result: RunResult) -> dict[str, Any]:
    """The bulk flows' rate per flow, fairness, utilisation and queue (analysis.dcqcn ``bulk_*``)
    through the first one's bottleneck: a DCQCN run's comparison (e.g. DCTCP through the same
    marking switch); empty without bulk flows."""
    setup = result.info.get("bulk") or {}
    rows = pd.DataFrame(result.dynamics.get("flows_goodput", []))
    if not setup or rows.empty:
        return {}
    rows = rows[rows["flow"].isin(setup["flows"])]
    queues = pd.DataFrame(result.traces.get("queues", []))
    capacity = dcqcn.tcp_capacity(setup["bottleneck_bps"])
    return dcqcn.measure_bulk(rows, queues, setup["direction"], capacity)


class RunDynamics:
    """Around one run's workload: the clock origin, the event runner and the bulk flows.

    ``clock`` is None when the run has no timeline and no traffic (nothing is started then).
    The origin: the first measured iteration (``clock: workload`` with a workload), else the
    moment the block is entered (``clock: wall``: the run's start, right before the ranks;
    traffic alone: the traffic's start). On leaving (also on an error or Ctrl-C): the events
    still to come are recorded as skipped, the faults still in force undone, the flows
    stopped; ``result.dynamics`` gets the rows."""

    def __init__(
        self, tb: Testbed, sc: Scenario, run_dir: Path, source: Path | None, result: RunResult
    ) -> None:
        assert tb.plan is not None
        self.result = result
        self.timeline = timeline_for(sc, tb.plan, source)
        self.clock: OriginClock | None = None
        self.runner: EventRunner | None = None
        self.flows: Flows | None = None
        self.errors: list[str] = []
        if not self.timeline.events and not sc.flows:
            return
        ranks = sc.rank_workload is not None
        self.clock = OriginClock(from_iterations=sc.clock == "workload" and ranks)
        self.runner = EventRunner(self.timeline, tb, self.clock)
        self.flows = Flows(tb, sc.flows, self.clock, run_dir, sc.dilation)
        self.wall = sc.clock == "wall" or not ranks

    def __enter__(self) -> RunDynamics:
        if self.clock is None:
            return self
        assert self.runner is not None and self.flows is not None
        try:
            self.flows.start()
            self.runner.start()
            if self.wall:
                self.clock.set_origin()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def spec_keys(self) -> dict[str, Any]:
        """What the ranks' spec gets: the socket they announce their iterations on."""
        return {"events_socket": self.clock.path} if self.clock is not None else {}

    def wait_traffic(self) -> None:
        """Until the flows are over (a run with traffic and no workload)."""
        if self.flows is not None:
            self.flows.wait()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.clock is None:
            return
        assert self.runner is not None and self.flows is not None
        run_id = self.result.run_id
        try:
            self.clock.end()
            self.runner.stop()
            self.flows.stop()
        finally:
            self.clock.close()
            events = self.runner.rows
            self.result.dynamics = {
                "events": [{"run_id": run_id, **r} for r in events],
                "flows_goodput": [{"run_id": run_id, **r} for r in self.flows.rows()],
            }
            for name, rows in self.flows.dcqcn_rows().items():
                self.result.dynamics[name] = [{"run_id": run_id, **r} for r in rows]
            if self.flows.dcqcn:
                self.result.info["dcqcn"] = {str(i): v for i, v in self.flows.dcqcn.items()}
            if self.flows.bulk:
                self.result.info["bulk"] = self.flows.bulk
            self.errors = list(self.flows.errors)
            try:  # apart from the shapers' queue-overflow drops (queues.parquet)
                if drops := self.runner.fault_drops():
                    self.result.info["fault_drops"] = drops
            except NetError as e:  # the run's numbers stand without them: said, not fatal
                self.result.info["fault_drops_error"] = str(e)
            if self.flows.cut:  # the workload ended first: their goodput rows end there
                self.result.info["traffic_cut"] = self.flows.cut
            if self.runner.crashed is not None:
                self.errors.append(f"event runner: {self.runner.crashed!r}")
            # counts per event (a set has a row per direction; an undo shares its start's index)
            events = list({(r["event"], r["status"]): r for r in events}.values())
            failed = [
                f"event {r['event']} ({r['what']}): {r['error']}" for r in events if r["error"]
            ]
            self.result.info["events"] = {
                "applied": sum(r["status"] == "applied" for r in events),
                "failed": len(failed),
                "late": sum(bool(r["late"]) for r in events),
                "skipped": sum(r["status"] == "skipped" for r in events),
                "skipped_trace_bins": self.runner.skipped_trace,
                "undone": sum(r["status"] == "undone" for r in events),
                "clock": self.timeline.clock,
            }
            # an event that failed does not fail the run (the rest of the timeline went on);
            # the run says so
            self.result.info["event_errors"] = failed


def execute(
    spec: RunSpec,
    run_dir: Path,
    selfcheck_seconds: float,
    source: Path | None = None,
    ray_address: str | None = None,
) -> RunResult:
    """Run one point of the sweep. Never raises for a failed run (only for Ctrl-C). A scenario
    placed on several machines spans the Ray cluster at ``ray_address`` (testbed.run.spanned:
    the self-check and the ranks run there; nothing is traced)."""
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
    tb: Testbed | SpannedTestbed
    if sc.placement is not None:
        tb = SpannedTestbed(sc, name=name, address=ray_address or "auto")
    else:
        tb = Testbed(sc, name=name)
    try:
        with tb:
            result.info["backend"] = tb.backend.name if tb.backend else None
            result.info["engine"] = tb.engine.name
            result.info["backend_reason"] = tb.backend.reason if tb.backend else None
            result.info["prefix"] = tb.record.prefix if tb.record else None
            result.info["rtt_compensation"] = [c.row() for c in tb.compensation]
            result.info["tcp_sysctls"] = tcp_sysctls_in_effect(tb)
            if isinstance(tb, SpannedTestbed):
                # comparable only when the machines are; no one-way delay is reported across
                # machines (their clocks are not compared): compensation from round trips
                result.info["machines"] = tb.identities
                result.info["interface_mtu"] = tb.plan.interface_mtu
                result.info["underlay_rtt_s"] = {
                    f"{a}->{b}": v for (a, b), v in tb.underlay_rtt.items()
                }
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
            traces: RunTraces | None = None
            if workload is None:
                # the traffic's hosts stand for the ranks' (their sockets' tcp_info)
                hosts = sorted({h for f in sc.flows for h in (f.from_, f.to)})
                traces = RunTraces(tb, sc.trace, run_dir, hosts)
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
                traces = (
                    _NoTraces()
                    if isinstance(tb, SpannedTestbed)
                    else RunTraces(tb, sc.trace, run_dir, [r.host for r in ranks])
                )
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
        raise _Interrupted(result) from None
    except TestbedError as exc:
        result.status = "skipped" if isinstance(exc, UnsupportedError) else "failed"
        result.reason = str(exc)
        result.rows, result.skips = read_rank_rows(run_dir)
    return result


class _Interrupted(Exception):
    def __init__(self, result: RunResult) -> None:
        super().__init__(result.reason)
        self.result = result


# -- the whole experiment ----------------------------------------------------------------------
class Experiment:
    """A sweep being run into one results directory (new, or resumed)."""

    def __init__(self, runs: list[RunSpec], source: str, out: str | Path, resume: bool) -> None:
        require_torch()
        self.runs = runs
        self.source = source
        # the Ray cluster of the machines a placed scenario spans (testbed run --ray)
        self.ray_address: str | None = None
        if resume:
            self.results = ResultsDir(Path(out))
            if not self.results.manifest_path.exists():
                raise TestbedError(f"--resume {out}: no manifest.json there")
        else:
            self.results = ResultsDir.create(out, runs[0].scenario.name)
        self.manifest = self.results.read_manifest()
        self.manifest.setdefault("runs", {})
        self.manifest.update(
            {
                "scenario_file": source,
                "scenario": runs[0].scenario.model_dump(mode="json"),
                "kernel": os.uname().release,
                "versions": versions(),
                "started": self.manifest.get("started", time.time()),
            }
        )
        self.tables: dict[str, list[dict]] = {
            name: self._load_table(name)
            for name in (
                *dict.fromkeys(k.rows_table for k in KINDS.values()),
                "links",
                "network",
                "ranks",
                "delayline",
                *TRACE_TABLES,
                *DYNAMICS_TABLES,
            )
        }
        if resume:  # a directory of an older format: its summaries and network as they are now
            network = pd.DataFrame(self.tables["network"])
            self.manifest, upgraded = upgrade(self.manifest, {"network": network})
            self.tables["network"] = upgraded["network"].to_dict("records")
        self.manifest["format_version"] = FORMAT_VERSION
        self.summaries: list[dict] = list(self.manifest.get("summary", []))

    def _load_table(self, name: str) -> list[dict]:
        path = self.results.path / f"{name}.parquet"
        if path.exists():
            return pd.read_parquet(path).to_dict("records")
        return []

    def done(self, spec: RunSpec) -> bool:
        return self.manifest["runs"].get(spec.run_id, {}).get("status") in FINAL

    def record(self, spec: RunSpec, result: RunResult) -> list[dict]:
        params = {k: _scalar(v) for k, v in spec.params.items()}
        for table in self.tables.values():
            table[:] = [r for r in table if r.get("run_id") != spec.run_id]
        workload = spec.scenario.workload
        kind = kind_of(workload) if workload is not None else None
        if kind is not None:
            self.tables[kind.rows_table] += [
                {"run_id": spec.run_id, "repeat": spec.repeat, **params, **row}
                for row in result.rows
            ]
        self.tables["links"] += [{**params, **row} for row in result.links]
        self.tables["network"] += [{**params, **row} for row in result.network]
        self.tables["ranks"] += [{**params, **row} for row in result.ranks]
        self.tables["delayline"] += [{**params, **row} for row in result.delayline]
        for name in TRACE_TABLES:
            self.tables[name] += [{**params, **row} for row in result.traces.get(name, [])]
        for name in DYNAMICS_TABLES:
            self.tables[name] += [{**params, **row} for row in result.dynamics.get(name, [])]
        summary = (
            kind.summarize(RunRows(result.rows, result.info, params, workload, result.traces))
            if kind is not None
            else []
        )
        for s in summary:
            s["kind"] = kind.name if kind is not None else "traffic"
        faults = fault_summary(spec, result) | dcqcn_summary(spec, result) | bulk_summary(result)
        if faults and not summary:  # every operation failed: the fault metrics still count
            summary = [{**params, "kind": "traffic"}]
        for s in summary:
            s.update(run_id=spec.run_id, repeat=spec.repeat, **faults)
        self.summaries = [s for s in self.summaries if s.get("run_id") != spec.run_id] + summary
        if kind is not None:
            kind.finish(self.summaries, self.tables[kind.rows_table], list(spec.params))
        info = dict(result.info)
        if isinstance(info.get("topology"), Topology):  # the model's input, kept with the run
            info["topology"] = asdict(info["topology"])
        self.manifest["runs"][spec.run_id] = {
            "params": params,
            "repeat": spec.repeat,
            "status": result.status,
            "reason": result.reason,
            "skipped_combinations": result.skips,
            "resolved": spec.scenario.model_dump(mode="json"),
            **info,
        }
        self.manifest["summary"] = self.summaries
        self.flush()
        return summary

    def flush(self) -> None:
        for name, rows in self.tables.items():
            if rows:
                self.results.write_table(name, rows)
        statuses = [r["status"] for r in self.manifest["runs"].values()]
        if statuses and all(s == "skipped" for s in statuses):
            # Nothing was measured: that is not a success a CI job should accept.
            self.manifest["status"] = "skipped"
        elif statuses and all(s in ("ok", "skipped") for s in statuses):
            self.manifest["status"] = "ok"
        else:
            self.manifest["status"] = "failed"
        self.manifest["finished"] = time.time()
        self.results.update_manifest(**self.manifest)

    def check_expectations(self) -> list[Check]:
        """The scenario's ``expect`` entries against every summary row; kept in the manifest."""
        expectations = self.runs[0].scenario.expect
        if not expectations:
            return []
        runs = self.manifest["runs"]
        checks = check(
            list(expectations),
            self.summaries,
            {rid: r.get("resolved") or {} for rid, r in runs.items()},
            list(self.runs[0].params),
            skipped_runs=sum(r["status"] == "skipped" for r in runs.values()),
        )
        self.manifest["expectations"] = [asdict(c) for c in checks]
        self.results.update_manifest(**self.manifest)
        return checks

    def run(
        self,
        selfcheck_seconds: float = 1.0,
        on_start: Callable[[RunSpec], None] | None = None,
        on_done: Callable[[RunSpec, RunResult], None] | None = None,
    ) -> bool:
        """Run every pending run; True when all finished ok (or skipped). Ctrl-C propagates
        after the interrupted run is recorded."""
        for spec in self.runs:
            if self.done(spec):
                continue
            if on_start:
                on_start(spec)
            try:
                result = execute(
                    spec,
                    self.results.path / "runs" / spec.run_id,
                    selfcheck_seconds,
                    source=Path(self.source) if self.source else None,
                    ray_address=self.ray_address,
                )
            except _Interrupted as stop:
                self.record(spec, stop.result)
                raise KeyboardInterrupt from None
            self.record(spec, result)
            if on_done:
                on_done(spec, result)
        return self.manifest["status"] == "ok"


def _scalar(value: Any) -> Any:
    """Sweep values become table columns: lists and mappings as compact text."""
    if isinstance(value, list | dict):
        return json.dumps(value, separators=(",", ":"))
    return value
