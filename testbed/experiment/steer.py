"""A testbed that ``testbed up`` left running, used from later processes: its WAN links changed
and its faults applied now through the event runner's own mechanism (:func:`apply_event` on an
:class:`EventTarget`), and the command kind's launcher run on it (:func:`launch`).

The process that built it is gone, with its plan, its link backend and its fault bookkeeping:
:func:`attach_live` rebuilds the plan from the scenario file (checked against the namespaces it
made) and adopts the running backend (delay lines by recorded pid). What only a running process
knew is kept in ``steer.json`` in the testbed's state directory, read and written back under its
lock for each event, so successive commands build on each other and concurrent ones take turns.
Each applied event is a row of ``events.jsonl`` there (events.parquet's columns).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.config.dynamics import DirectionSettings
from testbed.config.loading import load_scenario, with_faults
from testbed.config.scenario import Scenario
from testbed.config.wan import WanLink
from testbed.core import files
from testbed.core.errors import NetError, ScenarioError, TestbedError, UsageError
from testbed.core.events import UNDO
from testbed.core.files import atomic_write_text
from testbed.core.syntax import duration_text
from testbed.experiment.clock import OriginClock
from testbed.experiment.events import EventRunner, EventTarget, apply_event
from testbed.link.base import LinkBackend
from testbed.link.kernel import KernelBackend, ShapingOnlyBackend
from testbed.link.tclink import TclinkBackend
from testbed.link.userspace import DelayLineSupervisor, UserspaceBackend
from testbed.live.network import Network
from testbed.net import registry
from testbed.net.faults import FaultOps
from testbed.plan.directions import link_directions
from testbed.plan.model import Impairment, NetworkPlan
from testbed.plan.timeline import Change, Event, Timeline
from testbed.plan.timeline.faults import expand_fault
from testbed.plan.timeline.model import Builder, State, configured_states, full_changes
from testbed.plan.topology import build_plan

if TYPE_CHECKING:
    from testbed.experiment.session import RankSession

SCENARIO_PATH = "scenario_path"  # in the registry record's ``extra``: the absolute scenario file
STATE_FILE = "steer.json"
EVENT_LOG = "events.jsonl"
LOCK_FILE = ".steer.lock"
SETTINGS = tuple(DirectionSettings.model_fields)  # what `testbed link ... set` may change
# the faults a command applies now: each one start action and its undo; the others (flap,
# burst_loss, partition) are timelines of their own, written as a scenario's `faults:`
LIVE_FAULTS = {
    "blackhole": "link",
    "reset": "link",
    "link_down": "link",
    "gateway_crash": "cluster",
}
BACKENDS: dict[str, type[LinkBackend]] = {
    b.name: b for b in (KernelBackend, ShapingOnlyBackend, UserspaceBackend, TclinkBackend)
}


# -- the testbed -------------------------------------------------------------------------------
def find_live(name: str) -> registry.Record:
    """The live testbed ``name``; a UsageError (exit 2) naming the live ones otherwise."""
    live = [r for r in registry.records() if r.live()]
    for rec in live:
        if name in (rec.name, rec.prefix):
            return rec
    names = ", ".join(r.name for r in live) or "none (`testbed up FILE` makes one)"
    raise UsageError(f"NAME: no live testbed {name!r}; live testbeds: {names}")


def scenario_of(rec: registry.Record) -> Scenario:
    """The scenario that built ``rec``: the absolute path ``testbed up`` recorded, else the
    path as it was given (relative to where ``up`` ran)."""
    path = Path(rec.extra.get(SCENARIO_PATH) or rec.scenario)
    if not rec.scenario or not path.is_file():
        raise TestbedError(
            f"testbed {rec.name!r}: its scenario file {str(path)!r} is not there; steering "
            "needs the scenario that built it (run from the directory `testbed up` ran in)"
        )
    return load_scenario(path)


def attach_live(name: str) -> Network:
    """A handle on the live testbed ``name`` with its plan and its link backend (adopted, not
    started): what the event mechanisms and the launcher act on."""
    rec = find_live(name)
    if rec.phase != "up":
        raise TestbedError(f"testbed {rec.name!r} is {rec.phase}, not up")
    if rec.machine:
        raise UsageError(f"NAME: {rec.name!r} is one machine's part of a placed topology")
    sc = scenario_of(rec)
    plan = build_plan(sc, rec.prefix, rec.slot)
    if rec.namespaces and {n.name for n in plan.namespaces} != set(rec.namespaces):
        raise TestbedError(
            f"testbed {rec.name!r}: {rec.scenario} no longer describes it (its namespaces "
            "differ: the file changed since `testbed up`); bring it up again to steer it"
        )
    tb = Network.attach(rec.name)
    tb.scenario, tb.plan = sc, plan
    if rec.backend not in BACKENDS:
        raise TestbedError(f"testbed {rec.name!r}: unknown link backend {rec.backend!r}")
    tb.backend = BACKENDS[rec.backend]("adopted from the running testbed")
    tb.backend.directions = {d.name: d for d in plan.wan}
    restore_backend(tb.backend, tb, SteerState.load(rec.state_dir / STATE_FILE).backend)
    return tb


# -- what only a running process knew ------------------------------------------------------------
@dataclasses.dataclass
class SteerState:
    """``steer.json``: per changed direction its settings (a schedule's State: what the next
    change starts from) and its applied state; the backend's own view of what runs; the fault
    rules' bookkeeping; the faults in force (their start events)."""

    settings: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    applied: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    backend: dict[str, Any] = dataclasses.field(default_factory=dict)
    faults: dict[str, Any] = dataclasses.field(default_factory=dict)
    in_force: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> SteerState:
        with contextlib.suppress(FileNotFoundError):
            return cls(**json.loads(path.read_text()))
        return cls()

    def save(self, path: Path) -> None:
        atomic_write_text(path, json.dumps(dataclasses.asdict(self), indent=1))

    def states(self, plan: NetworkPlan, link: WanLink) -> dict[str, State]:
        """The link's directions' settings now: the configured ones until changed."""
        out = configured_states(plan, link)
        for name, saved in self.settings.items():
            if name in out:
                out[name] = State(**{**saved, "buffer": tuple(saved["buffer"])})
        return out


def _imp(d: dict[str, Any]) -> Impairment:
    return Impairment(**d)


def restore_backend(backend: LinkBackend, tb: Network, saved: dict[str, Any]) -> None:
    """Give an adopted backend what its running emulation holds: a kernel backend its netems and
    bottlenecks, the userspace one a supervisor of the running delay lines (by recorded pid)."""
    assert tb.plan is not None and tb.record is not None
    plan, rec = tb.plan, tb.record
    if isinstance(backend, KernelBackend):
        backend.netem = {
            d.name: d.impairment
            for d in plan.wan
            if (d.impairment.active or d.changes_later) and plan.has_ns(d.impairment.ns)
        }
        backend.netem.update({n: _imp(i) for n, i in saved.get("netem", {}).items()})
        backend.bottleneck = {d.name: (d.rate, d.buffer) for d in plan.wan}
        backend.bottleneck.update({n: (r, b) for n, (r, b) in saved.get("bottleneck", {}).items()})
    elif isinstance(backend, UserspaceBackend):
        sup = DelayLineSupervisor(plan, rec)
        pids = {what: (pid, start) for pid, start, what in rec.processes}
        for line in sup.lines:
            line.pid, line.start = pids.get(f"delay line {line.ns}", (None, None))
            if not line.alive():
                raise NetError(f"the delay line of {line.ns} is not running (pid {line.pid})")
            line.rules_installed = True  # by its launch: a line that dies now is a problem
            with contextlib.suppress(OSError, ValueError):
                sup.trace_interval = json.loads(line.config_path.read_text()).get("trace_interval")
        sup.impairments.update({n: _imp(i) for n, i in saved.get("impairments", {}).items()})
        sup.rates.update({n: (r, b) for n, (r, b) in saved.get("rates", {}).items()})
        sup.held = set(saved.get("held", []))
        backend.supervisor = sup


def backend_state(backend: LinkBackend) -> dict[str, Any]:
    if isinstance(backend, KernelBackend):
        return {
            "netem": {n: dataclasses.asdict(i) for n, i in backend.netem.items()},
            "bottleneck": backend.bottleneck,
        }
    if isinstance(backend, UserspaceBackend) and backend.supervisor is not None:
        sup = backend.supervisor
        return {
            "impairments": {n: dataclasses.asdict(i) for n, i in sup.impairments.items()},
            "rates": sup.rates,
            "held": sorted(sup.held),
        }
    return {}


def restore_faults(ops: FaultOps, saved: dict[str, Any]) -> None:
    ops.ready = set(saved.get("ready", []))
    ops.active = {
        (ns, port): {int(b): n for b, n in c.items()} for ns, port, c in saved.get("active", [])
    }
    ops.pinned = {(a, b, c): n for a, b, c, n in saved.get("pinned", [])}


def faults_state(ops: FaultOps) -> dict[str, Any]:
    return {
        "ready": sorted(ops.ready),
        "active": [[ns, port, c] for (ns, port), c in ops.active.items()],
        "pinned": [[*key, n] for key, n in ops.pinned.items()],
    }


def event_dict(e: Event) -> dict[str, Any]:
    return dataclasses.asdict(e)


def event_of(d: dict[str, Any]) -> Event:
    changes = tuple(Change(**c) for c in d["changes"])
    return Event(**{**d, "directions": tuple(d["directions"]), "changes": changes})


class Steering:
    """Applies events to one live testbed (see the module): ``apply`` is what an
    :class:`EventRunner` calls; ``log`` appends its rows to the event log."""

    def __init__(self, tb: Network, command: str) -> None:
        assert tb.record is not None
        self.tb = tb
        self.dir = tb.record.state_dir
        self.command = command

    @property
    def state_path(self) -> Path:
        return self.dir / STATE_FILE

    @property
    def log_path(self) -> Path:
        return self.dir / EVENT_LOG

    @contextlib.contextmanager
    def locked(self) -> Iterator[SteerState]:
        """The state, read under the lock; written back on the way out (also after a failed
        application: what it did apply stays recorded)."""
        with files.locked(self.dir / LOCK_FILE):
            state = SteerState.load(self.state_path)
            try:
                yield state
            finally:
                state.save(self.state_path)

    def state(self) -> SteerState:
        with files.locked(self.dir / LOCK_FILE):
            return SteerState.load(self.state_path)

    def target(self, state: SteerState) -> tuple[EventTarget, FaultOps]:
        """An event target with the testbed's state now (its fault mechanisms made)."""
        assert self.tb.backend is not None
        restore_backend(self.tb.backend, self.tb, state.backend)
        target = EventTarget(self.tb)
        target.state.update({n: Change(**c) for n, c in state.applied.items()})
        ops = target.fault_ops()
        restore_faults(ops, state.faults)
        return target, ops

    def apply(self, event: Event, settings: dict[str, State] | None = None) -> str:
        """Apply ``event`` with the testbed's current state; ``settings``: a ``set``'s new
        settings per direction (kept for the next change)."""
        with self.locked() as state:
            target, ops = self.target(state)
            try:
                operation = apply_event(event, target)
            finally:  # what the backend and the fault rules hold now, applied or not
                assert self.tb.backend is not None
                state.backend = backend_state(self.tb.backend)
                state.faults = faults_state(ops)
            if event.action == "set":
                state.applied.update({c.direction: dataclasses.asdict(c) for c in event.changes})
                for name, s in (settings or {}).items():
                    state.settings[name] = dataclasses.asdict(s)
            return operation

    def log(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        with files.locked(self.dir / LOCK_FILE), open(self.log_path, "a") as out:
            for row in rows:
                out.write(json.dumps({**row, "command": self.command}) + "\n")


def command_line() -> str:
    return shlex.join(["testbed", *sys.argv[1:]])


def run_now(
    steering: Steering,
    events: list[Event],
    settings: dict[str, State] | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    keep: bool = False,
) -> list[dict[str, Any]]:
    """Apply ``events`` at their times from now (an event runner on a wall clock whose origin
    is now), logging each row as it comes; the rows. A fault still in force at the end is undone
    (as at the end of a run) unless ``keep``; an interruption (Ctrl-C) undoes it in any case."""
    timeline = Timeline(tuple(events), "wall", None)
    clock = OriginClock(from_iterations=False)
    runner = EventRunner(timeline, steering.tb, clock, apply=lambda e: steering.apply(e, settings))
    runner.backend = steering.tb.backend.name if steering.tb.backend is not None else None
    logged: set[int] = set()

    def flush() -> None:
        new = [r for r in list(runner.rows) if id(r) not in logged]
        logged.update(id(r) for r in new)
        steering.log(new)
        if on_row is not None:
            for r in new:
                on_row(r)

    try:
        runner.start()
        clock.set_origin()
        while runner.pending:
            clock.wait_change(0.05)
            flush()
            if runner.crashed is not None:
                break
        if keep:
            runner.in_force.clear()
    finally:
        clock.end()
        runner.stop()
        clock.close()
        flush()
    if runner.crashed is not None:
        raise runner.crashed
    return runner.rows


# -- what a command asks for ---------------------------------------------------------------------
def parse_settings(items: list[str]) -> DirectionSettings:
    """``rate=100mbit delay=30ms ...`` as a schedule step's settings; a UsageError names the
    argument and what is allowed."""
    from pydantic import ValidationError

    data: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not value:
            raise UsageError(
                f"{item!r}: write FIELD=VALUE, e.g. delay=30ms; fields: {', '.join(SETTINGS)}"
            )
        if key not in SETTINGS:
            raise UsageError(f"{item!r}: unknown field {key!r}; fields: {', '.join(SETTINGS)}")
        data[key] = value
    if not data:
        raise UsageError(f"set what? FIELD=VALUE ..., fields: {', '.join(SETTINGS)}")
    try:
        return DirectionSettings.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            key = str(err["loc"][0]) if err["loc"] else "?"
            inner = (err.get("ctx") or {}).get("error")
            lines.append(f"{key}={data.get(key)}: {inner or err['msg']}")
        raise UsageError("; ".join(lines)) from None


def paths_of(sc: Scenario, link: str) -> list[WanLink]:
    paths = sc.links_named(link)
    if not paths:
        known = ", ".join(p.name for p in sc.wan_paths) or "(none)"
        raise UsageError(f"LINK: no WAN link {link!r}; links: {known}")
    return paths


def which_directions(path: WanLink, direction: str | None) -> str:
    """``--direction`` as a link's forward | reverse | both."""
    a, b = path.between
    names = {f"{a}->{b}": "forward", f"{b}->{a}": "reverse"}
    if direction is None or direction == "both":
        return "both"
    if direction in names:
        return names[direction]
    if direction in ("forward", "reverse"):
        return direction
    raise UsageError(
        f"--direction {direction!r}: allowed: {', '.join(names)}, forward, reverse, both"
    )


def link_event(
    tb: Network,
    steering: Steering,
    link: str,
    direction: str | None,
    settings: DirectionSettings | None,
    what: str,
) -> tuple[list[Event], dict[str, State]]:
    """The ``set`` events of changing ``link`` (every path of it) now: a schedule step's
    expansion from the settings in force (``settings`` None: restore the configured ones)."""
    assert tb.scenario is not None and tb.plan is not None
    state = steering.state()
    events, kept = [], {}
    for path in paths_of(tb.scenario, link):
        dirs = link_directions(path.between, which_directions(path, direction), path.path)
        configured = configured_states(tb.plan, path)
        states = state.states(tb.plan, path)
        before = full_changes(states)
        for d in dirs:
            if settings is None:
                states[d] = State(
                    **{**configured[d].__dict__, "ge_p": states[d].ge_p, "ge_r": states[d].ge_r}
                )
                continue
            for f in SETTINGS:
                if getattr(settings, f) is not None:
                    setattr(states[d], f, getattr(settings, f))
        after = full_changes(states)
        changed = [d for d in after if d in dirs or after[d] != before[d]]
        text = what + (f" ({dirs[0]})" if len(dirs) == 1 else "")
        events.append(
            Event(
                0.0, None, "set", "live", None, path.name, None, tuple(changed),
                tuple(after[d] for d in changed), text,
            )
        )  # fmt: skip
        kept.update({d: states[d] for d in changed})
    return events, kept


def fault_events(
    tb: Network, kind: str, target: str, duration: float | None, direction: str | None
) -> list[Event]:
    """A fault's start (and, with ``duration``, its end at ``duration``) as a scenario's fault
    at 0 s expands them (testbed.plan.timeline.faults)."""
    assert tb.scenario is not None and tb.plan is not None
    if kind not in LIVE_FAULTS:
        raise UsageError(
            f"KIND: {kind!r} is not a fault applied now; allowed: {', '.join(LIVE_FAULTS)} "
            "(flap, burst_loss and partition are scenario `faults:`)"
        )
    if duration is not None and duration <= 0:
        raise UsageError(f"--for {duration:g}s: a fault lasts a positive time, e.g. --for 2s")
    length = duration if duration is not None else 1.0  # only its start is kept without one
    spec: dict[str, Any] = {"kind": kind, "at": "0s"}
    if LIVE_FAULTS[kind] == "cluster":
        if direction is not None:
            raise UsageError("--direction: a gateway_crash has no direction")
        if target not in tb.scenario.clusters:
            raise UsageError(
                f"CLUSTER: no cluster {target!r}; clusters: {', '.join(tb.scenario.clusters)}"
            )
        spec |= {"cluster": target}
        if duration is not None:
            spec["restore_after"] = f"{duration!r}s"
    else:
        paths = paths_of(tb.scenario, target)
        spec |= {"link": target, "duration": f"{length!r}s"}
        if direction is not None:
            if kind != "blackhole":
                raise UsageError(f"--direction: only a blackhole has one (not {kind})")
            spec["direction"] = which_directions(paths[0], direction)
    try:
        sc = with_faults(tb.scenario, [spec], source=f"testbed fault {kind}")
    except ScenarioError as exc:
        raise UsageError(str(exc)) from None
    b = Builder(sc, tb.plan, Path.cwd(), 0.0, "testbed fault")
    expand_fault(b, 0, sc.faults[0])
    events = [e for _, e in sorted(b.events, key=lambda p: p[0])]
    events = [dataclasses.replace(e, source="live") for e in events]
    if duration is None:  # its start alone, without the placeholder length in its text
        shown = f"({duration_text(length)})"
        events = [
            dataclasses.replace(e, what=e.what.replace(shown, "(until --end)"))
            for e in events
            if e.action in UNDO
        ]
    return events


def in_force_matching(state: SteerState, kind: str, target: str) -> list[dict[str, Any]]:
    """The faults in force that ``kind`` on ``target`` started."""
    start = {"gateway_crash": "gateway_down"}.get(kind, kind)
    return [
        e for e in state.in_force if e["action"] == start and target in (e["link"], e["cluster"])
    ]


def end_events(state: SteerState, kind: str, target: str) -> list[Event]:
    found = in_force_matching(state, kind, target)
    if not found:
        shown = ", ".join(f"{e['action']} {e['link'] or e['cluster']}" for e in state.in_force)
        raise UsageError(f"--end: no {kind} on {target!r} is in force; in force: {shown or 'none'}")
    return [
        dataclasses.replace(event_of(e), action=UNDO[e["action"]], what=f"{e['what']}: ended")
        for e in found
    ]


def note_in_force(steering: Steering, started: list[Event], ended: list[Event]) -> None:
    """Record faults left in force (started without ``--for``) and forget the ended ones."""
    with steering.locked() as state:
        for e in ended:
            start = next(
                (
                    x
                    for x in state.in_force
                    if UNDO.get(x["action"]) == e.action
                    and x["link"] == e.link
                    and x["cluster"] == e.cluster
                    and tuple(x["directions"]) == e.directions
                ),
                None,
            )
            if start is not None:
                state.in_force.remove(start)
        state.in_force += [event_dict(e) for e in started]


def events_during(tb: Network, start: float, end: float, path: Path) -> int:
    """Copy the event log's rows applied between ``start`` and ``end`` (unix s) to ``path``;
    how many (no file when none)."""
    assert tb.record is not None
    try:
        lines = (tb.record.state_dir / EVENT_LOG).read_text().splitlines()
    except FileNotFoundError:
        return 0
    kept = [x for x in lines if start <= (json.loads(x).get("applied_unix") or 0) <= end]
    if kept:
        path.write_text("\n".join(kept) + "\n")
    return len(kept)


# -- a command on the live testbed ---------------------------------------------------------------
def launch_session(
    tb: Network,
    workload: Any,
    run_dir: Path,
    *,
    wan_counters: bool = False,
    since: float | None = None,
) -> tuple[RankSession, list[str]]:
    """The command kind's launcher on the live testbed ``tb``: ``workload`` (a CommandWorkload,
    ``cwd`` relative to the current directory) on its ranks or hosts, logs in ``run_dir``, with
    the testbed's events applied while it ran (``events.jsonl``, when there were any). The
    finished RankSession (codes, times, logs; with ``wan_counters``, the WAN bottlenecks' byte
    counters sampled while it ran) and the problems that failed it (the first failure first, as
    the run's status names them; empty: every process exited 0). ``since`` (unix s; default
    now): where its event window begins, when a user was told earlier that it started."""
    started = time.time() if since is None else since
    from testbed.experiment.session import RankSession, rank_detail, read_rank_rows
    from testbed.experiment.workloads.command import KIND
    from testbed.plan.ranks import place_ranks

    assert tb.plan is not None
    ranks = place_ranks(tb.plan, workload.ranks_per_host, workload.placement)
    run_dir.mkdir(parents=True, exist_ok=True)
    described = KIND.processes(workload, tb.plan, ranks, run_dir, None)
    session = RankSession(
        tb, ranks, run_dir, KIND.rank_module, workload.timeout, KIND.spec_keys(workload),
        processes=described, wan_counters=wan_counters,
    )  # fmt: skip
    try:
        problems = session.run(KIND.deadlines(workload))
        problems += KIND.problems(session, workload)
    finally:
        events_during(tb, started, time.time(), run_dir / EVENT_LOG)
    rows, _ = read_rank_rows(run_dir)
    details = [
        p + (f": {rank_detail(run_dir, p, rows)}" if p.startswith("rank ") else "")
        for p in problems
    ]
    return session, details


def launch(
    tb: Network, workload: Any, run_dir: Path, since: float | None = None
) -> tuple[list[str], dict[str, Any]]:
    """:func:`launch_session`'s problems and the kind's run info (a row per process)."""
    from testbed.experiment.workloads.command import KIND

    session, details = launch_session(tb, workload, run_dir, since=since)
    return details, KIND.run_info(session)
