"""The summary metrics an expectation may test: name, unit and meaning, declared once. PURE.

The run metrics here are added to every summary row of a run by the analysis of what happened
around its workload (faults, failover, DCQCN and bulk flows). A workload kind's own metrics are
declared by its schema (``WorkloadModel.metrics``, testbed.config.workloads), so a new kind
brings its metrics with it; ``expect`` accepts the union of both.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str  # s, B, bit/s, B/s, ratio, count, 1 (a flag: 1.0 true), loss
    meaning: str


def _group(unit: str, *pairs: tuple[str, str]) -> tuple[Metric, ...]:
    return tuple(Metric(name, unit, meaning) for name, meaning in pairs)


# a changing WAN (analysis.faults.summarize_faults; the worst over the run's faults)
FAULT_METRICS = (
    *_group(
        "s",
        ("fault_detect", "fault start to the first operation error"),
        ("fault_stall", "an operation's stall beyond its no-fault time"),
        ("fault_flow_stall", "the bulk flows' stall (traffic:)"),
        ("fault_recover", "fault end to the first successful operation"),
    ),
    Metric("fault_stall_over_predicted", "ratio", "stall / the TCP timer model's prediction"),
    Metric("fault_survived", "1", "1.0 when every fault was survived"),
    Metric("events_late", "count", "events applied more than LATE_S after their time"),
    Metric("trace_correlation", "ratio", "lowest per-second correlation, achieved vs trace"),
)
# a fault on one path of a multipath link (analysis.routing, the run's first such fault)
FAILOVER_METRICS = _group(
    "s",
    ("failover_detect_s", "fault start to the first BFD/BGP session down on the path"),
    ("failover_moved_s", "fault start to every gateway's route without the path"),
    ("failover_restored_s", "fault end to the routes with the path again"),
)
# DCQCN flows (analysis.dcqcn): measured over the settled half, the fluid model's prediction
DCQCN_METRICS = (
    *_group(
        "bit/s",
        ("dcqcn_rate_mean_bps", "mean rate per flow"),
        ("dcqcn_cut_depth_bps", "mean rate cut"),
        ("dcqcn_pred_rate_mean_bps", "fluid model: mean rate per flow"),
        ("dcqcn_pred_cut_depth_bps", "fluid model: mean rate cut"),
        ("dcqcn_pred_discrete_cut_depth_bps", "model of discrete marks: mean rate cut"),
    ),
    *_group(
        "ratio",
        ("dcqcn_jain", "Jain's fairness index"),
        ("dcqcn_utilisation", "bottleneck utilisation"),
        ("dcqcn_pred_jain", "fluid model: Jain's index"),
        ("dcqcn_pred_utilisation", "fluid model: utilisation"),
        ("dcqcn_queue_mean_over_predicted", "measured / predicted mean queue"),
        ("dcqcn_cut_interval_over_predicted", "measured / predicted cut interval"),
        ("dcqcn_cut_depth_over_predicted", "measured / predicted cut depth"),
        ("dcqcn_convergence_over_predicted", "measured / predicted convergence"),
        ("dcqcn_utilisation_over_predicted", "measured / predicted utilisation"),
        ("dcqcn_cut_interval_over_predicted_discrete", "measured / discrete-mark cut interval"),
        ("dcqcn_cut_depth_over_predicted_discrete", "measured / discrete-mark cut depth"),
        ("dcqcn_queue_mean_over_predicted_discrete", "measured / discrete-mark mean queue"),
    ),
    *_group(
        "s",
        ("dcqcn_convergence_s", "time to converge to a fair share"),
        ("dcqcn_cut_interval_s", "mean time between rate cuts"),
        ("dcqcn_pred_convergence_s", "fluid model: convergence"),
        ("dcqcn_pred_cut_interval_s", "fluid model: cut interval"),
        ("dcqcn_pred_discrete_cut_interval_s", "model of discrete marks: cut interval"),
    ),
    *_group(
        "count",
        ("dcqcn_cuts", "rate cuts"),
        ("dcqcn_cnps", "CNPs received"),
        ("dcqcn_lost", "packets lost"),
    ),
    Metric("dcqcn_lossy", "1", "1.0 when a flow lost packets"),
    *_group(
        "B",
        ("dcqcn_queue_mean_bytes", "mean bottleneck queue"),
        ("dcqcn_queue_p5_bytes", "5th percentile queue"),
        ("dcqcn_queue_p95_bytes", "95th percentile queue"),
        ("dcqcn_queue_amplitude_bytes", "queue p95 - p5"),
        ("dcqcn_pred_queue_mean_bytes", "fluid model: mean queue"),
        ("dcqcn_pred_queue_amplitude_bytes", "fluid model: queue amplitude"),
    ),
)
# bulk TCP flows through the first one's bottleneck (the comparison with DCQCN)
BULK_METRICS = (
    Metric("bulk_flows", "count", "bulk flows"),
    Metric("bulk_rate_mean_bps", "bit/s", "mean goodput per flow"),
    Metric("bulk_jain", "ratio", "Jain's fairness index"),
    Metric("bulk_utilisation", "ratio", "bottleneck utilisation"),
    Metric("bulk_convergence_s", "s", "time to converge to a fair share"),
    *_group(
        "B",
        ("bulk_queue_mean_bytes", "mean bottleneck queue"),
        ("bulk_queue_p5_bytes", "5th percentile queue"),
        ("bulk_queue_p95_bytes", "95th percentile queue"),
        ("bulk_queue_amplitude_bytes", "queue p95 - p5"),
    ),
    Metric("bulk_dropped", "count", "packets the bottleneck dropped"),
)
RUN_METRICS = FAULT_METRICS + FAILOVER_METRICS + DCQCN_METRICS + BULK_METRICS


def unknown_metric(name: str, known: Iterable[str]) -> str:
    """The message for a metric nobody offers: the closest names, else every name."""
    names = list(dict.fromkeys(known))
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    if close:
        return f"unknown metric {name!r}; did you mean {', '.join(repr(c) for c in close)}?"
    return f"unknown metric {name!r}; known: {', '.join(names)}"
