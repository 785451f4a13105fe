"""Results directories as tidy pandas tables. PURE: reads files, never imports ``testbed``.

This module owns ``analysis.load(path)``: one results directory (what one ``testbed run`` wrote:
``manifest.json`` + Parquet tables), a directory holding several of them, or a list of such paths
become one :class:`Results` whose tables carry a ``results`` column (the results directory's
name),
``run_id`` and the sweep parameters as columns (values as written in the scenario, e.g.
``wan[0].rate = "50mbit"``). Column meanings and units: docs/results.md ("Reports and
comparisons"); the raw tables' columns are documented there too.

Tables that a results directory does not have (no traces, every run skipped) are empty
DataFrames, so callers test ``results.has("tcp")`` instead of catching errors.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.network import NETWORK_COLUMNS, reference
from analysis.summary import iteration_times, summarize
from analysis.upgrade import FormatError, upgrade
from testbed.core.paths import get_path
from testbed.core.results import BY_NAME, TABLE_NAMES

TABLES = TABLE_NAMES
# summary kinds this module gives frames of their own (summary, training_summary, traffic_summary)
BUILT_IN_KINDS = ("collectives", "training", "traffic")
RUN_COLUMNS = [
    "results", "run_id", "point", "repeat", "status", "reason", "label", "backend",
    "backend_reason", "world_size", "cpu_busy_mean", "cpu_saturated", "congestion", "ecn",
    *NETWORK_COLUMNS, "skipped_combinations", "trace_warnings",
]  # fmt: skip


class ResultsError(ValueError):
    """A path is not a results directory (or holds none); the message says which and why."""


@dataclass
class Results:
    """Everything one or more results directories hold, as tidy DataFrames.

    ``runs``: one row per run (columns: :data:`RUN_COLUMNS` + sweep parameters).
    ``summary``: one row per run x collective x algorithm x size (the manifest's summary, which
    ``testbed run`` printed) + ``results`` and the run's ``status``.
    ``iterations``: one row per run x collective x algorithm x size x timed iteration; ``seconds``
    is the slowest rank's time (nccl-tests' convention).
    ``training_summary``: one row per training run (the manifest's summary of a ``kind:
    training`` workload, docs/results.md) + ``results`` and ``status``.
    ``traffic_summary``: one row per run without ranks (traffic alone: its fault, trace-replay
    and DCQCN metrics) + ``results`` and the sweep columns.
    ``collectives``, ``training``, ``links``, ``delayline``, ``tcp``, ``queues``, ``flows``,
    ``events`` (the WAN's schedule steps and faults as applied), ``flows_goodput`` (the
    ``traffic:`` flows' goodput samples), ``dcqcn`` (the DCQCN flows' RP events and CNPs) and
    ``dcqcn_rx`` (their receive counts per 100 ms), ``flowpaths`` (which path of a multipath
    link each TCP flow took), ``routing`` (FIB, BFD and BGP events in the gateways of a
    multipath or BGP run): the Parquet tables as written, +
    ``results`` (empty when absent). ``iterations`` leaves out operations that failed
    (``outcome`` error or timeout; they are in ``collectives``). ``skipped``:
    collective/algorithm combinations that do not exist (per run). ``manifests``: results
    name -> manifest.json content.
    ``params``: the sweep parameter columns, in the order the sweeps wrote them.
    ``param_order``: per parameter, its values sorted by the resolved number where it is one
    (50mbit before 1gbit).
    """

    runs: pd.DataFrame
    summary: pd.DataFrame
    iterations: pd.DataFrame
    collectives: pd.DataFrame
    training: pd.DataFrame
    metrics: pd.DataFrame  # a command workload's json-lines metrics
    network: pd.DataFrame
    ranks: pd.DataFrame
    training_summary: pd.DataFrame
    traffic_summary: pd.DataFrame
    links: pd.DataFrame
    delayline: pd.DataFrame
    tcp: pd.DataFrame
    queues: pd.DataFrame
    flows: pd.DataFrame
    events: pd.DataFrame
    flows_goodput: pd.DataFrame
    dcqcn: pd.DataFrame
    dcqcn_rx: pd.DataFrame
    flowpaths: pd.DataFrame
    routing: pd.DataFrame
    skipped: pd.DataFrame
    manifests: dict[str, dict[str, Any]]
    paths: dict[str, Path]
    params: list[str] = field(default_factory=list)
    param_order: dict[str, list[Any]] = field(default_factory=dict)
    # the summary rows of every other workload kind (one a user registered), by kind
    kind_summaries: dict[str, pd.DataFrame] = field(default_factory=dict)
    # tables the format does not declare (a registered kind's rows), by name, as written
    extra_tables: dict[str, pd.DataFrame] = field(default_factory=dict)

    def has(self, table: str) -> bool:
        """True when ``table`` has at least one row."""
        return not getattr(self, table).empty


def find_results(path: str | Path) -> list[Path]:
    """The results directories at ``path``: itself (it has a manifest.json), or its
    sub-directories that have one (a results root such as ``results/``)."""
    p = Path(path)
    if p.is_file() and p.name == "manifest.json":
        p = p.parent
    if not p.exists():
        raise ResultsError(f"{path}: no such file or directory")
    if not p.is_dir():
        raise ResultsError(f"{path}: not a results directory (expected a directory)")
    if (p / "manifest.json").is_file():
        return [p]
    found = sorted(d for d in p.iterdir() if (d / "manifest.json").is_file())
    if not found:
        raise ResultsError(
            f"{path}: not a results directory (no manifest.json in it or in its sub-directories; "
            "`testbed run FILE --out DIR` writes one)"
        )
    return found


def load(paths: str | Path | Iterable[str | Path]) -> Results:
    """One results directory, a directory of them, or several paths -> one :class:`Results`."""
    items = [paths] if isinstance(paths, str | Path) else list(paths)
    if not items:
        raise ResultsError("no results directory given")
    dirs: list[Path] = []
    for item in items:
        dirs += [d for d in find_results(item) if d.resolve() not in {x.resolve() for x in dirs}]
    names = _source_names(dirs)
    parts: dict[str, list[pd.DataFrame]] = {name: [] for name in (*TABLES, "runs", "summary")}
    skipped: list[dict[str, Any]] = []
    extra: dict[str, list[pd.DataFrame]] = {}
    manifests: dict[str, dict[str, Any]] = {}
    params: list[str] = []
    si: dict[str, dict[Any, float]] = {}
    for d, source in zip(dirs, names, strict=True):
        found: dict[str, pd.DataFrame] = {}
        for name in TABLES:
            path = d / f"{name}.parquet"
            if path.is_file():
                frame = pd.read_parquet(path)
                missing = [c for c in BY_NAME[name].columns if c not in frame.columns]
                if missing:
                    raise ResultsError(
                        f"{path}: missing column(s) {', '.join(missing)} (docs/results.md, "
                        f"{name}.parquet)"
                    )
                found[name] = frame
        for path in sorted(d.glob("*.parquet")):
            if path.stem not in TABLES:
                frame = pd.read_parquet(path)
                frame.insert(0, "results", source)
                extra.setdefault(path.stem, []).append(frame)
        try:
            manifest, found = upgrade(_read_manifest(d), found)
        except FormatError as exc:
            raise ResultsError(f"{d}/manifest.json: {exc}") from None
        manifests[source] = manifest
        runs = manifest.get("runs") or {}
        for run in runs.values():
            params += [p for p in run.get("params") or {} if p not in params]
        parts["runs"].append(_runs_frame(source, runs, si, found.get("network")))
        summary = pd.DataFrame(manifest.get("summary") or [])
        if not summary.empty:
            summary.insert(0, "results", source)
            parts["summary"].append(summary)
        for name, frame in found.items():
            if not frame.empty:
                frame.insert(0, "results", source)
                parts[name].append(frame)
        for run_id, run in runs.items():
            for skip in run.get("skipped_combinations") or []:
                skipped.append(
                    {
                        "results": source,
                        "run_id": run_id,
                        **(run.get("params") or {}),
                        "collective": skip.get("collective"),
                        "algorithm": skip.get("algorithm"),
                        "size": skip.get("size"),
                        "reason": skip.get("skipped"),
                    }
                )
    runs_df = _concat(parts["runs"], RUN_COLUMNS)
    tables = {name: _with_params(_concat(parts[name]), runs_df, params) for name in TABLES}
    iterations = _iterations(tables["collectives"], runs_df, params)
    summary = _concat(parts["summary"])
    # every summary row says its kind: the workload's, or "traffic" for a run without ranks
    # (its fault, trace-replay and DCQCN metrics)
    kinds = summary["kind"] if "kind" in summary.columns else pd.Series(dtype=object)
    training_summary = _of_kind(summary, kinds, "training")
    traffic_summary = _of_kind(summary, kinds, "traffic")
    others = [k for k in dict.fromkeys(kinds) if k not in BUILT_IN_KINDS]
    kind_summaries = {k: _with_params(_of_kind(summary, kinds, k), runs_df, params) for k in others}
    if not summary.empty:
        summary = summary[kinds == "collectives"].drop(columns=["kind"])
        if not training_summary.empty:  # the training rows' columns are not the collectives'
            summary = summary.dropna(axis=1, how="all")
        summary = summary.reset_index(drop=True)
    if not traffic_summary.empty:
        traffic_summary = _with_params(traffic_summary, runs_df, params)
    if summary.empty and not iterations.empty:
        summary = _summary_from_iterations(iterations, params)
    status = runs_df.set_index(["results", "run_id"])["status"] if not runs_df.empty else {}
    if not summary.empty:
        summary = _with_params(summary, runs_df, params)
        keys = zip(summary["results"], summary["run_id"], strict=True)
        summary["status"] = [status.get(key, "ok") for key in keys]
    if not training_summary.empty:
        training_summary = _with_params(training_summary, runs_df, params)
        keys = zip(training_summary["results"], training_summary["run_id"], strict=True)
        training_summary["status"] = [status.get(key, "ok") for key in keys]
    order = {p: _ordered(runs_df[p], si.get(p, {})) for p in params if p in runs_df}
    return Results(
        runs=runs_df,
        summary=summary,
        training_summary=training_summary,
        traffic_summary=traffic_summary,
        iterations=iterations,
        skipped=pd.DataFrame(skipped),
        manifests=manifests,
        paths=dict(zip(names, dirs, strict=True)),
        params=params,
        param_order=order,
        kind_summaries=kind_summaries,
        extra_tables={name: _concat(frames) for name, frames in extra.items()},
        **tables,
    )


# -- helpers -----------------------------------------------------------------------------------
def _read_manifest(d: Path) -> dict[str, Any]:
    try:
        data = json.loads((d / "manifest.json").read_text())
    except (OSError, ValueError) as exc:
        raise ResultsError(f"{d}/manifest.json: unreadable ({exc})") from None
    if not isinstance(data, dict):
        raise ResultsError(f"{d}/manifest.json: not a testbed manifest (expected a JSON object)")
    return data


def _source_names(dirs: list[Path]) -> list[str]:
    """Each directory's name; parents are prepended where two would collide."""
    names = [d.name for d in dirs]
    if len(set(names)) < len(names):
        names = [str(d) for d in dirs]
    return names


def _concat(frames: list[pd.DataFrame], columns: list[str] | None = None) -> pd.DataFrame:
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame(columns=columns or [])
    return pd.concat(frames, ignore_index=True)


def _of_kind(summary: pd.DataFrame, kinds: pd.Series, kind: str) -> pd.DataFrame:
    if summary.empty or not (kinds == kind).any():
        return pd.DataFrame()
    rows = summary[kinds == kind].dropna(axis=1, how="all").drop(columns=["kind"])
    return rows.reset_index(drop=True)


def _tcp(run: dict[str, Any]) -> dict[str, Any]:
    """The run's congestion control(s) (each cluster's, in cluster order) and whether any
    cluster asks for ECN, from its manifest entry's ``tcp`` (per cluster, overrides applied)."""
    clusters = list((run.get("tcp") or {}).values())
    ccs = [c for c in dict.fromkeys(t.get("congestion") for t in clusters) if c]
    return {
        "congestion": "/".join(ccs) if ccs else None,
        "ecn": any(bool(t.get("ecn")) for t in clusters),
    }


def _runs_frame(
    source: str,
    runs: dict[str, Any],
    si: dict[str, dict[Any, float]],
    network: pd.DataFrame | None,
) -> pd.DataFrame:
    rows = []
    extra: list[str] = []
    for run_id, run in runs.items():
        params = run.get("params") or {}
        extra += [p for p in params if p not in extra]
        resolved = run.get("resolved") or {}
        for path, value in params.items():
            number = get_path(resolved, path)
            if isinstance(number, int | float) and not isinstance(number, bool):
                si.setdefault(path, {})[_hashable(value)] = float(number)
        point = re.match(r"p(\d+)", run_id)
        rows.append(
            {
                "results": source,
                "run_id": run_id,
                "point": int(point.group(1)) if point else None,
                "repeat": run.get("repeat", 0),
                "status": run.get("status", "unknown"),
                "reason": run.get("reason") or "",
                "label": ", ".join(f"{k}={short_value(v)}" for k, v in params.items())
                or "(no sweep)",
                "backend": run.get("backend"),
                "backend_reason": run.get("backend_reason"),
                "world_size": run.get("world_size"),
                "cpu_busy_mean": run.get("cpu_busy_mean"),
                "cpu_saturated": bool(run.get("cpu_saturated", False)),
                **_tcp(run),
                **reference(_rows_of(network, run_id), run.get("backend")),
                "skipped_combinations": len(run.get("skipped_combinations") or []),
                "trace_warnings": "; ".join(run.get("trace_warnings") or []),
                **params,
            }
        )
    frame = pd.DataFrame(rows, columns=list(dict.fromkeys([*RUN_COLUMNS, *extra])))
    # Manifests of older versions lack some keys: the columns exist anyway (as None).
    return frame.astype({"cpu_saturated": bool}) if rows else frame


def _rows_of(frame: pd.DataFrame | None, run_id: str) -> pd.DataFrame:
    if frame is None or frame.empty or "run_id" not in frame:
        return pd.DataFrame()
    return frame[frame["run_id"] == run_id]


def short_value(value: Any) -> str:
    """A sweep value as legend text: '{"kind":"red","kmin":"20KB"}' -> 'kind=red kmin=20KB',
    '["flat"]' -> '[flat]'."""
    text = str(value)
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].replace('"', "").replace(",", " ").replace(":", "=")
    elif text.startswith("[") and text.endswith("]"):
        text = text.replace('"', "")
    return text


def _hashable(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if isinstance(value, list | dict) else value


def _ordered(values: pd.Series, si: dict[Any, float]) -> list[Any]:
    """Distinct values, by their resolved number when every value has one, else as first seen."""
    distinct = list(dict.fromkeys(v for v in values if not _missing(v)))
    if distinct and all(_hashable(v) in si for v in distinct):
        return sorted(distinct, key=lambda v: si[_hashable(v)])
    return distinct


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _with_params(frame: pd.DataFrame, runs: pd.DataFrame, params: list[str]) -> pd.DataFrame:
    """Add the sweep parameters a table lacks (tables of different sweeps, concatenated)."""
    if frame.empty or runs.empty or "run_id" not in frame:
        return frame
    missing = [p for p in params if p not in frame.columns and p in runs.columns]
    if not missing:
        return frame
    return frame.merge(runs[["results", "run_id", *missing]], on=["results", "run_id"], how="left")


def _iterations(collectives: pd.DataFrame, runs: pd.DataFrame, params: list[str]) -> pd.DataFrame:
    keys = ["results", "run_id", "collective", "algorithm", "size", "iteration"]
    if collectives.empty or not set(keys) <= set(collectives.columns):
        return pd.DataFrame(columns=[*keys, "seconds", "correct", "start", "ranks"])
    if "outcome" in collectives.columns:  # a failed operation's seconds are not a timing
        ok = collectives["outcome"].isna() | (collectives["outcome"] == "ok")
        collectives = collectives[ok & (collectives["iteration"] >= 0)]
        if collectives.empty:
            return pd.DataFrame(columns=[*keys, "seconds", "correct", "start", "ranks"])
    per = iteration_times(collectives, by=["results", "run_id"], sort=False)
    return _with_params(per, runs, params)


def _summary_from_iterations(iterations: pd.DataFrame, params: list[str]) -> pd.DataFrame:
    """For manifests without a summary: the runner's summary (analysis.summary) without the
    prediction, which needs the resolved network."""
    return summarize(iterations, by=["results", "run_id"], sort=False)
