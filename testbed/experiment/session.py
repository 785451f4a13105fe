"""One set of ranks on a live network, from its spec to what the ranks left behind.

:class:`RankSession` is what the sweep's run (:func:`testbed.experiment.execute.execute`) and the
pytest plugin's ``run_ranks`` (:mod:`testbed.testing.ranktest`) share: the spec (rank 0's host
the master), the launch (:class:`testbed.experiment.ranks.RankLaunch`) with its deadlines
(:class:`testbed.experiment.ranks.Deadlines`, re-exported here: setup until every rank joined,
then the operations' or a stall deadline), the clock origin and event runner of a timeline when
there is one, the WAN bottlenecks' byte counters when asked, and reading back the outcome:
every rank's rows (``rank-R.jsonl``), state (``rank-R.state``, traffic.entry's protocol), exit
code, why it was stopped, its log and stack, and the sweep's problem line per rank
(:func:`rank_problems`).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.core.errors import TestbedError
from testbed.experiment.clock import OriginClock
from testbed.experiment.events import EventRunner
from testbed.experiment.ranks import STACK_HEAD, Deadlines, LaunchProcess, RankLaunch, RankSpec
from testbed.live.network import Network
from testbed.live.protocol import LiveNetwork
from testbed.plan.ranks import RankSlot
from testbed.plan.timeline import Timeline
from testbed.trace.queues import QdiscSampler, QdiscTarget
from testbed.trace.run_traces import COUNTER_PERIOD
from traffic.exit_codes import EXIT_WRONG
from traffic.zygote import Zygote

# s: until every rank has joined (torch's import, then the join's own timeout,
# traffic.context.SETUP_TIMEOUT_S = 120 s, whatever the operations' timeout).
# TESTBED_SETUP_DEADLINE overrides it: in a TCG guest (`testbed vm`, no KVM) with one vCPU, two
# ranks importing torch side by side did not join within 180 s.
SETUP_DEADLINE = 180.0

# s beyond workload.timeout without any rank writing anything: the ranks are stopped as hung.
# Every operation is bounded by the timeout itself (gloo's), so this only catches what it
# does not bound (a hang outside an operation, gloo#520's lazy connect).
STALL_GRACE = 60.0


def setup_deadline() -> float:
    """SETUP_DEADLINE, or the TESTBED_SETUP_DEADLINE environment variable (s) when set."""
    value = os.environ.get("TESTBED_SETUP_DEADLINE", "")
    try:
        return float(value) if value else SETUP_DEADLINE
    except ValueError:
        raise TestbedError(f"TESTBED_SETUP_DEADLINE={value!r}: not a number of seconds") from None


class RankSession:
    """``module`` on every rank of ``ranks``, its files in ``run_dir``.

    ``keys``: the workload's spec keys; ``torch_timeout``: torch.distributed's own (must not fire
    before the deadlines). With ``timeline``, an event runner applies it around the launch (its
    clock's origin: rank 0's first announced iteration); ``events`` gets its rows. With
    ``wan_counters``, ``wan_counters`` gets the WAN bottlenecks' byte counters sampled during
    the launch. ``processes``: the workload kind's own processes for this spec and network (a
    user's program; :class:`testbed.experiment.ranks.LaunchProcess`) instead of ``module`` per
    rank. ``server``: a rank server started earlier (:func:`testbed.experiment.ranks.rank_server`).
    :meth:`run` once; then the read-back methods."""

    def __init__(
        self,
        tb: LiveNetwork,
        ranks: list[RankSlot],
        run_dir: Path,
        module: str,
        torch_timeout: float,
        keys: dict[str, Any],
        *,
        timeline: Timeline | None = None,
        wan_counters: bool = False,
        processes: Callable[[RankSpec, LiveNetwork], list[LaunchProcess]] | None = None,
        server: Zygote | None = None,
    ) -> None:
        assert tb.plan is not None, "the network is not up"
        self.tb = tb
        self.ranks = ranks
        self.run_dir = run_dir
        master = next(h for h in tb.plan.hosts if h.name == ranks[0].host)
        self.spec = RankSpec.build(tb, master.address, ranks, run_dir, torch_timeout, **keys)
        described = processes(self.spec, tb) if processes is not None else None
        self.launch = RankLaunch(
            tb, ranks, self.spec, run_dir, module, processes=described, server=server
        )
        self.timeline = timeline
        self.counting = wan_counters
        self.events: list[dict[str, Any]] = []
        self.wan_counters: list[dict[str, Any]] = []

    def run(self, deadlines: Deadlines) -> list[str]:
        """Start the ranks (the event runner and the counters around them), wait, stop what
        still runs; the link problems that ended the launch (empty otherwise)."""
        clock = runner = None
        if self.timeline is not None:
            # changes act on one machine's namespaces and link backend
            assert isinstance(self.tb, Network), "a timeline needs a one-machine network"
            clock = OriginClock(from_iterations=True)
            runner = EventRunner(self.timeline, self.tb, clock)
            self.spec.workload["events_socket"] = clock.path
        counters = self._sampler() if self.counting else None
        started = time.time()
        with counters or contextlib.nullcontext(), clock or contextlib.nullcontext():
            if runner is not None:
                runner.start()
            try:
                link_problems = self.launch.run(
                    deadlines.run,
                    setup_timeout=deadlines.setup,
                    failure_grace=deadlines.failure_grace,
                    stall=deadlines.stall,
                )
            finally:
                if runner is not None and clock is not None:
                    clock.end()
                    runner.stop()
        if self.counting:
            assert isinstance(self.tb, Network)
            self.wan_counters = list(counters.rows) if counters else []
            queues = self.tb.backend_queue_trace()
            self.wan_counters += [r for r in queues if r["time"] >= started]
        if runner is not None:
            self.events = runner.rows
        return link_problems

    def _sampler(self) -> QdiscSampler | None:
        """The WAN bottlenecks' byte counters, sampled every COUNTER_PERIOD (a delay line that
        holds a queue traces its own, as the network was brought up with ``trace.queues``)."""
        assert isinstance(self.tb, Network), "WAN counters need a one-machine network"
        assert self.tb.plan is not None
        targets = [
            QdiscTarget(d.name, d.shaper.ns, d.shaper.ifname)
            for d in self.tb.plan.wan
            if not self.tb.queue_in_backend(d)
        ]
        return QdiscSampler(targets, COUNTER_PERIOD) if targets else None

    # -- what the ranks left behind --------------------------------------------------------
    @property
    def codes(self) -> dict[int, int | None]:
        return self.launch.codes

    @property
    def stopped(self) -> dict[int, str]:
        """rank -> why it was stopped (testbed.experiment.ranks.STOP_REASONS)."""
        return self.launch.stopped

    @property
    def stopped_state(self) -> dict[int, Any]:
        """rank -> its state file when it was stopped."""
        return self.launch.stopped_state

    def state(self, rank: int) -> dict[str, Any]:
        """The rank's state file now (``{"state": None, "iteration": None}`` without one)."""
        return self.launch.state(rank)

    def log(self, rank: int) -> str:
        return self.launch.log(rank)

    def log_path(self, rank: int) -> Path:
        return self.launch.log_path(rank)

    def stack(self, rank: int) -> str:
        """The stack dump a stopped rank wrote into its log ("" without one)."""
        m = STACK_HEAD.search(self.log(rank))
        return m.string[m.start() :].strip() if m else ""

    def rows(self) -> tuple[list[dict], list[dict]]:
        """The ranks' rows and skipped combinations (:func:`read_rank_rows`)."""
        return read_rank_rows(self.run_dir)

    def problems(self, timeout: float) -> list[str]:
        """The sweep's line per rank that did not finish well (:func:`rank_problems`)."""
        return rank_problems(self.launch, timeout)


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


def rank_detail(run_dir: Path, problem: str, rows: list[dict]) -> str:
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
    """Every ``rank-R.jsonl`` row in ``run_dir`` (and ``host-H.jsonl``: a per-host process's,
    workload kind command), flattened, and apart the skipped ones."""
    rows, skips = [], []
    paths = sorted(run_dir.glob("rank-*.jsonl")) + sorted(run_dir.glob("host-*.jsonl"))
    for path in paths:
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
