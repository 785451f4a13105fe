"""The report's view of a ``command`` workload: what each process and service did (start, exit,
outcome, the first failure as the run's status names it), the last lines of their logs, a
timeline of the processes with the faults in force, and the program's own metrics per process.

Times are placed on one axis per run, seconds since its workload started (the first process's
start: ``clock: wall``'s origin), so processes, services (negative: before the workload) and
faults (events.parquet's ``applied_unix``) line up. PURE: reads results, draws without pyplot.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

from analysis.display import format_number, format_value
from analysis.loader import Results
from analysis.plots.style import MAX_PANELS, Plot, _colours, _figure, _legend, _style

TIMELINE = "command_timeline"
METRIC_PREFIX = "command_metric_"  # one figure per metric name: command_metric_<name>.png
LOG_LINES = 20  # a log's last lines shown
MAX_METRIC_FIGURES = 8  # a figure per metric name, the first ones printed (their CSV has all)
LOG_READ = 64 * 1024  # bytes read from a log's end at a time, until LOG_LINES lines are in
LOG_READ_MAX = 1 << 20  # and no more: a longer last line is shown from its cut (" …" before)
LINE_CHARS = 400  # a longer log line is cut (a 200 kB line stays readable)

# outcome -> colour of its bar
OUTCOME_COLOURS = {
    "ok": "#1a7f37",
    "failed": "#c62828",
    "timeout": "#8e24aa",
    "stopped": "#9e9e9e",
    "service": "#1565c0",
}
# how the run's status names a process's failure (testbed.experiment.workloads.command)
_FAILURE = re.compile(
    r"^(?P<what>(?:rank|host|service) \S+ \([^)]*\)) (?P<how>exited with code -?\d+"
    r"(?: while the workload ran)?|was killed by signal \w+(?: while the workload ran)?"
    r"|did not finish within \S+ \(workload\.timeout\)|was not ready within \S+"
    r"|exited with code -?\d+ before it was ready)"
)
_SIGNALS = {1: "SIGHUP", 2: "SIGINT", 6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM"}


def first_failure(reason: Any) -> tuple[str, str] | None:
    """(process as the status names it, e.g. ``rank 1 (west-h0)``; how it failed) from a run's
    ``reason``; None when the reason names no process's failure."""
    if not isinstance(reason, str):
        return None
    m = _FAILURE.match(reason.strip())
    return (m["what"], m["how"]) if m else None


def exit_text(code: Any) -> str:
    """An exit code as a reader says it: ``0``, ``3``, ``SIGTERM``; "-" when there is none."""
    if code is None or (isinstance(code, float) and math.isnan(code)):
        return "-"
    code = int(code)
    return _SIGNALS.get(-code, f"signal {-code}") if code < 0 else str(code)


def outcome(row: dict[str, Any]) -> str:
    """``ok``, ``failed``, ``timeout`` or ``stopped`` (the testbed stopped it: another process
    failed, or a service at the workload's end: ``service``)."""
    code, stopped = row.get("exit_code"), row.get("stopped")
    if row.get("role") == "service":
        if stopped is True:
            return "service"
        return "ok" if code in (0, None) else "failed"
    if stopped == "timeout":
        return "timeout"
    if stopped:
        return "stopped"
    if code is None or (isinstance(code, float) and math.isnan(code)):
        return "stopped"
    return "ok" if int(code) == 0 else "failed"


def outcome_text(value: str) -> str:
    """An outcome as a reader reads it (a service the testbed stopped: at the workload's end)."""
    return "stopped at the end" if value == "service" else value


def process_table(res: Results) -> pd.DataFrame:
    """One row per process and service of every command run (SI: seconds): ``results``,
    ``run_id``, ``role`` (process | service), ``process`` (as the run's status names it:
    ``rank 1``, ``service store``), ``host``, ``exit_code``, ``outcome``, ``start_s`` and
    ``end_s`` (seconds since the run's workload started; ``end_estimated``: it was stopped
    and its exit not timed, so the run's last known end), ``duration``, ``first_failure``
    (how the run's status names its failure, on that process's row only) and ``log``."""
    rows: list[dict[str, Any]] = []
    for source, manifest in res.manifests.items():
        for run_id, run in (manifest.get("runs") or {}).items():
            procs = run.get("processes")
            if procs is None:
                continue
            workload = (run.get("resolved") or {}).get("workload") or {}
            rows += _run_rows(source, run_id, run, procs, workload.get("timeout"))
    return pd.DataFrame(rows)


def _run_rows(
    source: str, run_id: str, run: dict[str, Any], procs: list[dict], timeout: Any
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in procs:
        out.append({**p, "role": "process", "process": p.get("process")})
    for s in run.get("services") or []:
        out.append({**s, "role": "service", "process": f"service {s.get('service')}"})
    starts = [r["start"] for r in out if r["role"] == "process" and r.get("start") is not None]
    origin = min(starts) if starts else None
    known_ends = []
    for r in out:
        r["results"], r["run_id"] = source, run_id
        r["outcome"] = outcome(r)
        start = r.get("start")
        # without recorded starts (older results): none, and each is drawn from the origin
        r["start_s"] = start - origin if start is not None and origin is not None else None
        if r["role"] == "process" and r.get("duration") is not None:
            r["end_s"] = (r["start_s"] or 0.0) + r["duration"]
            known_ends.append(r["end_s"])
    last = max(known_ends) if known_ends else None
    for r in out:
        if "end_s" in r:
            r["end_estimated"] = False
            continue
        r["end_estimated"] = True
        if r["outcome"] == "timeout" and timeout is not None:
            r["end_s"] = float(timeout)
        else:
            r["end_s"] = last if last is not None else (r["start_s"] or 0.0)
        if r["role"] == "service" and r.get("stopped") is True and last is not None:
            r["end_s"] = max(last, r["end_s"])
    failed = first_failure(run.get("reason"))
    for r in out:
        named = f"{r['process']} ({r.get('host')})"
        r["first_failure"] = failed[1] if failed and failed[0] == named else ""
    cols = ["results", "run_id", "role", "process", "host", "exit_code", "outcome", "start_s",
            "end_s", "end_estimated", "duration", "first_failure", "log", "start"]  # fmt: skip
    return [{c: r.get(c) for c in cols} for r in out]


def processes_display(table: pd.DataFrame, several_results: bool = False) -> pd.DataFrame:
    """The process table as a reader sees it: exit as a code or signal, times with units."""
    shown = []
    several_runs = table["run_id"].nunique() > 1 if not table.empty else False
    for r in table.to_dict("records"):
        end = format_value("end_s", r["end_s"]) + (" (stopped)" if r["end_estimated"] else "")
        row = {"results": r["results"]} if several_results else {}
        row |= {"run_id": r["run_id"]} if several_runs or several_results else {}
        row |= {
            "process": r["process"],
            "host": r["host"],
            "outcome": outcome_text(r["outcome"]),
            "exit": exit_text(r["exit_code"]),
            "start": format_value("start_s", r["start_s"]),
            "end": end,
            "duration": format_value("duration_s", r["duration"]),
            "status": r["first_failure"] and f"first failure: {r['first_failure']}",
        }
        shown.append(row)
    return pd.DataFrame(shown)


def log_tail(path: Path, lines: int = LOG_LINES) -> str | None:
    """The last ``lines`` lines of a log (each cut at LINE_CHARS), None when it is not there."""
    try:
        with open(path, "rb") as f:
            at = f.seek(0, 2)
            data = b""
            while at > 0 and len(data) < LOG_READ_MAX and data.count(b"\n") <= lines + 1:
                step = min(LOG_READ, at)
                at -= step
                f.seek(at)
                data = f.read(step) + data
    except OSError:
        return None
    text = data.decode(errors="replace").splitlines()
    if at > 0 and text:  # the first line read is part of one
        text[0] = "… " + text[0][2 - LINE_CHARS :]  # its end, within LINE_CHARS
    kept = [x if len(x) <= LINE_CHARS else x[:LINE_CHARS] + " …" for x in text if x.strip()]
    return "\n".join(kept[-lines:])


def log_tails(res: Results, table: pd.DataFrame) -> list[tuple[str, str]]:
    """(summary line, the log's last lines) per process and service whose log is kept
    (``runs/<run_id>/<log>``: stdout and stderr together, as written)."""
    out = []
    for r in table.to_dict("records"):
        base = res.paths.get(r["results"])
        if base is None or not r.get("log"):
            continue
        tail = log_tail(base / "runs" / r["run_id"] / r["log"])
        if tail is None:
            continue
        head = f"{r['run_id']} {r['process']} ({r['host']}): {outcome_text(r['outcome'])}"
        head += f", exit {exit_text(r['exit_code'])}" if r["exit_code"] is not None else ""
        out.append((f"{head} — {r['log']}, last {LOG_LINES} lines", tail or "(empty)"))
    return out


def fault_intervals(res: Results, results: str, run_id: str, origin: float) -> list[dict]:
    """Each fault of a run with ``start_s``/``end_s`` (seconds since ``origin``, Unix) and its
    text, from events.parquet's applied rows (end: its undo; none: still in force, NaN)."""
    ev = res.events
    if ev.empty or "fault" not in ev:
        return []
    ev = ev[(ev["results"] == results) & (ev["run_id"] == run_id) & ev["fault"].notna()]
    ev = ev[ev["status"].isin(["applied", "undone"]) & ev["applied_unix"].notna()]
    out = []
    for _, g in ev.sort_values("applied_unix").groupby("fault", sort=False):
        times = g["applied_unix"].drop_duplicates().tolist()
        first = g.iloc[0]
        out.append(
            {
                "start_s": times[0] - origin,
                "end_s": times[-1] - origin if len(times) > 1 else math.nan,
                "what": f"{first['action']} {first['link'] or first['cluster'] or ''}".strip(),
            }
        )
    return out


def _run_keys(table: pd.DataFrame) -> list[tuple[str, str]]:
    return list(dict.fromkeys(zip(table["results"], table["run_id"], strict=True)))


def _origin(table: pd.DataFrame, results: str, run_id: str) -> float | None:
    rows = table[(table["results"] == results) & (table["run_id"] == run_id)]
    starts = rows.loc[rows["role"] == "process", "start"].dropna()
    return float(starts.min()) if not starts.empty else None


def plot_timeline(res: Results, table: pd.DataFrame) -> Plot | None:
    """A panel per run: a bar per process and service from its start to its exit, coloured by
    outcome (hatched: stopped, its end not timed), the faults shaded."""
    if table.empty:
        return None
    runs = _run_keys(table)[:MAX_PANELS]
    with _style():
        height = max(1.6, 0.35 * table.groupby(["results", "run_id"]).size().max() + 1.2)
        fig, axes = _figure(len(runs), 1, width=9.0, height=height)
        for ax, (results, run_id) in zip(axes, runs, strict=False):
            rows = table[(table["results"] == results) & (table["run_id"] == run_id)]
            rows = rows.iloc[::-1]  # the first row at the top
            labels = []
            for y, r in enumerate(rows.to_dict("records")):
                start = _start(r)
                width = max(r["end_s"] - start, 1e-3)
                ax.barh(
                    y, width, left=start, height=0.6,
                    color=OUTCOME_COLOURS[r["outcome"]], hatch="//" if r["end_estimated"] else "",
                    edgecolor="white" if r["end_estimated"] else None,
                )  # fmt: skip
                ax.annotate(
                    f" {outcome_text(r['outcome'])} ({exit_text(r['exit_code'])})",
                    (start + width, y), va="center", fontsize=7,
                )  # fmt: skip
                labels.append(f"{r['process']} ({r['host']})")
            ax.set_yticks(range(len(labels)), labels)
            origin = _origin(table, results, run_id)
            for f in fault_intervals(res, results, run_id, origin) if origin else []:
                end = f["end_s"] if not math.isnan(f["end_s"]) else ax.get_xlim()[1]
                ax.axvspan(f["start_s"], end, color="#ff9800", alpha=0.25, lw=0)
                ax.annotate(
                    f["what"], (f["start_s"], 1.0), xycoords=("data", "axes fraction"),
                    va="bottom", fontsize=7, color="#e65100",
                )  # fmt: skip
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: format_value("time_s", v)))
            ax.set_xlabel("time since the workload started")
            ax.set_title(run_id if len({k[0] for k in runs}) < 2 else f"{results} {run_id}")
        seen = set(table["outcome"])
        handles = [
            Patch(color=c, label="service (stopped at the end)" if k == "service" else k)
            for k, c in OUTCOME_COLOURS.items()
            if k in seen
        ]
        handles.append(Patch(color="#ff9800", alpha=0.25, label="fault in force"))
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=7)
    left = len(_run_keys(table)) - len(runs)
    return Plot(
        TIMELINE,
        "Processes: start to exit",
        "One row per process and service of the command workload, from its start to its exit "
        "(seconds since the workload's first process started; services start before), coloured "
        "by outcome; hatched: stopped by the testbed, drawn to the run's last timed exit; "
        "shaded: a fault in force (events.parquet, as applied). Results without recorded starts "
        "draw every process from 0." + (f" {left} more run(s) not drawn." if left > 0 else ""),
        fig,
    )


def _start(row: dict[Any, Any]) -> float:
    """A row's start on the run's axis; 0 where its start was not recorded (older results)."""
    v = row.get("start_s")
    return 0.0 if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def _steps(fields: pd.Series) -> pd.Series:
    def step(text: Any) -> Any:
        try:
            s = json.loads(text).get("step") if isinstance(text, str) else None
        except (ValueError, AttributeError):
            return None
        return s if isinstance(s, int) and not isinstance(s, bool) else None

    return fields.map(step)


def metric_frame(res: Results, table: pd.DataFrame) -> pd.DataFrame:
    """metrics.parquet's numeric rows with ``step`` (from ``fields``; None without) and ``t``
    (seconds since the run's workload started)."""
    m = res.metrics
    if m.empty:
        return m
    m = m[pd.to_numeric(m["value"], errors="coerce").notna()].copy()
    m["value"] = pd.to_numeric(m["value"])
    m["step"] = _steps(m["fields"]) if "fields" in m else None
    origins = {k: _origin(table, *k) for k in _run_keys(table)} if not table.empty else {}
    first = m.groupby(["results", "run_id"])["time"].transform("min")
    origin = pd.Series(
        [origins.get(k) for k in zip(m["results"], m["run_id"], strict=True)], index=m.index
    )
    m["t"] = m["time"] - origin.fillna(first)
    return m


def plot_metrics(res: Results, table: pd.DataFrame) -> list[Plot]:
    """A figure per metric name: a panel per run, a line per process, over its ``step`` when
    every line of the metric has an integer one, else over time (faults shaded)."""
    m = metric_frame(res, table)
    if m.empty:
        return []
    plots = []
    names = list(dict.fromkeys(m["metric"]))
    for name in names[:MAX_METRIC_FIGURES]:
        rows = m[m["metric"] == name]
        by_step = rows["step"].notna().all()
        runs = list(dict.fromkeys(zip(rows["results"], rows["run_id"], strict=True)))
        shown = runs[:MAX_PANELS]
        colours = _colours(list(dict.fromkeys(rows["process"])))
        with _style():
            fig, axes = _figure(len(shown), 2)
            for ax, (results, run_id) in zip(axes, shown, strict=False):
                run = rows[(rows["results"] == results) & (rows["run_id"] == run_id)]
                for process, g in run.groupby("process", sort=False):
                    g = g.sort_values("step" if by_step else "t")
                    x = g["step"] if by_step else g["t"]
                    ax.plot(x, g["value"], marker="o", ms=3, lw=1, label=str(process),
                            color=colours[process])  # fmt: skip
                origin = _origin(table, results, run_id) if not table.empty else None
                for f in fault_intervals(res, results, run_id, origin) if origin else []:
                    lo, hi = (
                        f["start_s"],
                        f["end_s"] if not math.isnan(f["end_s"]) else f["start_s"],
                    )
                    if by_step:  # the steps whose lines were read while the fault was in force
                        lo, hi = _step_at(run, lo), _step_at(run, hi)
                    if lo is not None and hi is not None:
                        pad = 0.5 if by_step else 0.0  # a step's span: its point +- half a step
                        ax.axvspan(lo - pad, hi + pad, color="#ff9800", alpha=0.25, lw=0)
                ax.set_xlabel("step" if by_step else "time since the workload started")
                if not by_step:
                    ax.xaxis.set_major_formatter(
                        FuncFormatter(lambda v, _p: format_value("time_s", v))
                    )
                ax.yaxis.set_major_formatter(
                    FuncFormatter(lambda v, _p, n=str(name): format_value(n, v))
                )
                ax.set_ylabel(str(name))
                ax.set_title(run_id if len({k[0] for k in shown}) < 2 else f"{results} {run_id}")
                _legend(ax, fontsize=7)
        left = len(runs) - len(shown)
        plots.append(
            Plot(
                METRIC_PREFIX + _slug(str(name)),
                f"Metric {name}",
                f"The program's `{name}` lines (metrics.parquet, {format_number(len(rows))} "
                f"lines), a line per process, over "
                + ("its `step`" if by_step else "time since the workload started")
                + "; shaded: a fault in force"
                + (" (the steps whose lines were read while it was)." if by_step else ".")
                + (f" {left} more run(s) not drawn." if left > 0 else "")
                + (
                    f" {len(names) - MAX_METRIC_FIGURES} more metric(s) without a figure "
                    f"({', '.join(map(str, names[MAX_METRIC_FIGURES:]))}): metrics.parquet."
                    if len(names) > MAX_METRIC_FIGURES and name == names[MAX_METRIC_FIGURES - 1]
                    else ""
                ),
                fig,
            )
        )
    return plots


def _step_at(run: pd.DataFrame, t: float) -> Any:
    """The first step whose line was read at or after ``t`` (None: none was)."""
    later = run[run["t"] >= t]
    return later["step"].min() if not later.empty else None


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:60] or "metric"


def summary_display(rows: pd.DataFrame, several_results: bool = False) -> list[tuple[str, Any]]:
    """The kind's summary rows other than the processes' as (caption, table): each metric's p50
    in the unit its name says (``step_time``: a duration) with its number of lines, and the WAN
    bytes per direction."""
    keys = (["results"] if several_results else []) + ["run_id"]
    keys = [k for k in keys if k in rows]
    out: list[tuple[str, Any]] = []
    if "metric_name" in rows:
        m = rows[rows["metric_name"].notna()]
        if not m.empty:
            shown = m[keys].reset_index(drop=True).astype(str)
            shown["metric"] = m["metric_name"].to_numpy()
            shown["p50"] = [
                format_value(n, v) for n, v in zip(m["metric_name"], m["p50"], strict=True)
            ]
            shown["lines"] = [format_number(v) for v in m["samples"]]
            out.append(("Metrics: p50 of each metric's lines over the run's processes", shown))
    if "wan_direction" in rows:
        w = rows[rows["wan_direction"].notna()]
        if not w.empty:
            shown = w[keys].reset_index(drop=True).astype(str)
            shown["direction"] = w["wan_direction"].to_numpy()
            shown["WAN bytes"] = [format_value("bytes", v) for v in w["wan_bytes"]]
            out.append(("WAN bytes while the workload ran (the links' counters)", shown))
    return out


def headline_lines(table: pd.DataFrame, source: str) -> list[str]:
    """A line per command run of results ``source`` for the report's headline: how many of
    its processes exited 0, the slowest one's duration, the first failure as the status names
    it."""
    if table.empty:
        return []
    lines = []
    for run_id, rows in table[table["results"] == source].groupby("run_id", sort=False):
        procs = rows[rows["role"] == "process"]
        ok = int((procs["outcome"] == "ok").sum())
        mark = "✓" if ok == len(procs) else "✗"
        line = f"{mark} {run_id}: {ok} of {len(procs)} process(es) exited 0"
        if ok == len(procs) and procs["duration"].notna().any():
            line += f", the slowest in {format_value('duration_s', procs['duration'].max())}"
        failed = rows[rows["first_failure"] != ""]
        for r in failed.to_dict("records"):
            line += f"; first failure: {r['process']} ({r['host']}) {r['first_failure']}"
        lines.append(line)
    return lines
