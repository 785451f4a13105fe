"""Run a user's function on every rank of a live testbed and report what happened.

This module owns :class:`RankTestbed`: a network built from a scenario, ranks placed on its
hosts, functions run on them. Each ``run_ranks`` call is one
:class:`testbed.experiment.session.RankSession` of ``python -m traffic.user_rank`` processes,
the sweep's own launcher: it waits and reads back what the ranks wrote
(:mod:`testbed.testing.ranktest.outcomes`, :class:`testbed.testing.ranktest.results.RankResults`).
Two clocks bound a call: ``setup_timeout`` until every rank has joined torch.distributed (Python
start, torch import and gloo's rendezvous: seconds each on a small machine), then ``timeout``
for the iterations themselves, so a short ``timeout`` tests the user's code, not the machine's
import speed. A rank still running at its deadline gets SIGUSR1 (it dumps its stack into its
log, which the results show) and is then killed. ``run_command`` runs a user's program instead,
through the command kind's launcher (testbed.experiment.steer.launch_session), and reads its
processes back into the same RankResults.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.config.loading import with_faults
from testbed.core.errors import ScenarioError, TestbedError
from testbed.core.units import format_duration, format_rate
from testbed.experiment.session import Deadlines, RankSession
from testbed.live.network import Network
from testbed.plan.ranks import RankSlot, place_ranks
from testbed.plan.timeline import Timeline, build_timeline
from testbed.testing.ranktest.functions import (
    caller_sys_path,
    check_signature,
    describe_function,
    pickle_arguments,
    positive_seconds,
)
from testbed.testing.ranktest.outcomes import (
    RankOutcome,
    call_problems,
    read_outcomes,
    root_causes_first,
)
from testbed.testing.ranktest.results import RankResults
from testbed.trace.run_traces import with_wan_counters

RANK_MODULE = "traffic.user_rank"
FAILURE_GRACE = 5.0  # after one rank failed, seconds the others get to report their own error
LOG_TAIL = 10  # lines of a failed process's log in its outcome's ``error``


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
        blob = pickle_arguments(args, kwargs)
        timeout_s = positive_seconds(timeout, "timeout")
        setup_s = positive_seconds(setup_timeout, "setup_timeout")
        if iterations < 1 or warmup < 0:
            raise ValueError(f"iterations must be >= 1 and warmup >= 0, got {iterations}, {warmup}")
        if self.testbed.record is None or self.testbed.plan is None:
            raise TestbedError(f"testbed {self.name} is not up")
        self._calls += 1
        assert self.out_dir is not None
        run_dir = self.out_dir / f"call-{self._calls}"
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "args.pkl").write_bytes(blob)
        keys = {
            "function": function,
            "function_file": file,
            "args_file": str(run_dir / "args.pkl"),
            "sys_path": caller_sys_path(),
            "iterations": int(iterations),
            "warmup": int(warmup),
        }
        session = RankSession(
            self.testbed,
            self.ranks,
            run_dir,
            RANK_MODULE,
            # gloo's own timeout must not fire before ours: ours say where a rank hung
            setup_s + timeout_s + 30,
            keys,
            timeline=timeline,
            wan_counters=True,
        )
        deadlines = Deadlines(timeout_s, setup=setup_s, failure_grace=FAILURE_GRACE)
        link_problems = session.run(deadlines)
        outcomes = read_outcomes(session)
        network_problems = self.testbed.problems()
        # a failed link explains everything after it; then the ranks, root causes first
        problems = link_problems + [p for p in network_problems if p not in link_problems]
        ordered = root_causes_first(outcomes)
        problems += call_problems(session, ordered, function, timeout_s, setup_s)
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
            wan_counters=session.wan_counters,
            events=session.events if timeline is not None else None,
        )
        self.results.append(result)
        return result

    # -- running a program -----------------------------------------------------------------
    def run_command(
        self,
        argv: list[str],
        *,
        per: str = "rank",
        ranks_per_host: int | None = None,
        placement: str | None = None,
        env: dict[str, str] | None = None,
        cwd: str | Path | None = None,
        timeout: float | str = 120.0,
        metrics: str = "json-lines",
        on_failure: str = "stop-all",
        services: list[dict[str, Any]] | None = None,
    ) -> RankResults:
        """Run a program, unchanged, on every rank (``per="rank"``) or host (``per="host"``,
        e.g. torchrun) with the command kind's launcher (docs/command.md: the placeholders in
        ``argv`` and ``env`` values, torchrun's environment, the hosts' own hostnames, a
        process group each; ``services`` as its ``workload.services``). ``cwd`` defaults to the
        current directory; ``timeout`` bounds the whole launch. Returns a RankResults with an
        outcome per process (``status`` ``ok`` for exit 0, ``error``, ``timeout``, ``stopped``;
        ``exit_code``, ``seconds`` = [its duration], ``log``, ``stdout``), ``times`` = [the
        slowest process's seconds], ``wan_bytes`` = [the bytes through every WAN direction while
        it ran], ``metrics`` its stdout's metric lines. Raises ScenarioError (before any process
        starts) for a bad argument, an unknown placeholder or a program that is not there;
        never for what the processes do: check ``.ok``."""
        from pydantic import ValidationError

        from testbed.config.command import CommandWorkload, missing_files
        from testbed.experiment.session import read_rank_rows
        from testbed.experiment.steer import launch_session
        from testbed.experiment.workloads.command import KIND, describe_exit

        if isinstance(argv, str) or not argv:
            raise ScenarioError("run_command: argv is a non-empty list: ['python', 'bench.py']")
        data = {
            "kind": "command", "per": per, "argv": [str(a) for a in argv],
            "ranks_per_host": ranks_per_host or self.ranks_per_host,
            "placement": placement or self.placement,
            "cwd": str(Path(cwd if cwd is not None else ".").resolve()), "env": env or {},
            "timeout": f"{positive_seconds(timeout, 'timeout')!r}s", "metrics": metrics,
            "on_failure": on_failure,
            "services": services or [],
        }  # fmt: skip
        try:
            workload = CommandWorkload.model_validate(data)
        except ValidationError as exc:
            lines = []
            for e in exc.errors():
                inner = (e.get("ctx") or {}).get("error")
                path = getattr(inner, "path", ".".join(str(x) for x in e["loc"]))
                lines.append(
                    f"{path.removeprefix('workload.')}: {getattr(inner, 'message', e['msg'])}"
                )
            raise ScenarioError("run_command: " + "; ".join(lines)) from None
        missing = missing_files(workload, Path.cwd())
        if missing:
            shown = "; ".join(f"{f.removeprefix('workload.')}: {m}" for f, m in missing)
            raise ScenarioError(f"run_command: {shown}")
        if self.testbed.record is None or self.testbed.plan is None:
            raise TestbedError(f"testbed {self.name} is not up")
        self._calls += 1
        assert self.out_dir is not None
        run_dir = self.out_dir / f"call-{self._calls}"
        session, problems = launch_session(self.testbed, workload, run_dir, wan_counters=True)
        KIND.run_info(session)  # its services, if any, stopped and forgotten
        launch = session.launch
        unix = time.time() - launch.clock.now()  # the launch's clock -> Unix time
        clusters = {h.name: h.cluster for h in self.testbed.plan.hosts}
        outcomes = []
        for p in launch.processes or ():
            code, why = launch.codes.get(p.key), launch.stopped.get(p.key)
            seen, begun = launch.times.get(p.key), launch.begun.get(p.key)
            exited = seen.exited if seen is not None else None
            o = RankOutcome(
                p.key, p.host, clusters.get(p.host, ""), "ok", exit_code=code,
                log=run_dir / p.log, name=p.what,
            )  # fmt: skip
            if begun is not None:
                o.starts = [unix + begun]
                if exited is not None and why is None:
                    o.seconds = [exited - begun]
            if why is not None:
                o.status = "timeout" if why == "timeout" else "stopped"
                o.error_summary = f"was stopped ({why})"
            elif code is None:
                o.status, o.error_summary = "crashed", "did not start"
            elif code != 0:
                o.status, o.error_summary = "error", describe_exit(code)
                o.error_time = unix + (seen.failed if seen and seen.failed else launch.clock.now())
            if o.status != "ok":
                o.error = "\n".join(o.stdout.strip().splitlines()[-LOG_TAIL:])
            outcomes.append(o)
        begun_all = [unix + b for b in launch.begun.values()]
        ended = [unix + t.exited for t in launch.times.values() if t.exited is not None]
        window = (min(begun_all), max(ended)) if begun_all and ended else None
        network_problems = self.testbed.problems()
        rows, _ = read_rank_rows(run_dir)
        result = RankResults(
            function=" ".join(workload.argv),
            outcomes=outcomes,
            problems=problems + [p for p in network_problems if p not in problems],
            network=self.network_state(),
            network_problems=network_problems,
            links=self.links,
            call_kwargs={},
            run_dir=run_dir,
            topology=self._topology,
            wan_counters=session.wan_counters,
            call="run_command",
            metrics=[r for r in rows if "metric" in r],
            window=window,
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
