"""Everything one ``run_ranks`` (or ``run_command``) call produced (:class:`RankResults`): per-rank
returns, timings (:class:`TimeStats`), errors with tracebacks, problems, the link self-check, the
WAN counters, fault events and α-β predictions, a command's stdout and metric lines, and
``explain()``, the failure message a test shows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.core.stats import quantile
from testbed.core.units import format_duration
from testbed.testing.ranktest.outcomes import RankOutcome, root_causes_first, where_text

TRACEBACK_TAIL = 25  # lines of a traceback explain() shows


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
    * ``stdout``: each process's log (stdout and stderr), in the order of ``outcomes``;
      ``metrics``: ``run_command``'s metric lines as metrics.parquet's rows, ``metric(name)``
      their values.
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
        call: str = "run_ranks",
        metrics: list[dict[str, Any]] | None = None,
        window: tuple[float, float] | None = None,
    ) -> None:
        self.function = function
        self.call = call
        self.metrics = metrics or []
        # run_command: the launch's first start and last exit (Unix s), its one "iteration"
        self._window = window
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

        ends = [s + t for s, t in zip(starts, self.times, strict=True)]
        if self._window is not None:  # run_command: the whole launch
            starts, ends = [self._window[0]], [self._window[1]]
        steps = pd.DataFrame({"step": range(n), "start": starts, "end": ends})
        per_dir = wan_bytes(steps, pd.DataFrame(self.wan_counters))
        return [
            float(b)
            for b in per_dir.groupby("step")["bytes"].sum().reindex(range(n), fill_value=0.0)
        ]

    @property
    def stdout(self) -> list[str]:
        """Each process's log (stdout and stderr as written), in the order of ``outcomes``."""
        return [o.stdout for o in self.outcomes]

    def metric(self, name: str) -> list[float]:
        """The numeric values of the metric lines named ``name``, in the order they were read
        (every process's, rank 0's first)."""
        return [
            float(r["value"])
            for r in self.metrics
            if r.get("metric") == name and isinstance(r.get("value"), int | float)
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
        if self.ok and self.call == "run_command":
            return f"ok: {len(self.outcomes)} processes exited 0, slowest {self.time.max:.2f} s"
        if self.ok:
            return f"ok: {len(self.outcomes)} ranks, {self.time}"
        if first is not None and first.error_summary:
            return f"FAILED: {first.label} {first.error_summary}"
        return f"FAILED: {self.problems[0] if self.problems else 'see explain()'}"

    def _ordered(self) -> list[RankOutcome]:
        return root_causes_first(self.outcomes)

    def explain(self) -> str:
        lines = [
            f"{self.call}({self.function}) on {len(self.outcomes)} "
            f"{'processes' if self.call == 'run_command' else 'ranks'}: {self._summary()}",
        ]
        if self.problems:
            lines.append("problems:")
            lines += [f"  - {p}" for p in self.problems]
        for o in self._ordered():
            if o.status == "ok":
                continue
            head = f"{o.label}, cluster {o.cluster}: {o.status}"
            if o.where:
                head += f" ({where_text(o.where, o.iteration, self.function)})"
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
            which = "exited 0" if self.call == "run_command" else "returned"
            lines.append(
                f"{'processes' if self.call == 'run_command' else 'ranks'} that {which}: "
                + ", ".join(o.label for o in fine)
            )
        if self.times and self.call == "run_ranks":
            lines.append(f"time (slowest rank per iteration): {self.time}")
        lines.append(self.network)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.explain()

    def __repr__(self) -> str:
        return f"<RankResults {self._summary()} (str() or .explain() for details)>"
