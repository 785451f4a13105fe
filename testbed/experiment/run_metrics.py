"""A run's metrics beside its workload's summary (faults, failover, DCQCN and bulk flows), from
its tables as ``execute`` recorded them: the inputs gathered here, the work done by
analysis.run_summary.run_metrics (which reads the same rows from a results directory).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.operations import rank_operations
from analysis.run_summary import run_metrics
from testbed.config.sweep import RunSpec
from testbed.core.results import DYNAMICS_TABLES, TRACE_TABLES
from testbed.experiment.results import RunResult
from testbed.experiment.workloads import kind_of


def metrics_of(spec: RunSpec, result: RunResult) -> dict[str, Any]:
    """The run's fault, failover, DCQCN and bulk metrics for its summary rows (so that
    expectations can test them); empty for a run without any of them."""
    rows = pd.DataFrame([{"run_id": spec.run_id, **r} for r in result.rows])
    workload = spec.scenario.rank_workload
    ops = kind_of(workload).operations(rows) if workload is not None else rank_operations(rows)
    tables = {name: result.traces.get(name, []) for name in TRACE_TABLES}
    tables |= {name: result.dynamics.get(name, []) for name in DYNAMICS_TABLES}
    resolved = spec.scenario.model_dump(mode="json")
    return run_metrics(ops, resolved, result.info, result.network, tables)
