"""A run's summary rows, computed from what its results directory holds: its rows and its
manifest entry (world size, the model's topology, the CPU verdict). PURE.

The runner's workload kinds call these with the rows they write; :func:`recompute` gives the
same rows back from a loaded results directory (a test holds the two equal), so a summary, and
the prediction in it, can always be reproduced from the directory alone.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping
from typing import Any, cast

import pandas as pd

from analysis import dcqcn
from analysis.faults import summarize_faults
from analysis.model import (
    TERMS,
    Link,
    Topology,
    host_bw_from_phases,
    predict,
    predict_push_pull,
    predict_terms,
    unsupported,
)
from analysis.model.topology import rank_hosts
from analysis.network import reference
from analysis.routing import failover_metrics
from analysis.steps import measured_topology, phase_medians, wan_step_starts
from analysis.summary import summary_rows
from analysis.training import predicted_comm, step_table, summarize_training, time_to_loss
from testbed.core.dcqcn import DcqcnParams
from traffic.training.schedule import schedule_from_config, syncs
from traffic.training.shapes import model_shapes
from traffic.training.synthetic import is_emulated

# hierarchical all_reduce's phases inside a cluster: what the host's copy rate decides
INTRA_PHASES = ("cluster_reduce", "cluster_broadcast")


def topology_from(value: Topology | dict[str, Any] | None) -> Topology | None:
    """The model's topology as the runner kept it (the object, or its JSON in a manifest)."""
    if value is None or isinstance(value, Topology):
        return value
    fields = {f.name for f in dataclasses.fields(Topology)}
    data = {k: v for k, v in value.items() if k in fields}
    data["clusters"] = tuple((c, int(m)) for c, m in data.get("clusters", ()))
    data["links"] = tuple(Link(**link) for link in data.get("links", ()))
    return Topology(**data)


def collectives_summary(
    rows: list[dict],
    info: dict[str, Any],
    params: dict[str, Any],
    tcp: pd.DataFrame | list[dict] | None = None,
) -> list[dict]:
    """The run's summary rows (:func:`analysis.summary.summarize`: slowest rank per iteration,
    p50/p95, algbw/busbw at p50, the model's prediction), its terms as ``model_<term>`` columns
    (analysis.model.predict_terms), the sweep ``params`` in front and the run's CPU verdict
    behind. Operations that failed (``outcome`` error|timeout) are not timings: left out.

    The prediction takes what the run measured of its inputs: with the
    run's tcp_info samples (``tcp``), every WAN direction's window at the start of the point's
    steps (slow start from the initial window when it starts cold, the restart after idle) and
    its srtt; with hierarchical all_reduce rows, the copy rate its leaders' intra-cluster
    phases imply. ``model_inputs`` says which it had."""
    rows = [r for r in rows if r.get("outcome", "ok") == "ok" and r.get("iteration", 0) >= 0]
    if not rows:
        return []
    n = info.get("world_size") or len({r["rank"] for r in rows})
    topo = topology_from(info.get("topology"))
    frame = pd.DataFrame(rows).assign(run_id="run")  # one run: its rows and its samples
    steps = (
        wan_step_starts(pd.DataFrame(tcp).assign(run_id="run"), frame)
        if topo is not None and tcp is not None and len(tcp)
        else pd.DataFrame()
    )
    host_bw = measured_host_bw(frame, topo) if topo is not None else None

    cache: dict[tuple[str, str, int], tuple[dict[str, float] | None, str]] = {}

    def point_steps(coll: str, algo: str, size: int) -> pd.DataFrame:
        """The WAN connections' rows of this point's timed steps (empty without samples)."""
        if steps.empty:
            return steps
        at = steps[(steps["algorithm"] == algo) & (steps["size"] == size)]
        return at[at["collective"] == coll] if "collective" in at else at

    def split(coll: str, algo: str, size: int) -> tuple[dict[str, float] | None, str]:
        """The prediction's terms (analysis.model.predict_terms; they sum to the timed loop's
        prediction) and the inputs it measured, once per point: replaying gloo is costly."""
        if (coll, algo, size) not in cache:
            if topo is not None and unsupported(coll, algo, topo) is None:
                mine, inputs = topo, []
                at = point_steps(coll, algo, size)
                if not at.empty:
                    mine, inputs = measured_topology(topo, at), ["tcp windows"]
                if host_bw is not None:
                    mine = dataclasses.replace(mine, host_bw_bps=host_bw)
                    inputs.append("host copy rate")
                terms = predict_terms(coll, algo, size, mine)
                cache[(coll, algo, size)] = (terms, ", ".join(inputs) or "none")
            else:
                cache[(coll, algo, size)] = (None, "none")
        return cache[(coll, algo, size)]

    def model(coll: str, algo: str, size: int, _ranks: int) -> float | None:
        got = split(coll, algo, size)[0]
        return sum(got.values()) if got else None

    def terms(row: dict) -> dict[str, Any]:
        point = (row["collective"], row["algorithm"], int(row["size"]))
        got, inputs = split(*point)
        lost = None if steps.empty else float(point_steps(*point)["retransmits"].sum())
        return {f"model_{t}": got[t] if got else None for t in TERMS} | {
            "model_inputs": inputs,
            "wan_retransmits": lost,  # segments the WAN connections resent in the timed steps
        }

    saturated = bool(info.get("cpu_saturated", False))
    return [
        {**params, **row, **terms(row), "cpu_saturated": saturated}
        for row in summary_rows(rows, ranks=n, predict=model)
    ]


def measured_host_bw(rows: pd.DataFrame, topo: Topology) -> float | None:
    """The copy rate the run's hierarchical all_reduce leaders' intra-cluster phases imply
    (analysis.model.host_bw_from_phases on ``cluster_reduce`` + ``cluster_broadcast``, leaders'
    timers: analysis.steps.phase_medians), the median over sizes; None without such rows or
    when the phases are too short to tell (below their latency part)."""
    phases = [f"phases_{p}" for p in INTRA_PHASES]
    if not set(phases) <= set(rows.columns) or "algorithm" not in rows:
        return None
    mine = rows[(rows["algorithm"] == "hierarchical") & (rows.get("collective") == "all_reduce")]
    if mine.empty:
        return None
    where = rank_hosts(topo)
    leaders = sorted({min(r for r in range(len(where)) if where[r][0] == c) for c, _ in where})
    rates = []
    for r in phase_medians(mine, leaders).to_dict("records"):
        seconds = sum(r[p] for p in phases)
        try:
            rates.append(
                host_bw_from_phases(
                    seconds, INTRA_PHASES, "all_reduce", "hierarchical", r["size"], topo
                )
            )
        except ValueError:
            continue
    return statistics.median(rates) if rates else None


def predicted_comm_per_step(workload: dict[str, Any], topo: Topology) -> float | None:
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
                return predict_push_pull(payload, workload["parameter_server"]["servers"], topo)
            if group == "cluster":
                return max(
                    _collective(collective, payload, _alone(topo, c, m), m) for c, m in clusters
                )
            if group == "leaders":
                return _collective(collective, payload, leaders, len(clusters))
            return _collective(collective, payload, topo, n)
        except ValueError:
            return None

    model = workload["model"]
    s = schedule_from_config(workload, None if is_emulated(model) else model_shapes(model))
    return predicted_comm([(x.group, x.collective, x.payload) for x in syncs(s)], s.steps, one)


def _alone(topo: Topology, cluster: str, ranks: int) -> Topology:
    return dataclasses.replace(topo, clusters=((cluster, ranks),), links=())


def _collective(collective: str, payload: int, topo: Topology, ranks: int) -> float:
    if ranks < 2:
        return 0.0
    if collective == "all_gather":  # int8 codes: every rank's payload gathered everywhere
        return predict("all_gather", "flat", payload * ranks, topo)
    return predict("all_reduce", "flat", payload, topo)


def training_summary(
    rows: list[dict],
    queues: list[dict],
    workload: dict[str, Any],
    info: dict[str, Any],
    params: dict[str, Any],
) -> list[dict]:
    """A training run's summary row (analysis.training.summarize_training) with the α-β
    model's communication per step for its schedule, from its steps that ended ok, its WAN
    counters (queues.parquet), its resolved ``workload`` and manifest entry ``info``."""
    if not rows:
        return []
    topo = topology_from(info.get("topology"))
    predicted = predicted_comm_per_step(workload, topo) if topo is not None else None
    target = workload.get("target_loss")
    row = summarize_training(pd.DataFrame(rows), pd.DataFrame(queues), target, predicted)
    return [{**params, **row, "cpu_saturated": bool(info.get("cpu_saturated"))}]


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


def run_metrics(
    ops: pd.DataFrame,
    resolved: dict[str, Any],
    info: dict[str, Any],
    network: pd.DataFrame | list[dict],
    tables: Mapping[str, pd.DataFrame | list[dict]],
) -> dict[str, Any]:
    """The metrics every summary row of a run carries beside its workload's: its faults'
    (analysis.faults; with ``ops``, its ranks' operations), failover (routing events), DCQCN
    flows (measured beside the fluid model) and bulk flows; each empty without what it
    measures. ``tables``: the run's events, tcp, queues, flows_goodput, routing, dcqcn and
    dcqcn_rx rows; ``info``: its manifest entry (the flows' setups)."""
    frames = {name: pd.DataFrame(rows) for name, rows in tables.items()}
    empty = pd.DataFrame()
    return (
        fault_metrics(ops, resolved, network, frames)
        | dcqcn_metrics(info.get("dcqcn") or {}, frames)
        | bulk_metrics(info.get("bulk") or {}, frames.get("flows_goodput", empty), frames)
    )


def fault_metrics(
    ops: pd.DataFrame,
    resolved: dict[str, Any],
    network: pd.DataFrame | list[dict],
    frames: dict[str, pd.DataFrame],
) -> dict[str, Any]:
    """analysis.faults.summarize_faults over the run's events, priced on its reference
    direction as built (analysis.network, the report's too); failover from routing events."""
    events = frames.get("events", pd.DataFrame())
    if events.empty:
        return {}
    ref = reference(network)

    def table(name: str) -> pd.DataFrame | None:
        frame = frames.get(name)
        return frame if frame is not None and not frame.empty else None

    metrics = summarize_faults(
        events,
        ops,
        resolved,
        ref.get("rtt_s") or 0.0,
        tcp=table("tcp"),
        queues=table("queues"),
        goodput=table("flows_goodput"),
        rate_bps=ref.get("wan_rate_bps"),
    )
    routing = table("routing")
    if routing is not None:
        metrics |= failover_metrics(events, routing)
    return metrics


def dcqcn_metrics(setups: dict[str, Any], frames: dict[str, pd.DataFrame]) -> dict[str, Any]:
    """The DCQCN flows' metrics, measured over the settled half and predicted by the fluid model
    (analysis.dcqcn), from their setups (the manifest's ``dcqcn``), events and receive counts."""
    ev = frames.get("dcqcn", pd.DataFrame())
    if not setups or ev.empty:
        return {}
    rx = frames.get("dcqcn_rx", pd.DataFrame())
    queues = frames.get("queues", pd.DataFrame())
    first = setups[min(setups, key=int)]
    ends = ev[ev["kind"] == "end"].set_index("flow")
    sent = {int(cast(int, f)): int(n) for f, n in ends["sent"].items()} if "sent" in ends else {}
    size = int(first["size"])
    capacity = dcqcn.payload_capacity(first["bottleneck_bps"], size)
    out = dcqcn.measure(ev, rx, queues, first["direction"], capacity, sent) if not rx.empty else {}
    starts = ev[ev["kind"] == "start"].set_index("flow")["t"]
    if out and first["aqm"] and first["aqm"].get("kind") in ("red", "step"):
        origin = float(starts.min())
        flows = [int(f) for f in sorted(setups, key=int)]
        inputs: dict[str, Any] = {
            "line_rate_bps": first["line_rate_bps"],
            "bottleneck_bps": first["bottleneck_bps"],
            "rtt_s": first["rtt_s"],
            "aqm": first["aqm"],
            "size": size,
            "starts_s": [float(starts.get(f, origin) - origin) for f in flows],
            "duration_s": float(ends["t"].max() - origin) if not ends.empty else 10.0,
            "buffer_bytes": first["buffer_bytes"],
        }
        params = DcqcnParams(**first["params"])
        out |= dcqcn.predicted(dcqcn.predict(params, **inputs))
        # the model of discrete marks beside the fluid one (analysis.dcqcn_marks)
        out |= dcqcn.predicted_discrete(dcqcn.predict_discrete(params, **inputs))
        out |= dcqcn.ratios(out)
    return out


def bulk_metrics(
    setup: dict[str, Any], goodput: pd.DataFrame, frames: dict[str, pd.DataFrame]
) -> dict[str, Any]:
    """The bulk flows' rate per flow, fairness, utilisation and queue (analysis.dcqcn ``bulk_*``)
    through the first one's bottleneck: a DCQCN run's comparison; empty without bulk flows."""
    if not setup or goodput.empty:
        return {}
    rows = goodput[goodput["flow"].isin(setup["flows"])]
    queues = frames.get("queues", pd.DataFrame())
    capacity = dcqcn.tcp_capacity(setup["bottleneck_bps"])
    return dcqcn.measure_bulk(rows, queues, setup["direction"], capacity)


def recompute(
    manifest_run: dict[str, Any], rows: pd.DataFrame, tcp: pd.DataFrame | None = None
) -> list[dict]:
    """A collectives run's summary rows from its results directory: its collectives.parquet
    rows (``rows``, without the ``results`` column), its manifest entry and its tcp.parquet
    rows (``tcp``, the prediction's measured windows)."""
    params = dict(manifest_run.get("params") or {})
    drop = ["results", "run_id", "repeat", *params]
    clean = rows.drop(columns=[c for c in drop if c in rows.columns])
    records = [{k: v for k, v in r.items() if not _missing(v)} for r in clean.to_dict("records")]
    return collectives_summary(records, manifest_run, params, tcp)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)
