"""The ``collectives`` workload kind: nccl-tests-style timed collectives on every rank
(traffic.rank), one row per rank x timed iteration in collectives.parquet, and a summary row per
collective x algorithm x size with the α-β model's prediction and its terms beside it."""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.display import collectives_display
from analysis.operations import rank_operations
from analysis.run_summary import collectives_summary
from testbed.config.workloads import Workload
from testbed.experiment.workloads.base import RunRows, WorkloadKind


class Collectives(WorkloadKind):
    name = "collectives"
    schema = Workload
    rank_module = "traffic.rank"
    rows_table = "collectives"
    tcp_windows = True

    def spec_keys(self, workload: Any) -> dict[str, Any]:
        return {
            "collectives": list(workload.collectives),
            "algorithms": list(workload.algorithms),
            "sizes": list(workload.sizes),
            "dtype": workload.dtype,
            "warmup": workload.warmup,
            "iterations": workload.iterations,
        }

    def summarize(self, run: RunRows) -> list[dict]:
        return collectives_summary(run.rows, run.info, run.params, run.traces.get("tcp"))

    def operations(self, rows: pd.DataFrame) -> pd.DataFrame:
        return rank_operations(rows)

    def table(self, summaries: list[dict], params: list[str]) -> tuple[str, pd.DataFrame]:
        return (
            "collectives (time = slowest rank per iteration)",
            collectives_display(summaries, params),
        )


KIND = Collectives()
