"""The interface every workload kind implements, and the registry of kinds.

A workload kind is what ``workload: kind: <name>`` runs on the ranks: its schema (which declares
the metrics it offers to ``expect``), the module the ranks run, the keys their spec gets, the
table their rows go to, the run's summary rows, its operations for the fault analysis and its
table in ``testbed run``'s output. The runner and the CLI look a kind up by the scenario's
``workload.kind`` and never name one; adding a kind is one module (a :class:`WorkloadKind`) and
one :func:`register` call, which also registers its schema with the scenario parser.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from testbed.config.workloads import register_workload

if TYPE_CHECKING:
    import pandas as pd

    from testbed.config.fields import WorkloadModel


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
