"""``testbed compare``: did collective times change between two results sets? PURE pandas.

This module owns the matching and the verdicts; the CLI (``testbed.cli.report``) only prints.
Rows of the two sets' summaries are matched on what the scenario swept (sweep parameters,
collective, algorithm, size; for training, sweep parameters and algorithm; for a command
workload's metric lines, sweep parameters and metric), never on the results
directory's name or the run id, so a re-run of the same scenario matches its base. Repeats of one
point are folded into their median. The verdicts (regressed, improved, same, still failing,
fixed) and the training rows' time to loss: docs/results.md, "testbed compare". Rows only in one
set are listed as unmatched (a sweep point added or removed is not a change of the communication
code). :attr:`Comparison.regressed` is what a CI job checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pandas as pd

from analysis.loader import Results, ResultsError
from analysis.tables import sort_by_params

KEYS = ["collective", "algorithm", "size"]
COLUMNS = [
    "collective", "algorithm", "size", "base_time_p50", "new_time_p50", "ratio",
    "base_busbw", "new_busbw", "busbw_ratio", "verdict",
]  # fmt: skip
TRAINING_KEYS = ["algorithm"]
TRAINING_COLUMNS = [
    "algorithm", "base_time_p50", "new_time_p50", "ratio",
    "base_time_to_loss", "new_time_to_loss", "time_to_loss_ratio", "verdict",
]  # fmt: skip
# a command workload's metric lines (metrics.parquet): per metric, the median of its values,
# compared as a time is (more than the tolerance higher: regressed)
COMMAND_KEYS = ["metric"]
COMMAND_COLUMNS = [
    "metric", "base_p50", "new_p50", "ratio", "base_samples", "new_samples", "verdict",
]  # fmt: skip


@dataclass(frozen=True)
class _Kind:
    """What a comparison matches on and measures: summary frame, keys, time and second metric."""

    name: str
    keys: list[str]
    columns: list[str]
    time: str
    second: str  # busbw (collectives) or time_to_loss (training)


@dataclass
class Comparison:
    """``table``: matched rows (sweep parameters + :data:`COLUMNS`); ``only_base`` /
    ``only_new``: unmatched rows (parameters + collective, algorithm, size); ``params``: the
    parameter columns matched on; ``tolerance``: as a fraction."""

    table: pd.DataFrame
    only_base: pd.DataFrame
    only_new: pd.DataFrame
    params: list[str]
    tolerance: float
    kind: str = "collectives"  # or "training", "command"
    keys: list[str] = field(default_factory=lambda: list(KEYS))

    @property
    def regressed(self) -> bool:
        return bool((self.table["verdict"] == "regressed").any())

    def counts(self) -> dict[str, int]:
        return {str(k): int(v) for k, v in self.table["verdict"].value_counts().items()}


def _kind(base: Results, new: Results) -> _Kind:
    if (
        base.summary.empty
        and new.summary.empty
        and not (base.training_summary.empty or new.training_summary.empty)
    ):
        return _Kind("training", TRAINING_KEYS, TRAINING_COLUMNS, "step_time_p50", "time_to_loss")
    if (
        base.summary.empty
        and new.summary.empty
        and not (_command_summary(base).empty or _command_summary(new).empty)
    ):
        return _Kind("command", COMMAND_KEYS, COMMAND_COLUMNS, "p50", "samples")
    return _Kind("collectives", KEYS, COLUMNS, "time_p50", "busbw")


def _summary(res: Results, kind: _Kind) -> pd.DataFrame:
    if kind.name == "command":
        return _command_summary(res)
    return res.training_summary if kind.name == "training" else res.summary


def _command_summary(res: Results) -> pd.DataFrame:
    """Per run and metric of a command workload's metric lines: the median of their numeric
    values (``p50``), how many (``samples``) and the run's status."""
    m = res.metrics
    if m.empty or not {"metric", "value", "run_id"} <= set(m.columns):
        return pd.DataFrame()
    m = m.assign(value=pd.to_numeric(m["value"], errors="coerce")).dropna(subset=["value"])
    by = [c for c in ("results", "run_id", *res.params) if c in m.columns]
    s = m.groupby([*by, "metric"], as_index=False, dropna=False).agg(
        p50=("value", "median"), samples=("value", "size")
    )
    runs = res.runs
    if not runs.empty and {"results", "run_id", "status"} <= set(runs.columns):
        s = s.merge(runs[["results", "run_id", "status"]], on=["results", "run_id"], how="left")
    return s


def _folded(res: Results, params: list[str], kind: _Kind) -> pd.DataFrame:
    """Summary rows per (params, keys): median over repeats, ok flag."""
    s = _summary(res, kind)
    if s.empty:
        return pd.DataFrame(columns=[*params, *kind.keys, "time", "second", "ok"])
    s = s.copy()
    for p in params:
        if p not in s:
            s[p] = None
    if kind.second not in s:
        s[kind.second] = None
    ok = s["status"].eq("ok") if "status" in s else pd.Series(True, index=s.index)
    if "correct" in s:
        ok &= s["correct"].fillna(True).astype(bool)
    s["ok"] = ok
    # Sweep values are compared as text: '50mbit' in one set is '50mbit' in the other.
    for p in params:
        s[p] = s[p].map(lambda v: "" if v is None or pd.isna(v) else str(v))
    s[kind.second] = pd.to_numeric(s[kind.second], errors="coerce")
    return s.groupby([*params, *kind.keys], as_index=False, dropna=False).agg(
        time=(kind.time, "median"), second=(kind.second, "median"), ok=("ok", "all")
    )


def _failed_points(res: Results, params: list[str]) -> set[tuple[str, ...]]:
    """Parameter tuples of runs that failed or were interrupted."""
    runs = res.runs
    if runs.empty:
        return set()
    bad = runs[runs["status"].isin(["failed", "interrupted"])]
    return {
        tuple("" if p not in bad or pd.isna(r[p]) else str(r[p]) for p in params)
        for _, r in bad.iterrows()
    }


def compare(base: Results, new: Results, tolerance: float = 0.10) -> Comparison:
    """Match ``new`` against ``base``; raise :class:`ResultsError` when nothing matches."""
    if tolerance < 0:
        raise ResultsError(f"tolerance must not be negative, got {tolerance:g}")
    kind = _kind(base, new)
    params = list(dict.fromkeys([*base.params, *new.params]))
    b, n = _folded(base, params, kind), _folded(new, params, kind)
    if b.empty or n.empty:
        which = "BASE" if b.empty else "NEW"
        raise ResultsError(
            f"{which} has no measured collectives, training or command metrics to compare"
        )
    keys = [*params, *kind.keys]
    merged = b.merge(n, on=keys, how="outer", suffixes=("_base", "_new"), indicator=True)
    both = merged[merged["_merge"] == "both"].copy()
    only_base = merged[merged["_merge"] == "left_only"][keys]
    only_new = merged[merged["_merge"] == "right_only"][keys]
    # A base row whose new run failed before measuring anything is a regression, not a gap.
    failed_new = _failed_points(new, params)
    lost = only_base[[tuple(r[p] for p in params) in failed_new for _, r in only_base.iterrows()]]
    only_base = only_base.drop(lost.index)
    if both.empty and lost.empty:
        raise ResultsError(
            f"no matching runs: BASE and NEW share no (sweep parameters, {', '.join(kind.keys)}); "
            f"parameters: {', '.join(params) or '(no sweep)'}"
        )
    second = {"collectives": "busbw", "training": "time_to_loss"}.get(kind.name, kind.second)
    table = pd.DataFrame(
        {
            **{k: both[k] for k in keys},
            "base_time_p50": both["time_base"],
            "new_time_p50": both["time_new"],
            "ratio": both["time_new"] / both["time_base"],
            f"base_{second}": both["second_base"],
            f"new_{second}": both["second_new"],
            f"{second}_ratio": both["second_new"] / both["second_base"],
            "base_ok": both["ok_base"].astype(bool),
            "new_ok": both["ok_new"].astype(bool),
        }
    )
    table["verdict"] = [_verdict(r, tolerance, kind) for _, r in table.iterrows()]
    if not lost.empty:
        base_rows = b.merge(lost, on=keys)
        gone = pd.DataFrame(
            {
                **{k: base_rows[k] for k in keys},
                "base_time_p50": base_rows["time"],
                f"base_{second}": base_rows["second"],
                "base_ok": base_rows["ok"],
                "new_ok": False,
            }
        )
        gone["verdict"] = ["regressed" if ok else "still failing" for ok in gone["base_ok"]]
        table = pd.concat([table, gone], ignore_index=True)
    table = table.drop(columns=["base_ok", "new_ok"])
    if kind.name == "command":  # a metric's p50, not a time
        table = table.rename(columns={"base_time_p50": "base_p50", "new_time_p50": "new_p50"})
    order = _order(base, new)
    return Comparison(
        table=sort_by_params(table[[*params, *kind.columns]], order, kind.keys),
        only_base=sort_by_params(only_base, order, kind.keys),
        only_new=sort_by_params(only_new, order, kind.keys),
        params=params,
        tolerance=tolerance,
        kind=kind.name,
        keys=kind.keys,
    )


def _order(base: Results, new: Results) -> Results:
    """A stand-in holding both sets' parameter order, for :func:`sort_by_params`."""
    order = {p: list(v) for p, v in base.param_order.items()}
    for p, values in new.param_order.items():
        order[p] = list(dict.fromkeys([*order.get(p, []), *values]))
    params = list(dict.fromkeys([*base.params, *new.params]))
    return replace(
        base, params=params, param_order={p: [str(v) for v in order.get(p, [])] for p in params}
    )


def _verdict(row: pd.Series, tolerance: float, kind: _Kind) -> str:
    if not row["new_ok"]:
        return "regressed" if row["base_ok"] else "still failing"
    if not row["base_ok"]:
        return "fixed"
    ratio = row["ratio"]
    if kind.name == "training":
        base_ttl, new_ttl = row["base_time_to_loss"], row["new_time_to_loss"]
        if pd.notna(base_ttl) and pd.isna(new_ttl):
            return "regressed"  # the base reached the target loss, the new run did not
        if pd.notna(base_ttl) and pd.notna(new_ttl) and new_ttl > (1 + tolerance) * base_ttl:
            return "regressed"
    if ratio > 1 + tolerance:
        return "regressed"
    if ratio < 1 - tolerance:
        return "improved"
    return "same"


# -- what else differs between the two sides -----------------------------------------------------
NETWORK_FIELDS = {
    "rate_bps": "rate",
    "delay_s": "delay",
    "jitter_s": "jitter",
    "loss": "loss",
    "reorder": "reorder",
    "buffer": "buffer",
    "aqm": "aqm",
    "mtu": "mtu",
}
MAX_LINES = 3  # per kind of difference; the rest is counted


def identical(base: Results, new: Results) -> bool:
    """Whether the two sides hold the same results (their manifests equal): a comparison of a
    set with itself says nothing."""
    return sorted(map(_canonical, base.manifests.values())) == sorted(
        map(_canonical, new.manifests.values())
    )


def _canonical(manifest: object) -> str:
    import json

    return json.dumps(manifest, sort_keys=True, default=str)


def _text(v: object, field: str = "") -> str:
    from testbed.core.units import format_duration, format_percent, format_rate

    if v is None or (isinstance(v, float) and pd.isna(v)):
        return "-"
    if isinstance(v, int | float) and not isinstance(v, bool):
        shown = {"rate_bps": format_rate, "delay_s": format_duration, "jitter_s": format_duration,
                 "loss": format_percent, "reorder": format_percent}.get(field)  # fmt: skip
        return shown(float(v)) if shown else f"{v:g}"
    return str(v)


def _point(row: dict, params: list[str]) -> str:
    return ", ".join(f"{p}={row[p]}" for p in params if row.get(p) not in (None, "")) or "(all)"


def _per_point(frame: pd.DataFrame, params: list[str], keys: list[str], fields: list[str]) -> dict:
    """(point..., keys...) -> {field: value} of the first row of each (repeats agree)."""
    if frame.empty:
        return {}
    f = frame.copy()
    for p in params:
        f[p] = f[p].map(lambda v: "" if v is None or pd.isna(v) else str(v)) if p in f else ""
    out: dict = {}
    for row in f.to_dict("records"):
        key = tuple(row.get(k) for k in [*params, *keys])
        out.setdefault(key, ({k: row.get(k) for k in [*params, *keys]}, row))
    return {k: (ident, {fl: row.get(fl) for fl in fields}) for k, (ident, row) in out.items()}


def _capped(lines: list[str], what: str) -> list[str]:
    if len(lines) <= MAX_LINES:
        return lines
    return [*lines[:MAX_LINES], f"{what}: {len(lines) - MAX_LINES} more difference(s)"]


def differences(base: Results, new: Results) -> list[str]:
    """What differs between the two sides besides the code under test, one warning each: the
    resolved network of a sweep point (per WAN direction), the link backend, and the CPU flag
    (a run whose CPU was saturated measured the CPU, not the network). Points on one side only
    are not compared (they are listed as unmatched)."""
    params = list(dict.fromkeys([*base.params, *new.params]))
    out: list[str] = []
    fields = list(NETWORK_FIELDS)
    b = _per_point(base.network, params, ["direction"], fields)
    n = _per_point(new.network, params, ["direction"], fields)
    lines = []
    for key in [k for k in b if k in n]:
        ident, before = b[key]
        after = n[key][1]
        changed = [
            f"{NETWORK_FIELDS[f]} {_text(before[f], f)} -> {_text(after[f], f)}"
            for f in fields
            if _text(before[f]) != _text(after[f])
        ]
        if changed:
            lines.append(
                f"network differs at {_point(ident, params)} {ident['direction']}: "
                + ", ".join(changed)
            )
    out += _capped(lines, "network")
    rb = _per_point(base.runs, params, [], ["backend", "cpu_saturated"])
    rn = _per_point(new.runs, params, [], ["backend", "cpu_saturated"])
    backend, cpu = [], []
    for key in [k for k in rb if k in rn]:
        ident, before = rb[key]
        after = rn[key][1]
        where = _point(ident, params)
        if _text(before["backend"]) != _text(after["backend"]):
            backend.append(
                f"backend differs at {where}: BASE {_text(before['backend'])}, "
                f"NEW {_text(after['backend'])}"
            )
        sat_b, sat_n = bool(before["cpu_saturated"]), bool(after["cpu_saturated"])
        if sat_b != sat_n:
            which = "BASE" if sat_b else "NEW"
            cpu.append(
                f"CPU flag differs at {where}: {which}'s run saturated its CPU (cpu_saturated), "
                "the other's did not; its times are partly the CPU's"
            )
    return out + _capped(backend, "backend") + _capped(cpu, "CPU flag")


def comparison_json(cmp: Comparison, warnings: list[str] | None = None) -> dict:
    """:class:`Comparison` as JSON-ready data (docs/json.md, ``testbed compare --json``): NaN as
    null, numbers as SI (seconds, bytes, bytes/s)."""

    def records(frame: pd.DataFrame) -> list[dict]:
        rows = frame.astype(object).where(frame.notna(), None).to_dict("records")
        return [{str(k): _plain(v) for k, v in r.items()} for r in rows]

    counts = cmp.counts()
    return {
        "version": 1,
        "kind": cmp.kind,
        "verdict": "regressed" if cmp.regressed else "ok",
        "tolerance": cmp.tolerance,
        "params": cmp.params,
        "keys": cmp.keys,
        "matched": len(cmp.table),
        "counts": {k: counts.get(k, 0) for k in VERDICTS},
        "rows": records(cmp.table),
        "only_base": records(cmp.only_base),
        "only_new": records(cmp.only_new),
        "warnings": list(warnings or []),
    }


VERDICTS = ("regressed", "improved", "same", "still failing", "fixed")


def _plain(v: object) -> object:
    """numpy scalars as Python's own (json.dumps takes those only)."""
    item = getattr(v, "item", None)
    return item() if callable(item) else v
