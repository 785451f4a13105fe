"""Scenario expectations: what a sweep's results must show, checked after ``testbed run``. PURE.

An expectation (``where``, ``compare_to``, ``metric``, ``relation``, ``factor``, ``when``,
``value``; the YAML form: README, "Expectations") is checked against the rows of the run summary
(one per run x collective x algorithm x size, or one per training run; docs/results.md). Keys of
``where``, ``compare_to`` and ``when`` are summary columns (``collective``, ``algorithm``,
``size``, ``ranks``) or scenario field paths (``wan[0].rate``, ``tcp.congestion``), looked up in
each run's resolved scenario, so units work: ``wan[0].rate: 100mbit`` equals 1e8. ``when`` values
may start with a relation (``"<=200mbit"``, ``">10ms"``, ``"!=bbr"``) or be a list (any of).
"""

from __future__ import annotations

import contextlib
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from testbed.config.workloads import WORKLOAD_KINDS
from testbed.core.metrics import RUN_METRICS, unknown_metric
from testbed.core.paths import MISSING, get_path
from testbed.core.units import parse_duration, parse_percent, parse_rate, parse_size


def known_metrics() -> tuple[str, ...]:
    """Every summary column an expectation may test: each registered workload kind's (its
    schema's ``metrics``), then the run metrics (testbed.core.metrics)."""
    kinds = [m.name for schema in WORKLOAD_KINDS.values() for m in schema.metrics]
    return tuple(dict.fromkeys([*kinds, *(m.name for m in RUN_METRICS)]))


# A training sweep's algorithm is the scenario field workload.algorithm and the summary column
# algorithm: comparing on one must let the other differ too.
ALGORITHM_KEYS = {"algorithm", "workload.algorithm"}
SUMMARY_KEYS = ("collective", "algorithm", "size", "ranks")
RELATIONS: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}


class Expectation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = ""
    where: dict[str, Any] = {}
    compare_to: dict[str, Any] | None = None
    when: dict[str, Any] = {}
    metric: str
    relation: Literal["<", "<=", ">", ">=", "==", "!="]
    value: float | None = None
    factor: float = 1.0

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, v: str) -> str:
        if v not in known_metrics():
            raise ValueError(unknown_metric(v, known_metrics()))
        return v

    @model_validator(mode="after")
    def _one_reference(self) -> Expectation:
        if (self.compare_to is None) == (self.value is None):
            raise ValueError(
                "give exactly one of `value` (a number) or `compare_to` (the twin rows, e.g. "
                "{algorithm: flat})"
            )
        if self.factor <= 0:
            raise ValueError("factor must be positive")
        return self

    def describe(self) -> str:
        if self.name:
            return self.name
        where = _show(self.where) if self.where else "every row"
        if self.compare_to is None:
            rhs = f"{self.value:g}"
        else:
            rhs = f"{self.metric} of {_show(self.compare_to)}"
            if self.factor != 1:
                rhs = f"{self.factor:g} x {rhs}"
        when = f" when {_show(self.when)}" if self.when else ""
        return f"{where}: {self.metric} {self.relation} {rhs}{when}"


def _show(d: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items())


@dataclass
class Check:
    """One expectation applied to one row (or to nothing, when no row matched)."""

    expectation: int  # index in the scenario's list
    description: str
    status: str  # passed | failed | unchecked
    row: str = ""  # which run/collective/algorithm/size
    lhs: float | None = None
    rhs: float | None = None
    detail: str = ""

    def text(self) -> str:
        nums = ""
        if self.lhs is not None and self.rhs is not None:
            nums = f": {self.lhs:.4g} vs {self.rhs:.4g}"
        return (
            f"expect[{self.expectation}] {self.status}: {self.description} [{self.row}]{nums}"
            + (f" ({self.detail})" if self.detail else "")
        )


# -- values -----------------------------------------------------------------------------------
def parse_value(value: Any) -> Any:
    """A value as written ('200mbit', '10ms', '16MiB', '1%', 'bbr', 3) -> comparable number or
    text. Unit suffixes are distinct, so the first parser that accepts it is the right one."""
    if not isinstance(value, str):
        return value
    for parse in (parse_rate, parse_size, parse_duration, parse_percent):
        try:
            return parse(value)
        except ValueError:
            continue
    try:
        return float(value)
    except ValueError:
        return value


def split_condition(cond: Any) -> tuple[Callable[[Any, Any], bool], Any]:
    if isinstance(cond, str):
        for rel in ("<=", ">=", "!=", "==", "<", ">"):
            if cond.startswith(rel):
                return RELATIONS[rel], parse_value(cond[len(rel) :].strip())
    return operator.eq, parse_value(cond)


def lookup(row: dict[str, Any], resolved: dict[str, Any] | None, key: str) -> Any:
    """A summary column, else a field path in the run's resolved scenario (None if absent)."""
    if key in SUMMARY_KEYS or resolved is None:
        return row.get(key)
    value = get_path(resolved, key, MISSING)
    return row.get(key) if value is MISSING else value


def _equal(actual: Any, wanted: Any) -> bool:
    wanted = parse_value(wanted)
    if isinstance(actual, float | int) and isinstance(wanted, float | int):
        return math.isclose(actual, wanted, rel_tol=1e-9)
    return actual == wanted


def matches(row: dict, resolved: dict | None, where: dict[str, Any]) -> bool:
    return all(_equal(lookup(row, resolved, k), v) for k, v in where.items())


def holds(row: dict, resolved: dict | None, when: dict[str, Any]) -> bool:
    for key, cond in when.items():
        actual = lookup(row, resolved, key)
        conds = cond if isinstance(cond, list) else [cond]
        ok = False
        for c in conds:
            rel, wanted = split_condition(c)
            with contextlib.suppress(TypeError):  # e.g. "<=200mbit" against text
                ok = ok or bool(rel(actual, wanted))
        if not ok:
            return False
    return True


def _within(a: str, b: str) -> bool:
    """Whether field path ``a`` is ``b`` or inside it (``traffic[0].kind`` within ``traffic``)."""
    return a == b or a.startswith((b + ".", b + "["))


def _identity(row: dict, resolved: dict | None, ignore: set[str], params: list[str]) -> tuple:
    if ignore & ALGORITHM_KEYS:
        ignore = ignore | ALGORITHM_KEYS
    # a sweep path that holds a changed key, or lies inside one, differs between twins too
    ignored = {p for p in params if any(_within(k, p) or _within(p, k) for k in ignore)}
    keys = [k for k in (*SUMMARY_KEYS, *params, "repeat") if k not in ignore | ignored]
    return tuple((k, repr(lookup(row, resolved, k))) for k in keys)


def _label(row: dict) -> str:
    for key in ("process", "metric_name", "wan_direction"):  # a command workload's row
        if row.get(key) is not None:
            return f"{row.get('run_id')} {'WAN ' if key == 'wan_direction' else ''}{row[key]}"
    if "collective" not in row:  # a training run
        return f"{row.get('run_id')} {row.get('algorithm')}"
    return f"{row.get('run_id')} {row.get('collective')}/{row.get('algorithm')}/{row.get('size')} B"


# -- checking ---------------------------------------------------------------------------------
def check(
    expectations: list[Expectation],
    summaries: list[dict[str, Any]],
    resolved: dict[str, dict[str, Any]],
    params: list[str],
    skipped_runs: int = 0,
) -> list[Check]:
    """Apply every expectation to the summary rows. ``resolved``: run_id -> resolved scenario
    (JSON form); ``params``: the sweep's paths (twins must agree on the others)."""
    out: list[Check] = []

    def run_of(row: dict[str, Any]) -> dict[str, Any] | None:
        return resolved.get(row.get("run_id", ""))

    for i, exp in enumerate(expectations):
        desc = exp.describe()
        rel = RELATIONS[exp.relation]
        chosen = [
            r
            for r in summaries
            if matches(r, run_of(r), exp.where) and holds(r, run_of(r), exp.when)
        ]
        twins: dict[tuple, dict[str, Any]] = {}  # identity -> the first row with compare_to
        if exp.compare_to is not None:
            changed = set(exp.compare_to)
            chosen = [r for r in chosen if not matches(r, run_of(r), exp.compare_to)]
            for t in summaries:
                if matches(t, run_of(t), exp.compare_to):
                    twins.setdefault(_identity(t, run_of(t), changed, params), t)
        before = len(out)
        for row in chosen:
            lhs = row.get(exp.metric)
            if exp.compare_to is None:
                rhs = exp.value
            else:
                twin = twins.get(_identity(row, run_of(row), changed, params))
                if twin is None:
                    out.append(Check(i, desc, "unchecked", _label(row), detail="no twin row"))
                    continue
                rhs = twin.get(exp.metric)
            if lhs is None or rhs is None:
                out.append(
                    Check(i, desc, "unchecked", _label(row), detail=f"{exp.metric} is missing")
                )
                continue
            rhs = float(rhs) * exp.factor
            status = "passed" if rel(float(lhs), rhs) else "failed"
            out.append(Check(i, desc, status, _label(row), float(lhs), rhs))
        if len(out) == before:
            # Nothing to check: a typo in where/when, unless points were skipped on this kernel.
            status = "unchecked" if skipped_runs else "failed"
            out.append(
                Check(
                    i,
                    desc,
                    status,
                    detail="no result matched"
                    + (
                        f" ({skipped_runs} run(s) skipped)"
                        if skipped_runs
                        else "; check where/when"
                    ),
                )
            )
    return out
