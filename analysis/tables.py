"""Summary tables over loaded results: what a report shows and writes as CSV. PURE pandas.

This module owns the numbers of a report (``analysis.report`` lays them out, ``analysis.plots``
draws them). Every function takes a :class:`analysis.loader.Results` and returns a DataFrame in SI
units (seconds, bytes, bit/s for rates, bytes/s for algbw/busbw), empty when the data does not
exist; :func:`formatted` turns one into display strings with units. The tables (collectives,
speedup, congestion, links, runs, warnings, expectations, the header) are the report's sections:
docs/results.md, "testbed report".

*Goodput* here is the collective's bus bandwidth in bit/s (``busbw × 8``): nccl-tests defines
busbw so that it compares with a link's speed, and for gloo's ring over one WAN direction it is
the payload rate that direction carried while the collective ran.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import Any, SupportsInt, cast

import pandas as pd

from analysis.loader import Results
from analysis.loader import short_value as _short
from analysis.model import TERMS
from testbed.core.units import format_duration, format_rate, format_size

ALGORITHM_PARAM = "workload.algorithms"  # a sweep over algorithms: not part of a "point"
SUMMARY_KEYS = ["collective", "algorithm", "size"]


def point_params(res: Results) -> list[str]:
    """Sweep parameters that define a network/workload point (a sweep over the algorithm list
    puts flat and hierarchical in different runs; comparing them needs that path left out)."""
    return [p for p in res.params if p != ALGORITHM_PARAM]


def point_label(row: pd.Series | dict[str, Any], params: list[str]) -> str:
    """'wan[0].rate=50mbit, tcp.congestion=bbr' (or '(no sweep)')."""
    parts = [f"{p}={_short(row[p])}" for p in params if p in row and not _isna(row[p])]
    return ", ".join(parts) or "(no sweep)"


def _isna(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def sort_by_params(df: pd.DataFrame, res: Results, then: list[str] | None = None) -> pd.DataFrame:
    """Rows in sweep order: each parameter by its resolved number (50mbit < 1gbit), then
    ``then``."""
    if df.empty:
        return df
    keys, temp = [], {}
    for p in res.params:
        if p in df.columns:
            order = {v: i for i, v in enumerate(res.param_order.get(p, []))}
            temp[f"__{p}"] = df[p].map(lambda v, o=order: o.get(v, len(o)))
            keys.append(f"__{p}")
    keys += [c for c in (then or []) if c in df.columns]
    if "results" in df.columns:
        keys.insert(0, "results")
    out = df.assign(**temp).sort_values(keys, kind="stable") if keys else df
    return out.drop(columns=list(temp)).reset_index(drop=True)


# -- collectives -------------------------------------------------------------------------------
COLLECTIVE_COLUMNS = [
    "collective", "algorithm", "size", "ranks", "iterations", "time_p50", "time_p95",
    "algbw", "busbw", "predicted", "measured_over_predicted", "cpu_saturated", "correct",
    "status", "run_id",
]  # fmt: skip


def collective_table(res: Results) -> pd.DataFrame:
    """nccl-tests-style: run x collective x algorithm x size with time p50/p95, algbw, busbw,
    predicted (α-β model), measured/predicted, the CPU flag, correctness and the run's status."""
    if res.summary.empty:
        return pd.DataFrame(columns=["results", *res.params, *COLLECTIVE_COLUMNS])
    df = res.summary.copy()
    for col in COLLECTIVE_COLUMNS:
        if col not in df:
            df[col] = None
    cols = ["results", *[p for p in res.params if p in df], *COLLECTIVE_COLUMNS]
    return sort_by_params(df[cols], res, SUMMARY_KEYS)


MODEL_TERMS = [f"model_{term}" for term in TERMS]


def model_terms_table(res: Results) -> pd.DataFrame:
    """The α-β prediction split into its terms (analysis.model.predict_terms, docs/model.md,
    "Terms and their measured inputs"): the synchronous α-β steps, what gloo's segmented ring
    adds, what a congestion window below the BDP adds, what the ranks' staggered barrier exits add
    to the slowest rank's timer; with the measured p50 beside them. Empty
    when the runner recorded no terms (older results)."""
    df = res.summary
    # results from before a term existed show the terms they recorded
    if df.empty or "model_alpha_beta" not in df or df["model_alpha_beta"].isna().all():
        return pd.DataFrame()
    point = ["results", *[p for p in res.params if p in df], "collective", "algorithm", "size"]
    cols = [*point, "time_p50", *MODEL_TERMS, "predicted", "measured_over_predicted"]
    cols.append("cpu_saturated")
    out = df[df["model_alpha_beta"].notna()][[c for c in cols if c in df]]
    return sort_by_params(out, res, SUMMARY_KEYS)


def speedup_table(res: Results) -> pd.DataFrame:
    """Per results x sweep point x collective x size x non-flat algorithm: ``flat_time_p50``,
    ``time_p50`` and ``speedup`` = flat / this algorithm (> 1: the hierarchical one is faster)."""
    cols = ["results", "point", "collective", "size", "algorithm", "flat_time_p50", "time_p50"]
    df = res.summary
    if df.empty or "flat" not in set(df["algorithm"]):
        return pd.DataFrame(columns=[*cols, "speedup"])
    params = [p for p in point_params(res) if p in df]
    df = df[df["status"] == "ok"] if "status" in df else df
    # Repeats of one point: the median of their p50s.
    keys = ["results", *params, "collective", "size", "algorithm"]
    agg = df.groupby(keys, as_index=False, dropna=False)["time_p50"].median()
    flat = agg[agg["algorithm"] == "flat"].drop(columns="algorithm")
    other = agg[agg["algorithm"] != "flat"]
    if flat.empty or other.empty:
        return pd.DataFrame(columns=[*cols, "speedup"])
    merged = other.merge(
        flat.rename(columns={"time_p50": "flat_time_p50"}),
        on=["results", *params, "collective", "size"],
    )
    merged["speedup"] = merged["flat_time_p50"] / merged["time_p50"]
    merged.insert(1, "point", [point_label(r, params) for _, r in merged.iterrows()])
    return sort_by_params(merged, res, ["collective", "algorithm", "size"])


# -- congestion --------------------------------------------------------------------------------
def host_clusters(res: Results) -> dict[tuple[str, str], str]:
    """(results, host) -> cluster, from the rank rows; hosts are named <cluster>-h<i> otherwise."""
    out: dict[tuple[str, str], str] = {}
    if res.has("collectives") and {"host", "cluster"} <= set(res.collectives.columns):
        pairs = res.collectives[["results", "host", "cluster"]].drop_duplicates()
        out = {
            (results, host): cluster
            for results, host, cluster in zip(
                pairs["results"], pairs["host"], pairs["cluster"], strict=True
            )
        }
    return out


def _cluster(clusters: dict[tuple[str, str], str], results: str, host: Any) -> str | None:
    if not isinstance(host, str):
        return None
    return clusters.get((results, host), host.rsplit("-h", 1)[0])


def wan_sockets(res: Results) -> pd.DataFrame:
    """tcp.parquet rows of sockets whose peer is in another cluster (the WAN flows)."""
    if not res.has("tcp") or "peer_host" not in res.tcp:
        return pd.DataFrame()
    clusters = host_clusters(res)
    tcp = res.tcp
    src = tcp["results"]
    here = [_cluster(clusters, s, h) for s, h in zip(src, tcp["host"], strict=True)]
    there = [_cluster(clusters, s, h) for s, h in zip(src, tcp["peer_host"], strict=True)]
    mask = [a is not None and b is not None and a != b for a, b in zip(here, there, strict=True)]
    return tcp[mask]


def data_sockets(res: Results) -> pd.DataFrame:
    """Per run and host -> peer host, the WAN socket that sent the most (gloo's data connection;
    the others are its store and idle pairs)."""
    wan = wan_sockets(res)
    if wan.empty:
        return wan
    sock = ["results", "run_id", "host", "local", "peer"]
    sent = wan.groupby(sock)["bytes_sent"].agg(lambda s: s.max() - s.min()).rename("sent")
    top = sent.reset_index().merge(wan[[*sock, "peer_host"]].drop_duplicates(sock), on=sock)
    top = top.sort_values("sent").groupby(["results", "run_id", "host", "peer_host"]).tail(1)
    return wan.merge(top[sock], on=sock)


CONGESTION_COLUMNS = [
    "results", "run_id", "label", "congestion", "ecn", "wan_loss", "rtt_s", "aqm_profile",
    "aqm_at", "wan_rate_bps", "collective", "algorithm", "size", "time_p50", "time_p95",
    "goodput_bps", "wan_goodput_bps", "cpu_saturated",
    "srtt_p50_ms", "srtt_p95_ms", "cwnd_p50", "retransmits",
    "backlog_p50_bytes", "backlog_p95_bytes", "backlog_max_bytes", "dropped", "marked",
    "flow_retransmission_share", "flow_ce_share",
]  # fmt: skip


def congestion_table(res: Results) -> pd.DataFrame:
    """One row per ok run x collective x algorithm x size of a sweep (see module docstring)."""
    runs = res.runs[res.runs["status"] == "ok"] if not res.runs.empty else res.runs
    if runs.empty or res.summary.empty:
        return pd.DataFrame(columns=[*res.params, *CONGESTION_COLUMNS])
    desc = ["results", "run_id", "label", "congestion", "ecn", "wan_loss", "rtt_s"]
    desc += ["aqm_profile", "aqm_at", "wan_rate_bps", "wan_goodput_bps"]
    summary = res.summary[["results", "run_id", *SUMMARY_KEYS, "time_p50", "time_p95", "busbw"]]
    df = runs[[*desc, "cpu_saturated", *[p for p in res.params if p in runs]]].merge(
        summary, on=["results", "run_id"]
    )
    df["goodput_bps"] = df["busbw"] * 8
    key = ["results", "run_id"]
    data = data_sockets(res)
    if not data.empty:
        per_sock = data.groupby([*key, "local", "peer"])["retransmits"].agg(
            lambda s: s.max() - s.min()
        )
        stats = data.groupby(key).agg(
            srtt_p50_ms=("srtt_ms", "median"),
            srtt_p95_ms=("srtt_ms", lambda s: s.quantile(0.95)),
            cwnd_p50=("cwnd", "median"),
        )
        stats["retransmits"] = per_sock.groupby(key).sum()
        df = df.merge(stats.reset_index(), on=key, how="left")
    if res.has("queues"):
        q = res.queues
        per_dir = q.groupby([*key, "direction"]).agg(
            dropped=("dropped", lambda s: s.max() - s.min()),
            marked=("marked", lambda s: s.max() - s.min()),
        )
        stats = q.groupby(key).agg(
            backlog_p50_bytes=("backlog_bytes", "median"),
            backlog_p95_bytes=("backlog_bytes", lambda s: s.quantile(0.95)),
            backlog_max_bytes=("backlog_bytes", "max"),
        )
        stats = stats.join(per_dir.groupby(key).sum(min_count=1))
        df = df.merge(stats.reset_index(), on=key, how="left")
    if res.has("flows"):
        f = res.flows.groupby(key)[["payload_bytes", "retransmitted_bytes", "ce_bytes"]].sum()
        f["flow_retransmission_share"] = f["retransmitted_bytes"] / f["payload_bytes"]
        f["flow_ce_share"] = f["ce_bytes"] / f["payload_bytes"]
        df = df.merge(
            f[["flow_retransmission_share", "flow_ce_share"]].reset_index(), on=key, how="left"
        )
    for col in CONGESTION_COLUMNS:
        if col not in df:
            df[col] = None
    cols = [*[p for p in res.params if p in df], *CONGESTION_COLUMNS]
    return sort_by_params(df[cols], res, SUMMARY_KEYS)


def is_congestion_sweep(res: Results) -> bool:
    """Runs differ in congestion control, loss, RTT, ECN or marking profile, or were traced."""
    ok = res.runs[res.runs["status"] == "ok"] if not res.runs.empty else res.runs
    varies = any(
        col in ok and ok[col].nunique(dropna=True) > 1
        for col in ("congestion", "wan_loss", "rtt_s", "aqm_profile", "ecn")
    )
    return varies or res.has("tcp") or res.has("queues")


# -- runs, links, warnings, header -------------------------------------------------------------
def runs_table(res: Results) -> pd.DataFrame:
    cols = ["results", "run_id", "label", "status", "backend", "cpu_busy_mean", "cpu_saturated"]
    cols += ["reason"]
    if res.runs.empty:
        return pd.DataFrame(columns=cols)
    return sort_by_params(res.runs, res, ["run_id"])[cols]


def links_table(res: Results) -> pd.DataFrame:
    """The link self-check of every run: configured vs measured RTT, the direction's measured
    floor and the delay its emulator was given (RTT compensation), capacity and goodput per
    direction (results older than a column have it empty)."""
    cols = ["results", "run_id", "direction", "rtt_configured_s", "rtt_median_s", "rtt_p99_s"]
    cols += ["floor_s", "delay_emulated_s"]
    cols += ["capacity_configured_bps", "capacity_bps", "capacity_ratio"]
    cols += ["goodput_configured_bps", "goodput_bps", "goodput_ratio", "congestion", "ok"]
    cols += ["problem"]
    if not res.has("links"):
        return pd.DataFrame(columns=cols)
    df = res.links.copy()
    for col in cols:
        if col not in df:
            df[col] = None
    return sort_by_params(df, res, ["run_id", "direction"])[cols]


def warnings_table(res: Results) -> pd.DataFrame:
    """Everything a reader must know before trusting a number: failed, interrupted and skipped
    runs (with why), combinations not run, CPU-saturated runs, wrong results, link self-checks
    off by more than their tolerance, trace problems, truncated captures."""
    rows: list[dict[str, Any]] = []

    # kind, source, run_id, label and message: text, most of it cells of itertuples rows
    # (which pandas types as any scalar)
    def add(kind: Any, source: Any, run_id: Any, label: Any, message: Any) -> None:
        rows.append(
            {"kind": kind, "results": source, "run_id": run_id, "label": label, "message": message}
        )

    for r in res.runs.itertuples():
        if r.status in ("failed", "interrupted", "skipped", "unknown"):
            add(r.status, r.results, r.run_id, r.label, r.reason or "(no reason recorded)")
        if r.cpu_saturated:
            add(
                "cpu-saturated",
                r.results,
                r.run_id,
                r.label,
                "the emulating host's CPU was saturated: times describe the host, not the WAN",
            )
        if r.trace_warnings:
            add("trace", r.results, r.run_id, r.label, r.trace_warnings)
    labels = (
        res.runs.set_index(["results", "run_id"])["label"].to_dict() if not res.runs.empty else {}
    )
    for s in res.skipped.itertuples() if not res.skipped.empty else []:
        add(
            "not run",
            s.results,
            s.run_id,
            labels.get((s.results, s.run_id), ""),
            f"{s.collective} {s.algorithm}: {s.reason}",
        )
    if not res.summary.empty and "correct" in res.summary:
        for s in res.summary[res.summary["correct"] == False].itertuples():  # noqa: E712
            add(
                "wrong result",
                s.results,
                s.run_id,
                labels.get((s.results, s.run_id), ""),
                f"{s.collective} {s.algorithm} {int(cast(SupportsInt, s.size))} B: a rank's "
                "result was not the exact expected value",
            )
    if res.has("links") and "ok" in res.links:
        for lk in res.links[res.links["ok"] == False].itertuples():  # noqa: E712
            add(
                "link check",
                lk.results,
                lk.run_id,
                labels.get((lk.results, lk.run_id), ""),
                f"{lk.direction}: {lk.problem}",
            )
    for source, manifest in res.manifests.items():
        for run_id, run in (manifest.get("runs") or {}).items():
            for cap in run.get("pcap") or []:
                if cap.get("truncated"):
                    add(
                        "pcap truncated",
                        source,
                        run_id,
                        labels.get((source, run_id), ""),
                        f"{cap.get('label')}: the capture reached its size cap "
                        f"({cap.get('packets')} packets); flows.parquet covers the start only",
                    )
    for e in expectations_table(res).itertuples():
        if e.status == "failed":
            numbers = (
                f": {e.lhs:.4g} vs {e.rhs:.4g}" if e.lhs is not None and e.rhs is not None else ""
            )
            add(
                "expectation failed",
                e.results,
                "",
                str(e.row or ""),
                f"expect[{e.expectation}] {e.description}{numbers}"
                + (f" ({e.detail})" if e.detail else ""),
            )
    order = ["failed", "interrupted", "unknown", "expectation failed", "wrong result", "skipped"]
    order += ["not run"]
    order += ["link check", "cpu-saturated", "trace", "pcap truncated"]
    df = pd.DataFrame(rows, columns=["kind", "results", "run_id", "label", "message"])
    df["__k"] = df["kind"].map({k: i for i, k in enumerate(order)})
    return df.sort_values(["__k", "results", "run_id"], kind="stable").drop(columns="__k")


EXPECTATION_COLUMNS = ["results", "expectation", "status", "description", "row", "lhs", "rhs"]
EXPECTATION_COLUMNS += ["detail"]


def expectations_table(res: Results) -> pd.DataFrame:
    """The scenario's ``expect`` checks as ``testbed run`` recorded them in the manifest
    (``expectations``): one row per expectation x summary row it applied to."""
    rows = [
        {"results": source, **check}
        for source, manifest in res.manifests.items()
        for check in manifest.get("expectations") or []
    ]
    df = pd.DataFrame(rows)
    for col in EXPECTATION_COLUMNS:
        if col not in df:
            df[col] = None
    return df[EXPECTATION_COLUMNS]


def header(res: Results) -> list[tuple[str, str]]:
    """(key, value) lines for the top of a report: what ran, where, with what."""
    out: list[tuple[str, str]] = []

    def distinct(values: list[Any]) -> str:
        seen = [str(v) for v in dict.fromkeys(values) if v not in (None, "")]
        return ", ".join(seen) if seen else "-"

    manifests = list(res.manifests.values())
    scenarios = [m.get("scenario") or {} for m in manifests]
    out.append(("results", distinct([str(p) for p in res.paths.values()])))
    out.append(("scenario", distinct([s.get("name") for s in scenarios])))
    out.append(("description", distinct([s.get("description") for s in scenarios])))
    out.append(("scenario file", distinct([m.get("scenario_file") for m in manifests])))
    if not res.runs.empty:
        out.append(("backend", distinct(list(res.runs["backend"].dropna()))))
    out.append(("kernel", distinct([m.get("kernel") for m in manifests])))
    versions: dict[str, list[Any]] = {}
    for m in manifests:
        for k, v in (m.get("versions") or {}).items():
            versions.setdefault(k, []).append(v)
    out.append(("versions", "; ".join(f"{k} {distinct(v)}" for k, v in versions.items()) or "-"))
    out.append(("status", distinct([m.get("status") for m in manifests])))
    if not res.runs.empty:
        counts = res.runs["status"].value_counts()
        out.append(("runs", ", ".join(f"{n} {s}" for s, n in counts.items())))
    if res.params:
        out.append(
            ("sweep", "; ".join(_sweep_values(p, res.param_order.get(p)) for p in res.params))
        )
    started = [m["started"] for m in manifests if m.get("started")]
    finished = [m["finished"] for m in manifests if m.get("finished")]
    if started:
        out.append(("started", _when(min(started))))
    if finished:
        out.append(("finished", _when(max(finished))))
    return out


def _sweep_values(param: str, values: list[Any] | None) -> str:
    """'wan[0].rate: 50mbit, 200mbit': a parameter's values as the scenario wrote them (a mapping
    or list in YAML's flow style, '{kind: red, kmin: 20KB}'), comma-separated."""
    return f"{param}: " + ", ".join(_as_written(v) for v in values or [])


def _as_written(value: Any) -> str:
    """A sweep value in the scenario's syntax: the runs table keeps a mapping or list as JSON."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_as_written(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_as_written(v) for v in value) + "]"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _when(stamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp))


# -- display -----------------------------------------------------------------------------------
def _or_dash(fmt: Callable[[float], str]) -> Callable[[Any], str]:
    """``fmt`` for present values, ``-`` for missing ones (NaN, None)."""
    return lambda x: "-" if _isna(x) else fmt(x)


_fmt_size = _or_dash(format_size)
_fmt_time = _or_dash(format_duration)
_fmt_rate = _or_dash(format_rate)


def _fmt_bw(bytes_per_s: Any) -> str:
    return "-" if _isna(bytes_per_s) else f"{bytes_per_s / 1e6:.4g} MB/s"


def _fmt_num(x: Any, spec: str = ".3g") -> str:
    return "-" if _isna(x) else format(x, spec)


def _fmt_share(x: Any) -> str:
    return "-" if _isna(x) else f"{x * 100:.3g}%"


def _fmt_bool(flag: str):
    return lambda x: flag if x is True or x == 1 else ""


FORMATS = {
    "size": _fmt_size,
    "time_p50": _fmt_time,
    "time_p95": _fmt_time,
    "predicted": _fmt_time,
    "model_alpha_beta": _fmt_time,
    "model_segments_and_notify": _fmt_time,
    "model_cwnd": _fmt_time,
    "model_loss": _fmt_time,
    "model_barrier_skew": _fmt_time,
    "flat_time_p50": _fmt_time,
    "rtt_configured_s": _fmt_time,
    "rtt_median_s": _fmt_time,
    "rtt_p99_s": _fmt_time,
    "floor_s": _fmt_time,
    "delay_emulated_s": _fmt_time,
    "rtt_s": _fmt_time,
    "algbw": _fmt_bw,
    "busbw": _fmt_bw,
    "goodput_bps": _fmt_rate,
    "wan_goodput_bps": _fmt_rate,
    "wan_rate_bps": _fmt_rate,
    "goodput_configured_bps": _fmt_rate,
    "measured_over_predicted": lambda x: _fmt_num(x, ".2f"),
    "speedup": lambda x: _fmt_num(x, ".2f"),
    "goodput_ratio": _fmt_share,
    "wan_loss": _fmt_share,
    "cpu_busy_mean": _fmt_share,
    "flow_retransmission_share": _fmt_share,
    "flow_ce_share": _fmt_share,
    "cpu_saturated": _fmt_bool("CPU-saturated"),
    "correct": lambda x: "" if x is True or x == 1 else "WRONG",
    "ok": lambda x: "ok" if x is True or x == 1 else "OFF",
    "srtt_p50_ms": _fmt_num,
    "srtt_p95_ms": _fmt_num,
    "cwnd_p50": _fmt_num,
    "retransmits": lambda x: _fmt_num(x, ".0f"),
    "dropped": lambda x: _fmt_num(x, ".0f"),
    "marked": lambda x: _fmt_num(x, ".0f"),
    "backlog_p50_bytes": _fmt_size,
    "backlog_p95_bytes": _fmt_size,
    "backlog_max_bytes": _fmt_size,
    # a changing WAN (analysis.faults)
    "at_s": _fmt_time,
    "duration": _fmt_time,
    "detect_s": _fmt_time,
    "baseline_s": _fmt_time,
    "stall_s": _fmt_time,
    "predicted_stall_s": _fmt_time,
    "recover_s": _fmt_time,
    "stall_over_predicted": lambda x: _fmt_num(x, ".2f"),
    "target_mean_bps": _fmt_rate,
    "achieved_mean_bps": _fmt_rate,
    "achieved_over_target": _fmt_share,
    "correlation": lambda x: _fmt_num(x, ".3f"),
    "late_p50_s": _fmt_time,
    "late_p99_s": _fmt_time,
    "late_max_s": _fmt_time,
    "flow_stall_s": _fmt_time,
    "flow_predicted_s": _fmt_time,
}
HEADERS = {
    "time_p50": "time p50",
    "time_p95": "time p95",
    "measured_over_predicted": "meas/pred",
    "cpu_saturated": "CPU",
    "flat_time_p50": "flat p50",
    "model_alpha_beta": "α-β",
    "model_segments_and_notify": "+ segments & notify",
    "model_cwnd": "+ cwnd",
    "model_loss": "+ loss",
    "model_barrier_skew": "+ barrier skew",
    "goodput_bps": "goodput",
    "wan_goodput_bps": "WAN ceiling",
    "wan_rate_bps": "WAN rate",
    "rtt_configured_s": "RTT conf",
    "rtt_median_s": "RTT p50",
    "rtt_p99_s": "RTT p99",
    "floor_s": "floor (1-way)",
    "delay_emulated_s": "emulated delay",
    "rtt_s": "RTT",
    "goodput_configured_bps": "goodput conf",
    "goodput_ratio": "ratio",
    "wan_loss": "loss",
    "aqm_profile": "aqm",
    "aqm_at": "marks at",
    "cpu_busy_mean": "CPU busy",
    "flow_retransmission_share": "retrans (pcap)",
    "flow_ce_share": "CE (pcap)",
    "srtt_p50_ms": "srtt p50 ms",
    "srtt_p95_ms": "srtt p95 ms",
    "cwnd_p50": "cwnd p50",
    "backlog_p50_bytes": "backlog p50",
    "backlog_p95_bytes": "backlog p95",
    "backlog_max_bytes": "backlog max",
    "at_s": "at",
    "detect_s": "detect",
    "baseline_s": "no-fault op",
    "stall_s": "stall",
    "predicted_stall_s": "predicted",
    "stall_over_predicted": "stall/pred",
    "predicted_outcome": "predicted outcome",
    "recover_s": "recover",
    "target_mean_bps": "target mean",
    "achieved_mean_bps": "achieved mean",
    "achieved_over_target": "achieved/target",
    "late_p50_s": "late p50",
    "late_p99_s": "late p99",
    "late_max_s": "late max",
    "flow_stall_s": "flow stall",
    "flow_predicted_s": "flow predicted",
    "tcp_retransmits": "tcp retrans",
    "tcp_rto_max_ms": "tcp RTO max ms",
    "tcp_backoff_max": "tcp backoff max",
    "tcp_ca_states": "tcp ca states",
    "rto_spurious": "RTO spurious",
}


def formatted(df: pd.DataFrame, drop: tuple[str, ...] = ()) -> pd.DataFrame:
    """Display strings with units and short headers; a ``results`` column with one value goes."""
    out = df.drop(columns=[c for c in drop if c in df.columns])
    if "results" in out and out["results"].nunique() <= 1:
        out = out.drop(columns="results")
    shown = {}
    for col in out.columns:
        fmt = FORMATS.get(col)
        values = out[col].astype(object)
        shown[HEADERS.get(col, col)] = [
            fmt(v) if fmt else ("-" if _isna(v) else _short(v)) for v in values
        ]
    return pd.DataFrame(shown, columns=list(shown))
