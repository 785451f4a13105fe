"""Rank processes: the one launcher for every workload that runs torch.distributed ranks.

This module owns the rank spec (:class:`RankSpec`, the ``spec.json`` every rank reads: where the
master is, the world, the placement, plus the workload's own keys) and :class:`RankLaunch`: one
``python -m <module> --spec spec.json --rank R`` process per rank inside its host (recorded by
pid, so teardown stops it; its port and environment from :mod:`testbed.live.processes`), its
output in ``rank-R.log``, watched until every rank has exited, a link failed, a deadline passed or
one rank failed and the others had ``failure_grace`` seconds to report their own error. A rank
still running then gets ``SIGUSR1`` (the rank modules dump their stacks into their log on it), a
moment to write the dump, and ``SIGKILL``. Where a rank is and whether it joined come from its
``rank-R.state`` (traffic.entry's rank-status protocol; a program without one counts as joined
once its ``rank-R.jsonl`` exists). Its one user: :class:`testbed.experiment.session.RankSession`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from testbed.core.errors import TestbedError
from testbed.live.processes import rank_env
from testbed.live.protocol import HostProcess, LiveNetwork
from testbed.net import procs
from testbed.plan.ranks import RankSlot
from traffic.entry import has_joined, read_state, rows_path, state_path

POLL = 0.05  # seconds between two looks at the ranks
STACK_WAIT = 1.0  # seconds a stopped rank gets to write its SIGUSR1 stack dump
STACK_HEAD = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):", re.M)

# Why a rank was stopped (RankLaunch.stopped): its deadline passed ("timeout"), the setup
# deadline passed ("setup-timeout"), no rank wrote anything for the stall time ("stalled"),
# another rank failed ("stopped") or a link did ("link").
STOP_REASONS = ("timeout", "setup-timeout", "stalled", "stopped", "link")


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


# -- the launch --------------------------------------------------------------------------------
class RankLaunch:
    """One launch of ``module`` on every rank of ``ranks``, with its files in ``run_dir``.

    ``run()`` starts, waits and stops; afterwards ``codes`` holds every rank's exit code (None:
    never started), ``stopped`` rank -> why it was stopped (:data:`STOP_REASONS`) with
    ``stopped_state`` the rank's state at that moment, and ``run()``'s return value the link
    problems that ended it (empty otherwise). ``state`` and ``joined`` read the ranks' state
    files (traffic.entry) unless given."""

    def __init__(
        self,
        tb: LiveNetwork,
        ranks: list[RankSlot],
        spec: RankSpec,
        run_dir: Path,
        module: str,
        *,
        state: Callable[[int], Any] | None = None,
        joined: Callable[[int], bool] | None = None,
    ) -> None:
        self.tb = tb
        self.ranks = ranks
        self.spec = spec
        self.run_dir = run_dir
        self.module = module
        # rank -> where it is now (kept for stopped ranks)
        self.state = state or (lambda rank: read_state(run_dir, rank))
        # rank -> whether it has joined torch.distributed (ends the setup deadline)
        self.joined = joined or (lambda rank: has_joined(run_dir, rank))
        self.procs: dict[int, HostProcess] = {}
        self.stopped: dict[int, str] = {}
        self.stopped_state: dict[int, Any] = {}

    @property
    def codes(self) -> dict[int, int | None]:
        return {
            s.rank: (p.returncode if (p := self.procs.get(s.rank)) else None) for s in self.ranks
        }

    def log_path(self, rank: int) -> Path:
        return self.run_dir / f"rank-{rank}.log"

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
        require_torch()
        self.spec.write(self.run_dir / "spec.json")
        for slot in self.ranks:  # a state left by an earlier launch here is not this one's
            state_path(self.run_dir, slot.rank).unlink(missing_ok=True)
        try:
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
            return self._wait(timeout, setup_timeout, failure_grace, stall)
        finally:
            self.stop_all("stopped")

    def output_size(self) -> int:
        """Bytes the ranks have written so far (their jsonl and log files): their progress."""
        total = 0
        for slot in self.ranks:
            for path in (self.log_path(slot.rank), rows_path(self.run_dir, slot.rank)):
                with contextlib.suppress(OSError):
                    total += path.stat().st_size
        return total

    def _wait(
        self,
        timeout: float | None,
        setup_timeout: float | None,
        failure_grace: float,
        stall: float | None = None,
    ) -> list[str]:
        start = time.monotonic()
        ready_at: float | None = start if setup_timeout is None else None
        first_failure: float | None = None
        written, progress_at = -1, start
        while True:
            now = time.monotonic()
            if stall is not None:
                size = self.output_size()
                if size != written:
                    written, progress_at = size, now
            codes = {r: p.poll() for r, p in self.procs.items()}
            link_problems = self.tb.problems()
            if link_problems:
                self.stop_all("link")
                return list(link_problems)
            if all(c is not None for c in codes.values()):
                return []
            if first_failure is None and any(c not in (None, 0) for c in codes.values()):
                first_failure = now
            if ready_at is None and all(codes[r] is not None or self.joined(r) for r in codes):
                ready_at = now
            # After one rank failed, give the others a moment to report their own error, then
            # stop them: they would only wait for the failed one until their deadline.
            if first_failure is not None and now - first_failure > failure_grace:
                self.stop_all("stopped")
                return []
            if ready_at is None and setup_timeout is not None and now - start > setup_timeout:
                self.stop_all("setup-timeout")
                return []
            if ready_at is not None and timeout is not None and now - ready_at > timeout:
                self.stop_all("timeout")
                return []
            if (
                ready_at is not None
                and stall is not None
                and now - max(progress_at, ready_at) > stall
            ):
                self.stop_all("stalled")
                return []
            time.sleep(POLL)

    def stop_all(self, why: str) -> None:
        """SIGUSR1 to every rank still running (a stack dump into its log), then SIGKILL."""
        running = {r: p for r, p in self.procs.items() if p.poll() is None}
        if not running:
            return
        for r, p in running.items():
            self.stopped[r] = why
            self.stopped_state[r] = self.state(r)
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + STACK_WAIT
        while time.monotonic() < deadline:
            if all(
                p.poll() is not None or STACK_HEAD.search(self.log(r)) for r, p in running.items()
            ):
                time.sleep(0.1)  # the dump is a few writes from a signal handler: let it finish
                break
            time.sleep(POLL)
        for p in running.values():
            procs.stop(p)
