"""A run's traces across machines: each machine samples what it holds and the driver joins the
rows into the tables of one machine (docs/scale-out.md, "Tracing across machines").

On each agent a :class:`MachineTraces` runs :class:`testbed.trace.run_traces.RunTraces` on the
machine's part of the plan: tcp_info in the hosts of the run placed there, the qdisc counters
of the shapers there (the WAN byte counters of training steps among them), the delay line's
queue samples of the wires there, pcap on the wires there and the path taps of the multipath
links whose first gateway is there. The driver's :class:`SpannedTraces` has the ``RunTraces``
interface (a context manager; ``tables``, ``in_effect``, ``problems``, ``pcap_stats``) for the
run: it starts and stops every machine's part, copies the captures into the run directory
(the flows table is read from those copies) and, once the testbed is down (a delay line's
samples are complete then), joins the machines' rows.

Times: every row is stamped by its machine's clock (time.time(), a capture's kernel time) and
put on the driver's timeline with the machine's clock offset (:func:`driver_time`, the latest
measurement of testbed.live.spanned.clocks; within its bound, which the run's info records).
The capture files themselves keep their machine's times.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from testbed.config.scenario import Trace
from testbed.live.ray_common import NODE_DIR
from testbed.trace.run_traces import RunTraces

if TYPE_CHECKING:
    from testbed.live.network import Network
    from testbed.live.spanned.clocks import ClockSync
    from testbed.plan.model import NetworkPlan

# the tables a machine's part gives after teardown (the flows table comes from the captures,
# read on the driver)
MACHINE_TABLES = ("tcp", "queues", "flowpaths")
# each table's columns of unix times
TIME_COLUMNS = {"tcp": ("time",), "queues": ("time",), "flowpaths": ("time_from", "time_to")}


class Spanned(Protocol):
    """What the traces use of the driver (:class:`~testbed.live.spanned.SpannedNetwork`; the
    agent imports this module, the driver the agent)."""

    @property
    def ray(self) -> Any: ...

    @property
    def agents(self) -> dict[str, Any]: ...

    @property
    def plan(self) -> NetworkPlan | None: ...

    @property
    def clock(self) -> ClockSync | None: ...

    @property
    def traced(self) -> dict[str, dict[str, list[dict]]]: ...

    def machine_of(self, host: str) -> str: ...


def driver_time(tb: Spanned, machine: str) -> Callable[[float], float]:
    """A unix time of ``machine``'s clock on the driver's timeline (its latest clock offset;
    unchanged while none was measured)."""
    clock = tb.clock
    if clock is None:
        return lambda t: t
    return lambda t: clock.to_driver(machine, t)[0]


def _shifted(
    rows: list[dict], keys: tuple[str, ...], to_driver: Callable[[float], float]
) -> list[dict]:
    return [{**r, **{k: to_driver(r[k]) for k in keys if r.get(k) is not None}} for r in rows]


class MachineTraces:
    """One machine's part of a run's traces, on its agent (``Network`` of the part)."""

    def __init__(self, tb: Network, trace: Trace, hosts: list[str]) -> None:
        assert tb.record is not None
        NODE_DIR.mkdir(parents=True, exist_ok=True)
        self.dir = Path(tempfile.mkdtemp(prefix=f"{tb.record.prefix}-trace-", dir=NODE_DIR))
        self.traces = RunTraces(tb, trace, self.dir, hosts)
        self.tables: dict[str, list[dict]] = {}

    def start(self) -> None:
        # A Ray worker's thread blocks SIGINT and its children inherit the mask: tcpdump, which
        # a capture stops with SIGINT (its closing statistics), starts with it unblocked.
        old = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        try:
            self.traces.__enter__()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def stop(self) -> tuple[dict[str, bytes], list[dict], dict[str, Any], list[str]]:
        """Stop sampling; the captures (file name -> bytes), their statistics, what is in
        effect on the sockets sampled here and the samplers' problems."""
        self.traces.__exit__(None, None, None)
        pcap = self.traces.pcap
        files = {
            s.path.name: s.path.read_bytes()
            for s in (pcap.specs if pcap else [])
            if s.path.exists()
        }
        stats = [{**s, "path": Path(str(s.get("path", ""))).name} for s in self.traces.pcap_stats]
        return files, stats, self.traces.in_effect(), self.traces.problems()

    def finish(self) -> None:
        """After the part is down: its tables (a delay line's samples are complete then)."""
        t = self.traces
        t.pcap = None  # read on the driver, from its copies
        self.tables = {k: v for k, v in t.tables().items() if k in MACHINE_TABLES}
        shutil.rmtree(self.dir, ignore_errors=True)


class SpannedTraces:
    """The traces of one run across machines (the interface of ``RunTraces``): each machine
    samples its part through its agent (see the module doc)."""

    def __init__(self, tb: Spanned, trace: Trace, run_dir: Path, hosts: list[str]) -> None:
        assert tb.plan is not None
        self.tb = tb
        self.trace = trace
        self.run_dir = run_dir
        self.machines = sorted(tb.agents)
        self.hosts = {m: sorted({h for h in hosts if tb.machine_of(h) == m}) for m in tb.agents}
        self.pcap_stats: list[dict] = []
        self.pcaps: list[tuple[Path, str, str]] = []  # the copies here: label, machine
        self._in_effect: dict[str, Any] = {}
        self._problems: list[str] = []

    def __enter__(self) -> SpannedTraces:
        ray, agents = self.tb.ray, self.tb.agents
        try:
            ray.get([agents[m].trace_start.remote(self.trace, self.hosts[m]) for m in agents])
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop()

    def _stop(self) -> None:
        ray, agents = self.tb.ray, self.tb.agents
        got = ray.get([agents[m].trace_stop.remote() for m in agents])
        for machine, (files, stats, in_effect, problems) in zip(agents, got, strict=True):
            for name, data in files.items():
                (self.run_dir / name).write_bytes(data)
            for s in stats:
                path = self.run_dir / s["path"]
                self.pcaps.append((path, s.get("label", path.stem), machine))
                self.pcap_stats.append({**s, "path": str(path), "machine": machine})
            self._in_effect |= in_effect
            self._problems += [f"{machine}: {p}" for p in problems]

    def in_effect(self) -> dict[str, Any]:
        return dict(sorted(self._in_effect.items()))

    def problems(self) -> list[str]:
        return list(self._problems)

    def tables(self) -> dict[str, list[dict]]:
        """Every machine's rows in one machine's tables (after the testbed is down)."""
        out: dict[str, list[dict]] = {}
        for machine, part in self.tb.traced.items():
            to_driver = driver_time(self.tb, machine)
            for name, rows in part.items():
                keys = TIME_COLUMNS.get(name, ())
                out.setdefault(name, []).extend(_shifted(rows, keys, to_driver))
        if "queues" in out:
            out["queues"].sort(key=lambda r: (r["direction"], r["time"]))
        if self.trace.pcap:
            from analysis.flows import flows_from_pcap

            flows: list[dict] = []
            for path, label, machine in self.pcaps:
                if path.exists():
                    rows = flows_from_pcap(path, label=label).to_dict("records")
                    flows += _shifted(rows, ("time",), driver_time(self.tb, machine))
            out["flows"] = flows
        return out
