"""The ``command`` workload kind: a user's own program, unchanged, on every rank or host
(docs/command.md).

Each process (one per rank, or one per host: torchrun's agent) gets its argv with the
placeholders filled, torchrun's environment (:func:`command_slots`, pure), the hosts' socket
interface for gloo, NCCL and TensorPipe, and the scenario's ``env``; it runs through
``traffic.host_exec`` with its host's name as its hostname and the testbed's hosts file as
``/etc/hosts``, in a process group of its own (stopping it stops what it started). Its stdout
and stderr go to ``rank-R.log`` or ``host-H.log``; with ``metrics: json-lines``, stdout lines
that are JSON objects with a ``metric`` key also become rows of metrics.parquet. ``timeout`` is
the whole workload's deadline; ``on_failure: stop-all`` stops the rest at the first non-zero
exit (torchrun's rule), ``wait`` lets them finish. Rank 0's (node 0's) metric lines with an
integer ``step`` are the run's clock (``clock: workload``: its announcements, traffic.announce).
The workload's services (:class:`Services`) start first, each ready before the next, and stop
when the workload ends. The summary: a row per process (exit code, duration) and a row per
metric (p50).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.operations import rank_operations
from testbed.config.command import (
    SERVICE_PLACEHOLDERS,
    CommandWorkload,
    Service,
    expand,
    missing_files,
    placeholders_in,
    search_path,
    unknown_service_hosts,
)
from testbed.core.errors import ScenarioError, TestbedError
from testbed.core.nsenter import NETNS_DIR
from testbed.core.stats import quantile
from testbed.core.units import format_size
from testbed.experiment.ranks import Deadlines, LaunchProcess, RankSpec
from testbed.experiment.session import RankSession
from testbed.experiment.workloads.base import RunRows, WorkloadKind
from testbed.live.host_processes import listens, signal_group
from testbed.live.processes import rank_env
from testbed.live.protocol import HostProcess, LiveNetwork
from testbed.plan.model import Host, NetworkPlan
from testbed.plan.ranks import RankSlot
from traffic.announce import SPEC_KEY, Announcer

TRAMPOLINE = "traffic.host_exec"
# what a per-host process must not inherit: torchrun's agent gives each worker its own
PER_RANK_VARIABLES = ("RANK", "LOCAL_RANK", "ROLE_RANK")
IFNAME_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
LOG_TAIL = 5  # lines of a failed process's log in the run's status
SERVICE_POLL = 0.05  # s between two looks at a service that is not ready yet
SERVICE_STOP_GRACE = 2.0  # s a service gets to end on SIGTERM before its group is killed


@dataclass(frozen=True)
class CommandSlot:
    """One process of a command workload: where it runs, its placeholders' values, torchrun's
    variables for it, its log and how problems and metric rows name it."""

    key: int  # its rank (per: rank) or node rank (per: host)
    host: str
    cluster: str
    values: dict[str, Any]
    env: dict[str, str]
    log: str
    what: str  # "rank 3 (east-h1)" | "host east-h1"
    labels: dict[str, Any]  # the columns its metric rows get


def command_slots(
    workload: CommandWorkload,
    hosts: list[Host],
    ranks: list[RankSlot],
    master_addr: str,
    master_port: int,
    run_dir: Path,
) -> list[CommandSlot]:
    """Every process's slot. Nodes are the hosts in the order of their first rank (node 0
    holds rank 0, the master); a rank's local rank is its index among its host's ranks. The
    variables are torch.distributed.run's: RANK, LOCAL_RANK, ROLE_RANK (per: rank only),
    WORLD_SIZE = ROLE_WORLD_SIZE (all ranks), LOCAL_WORLD_SIZE (ranks per host), GROUP_RANK (the
    node rank), GROUP_WORLD_SIZE (nodes), MASTER_ADDR, MASTER_PORT."""
    by_name = {h.name: h for h in hosts}
    nodes = list(dict.fromkeys(r.host for r in ranks))
    nproc = workload.ranks_per_host
    world = len(ranks)
    common = {
        "world_size": world,
        "nnodes": len(nodes),
        "nproc_per_node": nproc,
        "master_addr": master_addr,
        "master_port": master_port,
        "run_dir": str(run_dir),
    }

    def node_env(host: Host, node_rank: int) -> dict[str, str]:
        env = {
            "MASTER_ADDR": master_addr,
            "MASTER_PORT": str(master_port),
            "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(nproc),
            "GROUP_RANK": str(node_rank),
            "GROUP_WORLD_SIZE": str(len(nodes)),
            "ROLE_WORLD_SIZE": str(world),
        }
        return env | dict.fromkeys(IFNAME_VARIABLES, host.ifname)

    def host_values(host: Host, node_rank: int) -> dict[str, Any]:
        return common | {
            "node_rank": node_rank,
            "host": host.name,
            "cluster": host.cluster,
            "host_addr": host.address,
        }

    slots = []
    if workload.per == "host":
        for node_rank, name in enumerate(nodes):
            host = by_name[name]
            slots.append(
                CommandSlot(
                    node_rank,
                    name,
                    host.cluster,
                    host_values(host, node_rank),
                    node_env(host, node_rank),
                    f"host-{name}.log",
                    f"host {name}",
                    {"process": f"host {name}", "node_rank": node_rank, "host": name},
                )
            )
        return slots
    seen: dict[str, int] = {}
    for r in ranks:
        host = by_name[r.host]
        node_rank = nodes.index(r.host)
        local = seen.get(r.host, 0)
        seen[r.host] = local + 1
        env = node_env(host, node_rank) | {
            "RANK": str(r.rank),
            "LOCAL_RANK": str(local),
            "ROLE_RANK": str(r.rank),
        }
        values = host_values(host, node_rank) | {"rank": r.rank, "local_rank": local}
        what = f"rank {r.rank} ({r.host})"
        labels = {"process": f"rank {r.rank}", "rank": r.rank, "host": r.host}
        slots.append(
            CommandSlot(
                r.rank, r.host, host.cluster, values, env, f"rank-{r.rank}.log", what, labels
            )
        )
    return slots


def hosts_file(hosts: list[Host]) -> str:
    """The /etc/hosts the processes see: localhost and every testbed host's name, each also
    under its IPv4-mapped IPv6 address: a dual-stack listener (c10d's TCPStore) sees its peers
    as ``::ffff:a.b.c.d``, and glibc finds a name for that address only on a line of its own
    (else it asks DNS, which no host can reach, and c10d warns that it cannot name the peer)."""
    lines = [
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        "::ffff:127.0.0.1\tlocalhost",
    ]
    lines += [f"{h.address}\t{h.name}" for h in hosts]
    lines += [f"::ffff:{h.address}\t{h.name}" for h in hosts]
    return "\n".join(lines) + "\n"


def metric_row(line: bytes, seen: float, labels: dict[str, Any]) -> dict[str, Any] | None:
    """The metrics.parquet row of one stdout line, or None: a line that is not a JSON object
    with a ``metric`` key is only log. ``value`` is the object's number (None: not a number);
    ``time`` its own number if it has one, else when the line was read; its other keys are kept
    as JSON text in ``fields``."""
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    if not isinstance(doc, dict) or "metric" not in doc:
        return None
    value, when = doc.pop("value", None), doc.pop("time", None)
    number = isinstance(value, int | float) and not isinstance(value, bool)
    timed = isinstance(when, int | float) and not isinstance(when, bool)
    return {
        **labels,
        "time": float(when) if timed else seen,
        "metric": str(doc.pop("metric")),
        "value": float(value) if number else None,
        "fields": json.dumps({**doc, **({} if number else {"value": value})}),
    }


def announced_step(row: dict[str, Any]) -> int | None:
    """The step a metric row announces to the run's clock: its integer ``step`` (None: none)."""
    step = json.loads(row["fields"]).get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def _appender(
    path: Path, labels: dict[str, Any], announcer: Announcer | None = None
) -> Callable[[bytes, float], None]:
    """Each metric line's row appended to ``path``; with ``announcer`` (rank 0's or node 0's
    lines), a row with an integer ``step`` K also announces iteration K to the run's clock."""

    def each(line: bytes, seen: float) -> None:
        row = metric_row(line, seen, labels)
        if row is not None:
            with open(path, "a") as out:
                out.write(json.dumps(row) + "\n")
            step = announced_step(row) if announcer is not None else None
            if announcer is not None and step is not None:
                announcer.start(step)

    return each


def wan_bytes_by_direction(queues: list[dict[str, Any]]) -> dict[str, float]:
    """Bytes through each WAN direction's bottleneck while the workload ran: its byte counter's
    last sample minus its first (queues.parquet's ``bytes``, sampled from the launch to the
    end; cross traffic during it counts too). Directions in the order first seen."""
    seen: dict[str, list[tuple[float, float]]] = {}
    for q in queues:
        when, count = q.get("time"), q.get("bytes")
        if q.get("direction") is not None and when is not None and count is not None:
            seen.setdefault(str(q["direction"]), []).append((float(when), float(count)))
    out = {}
    for direction, samples in seen.items():
        samples.sort()
        out[direction] = max(0.0, samples[-1][1] - samples[0][1])
    return out


def describe_exit(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by signal {signal.Signals(-code).name}"
        return f"was killed by signal {-code}"
    return f"exited with code {code}"


# -- services ----------------------------------------------------------------------------------
def service_launch(
    workload: CommandWorkload,
    service: Service,
    host: Host,
    ranks: list[RankSlot],
    master_addr: str,
    master_port: int,
    run_dir: Path,
) -> tuple[list[str], dict[str, str]]:
    """A service's argv (placeholders filled) and the variables it gets beside the testbed's
    environment: the launch's (MASTER_ADDR, MASTER_PORT, the world sizes), its host's socket
    interface, the workload's ``env`` (but a value that names a rank's or a node's placeholder,
    which a service has not), then its own ``env``. No rank or node variable: it is no rank's."""
    nodes = list(dict.fromkeys(r.host for r in ranks))
    values: dict[str, Any] = {
        "world_size": len(ranks),
        "nnodes": len(nodes),
        "nproc_per_node": workload.ranks_per_host,
        "master_addr": master_addr,
        "master_port": master_port,
        "run_dir": str(run_dir),
        "host": host.name,
        "cluster": host.cluster,
        "host_addr": host.address,
    }
    env = {
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "WORLD_SIZE": str(len(ranks)),
        "LOCAL_WORLD_SIZE": str(workload.ranks_per_host),
        "GROUP_WORLD_SIZE": str(len(nodes)),
        "ROLE_WORLD_SIZE": str(len(ranks)),
    }
    env |= dict.fromkeys(IFNAME_VARIABLES, host.ifname)
    env |= {
        k: expand(v, values)
        for k, v in workload.env.items()
        if set(placeholders_in(v)) <= set(SERVICE_PLACEHOLDERS)
    }
    env |= {k: expand(v, values) for k, v in service.env.items()}
    return [expand(a, values) for a in service.argv], env


def log_tail(path: Path, lines: int = LOG_TAIL) -> str:
    """The last ``lines`` non-empty lines of a log, joined with `` | `` ("" without any)."""
    with contextlib.suppress(OSError):
        kept = [x for x in path.read_text(errors="replace").splitlines() if x.strip()]
        return " | ".join(kept[-lines:])
    return ""


@dataclass
class RunningService:
    """A started service: its process, log, and what happened to it (clock: time.monotonic)."""

    index: int
    service: Service
    proc: HostProcess
    log: Path
    started: float
    ready_s: float | None = None  # start to ready
    exit_code: int | None = None
    stopped: bool = False  # it still ran when the workload ended: the testbed stopped it
    ended: bool = False  # its group was killed and it was reaped

    def what(self) -> str:
        return f"service {self.service.name} ({self.service.host})"


class Services:
    """The workload's services on a network: :meth:`start` starts each in order in its host
    (the ranks' launcher: hostname, hosts file, cwd, a process group of its own, recorded by
    pid) and waits until it is ready; :meth:`stop` ends them (SIGTERM to the group, then
    SIGKILL), the last first. ``launch(service)``: its argv and variables (:func:`service_launch`
    for this run)."""

    def __init__(
        self,
        tb: LiveNetwork,
        plan: NetworkPlan,
        services: list[Service],
        run_dir: Path,
        cwd: Callable[[Service], Path],
        hosts_path: Path,
        launch: Callable[[Service, Host], tuple[list[str], dict[str, str]]],
    ) -> None:
        self.tb, self.plan, self.services = tb, plan, services
        self.run_dir, self.cwd, self.hosts_path, self.launch = run_dir, cwd, hosts_path, launch
        self.running: list[RunningService] = []

    def start(self) -> None:
        """Each service, once the one before is ready. One that exits first or is not ready
        within its timeout stops those started and raises TestbedError naming it, its ready
        condition, its timeout and its log's last lines."""
        by_name = {h.name: h for h in self.plan.hosts}
        try:
            for i, service in enumerate(self.services):
                host = by_name[service.host]
                argv, variables = self.launch(service, host)
                env = rank_env()
                for name in PER_RANK_VARIABLES:
                    env.pop(name, None)
                env["PATH"] = search_path(env.get("PATH"))
                env |= variables
                trampoline = [sys.executable, "-m", TRAMPOLINE, "--hostname", host.name]
                trampoline += ["--hosts", str(self.hosts_path), "--cwd", str(self.cwd(service))]
                log = self.run_dir / service.log
                group: dict[str, Any] = {"start_new_session": True}  # a process group of its own
                with open(log, "wb") as out:
                    proc = self.tb.popen(
                        host.name, [*trampoline, "--", *argv], what=f"service {service.name}",
                        env=env, stdout=out, stderr=subprocess.STDOUT, **group,
                    )  # fmt: skip
                running = RunningService(i, service, proc, log, time.monotonic())
                self.running.append(running)
                self._wait_ready(running, host)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, s: RunningService, host: Host) -> None:
        ready = s.service.ready
        pattern = re.compile(ready.log, re.M) if ready.log is not None else None
        inode = None
        with contextlib.suppress(OSError):
            inode = os.stat(NETNS_DIR / host.ns).st_ino
        condition = f"ready: {ready.describe()}"
        while True:
            if pattern is not None:
                with contextlib.suppress(OSError):
                    if pattern.search(s.log.read_text(errors="replace")):
                        break
            elif ready.port is not None and listens(s.proc, ready.port, inode):
                break
            code = s.proc.poll()
            if code is not None:
                s.exit_code = code
                tail = log_tail(s.log)
                raise TestbedError(
                    f"{s.what()} {describe_exit(code)} before it was ready ({condition})"
                    + (f": {tail}" if tail else "")
                )
            waited = time.monotonic() - s.started
            if waited >= s.service.timeout:
                tail = log_tail(s.log)
                raise TestbedError(
                    f"{s.what()} was not ready within {s.service.timeout:g}s "
                    f"(workload.services[{s.index}].timeout; {condition}): "
                    + (tail or "its log is empty")
                )
            time.sleep(min(SERVICE_POLL, s.service.timeout - waited))
        s.ready_s = time.monotonic() - s.started

    def stop(self) -> None:
        """Every service still running: SIGTERM to its process group, SIGKILL to the group
        after SERVICE_STOP_GRACE; the last started first. Idempotent."""
        for s in reversed(self.running):
            if s.ended:
                continue
            s.ended = True
            if s.proc.poll() is None:
                s.stopped = True
                signal_group(s.proc, signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    s.proc.wait(SERVICE_STOP_GRACE)
            signal_group(s.proc, signal.SIGKILL)  # what it started, whether it ended or not
            s.exit_code = s.proc.wait()

    def problems(self) -> list[str]:
        """A line for each service that ended by itself, with a failure, while the workload
        ran (after :meth:`stop`)."""
        return [
            f"{s.what()} {describe_exit(s.exit_code)} while the workload ran"
            + (f": {tail}" if (tail := log_tail(s.log)) else "")
            for s in self.running
            if not s.stopped and s.exit_code not in (None, 0)
        ]

    def rows(self) -> list[dict[str, Any]]:
        """A row per started service for the run's info."""
        return [
            {
                "service": s.service.name,
                "host": s.service.host,
                "ready_s": s.ready_s,
                "exit_code": s.exit_code,
                "stopped": s.stopped,
                "log": s.service.log,
                "start": time.time() - (time.monotonic() - s.started),  # Unix s
            }
            for s in self.running
        ]


class Command(WorkloadKind):
    name = "command"
    schema = CommandWorkload
    rank_module = TRAMPOLINE  # not run as a rank module: processes() gives each its argv
    rows_table = "metrics"
    wan_counters = True  # what a user's program sent across the WAN (queues.parquet's bytes)

    def __init__(self) -> None:
        # a launch's services, by its run directory: started when its processes are described,
        # stopped by problems(), reported by run_info()
        self._services: dict[Path, Services] = {}

    def spec_keys(self, workload: Any) -> dict[str, Any]:
        return {"command": list(workload.argv), "per": workload.per}

    def check(self, scenario: Any, base: Path, source: str) -> None:
        problems = missing_files(scenario.workload, base)
        changes = (
            scenario.faults
            or scenario.traffic
            or any(link.schedule or link.trace for link in scenario.wan_paths)
        )
        if changes and scenario.clock == "workload" and scenario.workload.metrics_format == "none":
            problems.append(
                ("clock", "'workload' starts the WAN changes and traffic at rank 0's first "
                 "metric line with a step, and metrics: none reads no line; write clock: wall "
                 "or metrics: json-lines")
            )  # fmt: skip
        hosts = [f"{c}-h{i}" for c, cl in scenario.clusters.items() for i in range(cl.hosts)]
        problems += unknown_service_hosts(scenario.workload, hosts)
        if problems:
            lines = [f"{source}: {field}: {message}" for field, message in problems]
            raise ScenarioError("\n".join(lines))

    def processes(
        self,
        workload: Any,
        plan: NetworkPlan,
        ranks: list[RankSlot],
        run_dir: Path,
        source: Path | None,
    ) -> Callable[[RankSpec, LiveNetwork], list[LaunchProcess]]:
        base = source.parent if source is not None else Path.cwd()
        cwd = (base / workload.cwd).resolve()

        def service_cwd(service: Service) -> Path:
            return (base / service.cwd).resolve() if service.cwd is not None else cwd

        def described(spec: RankSpec, tb: LiveNetwork) -> list[LaunchProcess]:
            run = run_dir.resolve()
            hosts = run / "hosts"
            hosts.write_text(hosts_file(list(plan.hosts)))
            if workload.services:
                # started (and ready) before the processes are described, hence launched;
                # stopped by problems(), which every user of a session calls after its run
                def launch(service: Service, host: Host) -> tuple[list[str], dict[str, str]]:
                    return service_launch(
                        workload, service, host, ranks, spec.master_addr, spec.master_port, run
                    )

                services = Services(tb, plan, workload.services, run, service_cwd, hosts, launch)
                self._services[run] = services
                # a caller that never reaches problems() (Ctrl-C in `testbed launch`, whose
                # testbed stays up) must not leave them running: stopped at exit then
                atexit.register(services.stop)
                services.start()
            slots = command_slots(
                workload, list(plan.hosts), ranks, spec.master_addr, spec.master_port, run
            )
            out = []
            for slot in slots:
                env = rank_env()
                if workload.per == "host":
                    for name in PER_RANK_VARIABLES:
                        env.pop(name, None)
                env["PATH"] = search_path(env.get("PATH"))
                env |= slot.env
                env |= {k: expand(v, slot.values) for k, v in workload.env.items()}
                argv = [expand(a, slot.values) for a in workload.argv]
                trampoline = [sys.executable, "-m", TRAMPOLINE, "--hostname", slot.host]
                trampoline += ["--hosts", str(hosts), "--cwd", str(cwd), "--"]
                rows = run / f"{Path(slot.log).stem}.jsonl"
                rows.unlink(missing_ok=True)
                # rank 0's (node 0's) steps are the run's clock (clock: workload)
                announcer = Announcer(spec.workload.get(SPEC_KEY)) if slot.key == 0 else None
                each = (
                    _appender(rows, {**slot.labels, "cluster": slot.cluster}, announcer)
                    if workload.metrics_format == "json-lines"
                    else None
                )
                out.append(
                    LaunchProcess(
                        slot.key, slot.host, trampoline + argv, env, slot.log, slot.what,
                        stdout_line=each, group=True, stop_signal=signal.SIGTERM,
                    )
                )  # fmt: skip
            return out

        return described

    def deadlines(self, workload: Any) -> Deadlines:
        grace = 0.0 if workload.on_failure == "stop-all" else math.inf
        return Deadlines(workload.timeout, failure_grace=grace)

    def problems(self, session: RankSession, workload: Any) -> list[str]:
        launch = session.launch
        failed: list[tuple[float, str, str]] = []  # when, which, the line
        late, stopped = [], []
        for p in launch.processes or ():
            why = launch.stopped.get(p.key)
            code = launch.codes.get(p.key)
            seen = launch.times.get(p.key)
            if why is None and code not in (None, 0):
                assert code is not None
                at = seen.failed if seen is not None and seen.failed is not None else math.inf
                text = f"{p.what} {describe_exit(code)}"
                failed.append((at, p.what, text + self._tail(session, p)))
            elif why == "timeout":
                text = f"{p.what} did not finish within {workload.timeout:g}s (workload.timeout)"
                late.append(text + self._tail(session, p))
            elif why == "stopped":
                stopped.append(p.what)
        failed.sort(key=lambda item: item[0])
        after = f" after {failed[0][1]} failed" if failed else ""
        lines = [text for _, _, text in failed] + late
        if stopped:  # one line: a rank's line would get its (empty) log tail from the runner
            lines.append(f"stopped{after} (on_failure: stop-all): {', '.join(stopped)}")
        services = self._services_of(session)
        if services is not None:  # the workload has ended: its services go too
            services.stop()
            lines += services.problems()
        return lines

    def _services_of(self, session: RankSession, forget: bool = False) -> Services | None:
        run_dir = getattr(session, "run_dir", None)
        if run_dir is None:
            return None
        run = Path(run_dir).resolve()
        return self._services.pop(run, None) if forget else self._services.get(run)

    def _tail(self, session: RankSession, p: LaunchProcess) -> str:
        """A per-host process's log tail (a rank's is added by the runner, as for any rank)."""
        if p.what.startswith("rank "):
            return ""
        lines = [x for x in session.log(p.key).splitlines() if x.strip()]
        return f": {' | '.join(lines[-LOG_TAIL:])}" if lines else ""

    def run_info(self, session: RankSession) -> dict[str, Any]:
        launch = session.launch
        rows = []
        for p in launch.processes or ():
            seen, begun = launch.times.get(p.key), launch.begun.get(p.key)
            exited = seen.exited if seen is not None else None
            rows.append(
                {
                    "process": p.what.split(" (")[0],
                    "host": p.host,
                    "exit_code": launch.codes.get(p.key),
                    "duration": exited - begun
                    if exited is not None and begun is not None
                    else None,
                    "stopped": launch.stopped.get(p.key),
                    "log": p.log,
                    # Unix s, for the report's timeline: its begun (monotonic) on the wall clock
                    "start": launch.clock.wall() - (launch.clock.now() - begun)
                    if begun is not None
                    else None,
                }
            )
        services = self._services_of(session, forget=True)
        if services is None:
            return {"processes": rows}
        services.stop()  # stopped already by problems(), unless a caller skipped it
        atexit.unregister(services.stop)
        return {"processes": rows, "services": services.rows()}

    def summarize(self, run: RunRows) -> list[dict]:
        out = [
            {**run.params, **{k: v for k, v in p.items() if k != "log"}}
            for p in run.info.get("processes", [])
        ]
        values: dict[str, list[float]] = {}
        for row in run.rows:
            value = row.get("value")
            if "metric" in row and isinstance(value, int | float) and math.isfinite(value):
                values.setdefault(str(row["metric"]), []).append(float(value))
        for name, got in values.items():
            out.append(
                {**run.params, "metric_name": name, "p50": quantile(got, 0.5), "samples": len(got)}
            )
        per_direction = wan_bytes_by_direction(run.traces.get("queues", []))
        for direction, sent in per_direction.items():
            out.append({**run.params, "wan_direction": direction, "wan_bytes": sent})
        if per_direction:
            total = sum(per_direction.values())
            out.append({**run.params, "wan_direction": "all", "wan_bytes": total})
        return out

    def operations(self, rows: pd.DataFrame) -> pd.DataFrame:
        return rank_operations(pd.DataFrame())  # none the fault analysis could time

    def table(self, summaries: list[dict], params: list[str]) -> tuple[str, pd.DataFrame]:
        shown = []
        for s in summaries:
            if s.get("kind") != "command":
                continue
            point = {p: s.get(p) for p in params}
            if "process" in s:
                code, took = s.get("exit_code"), s.get("duration")
                status = "ok" if code == 0 else (s.get("stopped") or f"exit {code}")
                shown.append(
                    {**point, "process / metric": s["process"], "status": status,
                     "value": f"{took:.2f} s" if took is not None else "-"}
                )  # fmt: skip
            elif "metric_name" in s:
                lines = f"{s['samples']} lines"
                shown.append(
                    {**point, "process / metric": s["metric_name"], "status": lines,
                     "value": f"p50 {s['p50']:.6g}"}
                )  # fmt: skip
            elif "wan_direction" in s:
                shown.append(
                    {**point, "process / metric": f"WAN {s['wan_direction']}", "status": "bytes",
                     "value": format_size(s["wan_bytes"])}
                )  # fmt: skip
        title = "command (per process: status and duration; per metric: p50; WAN bytes)"
        return title, pd.DataFrame(shown)


KIND = Command()
