"""One topology over several machines (``placement:``): an agent per machine, a driver.

The driver (:class:`SpannedTestbed`, on any machine of the Ray cluster) reserves one machine per
placed machine name with a Ray placement group, ``STRICT_SPREAD`` (a gang of distinct
machines, each bundle ``{"testbed": 1}``: a machine that measures does nothing else), and
starts a :class:`MachineAgent` actor in each. A machine name is a node's ``testbed-machine``
label (``testbed ray-node --machine NAME``) or its address. The first agent claims a prefix and
an address slot, the others reserve the same (testbed.net.registry), and each builds its part
of the plan (``NetworkPlan.part``): its clusters, the wires of the links whose first cluster it
holds, its ends of the VXLAN cables (testbed.net.cables) over the underlay address of each
machine (the node's ``testbed-underlay`` label, else its Ray address).

The driver then measures each machine pair's underlay RTT (ICMP, recorded) and compensates the
emulated delays for the path floor, cables included, from round trips only: a one-way delay
across machines needs synchronised clocks, so each direction of a link gets half its link's
measured excess over the configured round trip.

Commands in hosts go to the agent of the host's machine (``run``, ``serving``): the link
self-check runs unchanged across machines. Teardown is per machine (each agent's ``down``); an
agent dies with its driver (Ray ends an owner's actors), and ``testbed clean`` on each machine
then removes its part like any testbed whose owner is gone.

A node's ``testbed-netns`` label makes a network namespace stand for that machine (its cables
are made there): how the tests run two "machines" on one kernel.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from testbed.config.scenario import Scenario
from testbed.core.errors import NetError, ScenarioError, TestbedError
from testbed.net import procs
from testbed.net.cables import Underlay
from testbed.net.registry import Record
from testbed.plan.compensation import Compensation, compensate, configured_one_way
from testbed.plan.topology import Impairment, NetworkPlan, build_plan
from testbed.run.ranks import RANK_ENV
from testbed.run.ray_common import NODE_DIR, RESOURCE, node_identity, require_ray
from testbed.run.testbed import Testbed

MACHINE_LABEL = "testbed-machine"
UNDERLAY_LABEL = "testbed-underlay"
NETNS_LABEL = "testbed-netns"
PLACE_TIMEOUT = 60.0  # s for Ray to reserve the machines
UNDERLAY_PINGS = 10
SHIP_MAX = 1 << 20  # bytes: a directory's larger files are not inputs of its processes
CALIBRATION_PROBES = 8  # round trips per link (the first dropped, like testbed.run.calibrate)


class MachineAgent:
    """One machine's part of a spanned testbed, as a Ray actor: a :class:`Testbed` of the part
    (its namespaces, cables, link emulation and processes) and the helpers it runs there."""

    def __init__(self, machine: str, netns: str | None = None) -> None:
        self.machine = machine
        self.netns = netns
        self.tb: Testbed | None = None
        self.servers: dict[int, subprocess.Popen] = {}
        self.procs: dict[int, tuple[subprocess.Popen, str]] = {}  # pid -> (it, driver's dir)
        self.dirs: dict[str, Path] = {}  # the driver's directory -> this machine's copy
        self.synced: dict[str, dict[str, int]] = {}  # ... -> file -> bytes sent (-1: not sent)

    def identity(self) -> dict[str, Any]:
        return {**node_identity(), "machine": self.machine}

    def up(
        self,
        scenario: Scenario,
        name: str,
        source: str,
        addresses: dict[str, str],
        reserve: tuple[str, int] | None,
        calibrating: bool,
    ) -> tuple[Record, str, str]:
        """Build this machine's part; its registry record and link backend (name, why)."""
        underlay = Underlay(self.machine, dict(addresses), self.netns)
        self.tb = Testbed(
            scenario, name=name, source=source, underlay=underlay, reserve=reserve,
            compensate_rtt=calibrating,
        )  # fmt: skip
        self.tb.up()
        assert self.tb.record is not None and self.tb.backend is not None
        return self.tb.record, self.tb.backend.name, self.tb.backend.reason

    def underlay_rtt(self, peer: str) -> list[float]:
        from testbed.net.cables import rtt

        assert self.tb is not None and self.tb.underlay is not None
        return rtt(self.tb.underlay, peer, UNDERLAY_PINGS)

    def set_impairments(self, changes: dict[str, Impairment]) -> None:
        assert self.tb is not None and self.tb.backend is not None
        self.tb.backend.set_impairments(changes)

    def run(self, host: str, argv: list[str], timeout: float | None) -> tuple[int, str, str]:
        assert self.tb is not None
        r = self.tb.run(host, argv, timeout=timeout)
        return r.returncode, r.stdout, r.stderr

    def serve(self, host: str, module: str, args: list[str]) -> int:
        """Start ``python -m module args`` in ``host`` and wait for its READY; a handle."""
        assert self.tb is not None
        proc = self.tb.python(
            host, module, *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        got = procs.wait_ready(proc)
        if not got:
            procs.stop(proc)
            raise NetError(f"{module} server on {host} did not start ({got.reason}): {got.output}")
        self.servers[proc.pid] = proc
        return proc.pid

    def communicate(self, handle: int, timeout: float) -> tuple[str, str]:
        return self.servers[handle].communicate(timeout=timeout)

    def stop(self, handle: int) -> None:
        proc = self.servers.pop(handle, None)
        if proc is not None:
            procs.stop(proc)

    # -- processes whose files live in a directory of the driver (ranks) ----------------------
    def start(
        self,
        host: str,
        argv: list[str],
        what: str,
        env: dict[str, str],
        dropped: list[str],
        remote_dir: str,
        files: dict[str, bytes],
        log: str,
    ) -> int:
        """Start ``argv`` in ``host`` with its output to ``log`` in this machine's copy of the
        driver's directory ``remote_dir`` (whose path in ``argv`` and in ``files``, written
        there first, is replaced by the copy's); ``env`` over this agent's environment, less
        ``dropped``. A handle (the pid)."""
        assert self.tb is not None and self.tb.record is not None
        local = self.workdir(remote_dir)
        for name, data in files.items():
            (local / name).write_bytes(data.replace(remote_dir.encode(), str(local).encode()))
            self.synced[remote_dir][name] = -1  # the driver's own: never sent back
        full = {k: v for k, v in os.environ.items() if k not in dropped} | env
        argv = [a.replace(remote_dir, str(local)) for a in argv]
        with open(local / log, "w") as out:
            proc = self.tb.popen(
                host, argv, what=what, env=full, stdout=out, stderr=subprocess.STDOUT
            )
        self.procs[proc.pid] = (proc, remote_dir)
        return proc.pid

    def workdir(self, remote_dir: str) -> Path:
        assert self.tb is not None and self.tb.record is not None
        if remote_dir not in self.dirs:
            NODE_DIR.mkdir(parents=True, exist_ok=True)
            self.dirs[remote_dir] = Path(
                tempfile.mkdtemp(prefix=f"{self.tb.record.prefix}-", dir=NODE_DIR)
            )
            self.synced[remote_dir] = {}
        return self.dirs[remote_dir]

    def poll(self, handle: int) -> tuple[int | None, dict[str, tuple[int, bytes]]]:
        """The process's exit code (None: running) and what its directory's files gained
        since the last call: name -> (offset, bytes), for the driver's copy."""
        proc, remote_dir = self.procs[handle]
        code = proc.poll()  # first: what a process wrote before it exited is then complete
        return code, self._gained(remote_dir)

    def _gained(self, remote_dir: str) -> dict[str, tuple[int, bytes]]:
        out = {}
        sent = self.synced[remote_dir]
        for path in sorted(self.dirs[remote_dir].iterdir()):
            done = sent.get(path.name, 0)
            if done < 0 or not path.is_file():
                continue
            with open(path, "rb") as f:
                f.seek(done)
                data = f.read()
            if data:
                out[path.name] = (done, data)
                sent[path.name] = done + len(data)
        return out

    def signal(self, handle: int, signum: int) -> None:
        proc, _ = self.procs[handle]
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signum)

    def wait(self, handle: int, timeout: float | None) -> int | None:
        proc, _ = self.procs[handle]
        with contextlib.suppress(subprocess.TimeoutExpired):
            return proc.wait(timeout)
        return None

    def free_port(self, host: str) -> int:
        assert self.tb is not None
        return self.tb.free_port(host)

    def sysctls(self, host: str, keys: list[str]) -> dict[str, str]:
        assert self.tb is not None
        return self.tb.sysctls(host, keys)

    def link_stats(self) -> list[dict]:
        """The link backend's counters (also after ``down``: what it counted)."""
        return self.tb.link_stats() if self.tb is not None else []

    def problems(self) -> list[str]:
        return self.tb.problems() if self.tb is not None else []

    def down(self) -> None:
        for handle in list(self.servers):
            self.stop(handle)
        for proc, _ in self.procs.values():
            procs.stop(proc)
        for d in self.dirs.values():
            shutil.rmtree(d, ignore_errors=True)
        if self.tb is not None:
            self.tb.down()


class _RemoteServer:
    """A server an agent runs: what ``serving`` yields (``communicate`` like a Popen's)."""

    def __init__(self, ray: Any, agent: Any, handle: int) -> None:
        self.ray, self.agent, self.handle = ray, agent, handle

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        return self.ray.get(self.agent.communicate.remote(self.handle, timeout or 60.0))


class _RemoteProcess:
    """A process an agent runs, as :class:`subprocess.Popen` looks to the rank launcher
    (``poll``, ``wait``, ``send_signal``, ``kill``, ``terminate``, ``returncode``, ``pid``). Each
    ``poll`` also brings the driver's copy of its directory up to date."""

    def __init__(self, ray: Any, agent: Any, handle: int, local_dir: Path) -> None:
        self.ray, self.agent, self.pid, self.dir = ray, agent, handle, local_dir
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            code, gained = self.ray.get(self.agent.poll.remote(self.pid))
            for name, (offset, data) in gained.items():
                with open(self.dir / name, "r+b" if offset else "wb") as f:
                    f.seek(offset)
                    f.write(data)
            self.returncode = code
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.ray.get(self.agent.wait.remote(self.pid, timeout))
            if self.poll() is None:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            self.ray.get(self.agent.signal.remote(self.pid, signum))

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


@dataclasses.dataclass(frozen=True)
class BackendInfo:
    """Which link backend (or engine) the machines' parts run, and why."""

    name: str
    reason: str = ""


@dataclasses.dataclass
class MachineNode:
    """A Ray node that takes a placed machine's part."""

    machine: str
    node_id: str
    address: str  # underlay
    netns: str | None


def machine_nodes(ray_nodes: list[dict[str, Any]], machines: Sequence[str]) -> list[MachineNode]:
    """The node of each machine name (its ``testbed-machine`` label, else its address), among
    the live nodes that offer the ``testbed`` resource. PURE: Ray's node list in."""
    nodes = [n for n in ray_nodes if n.get("Alive") and n.get("Resources", {}).get(RESOURCE)]
    out = []
    for m in machines:
        found = [n for n in nodes if (n.get("Labels") or {}).get(MACHINE_LABEL) == m] or [
            n for n in nodes if n.get("NodeManagerAddress") == m
        ]
        if len(found) != 1:
            known = ", ".join(
                f"{(n.get('Labels') or {}).get(MACHINE_LABEL, '-')} ({n.get('NodeManagerAddress')})"
                for n in nodes
            )
            what = "no" if not found else f"{len(found)}"
            raise ScenarioError(
                f"placement.machines: {what} Ray node with label {MACHINE_LABEL}={m} or address "
                f"{m} offers the `{RESOURCE}` resource; testbed nodes: {known or 'none'} "
                "(join one with `testbed ray-node --machine NAME`)"
            )
        labels = found[0].get("Labels") or {}
        out.append(
            MachineNode(
                m,
                found[0]["NodeID"],
                labels.get(UNDERLAY_LABEL) or found[0]["NodeManagerAddress"],
                labels.get(NETNS_LABEL),
            )
        )
    return out


def split_round_trips(plan: NetworkPlan, rtts: dict[str, list[float]]) -> dict[str, list[float]]:
    """One-way samples for ``compensate`` from round trips (link name -> RTTs, s): each
    direction gets its configured one-way delay plus half the round trip's excess over the
    configured one (the floor split evenly: clocks of two machines are not compared). PURE."""
    out: dict[str, list[float]] = {}
    for d in plan.wan:
        if d.multipath:
            continue
        back = next(r for r in plan.wan if r.src == d.dst and r.dst == d.src and not r.multipath)
        samples = rtts.get(link_of(d.name), [])
        fwd, rev = configured_one_way(plan, d), configured_one_way(plan, back)
        out[d.name] = [fwd + (r - fwd - rev) / 2 for r in samples]
    return out


def link_of(direction: str) -> str:
    """``east->west`` and ``west->east`` -> ``east-west``/``west-east`` sorted: one per link."""
    a, _, b = direction.partition("->")
    return "-".join(sorted((a, b)))


class SpannedTestbed:
    """A testbed whose clusters are placed on several machines of a Ray cluster (see the
    module's docstring). The API of :class:`Testbed` for what crosses machines: ``up``,
    ``down``, ``run``, ``serving``, ``hosts``, ``plan``, ``compensation_of``, ``problems``."""

    __test__ = False

    def __init__(
        self,
        scenario: Scenario,
        name: str | None = None,
        address: str = "auto",
        source: str = "",
        compensate_rtt: bool = True,
    ) -> None:
        if scenario.placement is None:
            raise ScenarioError("a spanned testbed needs `placement:` in its scenario")
        self.scenario = scenario
        self.name = name or f"{scenario.name}-{secrets.token_hex(2)}"
        self.address = address
        self.source = source
        self.compensate_rtt = compensate_rtt
        self.plan: NetworkPlan | None = None
        self.agents: dict[str, Any] = {}
        self.nodes: list[MachineNode] = []
        self.group: Any = None
        self.underlay_rtt: dict[tuple[str, str], float] = {}  # (from, to) -> median s
        self.identities: dict[str, dict[str, Any]] = {}  # machine -> host, kernel, CPU
        self.compensation: list[Compensation] = []
        self.ray: Any = None
        self.record: Record | None = None  # the first machine's part (prefix, slot)
        self.backend: BackendInfo | None = None
        self.engine = BackendInfo("native")
        self._link_stats: list[dict] = []
        self._calibrating = False  # whether the plan's delays are compensated after build
        # the directories of processes started through agents: which machines have their
        # inputs, which of their files are the processes' output
        self.shipped: set[tuple[str, Path]] = set()
        self.logs: dict[Path, set[str]] = {}

    # -- lifecycle ---------------------------------------------------------------------------
    def up(self) -> SpannedTestbed:
        ray = self.ray = require_ray()
        if not ray.is_initialized():
            ray.init(address=self.address, log_to_driver=False, configure_logging=False)
        placement = self.scenario.placement
        assert placement is not None
        machines = sorted(set(placement.machines.values()))
        self.nodes = machine_nodes(ray.nodes(), machines)
        try:
            self._place(ray)
            self._build(ray)
            self._measure(ray)
        except BaseException:
            self.down()
            raise
        return self

    def _place(self, ray: Any) -> None:
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.group = placement_group(
            [{RESOURCE: 1} for _ in self.nodes],
            strategy="STRICT_SPREAD",
            bundle_label_selector=[{"ray.io/node-id": n.node_id} for n in self.nodes],
        )
        ready, _ = ray.wait([self.group.ready()], timeout=PLACE_TIMEOUT)
        if not ready:
            raise TestbedError(
                f"Ray could not reserve {', '.join(n.machine for n in self.nodes)} within "
                f"{PLACE_TIMEOUT:.0f} s (each runs one testbed part or sweep point at a time)"
            )
        actor = ray.remote(num_cpus=0, max_restarts=0)(MachineAgent)
        for i, n in enumerate(self.nodes):
            strategy = PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=i)
            self.agents[n.machine] = actor.options(
                resources={RESOURCE: 1}, scheduling_strategy=strategy
            ).remote(n.machine, n.netns)

    def _build(self, ray: Any) -> None:
        addresses = {n.machine: n.address for n in self.nodes}
        # the plan's delays do not depend on its prefix and slot: any will do to look
        draft = build_plan(self.scenario, "mctb0000", 64)
        calibrating = self.compensate_rtt and any(d.delay for d in draft.wan)
        first, *rest = self.nodes
        args = (self.scenario, self.name, self.source, addresses)
        self.record, *backend = ray.get(
            self.agents[first.machine].up.remote(*args, None, calibrating)
        )
        reserve = (self.record.prefix, self.record.slot)
        ray.get([self.agents[n.machine].up.remote(*args, reserve, calibrating) for n in rest])
        self.backend = BackendInfo(*backend)
        who = ray.get([a.identity.remote() for a in self.agents.values()])
        self.identities = dict(zip(self.agents, who, strict=True))
        self.plan = build_plan(self.scenario, *reserve)
        self._calibrating = calibrating

    def _measure(self, ray: Any) -> None:
        """The underlay's RTT between every pair of machines, then the compensation."""
        from testbed.run.selfcheck import probe_rtt

        pairs = [(a.machine, b.machine) for a in self.nodes for b in self.nodes if a != b]
        got = ray.get([self.agents[a].underlay_rtt.remote(b) for a, b in pairs])
        self.underlay_rtt = {p: statistics.median(r) for p, r in zip(pairs, got, strict=True)}
        if not self._calibrating:
            return
        plan = self.plan
        assert plan is not None
        rtts: dict[str, list[float]] = {}
        for d in plan.wan:
            link = link_of(d.name)
            if d.multipath or link in rtts or not d.delay:
                continue
            r = probe_rtt(self, f"{d.src}-h0", f"{d.dst}-h0", CALIBRATION_PROBES, 0.01)
            rtts[link] = r["rtts"][1:]
        self.compensation = [
            dataclasses.replace(c, basis="round-trip")
            for c in compensate(plan, split_round_trips(plan, rtts))
        ]
        by_wire: dict[str, dict[str, Impairment]] = {}
        for d, c in zip(plan.wan, self.compensation, strict=True):
            if d.delay:
                machine = plan.machine_of(d.impairment.ns)
                imp = dataclasses.replace(d.impairment, delay=c.emulated_s)
                by_wire.setdefault(machine, {})[d.name] = imp
        ray.get([self.agents[m].set_impairments.remote(ch) for m, ch in by_wire.items()])

    def down(self) -> None:
        ray = self.ray
        if ray is None:
            return
        errors = []
        stats: list[dict] = []
        for machine, agent in self.agents.items():
            try:
                ray.get(agent.down.remote())
                stats += ray.get(agent.link_stats.remote())
            except Exception as exc:  # one machine's failure must not leave the others up
                errors.append(f"{machine}: {exc}")
            with contextlib.suppress(Exception):
                ray.kill(agent)
        self._link_stats = stats
        self.agents = {}
        if self.group is not None:
            from ray.util.placement_group import remove_placement_group

            with contextlib.suppress(Exception):
                remove_placement_group(self.group)
            self.group = None
        if errors:
            raise NetError("teardown failed on " + "; ".join(errors))

    def __enter__(self) -> SpannedTestbed:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    # -- using it ----------------------------------------------------------------------------
    def _agent(self, host: str) -> Any:
        assert self.plan is not None, "testbed is not up"
        ns = f"{self.plan.prefix}-{host}"
        if not any(n.name == ns for n in self.plan.namespaces):
            raise TestbedError(f"no host {host!r}; hosts: {', '.join(self.hosts)}")
        return self.agents[self.plan.machine_of(ns)]

    @property
    def hosts(self) -> dict[str, str]:
        assert self.plan is not None, "testbed is not up"
        return self.plan.names()

    def machine_of(self, host: str) -> str:
        assert self.plan is not None, "testbed is not up"
        return self.plan.machine_of(f"{self.plan.prefix}-{host}")

    def run(
        self, host: str, argv: Sequence[str], timeout: float | None = None, **_: Any
    ) -> subprocess.CompletedProcess:
        """Run ``argv`` in ``host`` on its machine and wait (text output, captured)."""
        code, out, err = self.ray.get(self._agent(host).run.remote(host, list(argv), timeout))
        return subprocess.CompletedProcess(list(argv), code, out, err)

    @contextlib.contextmanager
    def serving(self, host: str, module: str, *args: str) -> Iterator[_RemoteServer]:
        """``python -m module args`` in ``host`` on its machine, once READY; stopped after."""
        agent = self._agent(host)
        handle = self.ray.get(agent.serve.remote(host, module, list(args)))
        try:
            yield _RemoteServer(self.ray, agent, handle)
        finally:
            self.ray.get(agent.stop.remote(handle))

    def popen(
        self,
        host: str,
        argv: list[str],
        what: str = "",
        env: dict[str, str] | None = None,
        stdout: Any = None,
        stderr: Any = None,
    ) -> _RemoteProcess:
        """Start ``argv`` in ``host`` on its machine, as the rank launcher does: ``stdout`` an
        open file of a directory the agent copies (its small files go there first; the paths
        in the command line and in them are the copy's), which each ``poll`` brings back."""
        if stdout is None or not hasattr(stdout, "name") or stderr != subprocess.STDOUT:
            raise TestbedError("a spanned testbed starts processes with their output to a file")
        log = Path(stdout.name)
        run_dir = log.parent
        env = env if env is not None else dict(os.environ)
        agent = self._agent(host)
        logs = self.logs.setdefault(run_dir, set())
        logs.add(log.name)
        files = {}
        if (self.machine_of(host), run_dir) not in self.shipped:  # its inputs, once a machine
            self.shipped.add((self.machine_of(host), run_dir))
            files = {
                p.name: p.read_bytes()
                for p in run_dir.iterdir()
                if p.is_file() and p.name not in logs and p.stat().st_size < SHIP_MAX
            }
        delta = {k: v for k, v in env.items() if os.environ.get(k) != v or k in RANK_ENV}
        dropped = [k for k in os.environ if k not in env]
        handle = self.ray.get(
            agent.start.remote(host, argv, what, delta, dropped, str(run_dir), files, log.name)
        )
        return _RemoteProcess(self.ray, agent, handle, run_dir)

    def free_port(self, host: str) -> int:
        return self.ray.get(self._agent(host).free_port.remote(host))

    def sysctls(self, host: str, keys: list[str]) -> dict[str, str]:
        return self.ray.get(self._agent(host).sysctls.remote(host, keys))

    def link_stats(self) -> list[dict]:
        """Every machine's link backend counters (complete once the testbed is down)."""
        if self.agents:
            return [r for a in self.agents.values() for r in self.ray.get(a.link_stats.remote())]
        return list(self._link_stats)

    def compensation_of(self, direction: str) -> Compensation | None:
        return next((c for c in self.compensation if c.direction == direction), None)

    def problems(self) -> list[str]:
        got = self.ray.get([a.problems.remote() for a in self.agents.values()])
        return [p for part in got for p in part]
