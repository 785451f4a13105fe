"""The report's sections: which exist for a results set, their text, tables (analysis.display's
where `testbed run` prints the same) and figures; one builder per section, and each workload
kind's sections by kind (:data:`KIND_SECTIONS`). The Overview opens with a headline per scenario
(its question, the expectations' verdict, the main comparison) and the network of each run, so
that a reader gets the answer before the details. PURE: no files written here."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from analysis import command_report as CR
from analysis import dcqcn_plots as DP
from analysis import fault_plots as FP
from analysis import faults as F
from analysis import multipath as M
from analysis import multipath_plots as MP
from analysis import plots as P
from analysis import routing as R
from analysis import tables as T
from analysis import training_plots as TP
from analysis.display import (
    CHECK,
    CROSS,
    collectives_display,
    dcqcn_display,
    dynamics_display,
    format_row_label,
    format_value,
    network_display,
    network_summary,
    selfcheck_display,
    terms_display,
    training_display,
)
from analysis.loader import Results
from analysis.loader import short_value as _short
from testbed.core.vocab import SELFCHECK_CAPACITY_LOW, SELFCHECK_LEAK, SELFCHECK_TOLERANCE


@dataclass
class Section:
    """A report section: ``key`` (anchor), ``title``, intro text, tables and figures."""

    key: str
    title: str
    text: str = ""
    pairs: list[tuple[str, str]] = field(default_factory=list)
    tables: list[tuple[str, pd.DataFrame]] = field(default_factory=list)
    plots: list[P.Plot] = field(default_factory=list)
    headlines: list[Headline] = field(default_factory=list)
    # the tables folded away (HTML <details>) behind the text: long lists a reader opens on demand
    folded: bool = False
    # (summary, text) shown verbatim, each folded away: a process's log tail
    logs: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Headline:
    """The answer a scenario's results give: its ``question`` and ``expected`` outcome (the
    scenario's fields), the ``verdict`` of its expectations (``ok``: all met, False: one failed,
    None: none to check) with a line per expectation, and ``findings``: the main comparison and
    what the numbers rest on (runs, link self-check, CPU)."""

    scenario: str
    question: str = ""
    expected: str = ""
    verdict: str = ""
    ok: bool | None = None
    checks: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)


def formatted(df: pd.DataFrame, drop: tuple[str, ...] = ()) -> pd.DataFrame:
    """:func:`analysis.tables.formatted` with every column a reader sees in its unit: the
    columns it has no format for by their names (analysis.display.format_value), booleans as
    ✓/✗; sweep parameters (field paths: ``wan[0].rate``) as written, text as it is."""
    out = df.drop(columns=[c for c in drop if c in df.columns])
    if "results" in out and out["results"].nunique() <= 1:
        out = out.drop(columns="results")
    shown = {}
    for col in out.columns:
        written = "." in str(col) or "[" in str(col)
        fmt = None if col in OWN_FORMATS or written else T.FORMATS.get(col)
        values = out[col].astype(object)
        shown[T.HEADERS.get(col, col)] = [
            fmt(v) if fmt else _cell(str(col), v, written) for v in values
        ]
    return pd.DataFrame(shown, columns=list(shown))


# columns whose analysis.tables format a reader misreads: a blank for a true ``correct``, "OFF"
# for a failed check, "0" for a zero duration
OWN_FORMATS = {"correct", "ok", "survived", "cpu_saturated", "lhs", "rhs"}


def _cell(col: str, v: Any, as_written: bool) -> str:
    if isinstance(v, (list, tuple, dict)):
        return _short(v)
    if isinstance(v, str) or as_written:
        return "-" if v is None or (isinstance(v, float) and v != v) else _short(v)
    return format_value(col, v)


def sections(res: Results) -> tuple[list[Section], dict[str, pd.DataFrame]]:
    """The report's sections and the raw (SI-unit) tables to write as CSV."""
    out: list[Section] = []
    csv: dict[str, pd.DataFrame] = {}
    warnings = T.warnings_table(res).reset_index(drop=True)
    csv["runs"] = T.runs_table(res)
    csv["warnings"] = warnings

    overview = Section("overview", "Overview", pairs=T.header(res), headlines=headlines(res))
    network = _per_run(res, lambda runs, _summary, _params: network_display(runs))
    if not network.empty:
        overview.tables.append(("Network (configured, per direction)", network))
    out.append(overview)
    if warnings.empty:
        out.append(Section("warnings", "Warnings", "None: every run finished ok."))
    else:
        counts = warnings["kind"].value_counts()
        text = "; ".join(f"{n} {k}" for k, n in counts.items())
        shown = warnings.drop(columns=["results"] if res.runs["results"].nunique() < 2 else [])
        sec = Section("warnings", "Warnings", text, tables=[("", shown)])
        sec.folded = len(shown) > FOLD_ROWS
        out.append(sec)
    runs = formatted(csv["runs"], drop=("reason",))
    out.append(Section("runs", "Runs", f"{len(runs)} run(s).", tables=[("", runs)]))
    links = T.links_table(res)
    if not links.empty:
        csv["links"] = links
        bad = int((links["ok"] == False).sum())  # noqa: E712
        low, leak, tol = SELFCHECK_CAPACITY_LOW, SELFCHECK_LEAK, SELFCHECK_TOLERANCE
        text = (
            "Before its workload each run measures every WAN direction: RTT with UDP probes, "
            f"capacity with paced UDP (below {low:.0%} or above {leak:.0%} of the rate is "
            "flagged) and one bulk TCP flow's goodput against the ceiling (below "
            f"{1 - tol:.0%} or above {leak:.0%} is flagged). "
            + (f"{bad} direction(s) off." if bad else "All within tolerance.")
        )
        keys = ["results", "run_id"] if res.runs["results"].nunique() > 1 else ["run_id"]
        shown = pd.concat([links[keys].reset_index(drop=True), selfcheck_display(links)], axis=1)
        out.append(Section("links", "Link self-check", text, tables=[("", shown)]))

    expectations = T.expectations_table(res)
    if not expectations.empty:
        csv["expectations"] = expectations
        counts = expectations["status"].value_counts()
        text = "The scenario's `expect` entries, checked by `testbed run`: " + ", ".join(
            f"{n} {k}" for k, n in counts.items()
        )
        shown = expectations_display(res, expectations)
        out.append(Section("expectations", "Expectations", text, tables=[("", shown)]))
    # each workload kind's sections (its own, else a table of its summary rows)
    for kind in ("collectives", "training", *res.kind_summaries):
        out += KIND_SECTIONS.get(kind, _kind_sections(kind))(res, csv)
    if res.has("events"):
        out.append(_faults_section(res, csv))
    if res.has("dcqcn"):
        out.append(_dcqcn_section(res, csv))
    if res.has("flowpaths") or not M.multipath_queues(res.queues).empty:
        out.append(_multipath_section(res, csv))
    if res.has("routing"):
        out.append(_failover_section(res, csv))
    speedup = T.speedup_table(res)
    if not speedup.empty:
        csv["speedup"] = speedup
        shown = formatted(speedup.drop(columns=[p for p in res.params if p in speedup]))
        sec = Section(
            "speedup",
            "Flat vs hierarchical",
            "Speed-up = flat time p50 / hierarchical time p50 at the same sweep point and size "
            "(> 1: the WAN-aware algorithm is faster).",
            tables=[("", shown)],
        )
        sec.plots = [p for p in (P.plot_speedup(res, speedup),) if p]
        out.append(sec)
    if T.is_congestion_sweep(res):
        cong = T.congestion_table(res)
        if not cong.empty:
            csv["congestion"] = cong
            shown = formatted(cong.drop(columns=[*res.params, "label"], errors="ignore"))
            shown = shown.loc[:, [c for c in shown.columns if (shown[c] != "-").any()]]
            sec = Section(
                "congestion",
                "Congestion",
                "Per run: goodput (busbw × 8), the WAN data sockets' srtt and cwnd "
                "(tcp.parquet), the bottleneck's backlog, drops and CE marks "
                "(queues.parquet), retransmitted and CE-marked shares of the payload "
                "(flows.parquet), where traced. A red profile with these TCP senders is "
                "DCQCN's switch profile with TCP senders, not DCQCN (docs/congestion.md).",
                tables=[("", shown)],
            )
            sec.plots = [
                p
                for p in (
                    P.plot_congestion(res, cong),
                    P.plot_throughput_delay(res, cong),
                    P.plot_queues(res),
                    P.plot_tcp(res),
                )
                if p
            ]
            out.append(sec)
    return out, csv


def _collectives_sections(res: Results, csv: dict[str, pd.DataFrame]) -> list[Section]:
    out: list[Section] = []
    table = T.collective_table(res)
    if not table.empty:
        csv["summary"] = table
        sec = Section(
            "collectives",
            "Collectives",
            "nccl-tests conventions: time = the slowest rank per iteration, p50/p95 over "
            "iterations; algbw = size / time p50; busbw = algbw × bus factor; predicted = α-β "
            "model (docs/model.md); CPU = the emulating host was saturated.",
            tables=[
                ("", _as_printed(res, table[table["collective"].notna()], collectives_display))
            ],
        )
        sec.plots = [p for p in (P.plot_time_vs_size(res), P.plot_busbw_vs_rate(res)) if p]
        out.append(sec)
    terms = T.model_terms_table(res)
    if not terms.empty:
        csv["model_terms"] = terms
        out.append(
            Section(
                "model-terms",
                "Model terms",
                "The prediction split into what each modelled effect adds (docs/model.md, "
                '"Terms and their measured inputs"): the synchronous α-β steps, what gloo\'s '
                "segmented ring adds (two 1 MiB segments in flight, a recv-ready notify before "
                "every send), what a congestion window below the BDP adds (only with measured "
                "windows; the runner records none).",
                tables=[("", terms_table(res, terms))],
            )
        )
    return out


def _per_run(
    res: Results,
    build: Callable[[dict[str, Any], list[dict[str, Any]], list[str]], pd.DataFrame],
) -> pd.DataFrame:
    """A per-run table of analysis.display from each results directory's manifest (its runs
    and summary rows), with the directory's name when there are several."""
    frames = []
    for source, manifest in res.manifests.items():
        params = [p for p in res.params if any(p in (r.get("params") or {}) for r in
                  (manifest.get("runs") or {}).values())]  # fmt: skip
        frame = build(manifest.get("runs") or {}, manifest.get("summary") or [], params)
        if len(res.manifests) > 1 and not frame.empty:
            frame.insert(0, "results", source)
        frames.append(frame)
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _as_printed(
    res: Results,
    rows: pd.DataFrame,
    display: Callable[[pd.DataFrame, list[str]], pd.DataFrame],
) -> pd.DataFrame:
    """Summary ``rows`` as ``testbed run`` prints them (analysis.display), with each run's
    status (and which results directory, when there are several)."""
    rows = rows.reset_index(drop=True)
    shown = display(rows, [p for p in res.params if p in rows])
    if "status" in rows:
        shown["status"] = rows["status"].fillna("").astype(str).to_numpy()
    if res.runs["results"].nunique() > 1:
        shown.insert(0, "results", rows["results"].to_numpy())
    return shown


def _training_sections(res: Results, csv: dict[str, pd.DataFrame]) -> list[Section]:
    return [_training_section(res, csv)] if not res.training_summary.empty else []


def _kind_sections(kind: str) -> Callable[[Results, dict[str, pd.DataFrame]], list[Section]]:
    def sections(res: Results, csv: dict[str, pd.DataFrame]) -> list[Section]:
        rows = res.kind_summaries.get(kind)
        return [] if rows is None or rows.empty else [_kind_section(res, kind, rows, csv)]

    return sections


# the report's sections of a workload kind, by kind (a kind without an entry gets a table of
# its summary rows)
def _command_sections(res: Results, csv: dict[str, pd.DataFrame]) -> list[Section]:
    rows = res.kind_summaries.get("command")
    if rows is None or rows.empty:
        return []
    sec = _kind_section(res, "command", rows, csv)
    sec.title = "Workload: command"
    procs = CR.process_table(res)
    if procs.empty:
        return [sec]
    csv["command_processes"] = procs.drop(columns=["start"])
    several = res.runs["results"].nunique() > 1
    sec.text = (
        "Each process and service of the program: how it ended (exit code or signal; stopped: "
        "the testbed ended it, after another's failure or, for a service, at the workload's "
        "end), when it started and ended (seconds since the workload's first process "
        "started), the first failure as the run's status names it; then the summary rows "
        "(per metric its p50, per WAN direction its bytes) and each log's last lines."
    )
    sec.tables = [("Processes", CR.processes_display(procs, several))]
    sec.tables += CR.summary_display(rows, several)
    sec.plots = [p for p in (CR.plot_timeline(res, procs), *CR.plot_metrics(res, procs)) if p]
    sec.logs = CR.log_tails(res, procs)
    return [sec]


KIND_SECTIONS: dict[str, Callable[[Results, dict[str, pd.DataFrame]], list[Section]]] = {
    "collectives": _collectives_sections,
    "training": _training_sections,
    "command": _command_sections,
}


TRAINING_COLUMNS = [
    "algorithm", "steps", "final_loss", "target_loss", "time_to_loss", "step_time_p50",
    "step_time_p95", "wan_bytes_per_step", "comm_per_step", "predicted_comm_per_step",
    "comm_measured_over_predicted", "compute_utilisation", "cpu_saturated", "status",
]  # fmt: skip


FLOW_COLUMNS = [
    "run_id", "src_host", "sport", "dst_host", "dport", "link", "paths", "moves", "bytes",
    "bytes_by_path", "tcp_bytes_by_path",
]  # fmt: skip


def _multipath_section(res: Results, csv: dict[str, pd.DataFrame]) -> Section:
    windows = M.operation_windows(res.collectives)
    util = M.path_utilisation(res.queues, res.flowpaths, windows)
    flows = M.flow_paths(res.flowpaths, res.tcp)
    sec = Section(
        "multipath",
        "Multipath WAN paths",
        "Path utilisation per run, window (the whole run and each collective × algorithm × "
        "size) and link direction: bytes per path from the paths' shaper counters "
        "(queues.parquet; where traced) and their shares; carrying = paths with at least "
        f"{M.CARRYING:.0%} of the bytes; flows = flow directions with at least "
        f"{M.DATA_FLOW:.0%} of the bytes in the window, and the distinct paths they were seen "
        "on (flowpaths.parquet). Flows: each TCP flow direction across a multipath link, its "
        "paths in time order (0>1: moved from path 0 to path 1), bytes per path estimated from "
        "the header samples and, where tcp_info was traced, the sender's bytes_sent split at "
        "the move times (docs/multipath.md).",
    )
    if not util.empty:
        csv["path_utilisation"] = util
        shown = util.drop(columns=["start", "end"]).assign(bytes=util["bytes"].map(_mb))
        if res.runs["results"].nunique() < 2:
            shown = shown.drop(columns=["results"])
        sec.tables.append(("Path utilisation", formatted(shown)))
    if not flows.empty:
        csv["flow_paths"] = flows.assign(moved_at=flows["moved_at"].map(str))
        cross = flows[flows["src_host"].notna() & flows["dst_host"].notna()]
        cross = cross.assign(bytes=cross["bytes"].map(_mb))
        sec.tables.append(
            ("Flows and their paths", formatted(cross[[c for c in FLOW_COLUMNS if c in cross]]))
        )
    sec.plots = [p for p in (MP.plot_path_timeline(res),) if p]
    return sec


def _failover_section(res: Results, csv: dict[str, pd.DataFrame]) -> Section:
    sec = Section(
        "failover",
        "Routing and failover",
        "Per fault on a path of a multipath link (docs/multipath.md): detected by = the first "
        "BFD or BGP session down on the path (none: static routing notices nothing); detect = "
        "fault start to that event; moved = fault start until every gateway that routed over "
        "the path had a route without it; restored = fault end until they had it again; stall "
        "= the affected operations' time beyond the no-fault median (the fault table's). "
        "Routing events: the gateways' FIB changes (ip monitor), BFD and BGP session changes "
        "and updates (FRR's logs), seconds from the run's first fault.",
    )
    table = R.failover_table(res.events, res.routing)
    if not table.empty:
        faults = F.analyse(res).faults
        if not faults.empty:
            table = table.merge(
                faults[["results", "run_id", "fault", "stall_s", "survived"]],
                on=["results", "run_id", "fault"],
                how="left",
            )
        if res.params:
            table = table.merge(
                res.runs[["results", "run_id", *res.params]], on=["results", "run_id"]
            )
        csv["failover"] = table
        shown = table.drop(
            columns=["start", "end"] + (["results"] * (res.runs["results"].nunique() < 2))
        )
        sec.tables.append(("Failover", formatted(shown)))
    events = res.routing.copy()
    first = (
        res.events[res.events["source"] == "fault"]
        .groupby(["results", "run_id"])["applied_unix"]
        .min()
        if res.has("events") and "applied_unix" in res.events
        else pd.Series(dtype=float)
    )
    t0 = [
        first.get((r, i), float("nan"))
        for r, i in zip(events["results"], events["run_id"], strict=True)
    ]
    events = events.assign(t_s=events["time"] - pd.Series(t0, index=events.index))
    csv["routing_events"] = events
    cols = [
        c
        for c in ("run_id", "t_s", "gateway", "source", "event", "link", "paths", "detail")
        if c in events
    ]
    sec.tables.append(("Routing events", formatted(events[cols])))
    return sec


def _mb(v: float) -> str:
    return f"{v / 1e6:.3g} MB"


def _dcqcn_section(res: Results, csv: dict[str, pd.DataFrame]) -> Section:
    shown = DP.table(res)
    sec = Section(
        "dcqcn",
        "DCQCN flows",
        "Per run (docs/congestion.md, DCQCN): the real RP/NP over UDP through the marking "
        "bottleneck, measured over the settled half (the second half of the span all flows "
        "share) beside DCQCN's fluid model for the same parameters (`pred`) and the model of "
        "discrete marks (`pred_discrete`, `discrete`: a packet-level run of the same RP, mean "
        "over its seeds); times and rates in "
        "the testbed's dilated units (real = times / dilation, rates x dilation). LOSSY: a "
        "datagram was lost (RoCE assumes a lossless fabric; no PFC exists here).",
    )
    per_run = _per_run(res, lambda _runs, summary, params: dcqcn_display(summary, params))
    if not per_run.empty:  # as testbed run printed it
        sec.tables.append(("Per run, beside the fluid model", per_run))
    if not shown.empty:
        csv["dcqcn"] = shown
        sec.tables.append(("", formatted(shown)))
    sec.plots = [p for p in (DP.plot_rates_and_queue(res), DP.plot_versus_rtt(res)) if p]
    return sec


def _training_section(res: Results, csv: dict[str, pd.DataFrame]) -> Section:
    s = res.training_summary
    shown = s[[c for c in ("results", *res.params, *TRAINING_COLUMNS) if c in s.columns]]
    if res.runs["results"].nunique() < 2:
        shown = shown.drop(columns=["results"], errors="ignore")
    csv["training"] = shown
    sec = Section(
        "training",
        "Training",
        "Per run (docs/training.md): the step time is the slowest rank's; WAN bytes are the "
        "links' own counters; comm = time blocked in communication per step against the α-β "
        "model of the algorithm's schedule; time to loss = wall clock until the mean validation "
        "loss reached the target (the scenario's, else the DDP run's final loss).",
        tables=[("", _as_printed(res, s, training_display))],
    )
    sec.plots = [
        p for p in (TP.plot_loss(res), TP.plot_time_to_loss(res), TP.plot_wan_bytes(res)) if p
    ]
    return sec


def _kind_section(
    res: Results, kind: str, rows: pd.DataFrame, csv: dict[str, pd.DataFrame]
) -> Section:
    """The summary rows of a workload kind without a section of its own, as its kind wrote them."""
    shown = rows.drop(columns=["results"]) if res.runs["results"].nunique() < 2 else rows
    csv[kind] = shown
    return Section(
        kind,
        f"Workload: {kind}",
        f"The summary rows of the `{kind}` workload kind, one per row its kind summarised.",
        tables=[("", formatted(shown))],
    )


FAULT_SHOWN = [
    "results", "run_id", "fault", "kind", "link", "at_s", "duration", "detect_s",
    "affected_ops", "op_outcome", "baseline_s", "stall_s", "predicted_stall_s",
    "stall_over_predicted", "predicted_outcome", "recover_s", "survived", "flow_stall_s",
    "flow_predicted_s", "tcp_retransmits",
    "tcp_rto_max_ms", "tcp_backoff_max", "tcp_ca_states", "rto_spurious", "verdict",
]  # fmt: skip


def _faults_section(res: Results, csv: dict[str, pd.DataFrame]) -> Section:
    fr = F.analyse(res)
    sec = Section(
        "faults",
        "WAN dynamics and faults",
        'Per fault (docs/faults.md, "Results and report"): at = its start after the run\'s '
        "first operation; detect = fault start to the first error; stall = the affected "
        "operations' time beyond the median no-fault operation of the same run and arm; "
        "predicted = Linux TCP's probes through the outage (silent: a tail loss probe at "
        "2·srtt, then retransmissions at PTO + RTO0·(2^k−1); ICMP: ≈ D + RTO0; after a silent "
        "outage's RTO, the rest of the operation in slow start); recover = fault end to the "
        "end of the first successful operation ending after it; survived = that operation "
        "came with no error in between; flow stall = how long the bulk traffic crossing the "
        "fault stopped (goodput samples), against the RTO series from the fault's start; tcp = "
        "the WAN data sockets' tcp_info from 1 s before "
        "to 5 s after the fault (where traced). Trace replay: achieved vs target rate per second "
        "(seconds darkened by a fault left out). Events: applied minus scheduled time, late = "
        "more than 20 ms. Drops: per direction, the packets the faults dropped and reset (the "
        "fault rules' counters) beside the bottleneck queue's own drops (where traced).",
    )
    per_run = _per_run(res, dynamics_display)
    if not per_run.empty:  # as testbed run printed it
        sec.tables.append(("Per run: the worst over its faults", per_run))
    if not fr.faults.empty:
        csv["faults"] = fr.faults.drop(columns=["intervals"], errors="ignore")
        origin = F.clock_origins(fr.operations, res.events)
        shown = fr.faults.assign(
            at_s=[
                s - origin.get((r, i), s)
                for r, i, s in zip(
                    fr.faults["results"], fr.faults["run_id"], fr.faults["start"], strict=True
                )
            ]
        )
        if res.params:
            shown = shown.merge(
                res.runs[["results", "run_id", *res.params]], on=["results", "run_id"]
            )
        cols = [c for c in FAULT_SHOWN if c in shown] + [p for p in res.params if p in shown]
        sec.tables.append(("Faults", formatted(shown[cols])))
    if not fr.drops.empty:
        csv["fault_drops"] = fr.drops
        sec.tables.append(("Drops by fault and by queue overflow", formatted(fr.drops)))
    if not fr.traces.empty:
        csv["trace_replay"] = fr.traces
        sec.tables.append(("Trace replay", formatted(fr.traces)))
    if not fr.lateness.empty:
        csv["events_lateness"] = fr.lateness
        sec.tables.append(("Event application", formatted(fr.lateness)))
    sec.plots = [p for p in (FP.plot_timeline(res, fr),) if p]
    return sec


# -- the answer: headlines, expectations, model terms ------------------------------------------
FOLD_ROWS = 5  # a longer warnings table is folded behind its counts
MAX_LINES = 6  # comparisons per headline; the tables below have the rest


def _expect_specs(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    return list((manifest.get("scenario") or {}).get("expect") or [])


def _check_line(check: dict[str, Any], spec: dict[str, Any]) -> str:
    metric = str(spec.get("metric") or "")
    relation = str(spec.get("relation") or "vs")
    mark = {"passed": CHECK, "failed": CROSS}.get(str(check.get("status")), "?")
    text = f"{mark} {check.get('description') or spec.get('name') or 'expectation'}"
    lhs, rhs = check.get("lhs"), check.get("rhs")
    if lhs is not None and rhs is not None:
        text += f": {format_value(metric, lhs)} {relation} {format_value(metric, rhs)}"
    elif check.get("status") not in ("passed", "failed"):
        text += f" ({check.get('status')})"
    if check.get("detail"):
        text += f" ({check['detail']})"
    return text


def _verdict(
    checks: list[dict[str, Any]], specs: list[dict[str, Any]]
) -> tuple[str, bool | None, list[str]]:
    """Per expectation its worst row (a failed one, else the first), and the verdict over all."""
    by: dict[Any, list[dict[str, Any]]] = {}
    for c in checks:
        by.setdefault(c.get("expectation"), []).append(c)
    lines, failed, passed = [], 0, 0
    for index, rows in by.items():
        worst = next((r for r in rows if r.get("status") == "failed"), rows[0])
        spec = specs[index] if isinstance(index, int) and 0 <= index < len(specs) else {}
        line = _check_line(worst, spec)
        if len(rows) > 1:
            bad = sum(r.get("status") == "failed" for r in rows)
            line += f" [{bad} of {len(rows)} rows failed]" if bad else f" [all {len(rows)} rows]"
        lines.append(line)
        if all(r.get("status") == "passed" for r in rows):
            passed += 1
        elif any(r.get("status") == "failed" for r in rows):
            failed += 1
    n = len(by)
    if not n:
        return "No expectations to check (the scenario has no `expect`).", None, []
    if failed:
        return f"{CROSS} {failed} of {n} expectations failed.", False, lines
    if passed == n:
        return (
            f"{CHECK} " + ("The expectation is met." if n == 1 else f"All {n} expectations met."),
            True,
            lines,
        )
    return f"? {passed} of {n} expectations met, {n - passed} not checked.", None, lines


def _vs(unit: str, value: Any, base: Any) -> str:
    return f"{format_value(unit, value)} vs {format_value(unit, base)}"


def _speedup_lines(res: Results, source: str) -> list[str]:
    sp = T.speedup_table(res)
    sp = sp[sp["results"] == source] if not sp.empty else sp
    if sp.empty:
        return []
    lines = []
    for (coll, alg), g in sp.groupby(["collective", "algorithm"], sort=False):
        g = g[g["size"] == g["size"].max()]  # the size where the WAN matters most
        for r in g.to_dict("records"):
            x = float(r["speedup"])
            how = f"{x:.2f}× faster" if x >= 1 else f"{1 / x:.2f}× slower"
            at = "" if r["point"] == "(no sweep)" else f"at {r['point']}: "
            lines.append(
                f"{at}{alg} is {how} than flat ({coll}, {format_value('size', r['size'])}: "
                f"{_vs('time', r['time_p50'], r['flat_time_p50'])})"
            )
    return lines


def _training_lines(res: Results, source: str) -> list[str]:
    s = res.training_summary
    if s.empty or "results" not in s:
        return []
    s = s[(s["results"] == source) & (s.get("status", "ok") == "ok")]
    if s.empty or "ddp" not in set(s["algorithm"]):
        return []
    params = [p for p in T.point_params(res) if p in s and p != "workload.algorithm"]
    lines = []
    groups = s.groupby(params, sort=False, dropna=False) if params else [((), s)]
    for key, g in groups:
        base = g[g["algorithm"] == "ddp"]
        if base.empty:
            continue
        b = base.iloc[0]
        label = T.point_label(
            dict(zip(params, key if isinstance(key, tuple) else (key,), strict=True)), params
        )
        at = "" if label == "(no sweep)" else f"at {label}: "
        for r in g[g["algorithm"] != "ddp"].to_dict("records"):
            x = float(b["step_time_p50"]) / float(r["step_time_p50"])
            how = f"{x:.2f}× faster" if x >= 1 else f"{1 / x:.2f}× slower"
            lines.append(
                f"{at}{r['algorithm']} is {how} per step than ddp "
                f"({_vs('time', r['step_time_p50'], b['step_time_p50'])}), WAN "
                f"{_vs('bytes', r['wan_bytes_per_step'], b['wan_bytes_per_step'])} per step, "
                f"final loss {_vs('loss', r['final_loss'], b['final_loss'])}"
            )
    return lines


def _congestion_lines(res: Results, source: str) -> list[str]:
    """Goodput per sender (and marking profile, where it varies) at the sweep's mildest and
    harshest network (least and most loss, then RTT), at the largest size."""
    if not T.is_congestion_sweep(res):
        return []
    c = T.congestion_table(res)
    c = c[(c["results"] == source) & c["goodput_bps"].notna()] if not c.empty else c
    if c.empty or (c["congestion"].nunique() < 2 and c["aqm_profile"].nunique() < 2):
        return []
    c = c[c["size"] == c["size"].max()]
    by = ["congestion"] + (["aqm_profile"] if c["aqm_profile"].nunique() > 1 else [])
    lines = []
    points = c[["wan_loss", "rtt_s"]].drop_duplicates().sort_values(["wan_loss", "rtt_s"])
    for loss, rtt in dict.fromkeys([tuple(points.iloc[0]), tuple(points.iloc[-1])]):
        at = c[(c["wan_loss"] == loss) & (c["rtt_s"] == rtt)]
        goodput = at.groupby(by)["goodput_bps"].median().sort_values(ascending=False)
        senders = ", ".join(
            f"{' '.join(map(str, k)) if isinstance(k, tuple) else k} {format_value('_bps', v)}"
            for k, v in goodput.items()
        )
        lines.append(
            f"at loss {format_value('wan_loss', loss)}, RTT {format_value('rtt', rtt)} "
            f"({at['collective'].iloc[0]}, {format_value('size', at['size'].iloc[0])}), "
            f"goodput (busbw × 8): {senders}"
        )
    return lines


def _fault_lines(res: Results, source: str) -> list[str]:
    """Per fault: what, how long, where, in which run, and its verdict (analysis.faults)."""
    if not res.has("events"):
        return []
    faults = F.analyse(res).faults
    faults = faults[faults["results"] == source] if not faults.empty else faults
    runs = res.runs[res.runs["results"] == source]
    labels = dict(zip(runs["run_id"], runs["label"], strict=True))
    lines = []
    for f in faults.to_dict("records"):
        survived = f.get("survived")
        mark = "?" if survived is None or pd.isna(survived) else CHECK if survived else CROSS
        label = labels.get(f["run_id"], f["run_id"])
        at = "" if label == "(no sweep)" else f" ({label})"
        lines.append(
            f"{mark} {f['kind']} of {format_value('duration', f['duration'])} on {f['link']}{at}: "
            f"{f['verdict']}"
        )
    return lines


def _health_lines(res: Results, source: str) -> list[str]:
    runs = res.runs[res.runs["results"] == source]
    lines = []
    if not runs.empty:
        counts = runs["status"].value_counts()
        lines.append(f"{len(runs)} run(s): " + ", ".join(f"{n} {k}" for k, n in counts.items()))
        saturated = int(runs["cpu_saturated"].fillna(False).astype(bool).sum())
        if saturated:
            lines.append(
                f"{CROSS} the emulating host's CPU was saturated in {saturated} of {len(runs)} "
                "run(s): their times describe the host, not the WAN"
            )
    if res.has("links"):
        links = T.links_table(res)
        links = links[links["results"] == source]
        if not links.empty:
            off = int((links["ok"] == False).sum())  # noqa: E712
            mark = CROSS if off else CHECK
            lines.append(
                f"{mark} link self-check: {len(links) - off} of {len(links)} WAN direction(s) "
                "within tolerance"
            )
    return lines


def _limit(lines: list[str], what: str) -> list[str]:
    if len(lines) <= MAX_LINES:
        return lines
    return [*lines[:MAX_LINES], f"… and {len(lines) - MAX_LINES} more (see {what})"]


def headlines(res: Results) -> list[Headline]:
    """A :class:`Headline` per results directory: what its scenario asked, the verdict of its
    expectations, the main comparison (hierarchical vs flat at the largest size; each training
    algorithm vs DDP; each sender's goodput at a congestion sweep's mildest and harshest point)
    and what the numbers rest on."""
    out = []
    commands = CR.process_table(res)
    for source, manifest in res.manifests.items():
        scenario = manifest.get("scenario") or {}
        verdict, ok, checks = _verdict(manifest.get("expectations") or [], _expect_specs(manifest))
        findings = _limit(_speedup_lines(res, source), "Flat vs hierarchical")
        findings += _limit(_training_lines(res, source), "Training")
        findings += _limit(CR.headline_lines(commands, source), "Workload: command")
        findings += _congestion_lines(res, source)
        findings += _limit(_fault_lines(res, source), "WAN dynamics and faults")
        findings += _health_lines(res, source)
        name = str(scenario.get("name") or source)
        out.append(
            Headline(
                scenario=name if len(res.manifests) < 2 else f"{name} ({source})",
                question=str(scenario.get("question") or ""),
                expected=str(scenario.get("expected") or ""),
                verdict=verdict,
                ok=ok,
                checks=checks,
                findings=findings,
            )
        )
    return out


def expectations_display(res: Results, table: pd.DataFrame) -> pd.DataFrame:
    """The expectations' rows with ✓/✗, the row's sizes in binary units and both sides in the
    unit of the expectation's metric."""
    specs = {source: _expect_specs(m) for source, m in res.manifests.items()}
    rows = []
    for r in table.to_dict("records"):
        index = r.get("expectation")
        spec_list = specs.get(str(r.get("results")), [])
        spec = spec_list[index] if isinstance(index, int) and 0 <= index < len(spec_list) else {}
        metric = str(spec.get("metric") or "")
        status = str(r.get("status"))
        mark = {"passed": CHECK, "failed": CROSS}.get(status, "?")
        rows.append(
            {
                **({"results": r["results"]} if res.runs["results"].nunique() > 1 else {}),
                "expectation": str(r.get("description") or spec.get("name") or index),
                "status": f"{mark} {status}",
                "row": format_row_label(str(r.get("row") or "")),
                "metric": metric or "-",
                "measured": format_value(metric, r.get("lhs")),
                "relation": str(spec.get("relation") or "-"),
                "against": format_value(metric, r.get("rhs")),
                "detail": str(r.get("detail") or ""),
            }
        )
    return pd.DataFrame(rows)


def terms_table(res: Results, terms: pd.DataFrame) -> pd.DataFrame:
    """The model terms per row in one unit, signed, beside the prediction they add up to."""
    names = [c for c in T.MODEL_TERMS if c in terms]
    keys = [c for c in terms.columns if c not in (*names, "predicted")]
    base = formatted(terms[keys])
    shown_terms = []
    totals = []
    for r in terms.to_dict("records"):
        values, total = terms_display({n: r.get(n) for n in names}, r.get("predicted"))
        shown_terms.append(values)
        totals.append(total)
    at = (
        list(base.columns).index("time p50") + 1
        if "time p50" in base.columns
        else len(base.columns)
    )
    for i, n in enumerate(names):
        base.insert(at + i, T.HEADERS.get(n, n), [v[n] for v in shown_terms])
    base.insert(at + len(names), "= predicted", totals)
    return base


def plot_stamp(res: Results) -> str:
    """What every figure of the report was measured on, for its title: scenario(s), the WAN
    (per link: rate, RTT, loss, buffer; a sweep's values joined by ``|``), backend(s) and the
    date the runs started."""
    manifests = list(res.manifests.values())
    names = dict.fromkeys(str((m.get("scenario") or {}).get("name", "?")) for m in manifests)
    runs = {f"{source}/{k}": v for source, m in res.manifests.items()
            for k, v in (m.get("runs") or {}).items()}  # fmt: skip
    backends = dict.fromkeys(str(r.get("backend")) for r in runs.values() if r.get("backend"))
    started = [float(m["started"]) for m in manifests if m.get("started")]
    date = time.strftime("%Y-%m-%d", time.localtime(min(started))) if started else "undated"
    parts = [", ".join(names), "WAN " + network_summary(runs)]
    parts += [" | ".join(backends) or "backend ?", date]
    return " · ".join(parts)
