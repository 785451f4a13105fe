"""``testbed run``'s progress: which phase the run in progress is in (build, self-check, ranks
start, warm-up, iteration k/n or step k/n, teardown) and an ETA from ``testbed plan``'s
estimate (testbed.experiment.forecast), scaled by how long the finished runs took against theirs.

The phase is read, not reported: a thread of the CLI polls what a run already leaves behind (its
network's registry record, rank 0's ``rank-0.state`` and ``rank-0.jsonl``, one line per timed
iteration or step), so the experiment layer needs no hook and nothing extra runs. On a terminal
the phase is the progress bar's text; off one (a CI log) it is one plain line per phase change,
and a line at least every :data:`HEARTBEAT_S` while a phase lasts.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from testbed.cli.plan_view import human_duration

POLL_S = 0.5
HEARTBEAT_S = 15.0  # off a terminal: the longest silence while a phase lasts


@dataclass(frozen=True)
class Phase:
    """Where a run is: ``kind`` (build, self-check, ranks start, warm-up, iteration, step,
    running, teardown) and, for iteration and step, ``k`` of ``n``."""

    kind: str
    k: int | None = None
    n: int | None = None

    def text(self) -> str:
        if self.k is not None and self.n:
            return f"{self.kind} {self.k}/{self.n}"
        return self.kind


@dataclass(frozen=True)
class Counting:
    """What rank 0 counts in a run: ``unit`` (iteration, step or None: a program of its own),
    ``n`` of them, and whether warm-up operations come first."""

    unit: str | None
    n: int | None
    warmup: bool = False
    traffic_only: bool = False  # no ranks: the scenario's flows


def counting(workload: Any, has_flows: bool = False) -> Counting:
    """What rank 0 of ``workload`` (a scenario's ``rank_workload``) counts."""
    from testbed.config.workloads import TrainingWorkload, Workload

    if workload is None:
        return Counting(None, None, traffic_only=has_flows)
    if isinstance(workload, Workload):
        combos = len(workload.collectives) * len(workload.algorithms) * len(workload.sizes)
        return Counting("iteration", combos * workload.iterations, workload.warmup > 0)
    if isinstance(workload, TrainingWorkload):
        return Counting("step", workload.steps)
    return Counting(None, None)


def _lines(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 16), b""))
    except OSError:
        return 0


def _state(run_dir: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads((run_dir / "rank-0.state").read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def phase_of(run_dir: Path, network: str | None, what: Counting, seen_up: bool = False) -> Phase:
    """The phase of the run writing ``run_dir`` whose network is in registry phase ``network``
    (building, up, down; None before its record exists or after it is removed); ``seen_up``:
    it was up at an earlier look."""
    state = _state(run_dir)
    name = state.get("state") if state else None
    if name == "done":
        return Phase("teardown")
    if name is None and not (run_dir / "rank-0.log").exists():
        if network == "up":
            return Phase("self-check, then traffic" if what.traffic_only else "self-check")
        # no record yet, or one building: the network; a record gone again: its teardown
        return Phase("teardown" if seen_up else "build")
    if network in (None, "down") and (run_dir / "rank-0.log").exists():
        return Phase("teardown")
    if name in (None, "starting", "setup"):
        if name is None and what.unit is None:
            return Phase("running")
        return Phase("ranks start")
    if what.unit == "step":
        step = state.get("iteration") if state else None
        k = int(step) + 1 if isinstance(step, int) else 0
        return Phase("step", min(k, what.n or k), what.n)
    if what.unit == "iteration":
        rows = _lines(run_dir / "rank-0.jsonl")
        if rows == 0 and what.warmup:
            return Phase("warm-up")
        return Phase("iteration", min(rows, what.n or rows), what.n)
    return Phase(name if name not in ("running",) else "running")


@dataclass
class Eta:
    """The sweep's remaining time: the plan's estimate per run (None where it leaves out the
    workload's own length), scaled by measured/estimated of the runs finished so far."""

    estimates: dict[str, float | None]
    measured: dict[str, float] = field(default_factory=dict)

    def finished(self, run_id: str, seconds: float) -> None:
        self.measured[run_id] = seconds

    def _scale(self) -> float:
        known = [(s, self.estimates[r]) for r, s in self.measured.items() if self.estimates.get(r)]
        est = sum(e for _, e in known if e)
        return sum(s for s, _ in known) / est if known and est > 0 else 1.0

    def remaining(self, current: str | None, elapsed: float, pending: list[str]) -> float | None:
        """Seconds left of the run ``current`` (``elapsed`` into it) and of ``pending`` after
        it; None when no estimate covers them and no run has finished to stand in."""
        scale = self._scale()
        mean = sum(self.measured.values()) / len(self.measured) if self.measured else None
        total = 0.0
        for run_id in ([current] if current else []) + pending:
            est = self.estimates.get(run_id)
            seconds = est * scale if est else mean
            if seconds is None:
                return None
            total += max(seconds - elapsed, 0.0) if run_id == current else seconds
        return total


def estimates(runs: list[Any], selfcheck_s: float) -> dict[str, float | None]:
    """``testbed plan``'s estimate of each run (None where it cannot say how long the workload
    takes: a command's or a training run's compute)."""
    from testbed.experiment.forecast import forecast
    from testbed.plan.topology import build_plan

    out: dict[str, float | None] = {}
    for r in runs:
        try:
            fc = forecast(r, build_plan(r.scenario, "<prefix>", 64), selfcheck_s)
        except Exception:  # an estimate is a courtesy: a run never fails for it
            out[r.run_id] = None
            continue
        out[r.run_id] = None if fc.unknown else fc.seconds
    return out


def network_phase(scenario: str, run_id: str) -> str | None:
    """The registry phase of the network execute() builds for ``run_id`` (its name starts with
    the scenario's name and the run id), None while it has no record."""
    from testbed.net import registry

    head = f"{scenario[:30]}-{run_id}-"
    for rec in registry.records():
        if rec.name.startswith(head):
            return rec.phase
    return None


class PhaseWatch:
    """Polls the run in progress and shows its phase with the ETA: ``show(text)`` on a terminal
    (the bar's description), a plain line through ``console`` off one."""

    def __init__(
        self,
        console: Console,
        eta: Eta,
        order: list[str],
        tty: bool,
        show: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.console, self.eta, self.order, self.tty = console, eta, order, tty
        self.show, self.clock = show, clock
        self.current: tuple[str, str, Path, Counting, str] | None = None  # run_id, label, dir...
        self.seen_up = False
        self.started = clock()
        self.last: tuple[str, str] | None = None  # (run_id, phase kind) last printed
        self.last_at = 0.0
        self.durations: dict[str, float] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.network: Callable[[str, str], str | None] = network_phase

    def start_run(self, run_id: str, label: str, run_dir: Path, what: Counting, sc: str) -> None:
        with self._lock:
            self.current = (run_id, label, run_dir, what, sc)
            self.started = self.clock()
            self.seen_up = False
        self.poll()

    def end_run(self, run_id: str) -> None:
        with self._lock:
            seconds = self.clock() - self.started
            self.durations[run_id] = seconds
            self.eta.finished(run_id, seconds)
            if run_id in self.order:
                self.order.remove(run_id)
            self.current = None

    def line(self, phase: Phase) -> str:
        assert self.current is not None
        run_id, label = self.current[0], self.current[1]
        elapsed = self.clock() - self.started
        pending = [r for r in self.order if r != run_id]
        left = self.eta.remaining(run_id, elapsed, pending)
        eta = f"; ETA {human_duration(left)}" if left is not None else ""
        return f"{run_id} {label}: {phase.text()} ({human_duration(elapsed)}{eta})"

    def poll(self) -> None:
        with self._lock:
            if self.current is None:
                return
            run_id, _, run_dir, what, sc = self.current
            network = self.network(sc, run_id)
            self.seen_up = self.seen_up or network == "up"
            phase = phase_of(run_dir, network, what, self.seen_up)
            text = self.line(phase)
            now = self.clock()
            if self.tty:
                if self.show is not None:
                    self.show(text)
                return
            if (run_id, phase.kind) != self.last or now - self.last_at >= HEARTBEAT_S:
                self.console.print(text, highlight=False, markup=False, soft_wrap=True)
                self.last, self.last_at = (run_id, phase.kind), now

    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                self.poll()
            except Exception:  # progress must never end a run
                continue

    def __enter__(self) -> PhaseWatch:
        self._thread = threading.Thread(target=self._loop, name="run-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
