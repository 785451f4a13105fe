"""A run's metrics for its summary rows, from its tables as ``execute`` recorded them: the fault
metrics (:func:`fault_summary`), the DCQCN ones, measured and predicted by the fluid model
(:func:`dcqcn_summary`), and the bulk flows' rates and fairness (:func:`bulk_summary`); each
empty for a run without what it measures. Pure pandas over the result (analysis does the work).
"""

from __future__ import annotations

from typing import Any, cast

import pandas as pd

from analysis import dcqcn
from analysis.faults import summarize_faults
from analysis.network import reference
from analysis.operations import rank_operations
from analysis.routing import failover_metrics
from testbed.config.sweep import RunSpec
from testbed.core.dcqcn import DcqcnParams
from testbed.experiment.results import RunResult
from testbed.experiment.workloads import kind_of


def fault_summary(spec: RunSpec, result: RunResult) -> dict[str, Any]:
    """The run's fault metrics (analysis.faults.summarize_faults) for its summary rows, so that
    expectations can test them; empty for a run without events."""
    events = result.dynamics.get("events", [])
    if not events:
        return {}
    rows = pd.DataFrame([{"run_id": spec.run_id, **r} for r in result.rows])
    workload = spec.scenario.rank_workload
    ops = kind_of(workload).operations(rows) if workload is not None else rank_operations(rows)
    sc = spec.scenario
    # the run's reference direction as built, the same the report reads (analysis.network)
    network = reference(result.network)
    tables = {
        name: (pd.DataFrame(rows) if rows else None)
        for name, rows in (
            ("tcp", result.traces.get("tcp", [])),
            ("queues", result.traces.get("queues", [])),
            ("goodput", result.dynamics.get("flows_goodput", [])),
        )
    }
    metrics = summarize_faults(
        pd.DataFrame(events),
        ops,
        sc.model_dump(mode="json"),
        network.get("rtt_s") or 0.0,
        **tables,
        rate_bps=network.get("wan_rate_bps"),
    )
    if routing := result.traces.get("routing"):
        metrics |= failover_metrics(pd.DataFrame(events), pd.DataFrame(routing))
    return metrics


def dcqcn_summary(spec: RunSpec, result: RunResult) -> dict[str, Any]:
    """The run's DCQCN metrics, measured and predicted by the fluid model (analysis.dcqcn), for
    its summary rows; empty for a run without DCQCN flows."""
    setups = result.info.get("dcqcn") or {}
    events = result.dynamics.get("dcqcn", [])
    if not setups or not events:
        return {}
    ev = pd.DataFrame(events)
    rx = pd.DataFrame(result.dynamics.get("dcqcn_rx", []))
    queues = pd.DataFrame(result.traces.get("queues", []))
    first = setups[min(setups, key=int)]
    ends = ev[ev["kind"] == "end"].set_index("flow")
    sent = {int(cast(int, f)): int(n) for f, n in ends["sent"].items()} if "sent" in ends else {}
    size = next(f.size for f in spec.scenario.flows if f.kind == "dcqcn")
    capacity = dcqcn.payload_capacity(first["bottleneck_bps"], size)
    out = dcqcn.measure(ev, rx, queues, first["direction"], capacity, sent) if not rx.empty else {}
    starts = ev[ev["kind"] == "start"].set_index("flow")["t"]
    if out and first["aqm"] and first["aqm"].get("kind") in ("red", "step"):
        origin = float(starts.min())
        flows = [int(f) for f in sorted(setups, key=int)]
        params = DcqcnParams(**first["params"])
        res = dcqcn.predict(
            params,
            line_rate_bps=first["line_rate_bps"],
            bottleneck_bps=first["bottleneck_bps"],
            rtt_s=first["rtt_s"],
            aqm=first["aqm"],
            size=size,
            starts_s=[float(starts.get(f, origin) - origin) for f in flows],
            duration_s=float(ends["t"].max() - origin) if not ends.empty else 10.0,
            buffer_bytes=first["buffer_bytes"],
        )
        out |= dcqcn.predicted(res)
        out |= dcqcn.ratios(out)
    return out


def bulk_summary(result: RunResult) -> dict[str, Any]:
    """The bulk flows' rate per flow, fairness, utilisation and queue (analysis.dcqcn ``bulk_*``)
    through the first one's bottleneck: a DCQCN run's comparison (e.g. DCTCP through the same
    marking switch); empty without bulk flows."""
    setup = result.info.get("bulk") or {}
    rows = pd.DataFrame(result.dynamics.get("flows_goodput", []))
    if not setup or rows.empty:
        return {}
    rows = rows[rows["flow"].isin(setup["flows"])]
    queues = pd.DataFrame(result.traces.get("queues", []))
    capacity = dcqcn.tcp_capacity(setup["bottleneck_bps"])
    return dcqcn.measure_bulk(rows, queues, setup["direction"], capacity)
