"""The traces of one run: what to sample, started around the workload and turned into tables.

``trace:`` in the scenario says what is recorded (all off by default); this module starts the
samplers just before the ranks and stops them just after: ``tcp_info`` (:mod:`testbed.trace.tcp`),
``queues`` (:mod:`testbed.trace.queues`, or the delay line's own samples where it holds the
queue), ``pcap`` on the wire's egress of each direction (:mod:`testbed.trace.pcap`) and, on a
multipath link always, which path each TCP flow took (:mod:`testbed.trace.flowpaths`). On one
machine's part of a topology across machines (``NetworkPlan.part``) it samples what that machine
holds: each direction's shaper, wire and path taps where their namespace is (``has_ns``).

Whatever the settings, the congestion control and ECN *in effect* on the ranks' sockets are read
from tcp_info (one light sample per second when ``tcp_info`` tracing is off) and recorded per run.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Protocol

from testbed.config.scenario import Trace
from testbed.core.direction import Direction
from testbed.net.registry import Record
from testbed.plan.model import NetworkPlan, WanDirection
from testbed.trace.flowpaths import FlowPathSampler, path_taps
from testbed.trace.pcap import CaptureSpec, PcapCapture
from testbed.trace.queues import QdiscSampler, QdiscTarget
from testbed.trace.tcp import TcpInfoSampler

READBACK_PERIOD = 1.0  # s: tcp_info sampling just to learn what is in effect
FLOWPATH_PERIOD = 0.1  # s: draining the path taps (their samples carry the kernel's time)


class TracedNetwork(Protocol):
    """What the traces need of a live network (``testbed.live.network.Network`` is one)."""

    plan: NetworkPlan | None
    record: Record | None

    def namespace(self, host: str) -> str: ...

    def queue_in_backend(self, d: WanDirection) -> bool: ...

    def backend_queue_trace(self) -> list[dict]: ...


COUNTER_PERIOD = 0.02  # s: WAN byte counters of training steps and run_ranks iterations


def with_wan_counters(trace: Trace) -> Trace:
    """``trace`` with the WAN bottlenecks' counters on, at least every COUNTER_PERIOD (one
    rtnetlink dump per direction per period; a delay line that holds a queue samples its own)."""
    period = min(trace.queues or COUNTER_PERIOD, COUNTER_PERIOD)
    return trace.model_copy(update={"queues": period})


def capture_name(direction: str) -> str:
    """The capture file of a WAN direction: ``east-west.pcap``, ``east-west-1.pcap`` for path 1
    of a multipath link (every path's wire has a capture of its own)."""
    d = Direction.parse(direction)
    return f"{d.src}-{d.dst}" + (f"-{d.path}" if d.multipath else "") + ".pcap"


WINDOW_PERIOD = 0.02  # s: tcp_info of a workload whose prediction takes the measured windows


def with_tcp_windows(trace: Trace) -> Trace:
    """``trace`` with tcp_info sampled at least every WINDOW_PERIOD: the window each WAN
    connection starts a step with (a sample in the idle gap before it) and its srtt."""
    period = min(trace.tcp_info or WINDOW_PERIOD, WINDOW_PERIOD)
    return trace.model_copy(update={"tcp_info": period})


class RunTraces:
    """Context manager around the workload of one run."""

    def __init__(
        self, tb: TracedNetwork, trace: Trace, run_dir: Path, rank_hosts: list[str]
    ) -> None:
        assert tb.plan is not None
        self.tb = tb
        self.trace = trace
        self.run_dir = run_dir
        plan = tb.plan
        hosts = sorted(set(rank_hosts))
        names = {addr: name for name, addr in plan.names().items()}
        self.tcp = TcpInfoSampler(
            {h: tb.namespace(h) for h in hosts},
            trace.tcp_info or READBACK_PERIOD,
            names=names,
        )
        self.qdiscs: QdiscSampler | None = None
        if trace.queues:
            targets = [
                QdiscTarget(d.name, d.shaper.ns, d.shaper.ifname)
                for d in plan.wan
                if plan.has_ns(d.shaper.ns) and not tb.queue_in_backend(d)
            ]
            self.qdiscs = QdiscSampler(targets, trace.queues) if targets else None
        taps = [t for t in path_taps(plan) if plan.has_ns(t.ns)]
        self.paths = FlowPathSampler(taps, FLOWPATH_PERIOD, names) if taps else None
        self.pcap: PcapCapture | None = None
        if trace.pcap:
            specs = [
                CaptureSpec(
                    d.impairment.ns,
                    d.impairment.egress_if,
                    run_dir / capture_name(d.name),
                    f"{d.name}@{d.impairment.egress_if}",
                )
                for d in plan.wan
                if plan.has_ns(d.impairment.ns)
            ]
            self.pcap = PcapCapture(specs, max_bytes=trace.pcap, record=tb.record)
        self.pcap_stats: list[dict] = []
        self.window: tuple[float, float] = (0.0, 0.0)

    def __enter__(self) -> RunTraces:
        self.window = (time.time(), 0.0)
        try:
            if self.pcap is not None:
                self.pcap.start()
            if self.qdiscs is not None:
                self.qdiscs.start()
            if self.paths is not None:
                self.paths.start()
            self.tcp.start()
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop()

    def _stop(self) -> None:
        self.window = (self.window[0], time.time())
        with contextlib.suppress(Exception):
            self.tcp.stop()
        if self.qdiscs is not None:
            with contextlib.suppress(Exception):
                self.qdiscs.stop()
        if self.paths is not None:
            with contextlib.suppress(Exception):
                self.paths.stop()
        if self.pcap is not None:
            self.pcap_stats = self.pcap.stop()

    # -- results (after the testbed is down: the delay line's samples are complete then) -----
    def in_effect(self) -> dict[str, Any]:
        """Algorithm(s) and ECN negotiation seen on the ranks' sockets, per host."""
        per_host: dict[str, dict[str, Any]] = {}
        for row in self.tcp.rows:
            h = per_host.setdefault(row["host"], {"congestion": set(), "ecn": set()})
            if row.get("algorithm"):
                h["congestion"].add(row["algorithm"])
            if row.get("ecn") is not None:
                h["ecn"].add(bool(row["ecn"]))
        return {
            host: {"congestion": sorted(v["congestion"]), "ecn": sorted(v["ecn"])}
            for host, v in sorted(per_host.items())
        }

    def problems(self) -> list[str]:
        out = list(self.tcp.errors) + (list(self.qdiscs.errors) if self.qdiscs else [])
        return out + (list(self.paths.errors) if self.paths else [])

    def tables(self) -> dict[str, list[dict]]:
        start, end = self.window
        out: dict[str, list[dict]] = {}
        if self.trace.tcp_info:
            out["tcp"] = list(self.tcp.rows)
        if self.trace.queues:
            rows = list(self.qdiscs.rows) if self.qdiscs else []
            # the backend samples from its start: keep the workload's window only
            rows += [r for r in self.tb.backend_queue_trace() if start <= r["time"] <= end]
            out["queues"] = sorted(rows, key=lambda r: (r["direction"], r["time"]))
        if self.paths is not None:
            out["flowpaths"] = self.paths.table()
        if self.pcap is not None:
            from analysis.flows import flows_from_pcap

            flows: list[dict] = []
            for spec in self.pcap.specs:
                if spec.path.exists():
                    df = flows_from_pcap(spec.path, label=spec.label)
                    flows += df.to_dict("records")
            out["flows"] = flows
        return out
