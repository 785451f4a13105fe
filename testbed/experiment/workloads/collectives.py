"""The ``collectives`` workload kind: nccl-tests-style timed collectives on every rank
(traffic.rank), one row per rank x timed iteration in collectives.parquet, and a summary row per
collective x algorithm x size with the α-β model's prediction and its terms beside it."""

from __future__ import annotations

from typing import Any

import pandas as pd
from rich.markup import escape
from rich.table import Table

from analysis.operations import rank_operations
from analysis.run_summary import collectives_summary
from testbed.config.workloads import Workload
from testbed.core.units import format_duration, format_size
from testbed.experiment.workloads.base import RunRows, WorkloadKind


class Collectives(WorkloadKind):
    name = "collectives"
    schema = Workload
    rank_module = "traffic.rank"
    rows_table = "collectives"

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
        return collectives_summary(run.rows, run.info, run.params)

    def operations(self, rows: pd.DataFrame) -> pd.DataFrame:
        return rank_operations(rows)

    def table(self, summaries: list[dict], params: list[str]) -> Table | None:
        rows = [s for s in summaries if "collective" in s]  # not: every operation failed
        if not rows:
            return None
        t = Table(title="collectives (time = slowest rank per iteration)")
        for col in (
            *params,
            "collective",
            "algorithm",
            "size",
            "n",
            "p50",
            "p95",
            "algbw",
            "busbw",
            "predicted",
            "meas/pred",
            "flags",
        ):
            t.add_column(col, justify="right")
        for s in rows:
            flags = []
            if s.get("cpu_saturated"):
                flags.append("CPU-saturated")
            if not s.get("correct", True):
                flags.append("WRONG")
            pred = s.get("predicted")
            ratio = s.get("measured_over_predicted")
            t.add_row(
                *(escape(str(s.get(p, ""))) for p in params),
                escape(str(s["collective"])),
                escape(str(s["algorithm"])),
                format_size(s["size"]),
                str(s["ranks"]),
                format_duration(s["time_p50"]),
                format_duration(s["time_p95"]),
                f"{s['algbw'] / 1e6:.1f} MB/s",
                f"{s['busbw'] / 1e6:.1f} MB/s",
                format_duration(pred) if pred else "-",
                f"{ratio:.2f}" if ratio else "-",
                " ".join(flags),
            )
        return t


KIND = Collectives()
