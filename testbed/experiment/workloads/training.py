"""The ``training`` workload kind: ``traffic.train_rank`` processes train a small model with
one of the training algorithms; one row per rank x step in training.parquet, the WAN byte
counters sampled while they train (the queue trace, on whatever ``trace.queues`` says), and a
summary row per run with the α-β prediction of the algorithm's communication
(traffic.training.schedule + analysis.model).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd

from analysis.display import training_display
from analysis.model import Topology, predict, predict_push_pull
from analysis.operations import rank_operations
from analysis.training import predicted_comm, step_table, summarize_training, time_to_loss
from testbed.config.workloads import TrainingWorkload
from testbed.experiment.workloads.base import RunRows, WorkloadKind
from traffic.training.schedule import TrainingSchedule, schedule_from_config, syncs
from traffic.training.shapes import model_shapes

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
)


def rank_keys(w: TrainingWorkload) -> dict[str, Any]:
    """``spec["training"]`` for the ranks."""
    return {"training": w.model_dump(mode="json", include=set(SPEC_KEYS))}


def schedule_of(w: TrainingWorkload) -> TrainingSchedule:
    """The schedule the ranks will follow (they build it from the same keys)."""
    return schedule_from_config(rank_keys(w)["training"], model_shapes(w.model))


def predicted_comm_per_step(w: TrainingWorkload, topo: Topology) -> float | None:
    """The α-β model's communication seconds per step for the algorithm's schedule: world syncs
    on the run's topology, leaders' syncs on one rank per cluster, cluster syncs on the slowest
    cluster alone. Streaming's overlap is not subtracted (this is the communication, not the
    stall); the parameter server's exchange is synchronous (its staleness is not subtracted
    either). None where the model has no answer."""
    clusters = [(c, m) for c, m in topo.clusters if m]
    n = sum(m for _, m in clusters)
    leaders = dataclasses.replace(topo, clusters=tuple((c, 1) for c, _ in clusters))

    def one(group: str, collective: str, payload: int) -> float | None:
        try:
            if collective == "push-pull":
                return predict_push_pull(payload, w.parameter_server.servers, topo)
            if group == "cluster":
                return max(
                    _collective(collective, payload, _alone(topo, c, m), m) for c, m in clusters
                )
            if group == "leaders":
                return _collective(collective, payload, leaders, len(clusters))
            return _collective(collective, payload, topo, n)
        except ValueError:
            return None

    s = schedule_of(w)
    return predicted_comm([(x.group, x.collective, x.payload) for x in syncs(s)], s.steps, one)


def _alone(topo: Topology, cluster: str, ranks: int) -> Topology:
    return dataclasses.replace(topo, clusters=((cluster, ranks),), links=())


def _collective(collective: str, payload: int, topo: Topology, ranks: int) -> float:
    if ranks < 2:
        return 0.0
    if collective == "all_gather":  # int8 codes: every rank's payload gathered everywhere
        return predict("all_gather", "flat", payload * ranks, topo)
    return predict("all_reduce", "flat", payload, topo)


def summary(
    rows: list[dict], queues: list[dict], w: TrainingWorkload, topo: Topology | None
) -> dict[str, Any]:
    predicted = predicted_comm_per_step(w, topo) if topo is not None else None
    return summarize_training(pd.DataFrame(rows), pd.DataFrame(queues), w.target_loss, predicted)


def fill_targets(summaries: list[dict], training_rows: list[dict], point_keys: list[str]) -> None:
    """Where the scenario set no target: the target is the plain DDP run's final loss at the
    same sweep point (same parameters except the workload's; a DDP run with a compression hook
    is the baseline only where no plain one ran), and time_to_loss follows from it. Recomputed
    for every row on each call: a later run may be the baseline of earlier ones."""

    def point(s: dict) -> tuple:
        return tuple(str(s.get(k)) for k in point_keys if not k.startswith("workload."))

    def plain(s: dict) -> bool:
        return all(v in (None, "none") for k, v in s.items() if k.startswith("workload.ddp."))

    baseline: dict[tuple, tuple[bool, float | None]] = {}  # point -> (plain, final loss)
    for s in summaries:
        if s.get("algorithm") != "ddp":
            continue
        key = point(s)
        if key not in baseline or (plain(s) and not baseline[key][0]):
            baseline[key] = (plain(s), s.get("final_loss"))
    by_run = pd.DataFrame(training_rows)
    for s in summaries:
        if s.get("target_from") == "scenario":
            continue
        target = baseline.get(point(s), (False, None))[1]
        if target is None or by_run.empty:
            continue
        s["target_loss"], s["target_from"] = target, "ddp"
        s["time_to_loss"] = time_to_loss(
            step_table(by_run[by_run["run_id"] == s["run_id"]]), target
        )


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
        row = summary(done, run.traces.get("queues", []), run.workload, run.topology)
        return [{**run.params, **row, "cpu_saturated": bool(run.info.get("cpu_saturated"))}]

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
