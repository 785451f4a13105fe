"""Rank processes: the one launcher for every workload that runs torch.distributed ranks.

This module owns the rank spec (:class:`RankSpec`, the ``spec.json`` every rank reads: where the
master is, the world, the placement, plus the workload's own keys) and :class:`RankLaunch`: one
``python -m <module> --spec spec.json --rank R`` process per rank inside its host (on one
machine forked from a rank server that imported torch once, :mod:`traffic.zygote`), or the
processes a workload kind gives (:class:`LaunchProcess`: host, argv, environment, log; a user's
own program), each recorded by pid (so teardown stops it; its port and environment from
:mod:`testbed.live.processes`), its output in its log (``rank-R.log``), watched until every
process has exited, a link failed, or a deadline
passed (:class:`Deadlines`; one rank failed: the others had ``failure_grace`` seconds to report
their own error). Which deadline passed is a pure function of the times the loop saw
(:func:`deadline_decision`), so each is tested on explicit times rather than a machine's speed.
A rank still running then gets ``SIGUSR1`` (the rank modules dump their stacks into their log on
it), a moment to write the dump, and ``SIGKILL``. Where a rank is and whether it joined come
from its ``rank-R.state`` (traffic.entry's rank-status protocol; a program without one counts as
joined once its ``rank-R.jsonl`` exists). Its one user:
:class:`testbed.experiment.session.RankSession`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from testbed.core.clock import SYSTEM, Clock
from testbed.core.errors import TestbedError
from testbed.live.host_processes import signal_group
from testbed.live.network import Network
from testbed.live.processes import rank_env
from testbed.live.protocol import HostProcess, LiveNetwork
from testbed.net import procs
from testbed.plan.ranks import RankSlot
from traffic.entry import has_joined, read_state, rows_path, state_path
from traffic.zygote import Zygote

POLL = 0.05  # seconds between two looks at the ranks
STACK_WAIT = 1.0  # seconds a stopped rank gets to write its SIGUSR1 stack dump
# The rank modules start from one rank server that imported torch once (traffic.zygote), on the
# one-machine network, instead of one ``ip netns exec python -m MODULE`` per rank (a start of 4
# ranks: 2.5 s to joined where it took 3.2-6.0 s, half the CPU; benchmarks/rank_start.py).
# TESTBED_PREFORK=0 starts one process per rank again.
PREFORK = os.environ.get("TESTBED_PREFORK", "1") != "0"


def forks_ranks(local: bool, rank_module: bool) -> bool:
    """Whether a launch's ranks start from the rank server: ``PREFORK``, its network's
    namespaces on this machine (``local``) and the ranks the project's own rank module
    (``rank_module``; a user's program starts as its command says)."""
    return PREFORK and local and rank_module


STACK_HEAD = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):", re.M)

# Why a rank was stopped (RankLaunch.stopped): its deadline passed ("timeout"), the setup
# deadline passed ("setup-timeout"), no rank wrote anything for the stall time ("stalled"),
# another rank failed ("stopped") or a link did ("link").
STOP_REASONS = ("timeout", "setup-timeout", "stalled", "stopped", "link")


# -- the deadlines -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Deadlines:
    """The launch's clocks in seconds (None: none). ``setup``: until every rank joined or
    exited; ``run``: from then on (from the start without ``setup``); ``stall``: from then on,
    while no rank's output grows; ``failure_grace``: after one rank failed, for the others to
    report their own error."""

    run: float | None
    setup: float | None = None
    stall: float | None = None
    failure_grace: float = 5.0


@dataclass
class RankTimes:
    """When the wait loop saw one rank do something (its clock's seconds; None: not yet)."""

    progress: float | None = None  # its output (rank-R.jsonl, rank-R.log) last grew
    joined: float | None = None  # it had joined torch.distributed (traffic.entry's state)
    exited: float | None = None  # it had exited
    failed: float | None = None  # it had exited with a code other than 0


@dataclass(frozen=True)
class Wait:
    """No deadline has passed: look again, at the latest at ``until`` (inf: none pending)."""

    until: float


@dataclass(frozen=True)
class Stop:
    """A deadline passed: ``deadline`` is the :class:`Deadlines` field, ``reason`` the
    :data:`STOP_REASONS` entry the ranks still running are stopped with, ``since`` + the
    deadline's seconds = ``at``, when it fell due. ``ranks`` are the ranks it is about: the first
    failed rank (failure_grace), the ranks that had neither joined nor exited (setup), the ranks
    still running (run, stall)."""

    reason: str
    deadline: str
    since: float
    at: float
    ranks: tuple[int, ...]


def deadline_decision(
    now: float, start: float, ranks: Mapping[int, RankTimes], deadlines: Deadlines
) -> Wait | Stop:
    """Whether a deadline has passed at ``now`` for a launch that started at ``start``.

    Each deadline falls due at exactly its clock's start plus its seconds: the failure grace
    from the first failure; setup from ``start`` until every rank joined or exited (without a
    setup deadline the ranks count as ready at ``start``); run from ready; stall from the later
    of ready and the last output of any rank. When several are due (a loop that looked late),
    the one that fell due first names the stop; on a tie, the first of that order."""
    running = tuple(r for r, t in sorted(ranks.items()) if t.exited is None)
    due: list[Stop] = []

    failures = [(t.failed, r) for r, t in ranks.items() if t.failed is not None]
    if failures:
        failed_at, first = min(failures)
        due.append(
            Stop(
                "stopped", "failure_grace", failed_at, failed_at + deadlines.failure_grace, (first,)
            )
        )

    ready: float | None = start
    if deadlines.setup is not None:
        arrived = {r: _first(t.joined, t.exited) for r, t in sorted(ranks.items())}
        late = tuple(r for r, at in arrived.items() if at is None)
        if late:
            ready = None
            due.append(Stop("setup-timeout", "setup", start, start + deadlines.setup, late))
        else:
            ready = max((at for at in arrived.values() if at is not None), default=start)

    if ready is not None and deadlines.run is not None:
        due.append(Stop("timeout", "run", ready, ready + deadlines.run, running))
    if ready is not None and deadlines.stall is not None:
        written = [t.progress for t in ranks.values() if t.progress is not None]
        since = max([ready, *written])
        due.append(Stop("stalled", "stall", since, since + deadlines.stall, running))

    passed = [stop for stop in due if now >= stop.at]
    if passed:
        return min(passed, key=lambda stop: stop.at)  # min keeps the first of equal ones
    return Wait(min((stop.at for stop in due), default=math.inf))


def _first(*times: float | None) -> float | None:
    known = [t for t in times if t is not None]
    return min(known) if known else None


# -- the spec ----------------------------------------------------------------------------------
@dataclass
class RankSpec:
    """``spec.json`` of one launch: the keys :func:`traffic.context.setup` reads, and in
    ``workload`` the keys of the rank module (collectives and sizes, or the user's function)."""

    master_addr: str
    master_port: int
    world_size: int
    timeout_s: float  # torch.distributed's own timeout (gloo): must not fire before ours
    ranks: list[dict[str, Any]]
    out_dir: str
    workload: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        tb: LiveNetwork,
        master_addr: str,
        ranks: list[RankSlot],
        out_dir: Path,
        timeout_s: float,
        **workload: Any,
    ) -> RankSpec:
        """The spec for ``ranks``, rank 0 being the master at ``master_addr``; the port is
        free in rank 0's namespace (the network's ``free_port``)."""
        return cls(
            master_addr=master_addr,
            master_port=tb.free_port(ranks[0].host),
            world_size=len(ranks),
            timeout_s=timeout_s,
            ranks=[r.as_dict() for r in ranks],
            out_dir=str(out_dir),
            workload=workload,
        )

    def as_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        return {**{k: v for k, v in doc.items() if k != "workload"}, **self.workload}

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(self.as_dict(), indent=1))
        return path


def require_torch() -> None:
    """Ranks import torch; say how to get it before any process starts, not once per rank."""
    if importlib.util.find_spec("torch") is None:
        raise TestbedError(
            f"torch is not installed for {sys.executable}: ranks need the `ranks` extra "
            "(pip install -e '.[ranks]', CPU build: torch==2.13.0; scripts/setup.sh installs it)"
        )


def rank_server(run_dir: Path) -> Zygote:
    """A rank server (:mod:`traffic.zygote`) with the rank environment, its own errors in the run
    directory's ``rank-server.log``; it imports torch from now on. Started before the network's
    bring-up, the imports run beside it (an idle server ends with its launcher's pipe)."""
    return Zygote(rank_env(), run_dir / "rank-server.log")


# -- the launch --------------------------------------------------------------------------------
@dataclass(frozen=True)
class LaunchProcess:
    """One process of a launch that a workload kind describes itself (a user's own program):
    ``key`` names it in ``codes``, ``times`` and ``stopped`` (its rank; a per-host process's node
    rank), ``what`` in the network's record and in problems (``rank 3 (east-h1)``). ``log``: its
    stdout and stderr, a file name in the run directory. ``stdout_line``: when given, stdout is
    read line by line: each line goes to the log and then to it, with the time it was read.
    ``group``: it leads a process group of its own (a new session), and stopping it stops the
    group, so that what it started (torchrun's workers) goes with it. ``stop_signal``: what asks
    it to end before SIGKILL (the rank modules dump their stacks on SIGUSR1; a user's program
    gets SIGTERM, as torchrun sends its workers)."""

    key: int
    host: str
    argv: list[str]
    env: dict[str, str]
    log: str
    what: str
    stdout_line: Callable[[bytes, float], None] | None = None
    group: bool = False
    stop_signal: int = signal.SIGUSR1


class RankLaunch:
    """One launch of ``module`` on every rank of ``ranks``, with its files in ``run_dir``.

    ``run()`` starts, waits and stops; afterwards ``codes`` holds every rank's exit code (None:
    never started), ``stopped`` rank -> why it was stopped (:data:`STOP_REASONS`) with
    ``stopped_state`` the rank's state at that moment, and ``run()``'s return value the link
    problems that ended it (empty otherwise); ``fired`` the deadline that ended the wait (None:
    every rank exited, or a link failed), ``started`` when the wait began and ``times`` what it
    saw each rank do, on ``clock``. ``state`` and ``joined`` read the ranks' state files
    (traffic.entry) unless given."""

    def __init__(
        self,
        tb: LiveNetwork,
        ranks: list[RankSlot],
        spec: RankSpec,
        run_dir: Path,
        module: str,
        *,
        processes: list[LaunchProcess] | None = None,
        state: Callable[[int], Any] | None = None,
        joined: Callable[[int], bool] | None = None,
        clock: Clock = SYSTEM,
        server: Zygote | None = None,
    ) -> None:
        self.tb = tb
        self.ranks = ranks
        self.spec = spec
        self.run_dir = run_dir
        self.module = module
        # the kind's own processes (None: ``python -m module`` per rank)
        self.processes = processes
        self.keys = [p.key for p in processes] if processes is not None else [s.rank for s in ranks]
        self.begun: dict[int, float] = {}  # key -> when it was started, on ``clock``
        self._readers: list[threading.Thread] = []
        # rank -> where it is now (kept for stopped ranks)
        self.state = state or (lambda rank: read_state(run_dir, rank))
        # rank -> whether it has joined torch.distributed (ends the setup deadline)
        self.joined = joined or (lambda rank: has_joined(run_dir, rank))
        self.procs: dict[int, HostProcess] = {}
        self.stopped: dict[int, str] = {}
        self.stopped_state: dict[int, Any] = {}
        self.clock = clock
        self.started: float | None = None  # when the wait began, on ``clock``
        self.times: dict[int, RankTimes] = {}
        self.fired: Stop | None = None
        # the rank server, while the ranks run (PREFORK); ``server``: one started earlier, its
        # imports beside the bring-up (:func:`rank_server`), the launch's to use and close
        self.zygote: Zygote | None = server

    @property
    def codes(self) -> dict[int, int | None]:
        return {k: (p.returncode if (p := self.procs.get(k)) else None) for k in self.keys}

    def process(self, key: int) -> LaunchProcess | None:
        """The kind's description of process ``key`` (None: a rank module's)."""
        return next((p for p in self.processes or () if p.key == key), None)

    def log_path(self, rank: int) -> Path:
        described = self.process(rank)
        return self.run_dir / (described.log if described else f"rank-{rank}.log")

    def log(self, rank: int) -> str:
        with contextlib.suppress(OSError):
            return self.log_path(rank).read_text(errors="replace")
        return ""

    def argv(self, rank: int) -> list[str]:
        spec = str(self.run_dir / "spec.json")
        return [sys.executable, "-m", self.module, "--spec", spec, "--rank", str(rank)]

    def run(
        self,
        timeout: float | None,
        *,
        setup_timeout: float | None = None,
        failure_grace: float = 5.0,
        stall: float | None = None,
    ) -> list[str]:
        """Start every rank, wait, stop what still runs; the link problems that ended it.

        Deadlines: without ``setup_timeout``, ``timeout`` from the start. With it, every rank must
        have joined (``joined(rank)``) or exited within ``setup_timeout``, and the ``timeout``
        clock starts then (None: no overall deadline). With ``stall``, the ranks are also
        stopped ("stalled") once they are ready and no rank's output (``rank-R.jsonl``,
        ``rank-R.log``) has grown for ``stall`` seconds: a deadline that follows progress, for
        runs whose every operation is bounded by its own timeout."""
        if self.processes is None:
            require_torch()
        self.spec.write(self.run_dir / "spec.json")
        for slot in self.ranks:  # a state left by an earlier launch here is not this one's
            state_path(self.run_dir, slot.rank).unlink(missing_ok=True)
        try:
            local = isinstance(self.tb, Network) and self.tb.record is not None
            if forks_ranks(local, self.processes is None):
                self._start_forked()
            elif self.processes is None:
                for slot in self.ranks:
                    with open(self.log_path(slot.rank), "w") as log:
                        self.procs[slot.rank] = self.tb.popen(
                            slot.host,
                            self.argv(slot.rank),
                            what=f"rank {slot.rank}",
                            env=rank_env(),
                            stdout=log,
                            stderr=subprocess.STDOUT,
                        )
            else:
                for described in self.processes:
                    self._start(described)
            return self._wait(Deadlines(timeout, setup_timeout, stall, failure_grace))
        finally:
            self.stop_all("stopped")
            self._end_groups()
            if self.zygote is not None:
                self.zygote.close()
                self.zygote = None

    def _start_forked(self) -> None:
        """Every rank forked from one rank server that imported torch once, each recorded by
        pid in the network's record (as ``popen`` records its processes)."""
        assert isinstance(self.tb, Network) and self.tb.record is not None
        env = rank_env()
        if self.zygote is None:
            self.zygote = rank_server(self.run_dir)
        self.tb.record.add_process(self.zygote.pid, "rank server")
        spec = str(self.run_dir / "spec.json")
        for slot in self.ranks:
            proc = self.zygote.start(
                self.tb.namespace(slot.host),
                self.module,
                ["--spec", spec, "--rank", str(slot.rank)],
                env,
                self.log_path(slot.rank),
            )
            self.tb.record.add_process(proc.pid, f"rank {slot.rank}")
            self.procs[slot.rank] = proc

    def _start(self, p: LaunchProcess) -> None:
        """Start one described process: its log truncated, then opened for appending by both
        the process (stderr, and stdout unless it is read here) and the reader of its stdout."""
        path = self.run_dir / p.log
        path.write_bytes(b"")
        extra: dict[str, Any] = {"start_new_session": True} if p.group else {}
        with open(path, "ab") as log:
            self.begun[p.key] = self.clock.now()
            proc = self.tb.popen(
                p.host,
                p.argv,
                what=p.what,
                env=p.env,
                stdout=subprocess.PIPE if p.stdout_line else log,
                stderr=log,
                **extra,
            )
        self.procs[p.key] = proc
        pipe = getattr(proc, "stdout", None)
        if p.stdout_line is not None and pipe is not None:
            reader = threading.Thread(
                target=_copy_lines, args=(pipe, path, p.stdout_line), daemon=True
            )
            reader.start()
            self._readers.append(reader)

    def _end_groups(self) -> None:
        """Kill what the group leaders left behind (their processes' children), then let the
        readers of their stdout see its end."""
        for p in self.processes or ():
            proc = self.procs.get(p.key)
            if p.group and proc is not None:
                signal_group(proc, signal.SIGKILL)
        for reader in self._readers:
            reader.join(timeout=5.0)

    def output_size(self, rank: int | None = None) -> int:
        """Bytes the ranks (or ``rank``) have written so far (jsonl and log files): progress."""
        total = 0
        for key in self.keys:
            if rank is not None and key != rank:
                continue
            for path in (self.log_path(key), rows_path(self.run_dir, key)):
                with contextlib.suppress(OSError):
                    total += path.stat().st_size
        return total

    def _wait(self, deadlines: Deadlines) -> list[str]:
        """Look at the ranks every POLL until they all exited, a link failed or
        :func:`deadline_decision` says a deadline passed (then stop what still runs)."""
        start = self.started = self.clock.now()
        self.times = {r: RankTimes() for r in self.procs}
        written: dict[int, int] = {}
        while True:
            now = self.clock.now()
            for r, p in self.procs.items():
                seen = self.times[r]
                if deadlines.stall is not None:
                    size = self.output_size(r)
                    if size != written.get(r):
                        written[r], seen.progress = size, now
                code = p.poll()
                if code is not None and seen.exited is None:
                    seen.exited = now
                    seen.failed = now if code != 0 else None
                if (
                    deadlines.setup is not None
                    and seen.joined is None
                    and seen.exited is None
                    and self.joined(r)
                ):
                    seen.joined = now
            link_problems = self.tb.problems()
            if link_problems:
                self.stop_all("link")
                return list(link_problems)
            if all(t.exited is not None for t in self.times.values()):
                return []
            # After one rank failed, the others get a moment to report their own error, then
            # they are stopped: they would only wait for the failed one until their deadline.
            decision = deadline_decision(now, start, self.times, deadlines)
            if isinstance(decision, Stop):
                self.fired = decision
                self.stop_all(decision.reason)
                return []
            self.clock.sleep(min(POLL, decision.until - now))

    def stop_all(self, why: str) -> None:
        """SIGUSR1 to every rank still running (a stack dump into its log; a described process
        gets its ``stop_signal``), then SIGKILL (to its group, for a group leader)."""
        running = {r: p for r, p in self.procs.items() if p.poll() is None}
        if not running:
            return
        for r, p in running.items():
            self.stopped[r] = why
            self.stopped_state[r] = self.state(r)
            described = self.process(r)
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(described.stop_signal if described else signal.SIGUSR1)
        deadline = self.clock.now() + STACK_WAIT
        while self.clock.now() < deadline:
            if all(
                p.poll() is not None or STACK_HEAD.search(self.log(r)) for r, p in running.items()
            ):
                self.clock.sleep(0.1)  # the dump is a few writes from a signal handler
                break
            self.clock.sleep(POLL)
        for r, p in running.items():
            described = self.process(r)
            if described is not None and described.group:
                signal_group(p, signal.SIGKILL)
            procs.stop(p)


def _copy_lines(pipe: Any, log: Path, each: Callable[[bytes, float], None]) -> None:
    """Every line of ``pipe`` appended to ``log`` (as it comes), then handed to ``each`` with
    the time it was read; until the pipe's end. A fault in ``each`` never stops the copy. A
    pipe whose lines are ``logged`` (another machine's agent wrote them into the log there,
    which comes back with the process's files) is only read."""
    logged = getattr(pipe, "logged", False)
    with pipe, contextlib.nullcontext() if logged else open(log, "ab", buffering=0) as out:
        for line in iter(pipe.readline, b""):
            if out is not None:
                out.write(line)
            with contextlib.suppress(Exception):
                each(line, time.time())
