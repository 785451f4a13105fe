"""Run a user's function on every rank of a live testbed and report what happened.

This module owns :class:`RankTestbed` (a network built from a scenario, ranks placed on its
hosts, functions run on them) and :class:`RankResults` (per-rank returns, timings, errors with
tracebacks, problems, the link self-check and α-β predictions). The pytest plugin
(:mod:`testbed.testing.plugin`) is a thin layer over it; scripts may use it directly::

    with RankTestbed.from_file("scenarios/quickstart.yaml", set={"wan[0].delay": "50ms"}) as rt:
        res = rt.run_ranks(mypkg.comms.my_allreduce, nbytes=16 << 20)
        assert res.ok, res.explain()
        print(res.time.p50, res.predicted("all_reduce", "flat"))

Each ``run_ranks`` call starts one ``python -m traffic.user_rank`` process per rank inside its
host namespace (started, watched and stopped by :class:`testbed.experiment.ranks.RankLaunch`, the
one launcher, which :mod:`testbed.experiment.execute` uses too), waits, and reads the files the
ranks wrote. Two clocks bound a call: ``setup_timeout`` until every rank has joined
torch.distributed (Python start, torch import and gloo's rendezvous: seconds each on a small
machine), then ``timeout`` for the iterations themselves, so a short ``timeout`` tests the
user's code, not the machine's import speed. A rank still running at its deadline gets SIGUSR1
(it dumps its stack into its log, which the results show) and is then killed.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import os
import pickle
import re
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.config.loading import with_faults
from testbed.core.errors import ScenarioError, TestbedError
from testbed.core.stats import quantile
from testbed.core.units import format_duration, format_rate, parse_duration
from testbed.experiment.clock import OriginClock
from testbed.experiment.events import EventRunner
from testbed.experiment.ranks import STACK_HEAD, RankLaunch, RankSpec
from testbed.live.network import Network
from testbed.plan.ranks import RankSlot, place_ranks
from testbed.plan.timeline import Timeline, build_timeline
from testbed.trace.queues import QdiscSampler, QdiscTarget
from testbed.trace.run_traces import COUNTER_PERIOD, with_wan_counters

RANK_MODULE = "traffic.user_rank"
FAILURE_GRACE = 5.0  # after one rank failed, seconds the others get to report their own error
TRACEBACK_TAIL = 25  # lines of a traceback explain() shows
_GLOO_LOCATION = re.compile(r"^\[[^\]]+:[0-9]+\] ")
HARNESS_STAGES = ("setup", "barrier", "final-barrier")  # the harness's own torch.distributed calls

_STATE_TEXT = {
    "starting": "starting Python and loading the function",
    "setup": "joining torch.distributed",
    "import": "loading the function or its arguments",
    "return": "sending its return value",
    "final-barrier": "in the final barrier after returning",
    "done": "finished",
}


class RankFunctionError(TypeError):
    """The function or its arguments cannot be sent to the rank processes."""


# -- statistics --------------------------------------------------------------------------------
@dataclass(frozen=True)
class TimeStats:
    """Seconds over iterations. Empty (no iteration finished): every value is NaN, so any
    comparison in a test is False instead of an AttributeError hiding the real failure."""

    p50: float
    p95: float
    max: float
    min: float
    mean: float
    n: int

    @classmethod
    def of(cls, values: list[float]) -> TimeStats:
        if not values:
            nan = float("nan")
            return cls(nan, nan, nan, nan, nan, 0)
        return cls(
            p50=quantile(values, 0.5),
            p95=quantile(values, 0.95),
            max=max(values),
            min=min(values),
            mean=sum(values) / len(values),
            n=len(values),
        )

    def __str__(self) -> str:
        if not self.n:
            return "no timed iteration finished"
        return (
            f"p50 {format_duration(self.p50)}, p95 {format_duration(self.p95)}, "
            f"max {format_duration(self.max)} over {self.n} iteration(s)"
        )


# -- one rank's outcome ------------------------------------------------------------------------
@dataclass
class RankOutcome:
    """What one rank did in one ``run_ranks`` call.

    ``status``: ``ok`` (the function returned on every iteration), ``error`` (an exception;
    ``where`` says in whose code: ``fn``, ``import``, ``return``, or the harness's ``setup``,
    ``barrier``, ``final-barrier``), ``timeout`` (stopped at a deadline), ``stopped`` (stopped
    because another rank failed), ``crashed`` (exited without writing a result).
    """

    rank: int
    host: str
    cluster: str
    status: str
    returned: Any = None
    seconds: list[float] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)  # unix time each timed iteration began
    warmup_seconds: list[float] = field(default_factory=list)
    phases: list[dict[str, float]] = field(default_factory=list)
    where: str | None = None
    iteration: int | None = None
    error: str = ""
    error_summary: str = ""
    error_time: float | None = None
    exit_code: int | None = None
    stack: str = ""
    log: Path | None = None

    @property
    def label(self) -> str:
        return f"rank {self.rank} ({self.host})"

    @property
    def primary(self) -> bool:
        """True when this rank's own code (or setup) failed or hung, not when it failed or
        waited in one of the harness's barriers (because another rank did not arrive)."""
        return self.status in ("error", "crashed", "timeout") and self.where not in (
            "barrier",
            "final-barrier",
        )


def _short(message: str, limit: int = 160) -> str:
    """First line of an error message, without gloo's source location and advice."""
    line = message.strip().splitlines()[0] if message.strip() else ""
    line = _GLOO_LOCATION.sub("", line).split(". This is typically", 1)[0]
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _user_frames(stack: str) -> str:
    """A faulthandler dump without the harness's own frames (runpy, traffic.user_rank)."""
    keep = [
        line
        for line in stack.splitlines()
        if not ("<frozen runpy>" in line or f"{os.sep}traffic{os.sep}user_rank.py" in line)
    ]
    return "\n".join(keep)


def _root_causes_first(outcomes: list[RankOutcome]) -> list[RankOutcome]:
    """Failed ranks whose own code failed first (earliest first), then the ranks that failed
    because of them, then the ranks that were fine."""
    return sorted(
        outcomes,
        key=lambda o: (
            o.status == "ok",
            not o.primary,
            o.error_time if o.error_time is not None else math.inf,
            o.rank,
        ),
    )


def _where_text(state: str | None, iteration: int | None, function: str) -> str:
    if state == "fn":
        return f"in {function}, iteration {iteration}"
    if state == "barrier":
        return f"in the barrier before iteration {iteration}"
    return _STATE_TEXT.get(state or "", state or "not started")


# -- the results of one call -------------------------------------------------------------------
class RankResults:
    """Everything one ``run_ranks`` call produced.

    * ``ok``: every rank returned from every iteration, no exception, no timeout, no link failure.
    * ``returns``: the last iteration's return value, indexed by rank (None where none).
    * ``errors``: rank -> formatted traceback of every rank that raised.
    * ``problems``: one line per failure, root causes first
      ("rank 1 (west-h0) did not finish within 5 s (in mod.fn, iteration 0)").
    * ``times``: per timed iteration the slowest rank's seconds (the nccl-tests convention);
      ``time``: their :class:`TimeStats` (``p50``, ``p95``, ``max``, ``min``, ``mean``, ``n``).
    * ``phases``: phase name -> TimeStats of the slowest rank's time in that phase per iteration
      (phases are what the function timed with ``ctx.timer(name)``).
    * ``outcomes``: one :class:`RankOutcome` per rank (per-rank seconds, phases, logs, stacks).
    * ``links``: the network's link self-check rows; ``network_problems``: emulation failures.
    * ``predicted(collective, algorithm, size=None)``: the α-β model's seconds.
    * ``events``: with ``run_ranks(faults=[...])``, one row per fault event as in
      events.parquet (docs/results.md: ``action``, ``what``, ``scheduled_unix``,
      ``applied_unix``, ``late_s``, ``status``, ``error``, ...); empty otherwise.
      ``faults_ended_at``: when the last fault's closing event was applied (Unix time).
    * ``explain()`` (also ``str(res)``): failing ranks, their hosts and traceback tails, and the
      network state; ``repr`` is a one-line summary.
    """

    def __init__(
        self,
        *,
        function: str,
        outcomes: list[RankOutcome],
        problems: list[str],
        network: str,
        network_problems: list[str],
        links: list[Any],
        call_kwargs: dict[str, Any],
        run_dir: Path,
        topology: Callable[[], Any],
        wan_counters: list[dict[str, Any]] | None = None,
        events: list[dict[str, Any]] | None = None,
    ) -> None:
        self.function = function
        self.wan_counters = wan_counters or []
        self.events = events or []
        self.outcomes = outcomes
        self.problems = problems
        self.network = network
        self.network_problems = network_problems
        self.links = links
        self.run_dir = run_dir
        self._call_kwargs = call_kwargs
        self._topology = topology

    @property
    def faults_ended_at(self) -> float | None:
        """Unix time the last fault ended (its closing event applied, or undone at the end of
        the call); None without faults."""
        # a fault's last event is its end (or the undo at the end of the call)
        ends = [r["applied_unix"] for r in self.events if r.get("applied_unix") is not None]
        return max(ends) if ends else None

    @property
    def ok(self) -> bool:
        return not self.problems and all(o.status == "ok" for o in self.outcomes)

    @property
    def returns(self) -> list[Any]:
        return [o.returned for o in self.outcomes]

    @property
    def errors(self) -> dict[int, str]:
        return {o.rank: o.error for o in self.outcomes if o.error}

    @property
    def times(self) -> list[float]:
        per_rank = [o.seconds for o in self.outcomes]
        if not per_rank or any(len(s) != len(per_rank[0]) for s in per_rank):
            # an iteration counts only when every rank finished it
            n = min((len(s) for s in per_rank), default=0)
            per_rank = [s[:n] for s in per_rank]
        return [max(col) for col in zip(*per_rank, strict=True)] if per_rank else []

    @property
    def time(self) -> TimeStats:
        return TimeStats.of(self.times)

    @property
    def wan_bytes(self) -> list[float]:
        """Per timed iteration, the bytes through every WAN direction's bottleneck (the links'
        own counters, sampled every 20 ms and interpolated at the iterations' starts; the
        barrier before the next iteration counts with this one)."""
        n = len(self.times)
        starts = self.outcomes[0].starts[:n] if self.outcomes else []
        if not n or len(starts) < n or not self.wan_counters:
            return []
        import pandas as pd

        from analysis.training import wan_bytes

        steps = pd.DataFrame(
            {
                "step": range(n),
                "start": starts,
                "end": [s + t for s, t in zip(starts, self.times, strict=True)],
            }
        )
        per_dir = wan_bytes(steps, pd.DataFrame(self.wan_counters))
        return [
            float(b)
            for b in per_dir.groupby("step")["bytes"].sum().reindex(range(n), fill_value=0.0)
        ]

    @property
    def phases(self) -> dict[str, TimeStats]:
        n = len(self.times)
        names = dict.fromkeys(k for o in self.outcomes for p in o.phases[:n] for k in p)
        return {
            name: TimeStats.of(
                [max(o.phases[i].get(name, 0.0) for o in self.outcomes) for i in range(n)]
            )
            for name in names
        }

    def predicted(self, collective: str, algorithm: str = "flat", size: int | None = None) -> float:
        """Seconds the α-β model (analysis.model) predicts for ``collective`` with ``algorithm``
        on this network and placement; ``size`` in bytes defaults to the call's ``nbytes=``."""
        from analysis.model import predict

        if size is None:
            if "nbytes" not in self._call_kwargs:
                raise ValueError(
                    "predicted(): pass size=<bytes>; this run_ranks call had no nbytes= keyword "
                    "to take it from"
                )
            size = int(self._call_kwargs["nbytes"])
        return predict(collective, algorithm, size, self._topology())

    # -- presentation ----------------------------------------------------------------------
    def _summary(self) -> str:
        first = next((o for o in self._ordered() if o.status != "ok"), None)
        if self.ok:
            return f"ok: {len(self.outcomes)} ranks, {self.time}"
        if first is not None and first.error_summary:
            return f"FAILED: {first.label} {first.error_summary}"
        return f"FAILED: {self.problems[0] if self.problems else 'see explain()'}"

    def _ordered(self) -> list[RankOutcome]:
        return _root_causes_first(self.outcomes)

    def explain(self) -> str:
        lines = [
            f"run_ranks({self.function}) on {len(self.outcomes)} ranks: {self._summary()}",
        ]
        if self.problems:
            lines.append("problems:")
            lines += [f"  - {p}" for p in self.problems]
        for o in self._ordered():
            if o.status == "ok":
                continue
            head = f"{o.label}, cluster {o.cluster}: {o.status}"
            if o.where:
                head += f" ({_where_text(o.where, o.iteration, self.function)})"
            lines.append(head)
            text = o.error or o.stack
            if text and not o.primary and any(x.primary for x in self.outcomes):
                # a consequence of another rank's failure: its harness traceback is noise
                if o.status in ("timeout", "stopped"):
                    lines.append("  | was waiting for the other ranks when stopped")
                else:
                    lines.append(f"  | {o.error_summary} (after another rank failed)")
            elif text:
                body = text.splitlines()
                if len(body) > TRACEBACK_TAIL:
                    body = ["...", *body[-TRACEBACK_TAIL:]]
                lines += [f"  | {line}" for line in body]
            if o.log:
                lines.append(f"  log: {o.log}")
        fine = [o for o in self.outcomes if o.status == "ok"]
        if fine:
            lines.append("ranks that returned: " + ", ".join(o.label for o in fine))
        if self.times:
            lines.append(f"time (slowest rank per iteration): {self.time}")
        lines.append(self.network)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.explain()

    def __repr__(self) -> str:
        return f"<RankResults {self._summary()} (str() or .explain() for details)>"


# -- validation of what is sent to the ranks ---------------------------------------------------
def describe_function(fn: Callable[..., Any]) -> tuple[str, str | None]:
    """'module:qualname' and source file of a function the rank processes can import by name.

    Raises RankFunctionError for anything they cannot: lambdas, nested functions and closures,
    bound methods, partials and other callables, functions not reachable under their own name.
    """
    how = (
        "define it with `def` at the top level of a module (a test file or your package) and pass "
        "its arguments to run_ranks(fn, *args, **kwargs)"
    )
    if inspect.ismethod(fn):
        raise RankFunctionError(
            f"{fn!r} is a bound method; rank processes cannot receive its object: {how}"
        )
    if not inspect.isfunction(fn):
        raise RankFunctionError(
            f"{fn!r} is not a plain function (a {type(fn).__name__}); "
            f"run_ranks needs a picklable top-level function: {how}"
        )
    qualname, module = fn.__qualname__, fn.__module__
    if "<lambda>" in qualname:
        raise RankFunctionError(f"a lambda cannot run on the ranks: {how}")
    if "<locals>" in qualname:
        raise RankFunctionError(
            f"{qualname} is a nested function or closure; rank processes cannot import it: {how}"
        )
    obj: Any = sys.modules.get(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if obj is not fn:
        raise RankFunctionError(
            f"{module}.{qualname} does not name this function (redefined, or wrapped by a "
            f"decorator without functools.wraps?); rank processes import it by name: {how}"
        )
    try:
        file: str | None = inspect.getsourcefile(fn) or fn.__code__.co_filename
    except TypeError:
        file = None
    return f"{module}:{qualname}", str(Path(file).resolve()) if file else None


def check_signature(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> None:
    """Raise RankFunctionError unless ``fn(ctx, *args, **kwargs)`` binds: the rank context comes
    first, so a function without it would fail on every rank with a confusing TypeError."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(object(), *args, **kwargs)
    except TypeError as exc:
        name = getattr(fn, "__qualname__", repr(fn))
        raise RankFunctionError(
            f"{name}{sig} cannot be called as {name}(ctx, *args, **kwargs) with these arguments "
            f"({exc}); a rank function takes the rank context first, e.g. "
            f"def {getattr(fn, '__name__', 'fn')}(ctx, nbytes): ..."
        ) from None


def _pickle_arguments(args: tuple, kwargs: dict[str, Any]) -> bytes:
    try:
        return pickle.dumps((args, kwargs))
    except Exception as exc:
        raise RankFunctionError(
            f"run_ranks arguments must be picklable (they are sent to every rank): {exc}"
        ) from exc


def _seconds(value: float | str, what: str) -> float:
    seconds = parse_duration(value) if isinstance(value, str) else float(value)
    if seconds <= 0:
        raise ValueError(f"{what} must be positive, got {value!r}")
    return seconds


def _caller_sys_path() -> list[str]:
    # '' means "the current directory" to the caller; the rank process must get it spelled out
    return [os.getcwd() if p == "" else p for p in sys.path]


# -- the testbed -------------------------------------------------------------------------------
class RankTestbed:
    """A live network with ranks placed on it, running user functions on every rank.

    Attributes once up: ``testbed`` (:class:`testbed.api.Network`), ``plan`` (its NetworkPlan),
    ``ranks`` (list of :class:`testbed.layout.RankSlot`), ``links`` (the link self-check rows,
    :class:`testbed.selfcheck.LinkCheck`, empty with ``selfcheck=False``), ``results`` (every
    RankResults so far).
    """

    def __init__(
        self,
        testbed: Network,
        *,
        ranks_per_host: int | None = None,
        placement: str | None = None,
        selfcheck: bool = True,
        out_dir: str | Path | None = None,
        selfcheck_seconds: float = 1.0,
    ) -> None:
        workload = testbed.scenario.rank_workload if testbed.scenario else None
        self.testbed = testbed
        self.ranks_per_host = ranks_per_host or (workload.ranks_per_host if workload else 1)
        self.placement = placement or (workload.placement if workload else "by-cluster")
        self.selfcheck = selfcheck
        self.selfcheck_seconds = selfcheck_seconds
        self.out_dir = Path(out_dir) if out_dir else None
        self.ranks: list[RankSlot] = []
        self.links: list[Any] = []
        self.results: list[RankResults] = []
        self._calls = 0

    @classmethod
    def from_file(
        cls,
        path: str | Path,
        set: dict[str, Any] | None = None,
        name: str | None = None,
        **kwargs: Any,
    ) -> RankTestbed:
        """A RankTestbed (not up yet) for a scenario file with ``set`` overrides applied
        (``{"wan[0].delay": "50ms"}``, as ``testbed run --set``)."""
        from testbed.config.loading import load_yaml
        from testbed.config.sweep import expand

        runs = expand(load_yaml(path), str(path), list((set or {}).items()))
        if len(runs) != 1:
            raise ScenarioError(
                f"{path}: its sweep/repeat makes {len(runs)} runs, a test needs one network: "
                "pin the swept fields with set={...} (and parametrize the test over them)"
            )
        scenario = runs[0].scenario
        # WAN byte counters for RankResults.wan_bytes, also from a delay line holding a queue
        scenario = scenario.model_copy(update={"trace": with_wan_counters(scenario.trace)})
        return cls(Network(scenario, name=name, source=str(path)), **kwargs)

    @property
    def plan(self) -> Any:
        return self.testbed.plan

    @property
    def name(self) -> str:
        return self.testbed.name

    # -- lifecycle -------------------------------------------------------------------------
    def up(self) -> RankTestbed:
        """Build the network (SIGTERM tears it down, as with ``with Network``), place the ranks,
        run the link self-check."""
        self.testbed.__enter__()
        try:
            assert self.testbed.plan is not None
            self.ranks = place_ranks(self.testbed.plan, self.ranks_per_host, self.placement)
            if self.out_dir is None:
                self.out_dir = Path(tempfile.mkdtemp(prefix=f"testbed-{self.name}-"))
            if self.selfcheck:
                from testbed.live.selfcheck import check_links

                self.links = check_links(self.testbed, duration=self.selfcheck_seconds, pings=20)
        except BaseException:
            self.testbed.__exit__(None, None, None)
            raise
        return self

    def down(self) -> None:
        if self.testbed.record is not None:
            self.testbed.__exit__(None, None, None)

    def __enter__(self) -> RankTestbed:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    # -- the network state, for failure messages -------------------------------------------
    def network_state(self) -> str:
        tb = self.testbed
        rec = tb.record
        backend = tb.backend.name if tb.backend else "?"
        head = f"network: testbed {tb.name}"
        head += f" (prefix {rec.prefix}, {backend} backend)" if rec else " (down)"
        lines = [head]
        placement = ", ".join(f"{r.rank}={r.host}" for r in self.ranks)
        lines.append(f"  ranks ({self.placement}, {self.ranks_per_host}/host): {placement}")
        if tb.plan is not None:
            for d in tb.plan.wan:
                lines.append(
                    f"  wan {d.name}: {format_rate(d.rate)}, delay {format_duration(d.delay)}"
                )
        problems = tb.problems() if rec else []
        lines.append(
            "  emulation problems: " + ("; ".join(problems) if problems else "none (links alive)")
        )
        if not self.selfcheck:
            lines.append("  link self-check: off")
        for c in self.links:
            rtt = format_duration(c.rtt_median_s) if c.rtt_median_s is not None else "-"
            good = format_rate(c.goodput_bps) if c.goodput_bps else "-"
            verdict = "ok" if c.ok else f"FLAGGED: {c.problem}"
            lines.append(
                f"  link self-check {c.direction}: RTT {rtt} "
                f"(configured {format_duration(c.rtt_configured_s)}), goodput {good} "
                f"(configured {format_rate(c.goodput_configured_bps)}): {verdict}"
            )
        return "\n".join(lines)

    def _topology(self) -> Any:
        from testbed.experiment.execute import model_topology

        assert self.testbed.plan is not None
        return model_topology(self.testbed.plan, self.ranks, self.placement, self.ranks_per_host)

    # -- running a function ----------------------------------------------------------------
    def run_ranks(
        self,
        fn: Callable[..., Any],
        *args: Any,
        iterations: int = 1,
        warmup: int = 0,
        timeout: float | str = 120.0,
        setup_timeout: float | str = 120.0,
        faults: list[dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> RankResults:
        """Run ``fn(ctx, *args, **kwargs)`` on every rank, ``warmup`` untimed then
        ``iterations`` timed times, each after a world barrier.

        ``faults``: WAN faults during the call, written as in a scenario's ``faults``
        (docs/faults.md; times count from the first timed iteration, ``after: {iteration: K}``
        from the start of timed iteration K), e.g. ``[{"kind": "blackhole", "link":
        "east-west", "after": {"iteration": 1}, "duration": "2s"}]``; what happened is in
        ``.events``. A fault still in force when the call ends is undone then. Burst loss needs
        a delay line (or netem) for the link from bring-up: put it in the scenario file instead.

        ``fn`` must be a top-level function (rank processes import it by name); arguments and
        return values travel by pickle. ``ctx`` is a :class:`traffic.context.RankContext`.
        ``timeout`` bounds the iterations once every rank has joined torch.distributed;
        ``setup_timeout`` bounds the joining. Never raises for what happens on the ranks: check
        ``.ok``. Raises RankFunctionError (before any process starts) for a function or arguments
        that cannot be sent.
        """
        function, file = describe_function(fn)
        check_signature(fn, args, kwargs)
        timeline = self._timeline(faults) if faults else None
        blob = _pickle_arguments(args, kwargs)
        timeout_s = _seconds(timeout, "timeout")
        setup_s = _seconds(setup_timeout, "setup_timeout")
        if iterations < 1 or warmup < 0:
            raise ValueError(f"iterations must be >= 1 and warmup >= 0, got {iterations}, {warmup}")
        if self.testbed.record is None or self.testbed.plan is None:
            raise TestbedError(f"testbed {self.name} is not up")
        self._calls += 1
        assert self.out_dir is not None
        run_dir = self.out_dir / f"call-{self._calls}"
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "args.pkl").write_bytes(blob)
        master = next(h for h in self.testbed.plan.hosts if h.name == self.ranks[0].host)
        spec = RankSpec.build(
            self.testbed,
            master.address,
            self.ranks,
            run_dir,
            # gloo's own timeout must not fire before ours: ours say where a rank hung
            setup_s + timeout_s + 30,
            function=function,
            function_file=file,
            args_file=str(run_dir / "args.pkl"),
            sys_path=_caller_sys_path(),
            iterations=int(iterations),
            warmup=int(warmup),
        )
        clock = runner = None
        if timeline is not None:
            clock = OriginClock(from_iterations=True)
            runner = EventRunner(timeline, self.testbed, clock)
            spec.workload["events_socket"] = clock.path
        launch = _Launch(self.testbed, self.ranks, spec, run_dir, function)
        counters = self._wan_counters()
        started = time.time()
        with counters or contextlib.nullcontext(), clock or contextlib.nullcontext():
            if runner is not None:
                runner.start()
            try:
                link_problems = launch.run(timeout_s, setup_s)
            finally:
                if runner is not None and clock is not None:
                    clock.end()
                    runner.stop()
        wan_rows = list(counters.rows) if counters else []
        wan_rows += [r for r in self.testbed.backend_queue_trace() if r["time"] >= started]
        outcomes = launch.outcomes()
        network_problems = self.testbed.problems()
        # a failed link explains everything after it; then the ranks, root causes first
        problems = link_problems + [p for p in network_problems if p not in link_problems]
        problems += launch.problems_for(_root_causes_first(outcomes))
        result = RankResults(
            function=function,
            outcomes=outcomes,
            problems=problems,
            network=self.network_state(),
            network_problems=network_problems,
            links=self.links,
            call_kwargs=kwargs,
            run_dir=run_dir,
            topology=self._topology,
            wan_counters=wan_rows,
            events=runner.rows if runner is not None else None,
        )
        self.results.append(result)
        return result

    def _timeline(self, faults: list[dict[str, Any]]) -> Timeline:
        """The call's faults as a timeline (checked like a scenario's: bad ones raise
        ScenarioError naming the field)."""
        sc = self.testbed.scenario
        if sc is None or self.plan is None:
            raise TestbedError(f"testbed {self.name} is not up")
        sc = with_faults(sc, faults, "run_ranks(faults=...)")
        source = self.testbed.source or "run_ranks(faults=...)"
        return build_timeline(sc, self.plan, Path(source).parent, 0.0, source=source)

    def _wan_counters(self) -> QdiscSampler | None:
        """The WAN bottlenecks' byte counters, sampled every COUNTER_PERIOD during a call (a
        delay line that holds a queue traces its own, as the testbed was brought up with
        ``trace.queues``)."""
        plan = self.testbed.plan
        targets = [
            QdiscTarget(d.name, d.shaper.ns, d.shaper.ifname)
            for d in plan.wan
            if not self.testbed.queue_in_backend(d)
        ]
        return QdiscSampler(targets, COUNTER_PERIOD) if targets else None


class _Launch:
    """One call's rank processes (started, watched and stopped by the one launcher,
    :class:`testbed.experiment.ranks.RankLaunch`) and what they left behind, read back as
    outcomes."""

    def __init__(
        self, tb: Network, ranks: list[RankSlot], spec: RankSpec, run_dir: Path, function: str
    ) -> None:
        self.ranks = ranks
        self.run_dir = run_dir
        self.function = function
        self.timeouts = (0.0, 0.0)
        self.procs = RankLaunch(
            tb, ranks, spec, run_dir, RANK_MODULE, state=self._state, joined=self._joined
        )

    def _state(self, rank: int) -> dict[str, Any]:
        with contextlib.suppress(OSError, ValueError):
            return json.loads((self.run_dir / f"rank-{rank}.state").read_text())
        return {"state": None, "iteration": None}

    def _joined(self, rank: int) -> bool:
        return self._state(rank)["state"] not in (None, "starting", "setup")

    def run(self, timeout: float, setup_timeout: float) -> list[str]:
        self.timeouts = (timeout, setup_timeout)
        return self.procs.run(timeout, setup_timeout=setup_timeout, failure_grace=FAILURE_GRACE)

    def _log(self, rank: int) -> str:
        return self.procs.log(rank)

    def _stack(self, rank: int) -> str:
        """The faulthandler dump of a stopped rank."""
        m = STACK_HEAD.search(self._log(rank))
        if not m:
            return ""
        return "stack when stopped:\n" + _user_frames(m.string[m.start() :].strip())

    def outcomes(self) -> list[RankOutcome]:
        out = []
        for slot in self.ranks:
            out.append(self._outcome(slot))
        return out

    def _outcome(self, slot: RankSlot) -> RankOutcome:
        r = slot.rank
        o = RankOutcome(r, slot.host, slot.cluster, "crashed", log=self.run_dir / f"rank-{r}.log")
        o.exit_code = self.procs.codes.get(r)
        path = self.run_dir / f"rank-{r}.result.pkl"
        data: dict[str, Any] = {}
        with contextlib.suppress(OSError, pickle.UnpicklingError, EOFError):
            data = pickle.loads(path.read_bytes())
        if data:
            o.status = data["status"]
            o.seconds = list(data.get("seconds", []))
            o.starts = list(data.get("starts", []))
            o.warmup_seconds = list(data.get("warmup_seconds", []))
            o.phases = list(data.get("phases", []))
            o.where, o.iteration = data.get("where"), data.get("iteration")
            o.error = data.get("error", "")
            if o.error:
                what = f"{data.get('error_type')}: {_short(str(data.get('error_message')))}"
                harness = o.where in HARNESS_STAGES
                o.error_summary = f"failed: {what}" if harness else f"raised {what}"
            o.error_time = data.get("error_time")
            if data.get("returned") is not None:
                try:
                    o.returned = pickle.loads(data["returned"])
                except Exception as exc:  # e.g. a class only the rank could import
                    o.status, o.where = "error", "return"
                    o.error = f"the returned value cannot be unpickled here: {exc!r}"
                    o.error_summary = "returned a value that cannot be unpickled by the test"
        if r in self.procs.stopped and o.status != "ok":
            why, state = self.procs.stopped[r], self.procs.stopped_state[r]
            o.status = "timeout" if why in ("timeout", "setup-timeout") else "stopped"
            o.where, o.iteration = state.get("state"), state.get("iteration")
            o.stack = self._stack(r)
            o.error_time = o.error_time or time.time()
        elif o.status == "crashed":
            tail = self._log(r).strip().splitlines()[-10:]
            o.error = "\n".join(tail)
            o.error_summary = f"exited with code {o.exit_code} without a result"
            o.where = self._state(r).get("state")
        return o

    def problems_for(self, outcomes: list[RankOutcome]) -> list[str]:
        timeout, setup_timeout = self.timeouts
        out = []
        for o in outcomes:
            where = _where_text(o.where, o.iteration, self.function)
            why = self.procs.stopped.get(o.rank, "")
            if o.status == "timeout" and why == "setup-timeout":
                out.append(
                    f"{o.label} did not finish setting up within {setup_timeout:g} s ({where})"
                )
            elif o.status == "timeout":
                out.append(f"{o.label} did not finish within {timeout:g} s ({where})")
            elif o.status == "stopped":
                reason = "a link failed" if why == "link" else "another rank failed"
                out.append(f"{o.label} stopped after {reason} ({where})")
            elif o.status in ("error", "crashed"):
                out.append(f"{o.label} {o.error_summary} ({where})")
        return out
