"""The interface every workload kind implements, and the registry of kinds.

A workload kind is what ``workload: kind: <name>`` runs on the ranks: its schema (which declares
the metrics it offers to ``expect``), the module the ranks run, the keys their spec gets, the
table their rows go to, the run's summary rows, its operations for the fault analysis and its
table in ``testbed run``'s output. The runner and the CLI look a kind up by the scenario's
``workload.kind`` and never name one; adding a kind is one module (a :class:`WorkloadKind`) and
one :func:`register` call, which also registers its schema with the scenario parser.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from testbed.config.workloads import register_workload
from testbed.experiment.ranks import Deadlines, LaunchProcess, RankSpec
from testbed.experiment.session import STALL_GRACE, RankSession, setup_deadline

if TYPE_CHECKING:
    import pandas as pd

    from testbed.config.fields import WorkloadModel
    from testbed.live.protocol import LiveNetwork
    from testbed.plan.model import NetworkPlan
    from testbed.plan.ranks import RankSlot


@dataclass
class RunRows:
    """What one finished run hands its kind to summarise: its ranks' rows (those that ended
    ``ok`` and those that did not), the run's info (world size, topology, CPU verdict, ...), its
    sweep parameters, its resolved workload and the traces it sampled (queues, tcp, ...)."""

    rows: list[dict]
    info: dict[str, Any]
    params: dict[str, Any]
    workload: Any
    traces: dict[str, list[dict]] = field(default_factory=dict)


class WorkloadKind:
    """One kind of rank workload. Subclasses set the class attributes and implement
    :meth:`spec_keys` and :meth:`summarize`; the rest has working defaults."""

    name: ClassVar[str]  # the scenario's ``workload.kind``
    # what a scenario's ``workload:`` of this kind validates as (testbed.config.workloads);
    # its ``metrics`` are what the kind offers to ``expect``
    schema: ClassVar[type[WorkloadModel]]
    # ``python -m <rank_module> --spec spec.json --rank R`` runs each rank; it says where it is
    # with traffic.entry.write_state (rank-R.state: joined once past "setup"); a program
    # without a state file counts as joined once its rank-R.jsonl exists
    rank_module: ClassVar[str]
    rows_table: ClassVar[str]  # the results table the ranks' rows go to (<name>.parquet)
    # sample the WAN byte counters (the queue trace) while it runs, whatever ``trace:`` says
    wan_counters: ClassVar[bool] = False
    # sample the ranks' sockets' tcp_info while it runs when ``trace:`` does not: the windows
    # its prediction takes (analysis.steps.measured_topology)
    tcp_windows: ClassVar[bool] = False

    def spec_keys(self, workload: Any) -> dict[str, Any]:
        """What every rank's spec.json gets beside the launcher's own keys."""
        raise NotImplementedError

    def check(self, scenario: Any, base: Path, source: str) -> None:
        """Before any network is built: raise ScenarioError (exit 2) for what would fail every
        run of ``scenario`` (one point of the sweep), e.g. a file its workload names that is not
        there. ``base``: the scenario file's directory; ``source``: how errors name the file."""

    def processes(
        self,
        workload: Any,
        plan: NetworkPlan,
        ranks: list[RankSlot],
        run_dir: Path,
        source: Path | None,
    ) -> Callable[[RankSpec, LiveNetwork], list[LaunchProcess]] | None:
        """The kind's own processes for a spec on a network (host, argv, environment, log; what
        they need first, e.g. a service, may be started on the network then), or None:
        ``python -m <rank_module> --spec spec.json --rank R`` on every rank."""
        return None

    @property
    def runs_rank_module(self) -> bool:
        """Whether ``python -m <rank_module>`` runs each rank: the kind describes no processes
        of its own (:meth:`processes` not overridden)."""
        return type(self).processes is WorkloadKind.processes

    def deadlines(self, workload: Any) -> Deadlines:
        """The launch's deadlines. By default ``workload.timeout`` bounds every operation (the
        ranks' process group timeout), not the run: the ranks are stopped when they make no
        progress for longer; after a rank failed, the others get 10 s to report their own
        error."""
        return Deadlines(
            None, setup=setup_deadline(), stall=workload.timeout + STALL_GRACE, failure_grace=10.0
        )

    def problems(self, session: RankSession, workload: Any) -> list[str]:
        """The run's line per process that did not finish well."""
        return session.problems(workload.timeout)

    def run_info(self, session: RankSession) -> dict[str, Any]:
        """What the run's manifest entry (and :class:`RunRows`' ``info``) gets of the launch."""
        return {}

    def summarize(self, run: RunRows) -> list[dict]:
        """The run's summary rows (sweep parameters in front), from its rows."""
        raise NotImplementedError

    def operations(self, rows: pd.DataFrame) -> pd.DataFrame:
        """Its rows as operations (analysis.faults.operations: one per rank x operation, with
        an ``arm`` and an ``op`` index) for the fault analysis."""
        raise NotImplementedError

    def finish(self, summaries: list[dict], rows: list[dict], point_keys: list[str]) -> None:
        """After every run: what needs the other runs' summaries too (in place)."""

    def table(self, summaries: list[dict], params: list[str]) -> tuple[str, pd.DataFrame] | None:
        """Its table in ``testbed run``'s output: a title and text cells (analysis.display
        builds the built-in kinds'), or None."""
        return None


KINDS: dict[str, WorkloadKind] = {}


def register(kind: WorkloadKind) -> WorkloadKind:
    """Make ``kind`` known to the runner and its schema to the scenario parser, by its name
    (a later one of the same name replaces it)."""
    KINDS[kind.name] = kind
    register_workload(kind.name, kind.schema)
    return kind


def kind_of(workload: Any) -> WorkloadKind:
    """The kind that runs ``workload`` (its ``kind`` field)."""
    try:
        return KINDS[workload.kind]
    except KeyError:
        known = ", ".join(sorted(KINDS))
        raise KeyError(
            f"no workload kind {workload.kind!r} is registered; known: {known}"
        ) from None
