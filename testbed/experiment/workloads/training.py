"""The ``training`` workload kind: ``traffic.train_rank`` processes train a small model with
one of the training algorithms; one row per rank x step in training.parquet, the WAN byte
counters sampled while they train (the queue trace, on whatever ``trace.queues`` says), and a
summary row per run with the α-β prediction of the algorithm's communication
(traffic.training.schedule + analysis.model).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.compute_util import emulated_summary, sync_period
from analysis.display import training_display
from analysis.operations import rank_operations
from analysis.run_summary import (
    fill_targets,
    predicted_comm_per_step,
    topology_from,
    training_summary,
)
from testbed.config.workloads import TrainingWorkload
from testbed.experiment.workloads.base import RunRows, WorkloadKind

SPEC_KEYS = (
    "model",
    "data",
    "steps",
    "batch",
    "lr",
    "seed",
    "algorithm",
    "ddp",
    "diloco",
    "streaming",
    "localsgd",
    "parameter_server",
    "eval_every",
    "compute",
    "scale",
)


def rank_keys(w: TrainingWorkload) -> dict[str, Any]:
    """``spec["training"]`` for the ranks."""
    return {"training": w.model_dump(mode="json", include=set(SPEC_KEYS))}


class Training(WorkloadKind):
    name = "training"
    schema = TrainingWorkload
    rank_module = "traffic.train_rank"
    rows_table = "training"
    wan_counters = True

    def spec_keys(self, workload: Any) -> dict[str, Any]:
        return rank_keys(workload)

    def summarize(self, run: RunRows) -> list[dict]:
        done = [r for r in run.rows if r.get("outcome", "ok") == "ok"]
        if not done:
            return []
        workload = run.workload.model_dump(mode="json")
        out = training_summary(done, run.traces.get("queues", []), workload, run.info, run.params)
        if workload.get("compute") is None:  # real math on every rank
            return [{**row, "compute": "real"} for row in out]
        # emulated compute: CU over settled steps, both units, the paper's wall-clock model
        topo = topology_from(run.info.get("topology"))
        # the α-β model over one sync period (the settled CU counts whole periods)
        period = sync_period(workload["algorithm"], workload["diloco"]["inner_steps"])
        ab = predicted_comm_per_step({**workload, "steps": period}, topo) if topo else None
        extra = emulated_summary(pd.DataFrame(done), workload, topo, ab)
        return [{**row, **extra} for row in out]

    def operations(self, rows: pd.DataFrame) -> pd.DataFrame:
        return rank_operations(pd.DataFrame(), rows)

    def finish(self, summaries: list[dict], rows: list[dict], point_keys: list[str]) -> None:
        fill_targets(summaries, rows, point_keys)

    def table(self, summaries: list[dict], params: list[str]) -> tuple[str, pd.DataFrame]:
        return (
            "training (step time = slowest rank; WAN bytes = both directions' counters)",
            training_display(summaries, params),
        )


KIND = Training()
