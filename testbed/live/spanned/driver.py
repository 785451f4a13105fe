"""The driver of a spanned testbed (:class:`SpannedNetwork`, on any machine of the Ray cluster).

It reserves one machine per placed machine name with a Ray placement group, ``STRICT_SPREAD`` (a
gang of distinct machines, each bundle ``{"testbed": 1}``: a machine that measures does nothing
else), and starts an agent in each. The first agent claims a prefix and an address slot, the
others reserve the same (testbed.net.registry).

It then measures each machine's clock offset to its own (testbed.live.spanned.clocks, again
every few seconds while up), each machine pair's underlay RTT (ICMP, recorded) and compensates
the emulated delays for the path floor, cables included, from round trips: each direction of a
link gets half its link's measured excess over the configured round trip (the one-way delays
measured with the clock offsets are recorded beside it; their bound is the offsets' bounds
summed, too wide to split a sub-millisecond floor).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import statistics
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from testbed.config.scenario import Scenario
from testbed.core.direction import Direction
from testbed.core.errors import NetError, ScenarioError, TestbedError
from testbed.live.processes import RANK_ENV
from testbed.live.ray_common import RESOURCE, connect_ray
from testbed.live.spanned.agent import MachineAgent
from testbed.live.spanned.clocks import (
    CLOCK_GROUP,
    CONCURRENCY_GROUPS,
    ClockSync,
    one_way_delay,
)
from testbed.live.spanned.nodes import MachineNode, machine_nodes
from testbed.live.spanned.remote import RemoteProcess, RemoteServer
from testbed.live.spanned.routing import SpannedRoutingEvents, wait_converged
from testbed.net.registry import Record
from testbed.plan.compensation import Compensation, compensate, configured_one_way
from testbed.plan.model import Impairment, NetworkPlan
from testbed.plan.topology import build_plan

PLACE_TIMEOUT = 60.0  # s for Ray to reserve the machines
SHIP_MAX = 1 << 20  # bytes: a directory's larger files are not inputs of its processes
CALIBRATION_PROBES = 8  # round trips per link (the first dropped, like testbed.live.calibrate)


@dataclasses.dataclass(frozen=True)
class BackendInfo:
    """Which link backend (or engine) the machines' parts run, and why."""

    name: str
    reason: str = ""


def split_round_trips(plan: NetworkPlan, rtts: dict[str, list[float]]) -> dict[str, list[float]]:
    """One-way samples for ``compensate`` from round trips (link name -> RTTs, s): each
    direction gets its configured one-way delay plus half the round trip's excess over the
    configured one (the floor split evenly: clocks of two machines are not compared). PURE."""
    out: dict[str, list[float]] = {}
    for d in plan.wan:
        if d.multipath:
            continue
        back = next(r for r in plan.wan if r.src == d.dst and r.dst == d.src and not r.multipath)
        samples = rtts.get(Direction.parse(d.name).link, [])
        fwd, rev = configured_one_way(plan, d), configured_one_way(plan, back)
        out[d.name] = [fwd + (r - fwd - rev) / 2 for r in samples]
    return out


class SpannedNetwork:
    """A testbed whose clusters are placed on several machines of a Ray cluster (see
    :mod:`testbed.live.spanned`). The API of :class:`Network` for what crosses machines: ``up``,
    ``down``, ``run``, ``serving``, ``hosts``, ``plan``, ``compensation_of``, ``problems``."""

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
        self.traced: dict[str, dict[str, list[dict]]] = {}  # machine -> its trace tables
        self._calibrating = False  # whether the plan's delays are compensated after build
        self.clock: ClockSync | None = None  # each machine's clock offset to this process's
        self.one_way: dict[str, dict[str, float]] = {}  # WAN direction -> one-way delay, bound
        # the directories of processes started through agents: which of their files each
        # machine has (machine, directory) -> name -> (mtime ns, size), which are the
        # processes' output (their logs and what came back)
        self.shipped: dict[tuple[str, Path], dict[str, tuple[int, int]]] = {}
        self.logs: dict[Path, set[str]] = {}

    # -- lifecycle ---------------------------------------------------------------------------
    def up(self) -> SpannedNetwork:
        ray = self.ray = connect_ray(self.address)
        placement = self.scenario.placement
        assert placement is not None
        machines = sorted(set(placement.machines.values()))
        self.nodes = machine_nodes(ray.nodes(), machines)
        try:
            self._place(ray)
            self._build(ray)
            self.clock = ClockSync(ray, self.agents)
            self.clock.measure("bring-up")
            self._measure(ray)
            self.clock.start()
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
        # its clock reads and the WAN's changes in their own threads (testbed.live.spanned.clocks)
        options = {"num_cpus": 0, "max_restarts": 0, "concurrency_groups": CONCURRENCY_GROUPS}
        actor = ray.remote(**options)(MachineAgent)
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
        record: Record  # MachineAgent.up: the record, the backend's name and reason
        record, *backend = ray.get(self.agents[first.machine].up.remote(*args, None, calibrating))
        self.record = record
        reserve = (record.prefix, record.slot)
        ray.get([self.agents[n.machine].up.remote(*args, reserve, calibrating) for n in rest])
        self.backend = BackendInfo(*backend)
        who = ray.get([a.identity.remote() for a in self.agents.values()])
        self.identities = dict(zip(self.agents, who, strict=True))
        self.plan = build_plan(self.scenario, *reserve)
        self._calibrating = calibrating
        if self.plan.bgp is not None:  # every part's FRR runs: the sessions across open
            wait_converged(ray, self.agents)

    def _measure(self, ray: Any) -> None:
        """The underlay's RTT between every pair of machines, then the compensation."""
        from testbed.live.selfcheck import probe_rtt

        pairs = [(a.machine, b.machine) for a in self.nodes for b in self.nodes if a != b]
        got = ray.get([self.agents[a].underlay_rtt.remote(b) for a, b in pairs])
        self.underlay_rtt = {p: statistics.median(r) for p, r in zip(pairs, got, strict=True)}
        if not self._calibrating:
            return
        plan = self.plan
        assert plan is not None
        rtts: dict[str, list[float]] = {}
        raw: dict[str, list[float]] = {}  # direction -> receive minus send stamp (two clocks)
        for d in plan.wan:
            link = Direction.parse(d.name).link
            if d.multipath or link in rtts or not d.delay:
                continue
            r = probe_rtt(self, f"{d.src}-h0", f"{d.dst}-h0", CALIBRATION_PROBES, 0.01)
            rtts[link] = r["rtts"][1:]
            raw[d.name] = r["forward"][1:]
            raw[str(Direction.parse(d.name).reverse())] = r["reverse"][1:]
        split = split_round_trips(plan, rtts)
        self.compensation = [
            dataclasses.replace(c, basis="round-trip") for c in compensate(plan, split)
        ]
        self.one_way = self._one_way(raw, split)
        by_wire: dict[str, dict[str, Impairment]] = {}
        for d, c in zip(plan.wan, self.compensation, strict=True):
            if d.delay:
                machine = plan.machine_of(d.impairment.ns)
                imp = dataclasses.replace(d.impairment, delay=c.emulated_s)
                by_wire.setdefault(machine, {})[d.name] = imp
        ray.get([self.agents[m].set_impairments.remote(ch) for m, ch in by_wire.items()])

    def _one_way(
        self, raw: dict[str, list[float]], split: dict[str, list[float]]
    ) -> dict[str, dict[str, float]]:
        """Each probed WAN direction's one-way delay on the driver's clock, ± the bound of the
        two machines' offsets, beside the round-trip split (testbed.live.spanned.clocks)."""
        assert self.plan is not None and self.clock is not None
        out = {}
        for d in self.plan.wan:
            if raw.get(d.name):
                src = self.clock.offset(self.plan.machines[d.src])
                dst = self.clock.offset(self.plan.machines[d.dst])
                out[d.name] = one_way_delay(raw[d.name], src, dst, split.get(d.name, []))
        return out

    def down(self) -> None:
        ray = self.ray
        if ray is None:
            return
        errors = []
        stats: list[dict] = []
        if self.clock is not None:
            self.clock.stop()
        # every machine tears its part down at once (a part's teardown is its own namespaces)
        downs = {machine: agent.down.remote() for machine, agent in self.agents.items()}
        for machine, agent in self.agents.items():
            try:
                ray.get(downs[machine])
                stats += ray.get(agent.link_stats.remote())
                self.traced[machine] = ray.get(agent.traced.remote())
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

    def __enter__(self) -> SpannedNetwork:
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
    def serving(self, host: str, module: str, *args: str) -> Iterator[RemoteServer]:
        """``python -m module args`` in ``host`` on its machine, once READY; stopped after."""
        agent = self._agent(host)
        handle = self.ray.get(agent.serve.remote(host, module, list(args)))
        try:
            yield RemoteServer(self.ray, agent, handle)
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
        start_new_session: bool = False,
    ) -> RemoteProcess:
        """Start ``argv`` in ``host`` on its machine, as the launchers do: its output to an
        open file of a directory the agent copies (``stdout`` that file and ``stderr``
        STDOUT; or ``stdout`` PIPE and ``stderr`` the file: its stdout lines are read there
        and come back through the proxy's ``stdout``). The directory's small files go there
        first, again when they changed (the paths in the command line, in the environment and
        in them are the copy's); each ``poll`` brings its files back."""
        piped = stdout == subprocess.PIPE
        log_file = stderr if piped else stdout
        if not hasattr(log_file, "name") or (not piped and stderr != subprocess.STDOUT):
            raise TestbedError("a spanned testbed starts processes with their output to a file")
        log = Path(log_file.name)
        run_dir = log.parent
        env = env if env is not None else dict(os.environ)
        agent = self._agent(host)
        outputs = self.logs.setdefault(run_dir, set())
        outputs.add(log.name)
        sent = self.shipped.setdefault((self.machine_of(host), run_dir), {})
        files = {}
        # its inputs: what is new or changed since. Not an empty file: another thread may have
        # just opened it as the log of a process it is about to start (a traffic sender beside
        # the ranks), which that machine must neither truncate nor take for an input
        for p in sorted(run_dir.iterdir()):
            if not p.is_file() or p.name in outputs:
                continue
            if not 0 < (st := p.stat()).st_size < SHIP_MAX:
                continue
            if sent.get(p.name) != (st.st_mtime_ns, st.st_size):
                sent[p.name] = (st.st_mtime_ns, st.st_size)
                files[p.name] = p.read_bytes()
        delta = {k: v for k, v in env.items() if os.environ.get(k) != v or k in RANK_ENV}
        dropped = [k for k in os.environ if k not in env]
        handle = self.ray.get(
            agent.start.remote(
                host, argv, what, delta, dropped, str(run_dir), files, log.name,
                lines=piped, group=start_new_session,
            )
        )  # fmt: skip
        return RemoteProcess(self.ray, agent, handle, run_dir, lines=piped, outputs=outputs)

    def free_port(self, host: str) -> int:
        return self.ray.get(self._agent(host).free_port.remote(host))

    def sysctls(self, host: str, keys: list[str]) -> dict[str, str]:
        return self.ray.get(self._agent(host).sysctls.remote(host, keys))

    def link_stats(self) -> list[dict]:
        """Every machine's link backend counters (complete once the testbed is down)."""
        if self.agents:
            return [r for a in self.agents.values() for r in self.ray.get(a.link_stats.remote())]
        return list(self._link_stats)

    def across_machines(self) -> dict[str, Any]:
        """What the results record of the machines: comparable only when the machines are;
        each machine's clock offset to the driver at bring-up (``clock_offset``: offset and
        bound, s) and each probed WAN direction's one-way delay with its bound beside the
        round-trip split the compensation uses (``one_way_delay``)."""
        assert self.plan is not None, "testbed is not up"
        return {
            "machines": self.identities,
            "interface_mtu": self.plan.interface_mtu,
            "underlay_rtt_s": {f"{a}->{b}": v for (a, b), v in self.underlay_rtt.items()},
            "clock_offset": self.clock.bring_up() if self.clock is not None else {},
            "one_way_delay": self.one_way,
        }

    def relay_start(self, host: str) -> str:
        """A socket on ``host``'s machine for rank 0's announcements (its path there)."""
        agent = self._agent(host)
        return self.ray.get(agent.relay_start.options(concurrency_group=CLOCK_GROUP).remote())

    def relay_take(self, host: str) -> list[tuple[float, bytes]]:
        """What that socket received since the last call: (receipt unix time there, datagram)."""
        agent = self._agent(host)
        return self.ray.get(agent.relay_take.options(concurrency_group=CLOCK_GROUP).remote())

    def clock_rows(self) -> list[dict[str, Any]]:
        """Every clock offset measurement (bring-up, then every few seconds): the
        ``clock_offsets`` table."""
        return list(self.clock.rows) if self.clock is not None else []

    def compensation_of(self, direction: str) -> Compensation | None:
        return next((c for c in self.compensation if c.direction == direction), None)

    def routing_events(self, run_dir: Path) -> SpannedRoutingEvents:
        """The routing events of a run, recorded on every machine (a context manager), on this
        process's timeline (each machine's latest clock offset)."""
        clock = self.clock
        to_driver = None if clock is None else (lambda m, t: clock.to_driver(m, t)[0])
        return SpannedRoutingEvents(self.ray, self.agents, run_dir, to_driver)

    def problems(self) -> list[str]:
        got = self.ray.get([a.problems.remote() for a in self.agents.values()])
        return [p for part in got for p in part]
