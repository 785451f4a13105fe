"""Every problem of a scenario file in one pass (``testbed validate``, ``testbed plan``). PURE.

``testbed run`` refuses a scenario point by point and stops at the first problem; this module
checks what it checks, all at once: the YAML, the sweep's structure, every sweep point's schema,
network plan and timeline, and the expectations against the runs the sweep will produce (a key
of ``where``/``when`` that names nothing, a value no run has, a metric of another workload).

Schema errors do not come in rounds: a field that fails is set aside (its default, or a stand-in
value that validates) and the scenario is validated again, so the checks that need every field
(clusters a link names, faults' links) run beside the field errors. A problem is reported once,
with the sweep points it occurs in when not all of them; a problem at a path the sweep sets is
named by its sweep entry (``sweep.wan[0].delay``), where the user wrote the value.
"""

from __future__ import annotations

import copy
import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from testbed.config.expect import SUMMARY_KEYS, Check, Expectation, check, known_metrics
from testbed.config.loading import close_names, describe_errors, load_yaml
from testbed.config.scenario import Scenario
from testbed.config.sweep import CASES, _case_axis, _label, sweep_points
from testbed.config.workloads import WORKLOAD_KINDS, TrainingWorkload, Workload
from testbed.core.errors import TestbedError
from testbed.core.metrics import RUN_METRICS
from testbed.core.paths import MISSING, format_path, get_path, parse_path, set_path

# stand-ins for a required field that failed, tried in order until the field validates
_STAND_INS: tuple[Any, ...] = (1, "x", "1s", "1mbit", "1MiB", "0%", True, ["x"], {})
_DELETE = object()
_ROUNDS = 6
# how messages count the entries of a list field
_ENTRY = {"wan": "WAN link", "faults": "fault", "traffic": "flow", "expect": "expectation"}
# summary columns beside the metrics and SUMMARY_KEYS (analysis.run_summary; and model_<term>)
_MORE_COLUMNS = (
    "run_id", "repeat", "kind", "cpu_saturated", "model_inputs", "wan_retransmits",
    "process", "metric_name", "wan_direction",  # a command workload's rows (per process, ...)
)  # fmt: skip
_LINE = re.compile(r"^(?P<field>[^\s:]+(?: \S+)?): (?P<message>.*)$")


@dataclass(frozen=True)
class Problem:
    """One problem: the file, the field path as the user wrote it, what is wrong, and the sweep
    points (labels) it occurs in when it does not occur in all of them."""

    file: str
    field: str
    message: str
    points: tuple[str, ...] = ()

    def text(self) -> str:
        where = ""
        if len(self.points) == 1:
            where = f" (sweep point {self.points[0]})"
        elif self.points:
            more = len(self.points) - 2
            where = f" (sweep points {self.points[0]}; {self.points[1]}" + (
                f"; and {more} more)" if more > 0 else ")"
            )
        field = "" if self.field == "(file)" else f"{self.field}: "
        return f"{self.file}: {field}{self.message}{where}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "field": self.field,
            "message": self.message,
            "points": list(self.points),
        }


@dataclass
class Checked:
    """What :func:`check_file` found: the problems, and the size of the sweep."""

    file: str
    problems: list[Problem] = field(default_factory=list)
    name: str = ""
    points: int = 0
    repeat: int = 1

    @property
    def runs(self) -> int:
        return self.points * self.repeat

    def text(self) -> str:
        """Every problem, one line each."""
        return "\n".join(p.text() for p in self.problems)


class _Found:
    """Problems in the order found: (field, message) -> the points it occurred in."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], list[str]] = {}

    def add(self, where: str, message: str, point: str | None = None) -> None:
        points = self.seen.setdefault((where, message), [])
        if point is not None and point not in points:
            points.append(point)

    def problems(self, source: str, all_points: Sequence[str]) -> list[Problem]:
        out = []
        for (where, message), points in self.seen.items():
            every = not points or set(points) >= set(all_points)
            out.append(Problem(source, where, message, () if every else tuple(points)))
        return out


def check_file(path: str | Path, overrides: Sequence[tuple[str, Any]] = ()) -> Checked:
    """Every problem of the scenario file at ``path`` (with ``--set`` ``overrides``)."""
    source = str(path)
    try:
        data = load_yaml(path)
    except TestbedError as exc:
        return Checked(source, [_problem(source, line) for line in str(exc).splitlines()])
    return check_data(data, source, Path(path).parent, overrides)


def check_data(
    data: Any,
    source: str = "<scenario>",
    base_dir: Path = Path("."),
    overrides: Sequence[tuple[str, Any]] = (),
) -> Checked:
    """Every problem of already-loaded scenario data; see the module docstring."""
    if not isinstance(data, dict):
        return Checked(
            source,
            [
                Problem(
                    source, "(top level)", "a scenario is a mapping of keys (name, clusters, ...)"
                )
            ],
        )
    found = _Found()
    base = copy.deepcopy(data)
    for path, value in overrides:
        try:
            set_path(base, path, value)
        except ValueError as exc:
            found.add(f"--set {path}", _no_such(str(exc), path, base))
    sweep, axes = _sweep_axes(base.pop("sweep", None), found)
    repeat = base.get("repeat", 1)
    labels: list[str] = []
    valid: list[tuple[dict[str, Any], Scenario]] = []
    stand_ins: list[tuple[dict[str, Any], Scenario]] = []
    for params, concrete, unset in sweep_points(base, axes):
        label = _label(params) or "(no sweep)"
        labels.append(label)
        point = label if params else None
        for path, reason in unset:
            found.add(f"sweep.{path}", _no_such(reason, path, concrete), point)
        errors, scenario, stand_in = schema_problems(
            {**concrete, "sweep": sweep} if sweep else concrete
        )
        if stand_in is not None:
            stand_ins.append((params, stand_in))
        for where, message in errors:
            swept = next((p for p in params if _within(where, p)), None)
            if swept is not None:
                message = message if where == swept else f"{where}: {message}"
                where = f"sweep.{swept}"
            found.add(where, message, point)
        if scenario is None:
            continue
        for where, message in _plan_problems(scenario, base_dir, source):
            found.add(where, message, point)
        valid.append((params, scenario))
    # the expectations against the valid points; against the others' stand-ins only their
    # keys and metric (the stand-in values would give wrong answers about matching runs)
    for where, message in expectation_problems(valid or stand_ins, list(sweep), not valid):
        found.add(where, message)
    checked = Checked(source, found.problems(source, labels))
    checked.points = len(labels)
    checked.repeat = repeat if isinstance(repeat, int) and repeat >= 1 else 1
    checked.name = str(base.get("name", ""))
    return checked


# -- the sweep -----------------------------------------------------------------------------------
def _sweep_axes(sweep: Any, found: _Found) -> tuple[dict[str, list[Any]], list[list[dict]]]:
    """The well-formed entries of a sweep and its axes; what is malformed goes to ``found``."""
    if sweep is None:
        return {}, []
    if not isinstance(sweep, dict):
        found.add("sweep", "expected a mapping of field path -> list of values, e.g. "
                  "{wan[0].delay: [10ms, 50ms]}")  # fmt: skip
        return {}, []
    good: dict[str, list[Any]] = {}
    axes = []
    for path, values in sweep.items():
        if not isinstance(values, list) or not values:
            found.add(f"sweep.{path}", f"expected a non-empty list of values, got {values!r}")
            continue
        if path == CASES:
            if not all(isinstance(c, dict) and c for c in values):
                found.add(
                    "sweep.cases",
                    "expected a list of mappings of field path -> value, e.g. "
                    "- {workload.algorithm: diloco, workload.diloco.inner_steps: 30}",
                )
                continue
            bad = [p for c in values for p in c if not _is_path(p)]
            for p in dict.fromkeys(bad):
                found.add(f"sweep.cases.{p}", "not a field path; examples: wan[0].rate")
            if bad:
                continue
            axes.append(_case_axis(values))
        elif not _is_path(path):
            found.add(f"sweep.{path}", "not a field path; examples: wan[0].rate, tcp.congestion")
            continue
        else:
            axes.append([{path: v} for v in values])
        good[path] = values
    return good, axes


def _is_path(path: Any) -> bool:
    try:
        parse_path(str(path))
    except ValueError:
        return False
    return isinstance(path, str)


def _within(path: str, outer: str) -> bool:
    return path == outer or path.startswith((outer + ".", outer + "["))


def _no_such(message: str, path: str, data: dict[str, Any]) -> str:
    """set_path's message without its path, and how many entries the list it missed has."""
    text = message.removeprefix(f"{path}: ")
    m = re.fullmatch(r"there is no (?P<list>.+)\[(?P<i>[0-9]+)\]", text)
    if m:
        have = get_path(data, m["list"], None)
        if isinstance(have, list):
            what = _ENTRY.get(m["list"], "entry")
            last = f" ({m['list']}[0] to {m['list']}[{len(have) - 1}])" if len(have) > 1 else ""
            plural = "s" if len(have) != 1 else ""
            text += f": the scenario has {len(have)} {what}{plural}{last}"
    return text


# -- one point's schema ------------------------------------------------------------------------
def schema_problems(
    data: dict[str, Any],
) -> tuple[list[tuple[str, str]], Scenario | None, Scenario | None]:
    """Every (field, message) of validating ``data`` as a scenario, the scenario when there are
    none, and else the scenario with the failing fields set aside when that validates. Each
    failing field is set aside (deleted: its default; else a stand-in that validates; a name the
    scenario does not know: the closest it knows) and the rest validated again, so that checks
    needing every field run too."""
    found: dict[tuple[str, str], None] = {}
    work = copy.deepcopy(data)
    set_aside: set[str] = set()
    for _ in range(_ROUNDS):
        errors = _errors(work)
        if errors is None:
            break
        fresh = [(p, m) for p, m in errors if p not in set_aside]
        for p, m in fresh:
            found.setdefault((p, _worded(p, m, data)))
        repaired = False
        for p, m in fresh:
            set_aside.add(p)
            repaired = _set_aside(work, p) or _renamed(work, p, m) or repaired
        if not repaired:
            break
    if not found:
        return [], Scenario.model_validate(data), None
    try:
        return list(found), None, Scenario.model_validate(work)
    except (ValidationError, TestbedError):
        return list(found), None, None


def _errors(data: dict[str, Any]) -> list[tuple[str, str]] | None:
    try:
        Scenario.model_validate(data)
    except ValidationError as exc:
        return describe_errors(exc, data)
    except TestbedError as exc:  # a validator's own error, raised as is
        return [("(top level)", str(exc))]
    return None


def _set_aside(work: dict[str, Any], path: str) -> bool:
    """Replace the field at ``path`` by its default (deleted) or a stand-in that makes the
    error at ``path`` go away; False (``work`` unchanged) when neither does."""
    try:
        steps = parse_path(path)
    except ValueError:
        return False
    parent = get_path(work, format_path(steps[:-1]), None) if len(steps) > 1 else work
    key = steps[-1]
    if isinstance(parent, list) and isinstance(key, int) and key < len(parent):
        # an entry of a list: another entry of it, else a stand-in (removing it would shift
        # the paths of the entries after it)
        old = parent[key]
        for stand_in in (*(e for j, e in enumerate(parent) if j != key), *_STAND_INS):
            parent[key] = copy.deepcopy(stand_in)
            if _cleared(work, path):
                return True
        parent[key] = old
        return False
    if not isinstance(parent, dict) or not isinstance(key, str) or key not in parent:
        return False
    old = parent.pop(key)
    for stand_in in (_DELETE, *_STAND_INS):
        if stand_in is not _DELETE:
            parent[key] = copy.deepcopy(stand_in)
        if _cleared(work, path):
            return True
        parent.pop(key, None)
    parent[key] = old
    return False


_UNKNOWN_NAME = re.compile(
    r"(?:unknown \w+|no WAN link) '(?P<name>[^']*)'; \w+ are: (?P<known>.*)$"
)


def _renamed(work: dict[str, Any], path: str, message: str) -> bool:
    """For a name the scenario does not know (a cluster, a link): that name, wherever it stands
    at ``path``, replaced by the closest known one, so the checks after it run too."""
    m = _UNKNOWN_NAME.match(message)
    if m is None:
        return False
    known = m["known"].split(", ")
    close = difflib.get_close_matches(m["name"], known, n=1, cutoff=0.0)
    value = get_path(work, path, MISSING)
    if not close or value is MISSING:
        return False

    def swap(v: Any) -> Any:
        if isinstance(v, list):
            return [swap(x) for x in v]
        return close[0] if v == m["name"] else v

    try:
        set_path(work, path, swap(value))
    except ValueError:
        return False
    return True


def _cleared(work: dict[str, Any], path: str) -> bool:
    """Whether ``work`` validates without an error at or inside ``path``."""
    errors = _errors(work)
    return errors is None or all(not _within(p, path) for p, _ in errors)


def _worded(path: str, message: str, data: dict[str, Any]) -> str:
    """Messages made shorter and kinder: an unknown metric gets this workload's metrics (not
    every one), an unknown name a "did you mean"."""
    if re.fullmatch(r"expect\[[0-9]+\]\.metric", path) and message.startswith("unknown metric"):
        return _metric_message(get_path(data, path), data.get("workload"))
    m = _UNKNOWN_NAME.match(message)
    if m and "did you mean" not in message:
        return message + close_names(m["name"], m["known"].split(", "))
    return message


def _kind_metrics(workload: Any) -> tuple[str, tuple[str, ...]]:
    """The workload's kind and the names of its own metrics."""
    kind = workload.get("kind", "collectives") if isinstance(workload, dict) else None
    if workload is not None and not isinstance(workload, dict):
        kind = getattr(workload, "kind", None)
    schema = WORKLOAD_KINDS.get(kind) if isinstance(kind, str) else None
    return str(kind), tuple(m.name for m in schema.metrics) if schema else ()


def _metric_message(name: Any, workload: Any) -> str:
    kind, own = _kind_metrics(workload)
    close = close_names(name, known_metrics(), n=3)
    if close:
        return f"unknown metric {name!r}{close}"
    listed = f"{kind} workloads' metrics: {', '.join(own)}; " if own else ""
    return f"unknown metric {name!r}; {listed}the run metrics are in docs/results.md"


# -- one point's plan and timeline -------------------------------------------------------------
def _plan_problems(sc: Scenario, base_dir: Path, source: str) -> list[tuple[str, str]]:
    """What building the point's network plan and timeline refuses (traces read, faults that
    contradict each other), as (field, message)."""
    from testbed.plan.timeline import build_timeline, default_horizon, read_link_trace
    from testbed.plan.topology import build_plan

    try:
        for i, link in enumerate(sc.wan):
            for path in link.paths_of():
                if path.trace is not None:
                    read_link_trace(path, i, base_dir, source)
        plan = build_plan(sc, "<prefix>", 64)
        build_timeline(sc, plan, base_dir, default_horizon(sc), source=source)
    except TestbedError as exc:
        return [_split(source, line) for line in str(exc).splitlines() if line.strip()]
    return []


def _split(source: str, line: str) -> tuple[str, str]:
    text = line.removeprefix(f"{source}: ")
    m = _LINE.match(text)
    if m and text != line:
        return m["field"], m["message"]
    return "(plan)", text


def _problem(source: str, line: str) -> Problem:
    where, message = _split(source, line)
    return Problem(source, "(file)" if where == "(plan)" else where, message)


# -- expectations against the runs --------------------------------------------------------------
def expectation_problems(
    points: list[tuple[dict[str, Any], Scenario]], sweep_paths: list[str], keys_only: bool = False
) -> list[tuple[str, str]]:
    """Each expectation against the runs the sweep produces: its metric is one the workload
    reports, every key of ``where``, ``compare_to`` and ``when`` names a summary column or a
    scenario field, each condition is met by some run, and together they pick rows
    (``keys_only``: the metric and keys alone)."""
    if not points:
        return []
    expectations = list(points[0][1].expect)
    if not expectations:
        return []
    out: list[tuple[str, str]] = []
    resolved = [sc.model_dump(mode="json") for _, sc in points]
    rows = [_rows(sc) for _, sc in points]
    known_rows = all(r is not None for r in rows)
    leaves = list(dict.fromkeys(p for r in resolved for p in _leaf_paths(r)))
    columns = [*SUMMARY_KEYS, *known_metrics(), *_MORE_COLUMNS]
    for i, exp in enumerate(expectations):
        out += _metric_problems(i, exp, points[0][1])
        bad_keys = False
        unknowable = False  # a condition on a column only the run's rows have
        for part in ("where", "compare_to", "when"):
            for key, wanted in (getattr(exp, part) or {}).items():
                where = f"expect[{i}].{part}.{key}"
                in_scenario = any(get_path(r, key, MISSING) is not MISSING for r in resolved)
                if (key in SUMMARY_KEYS and known_rows) or (
                    in_scenario and key not in SUMMARY_KEYS
                ):
                    if keys_only:
                        continue
                    missing = _unmet(part, key, wanted, rows, resolved)
                    if missing is not None:
                        bad_keys = True
                        out.append((where, missing))
                    continue
                unknowable = True
                # a field path must be the scenario's; a bare name a column of the rows (the
                # collectives' and training's are known; another kind's, only a near miss)
                near = close_names(key, [*columns, *sweep_paths, *leaves])
                path_like = "." in key or "[" in key
                column = key in columns or key.startswith("model_")
                if not column and (path_like or near or known_rows):
                    bad_keys = True
                    out.append((where, _unknown_key(key, [*columns, *sweep_paths, *leaves])))
        if not bad_keys and not unknowable and not keys_only:
            out += _combined(i, exp, points)
    return out


def _metric_problems(i: int, exp: Expectation, sc: Scenario) -> list[tuple[str, str]]:
    kind, own = _kind_metrics(sc.workload)
    if exp.metric in own or exp.metric in {m.name for m in RUN_METRICS}:
        return []
    others = [k for k, s in WORKLOAD_KINDS.items() if exp.metric in {m.name for m in s.metrics}]
    if not others:
        return []
    mine = f"this scenario's workload is {kind}" if sc.workload is not None else "no workload"
    listed = f"; its metrics: {', '.join(own)}" if own else ""
    return [
        (
            f"expect[{i}].metric",
            f"{exp.metric!r} is a metric of {' and '.join(others)} workloads; {mine}{listed}",
        )
    ]


def _unknown_key(key: str, candidates: Iterable[str]) -> str:
    return (
        f"unknown key {key!r}: neither a summary column ({', '.join(SUMMARY_KEYS)}) nor a field "
        "of the scenario" + close_names(key, list(dict.fromkeys(candidates)))
    )


def _rows(sc: Scenario) -> list[dict[str, Any]] | None:
    """The summary rows' columns a run of ``sc`` has (collective x algorithm x size, or one per
    training run); None for a workload whose rows are not known before it runs."""
    w = sc.workload
    ranks = sum(c.hosts for c in sc.clusters.values()) * getattr(w, "ranks_per_host", 1)
    if isinstance(w, Workload):
        return [
            {"collective": c, "algorithm": a, "size": s, "ranks": ranks}
            for c in w.collectives
            for a in w.algorithms
            for s in w.sizes
        ]
    if isinstance(w, TrainingWorkload):
        return [{"algorithm": w.algorithm, "ranks": ranks}]
    return None


def _leaf_paths(data: Any, prefix: str = "") -> Iterable[str]:
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _leaf_paths(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(data, list) and data and isinstance(data[0], dict | list):
        for j, v in enumerate(data):
            yield from _leaf_paths(v, f"{prefix}[{j}]")
    elif prefix:
        yield prefix


def _unmet(
    part: str,
    key: str,
    wanted: Any,
    rows: list[list[dict[str, Any]] | None],
    resolved: list[dict[str, Any]],
) -> str | None:
    """Why no run meets the one condition ``key: wanted``; None when some run does (or the runs'
    rows are not known before they run)."""
    from testbed.config.expect import holds, lookup, matches

    seen: list[Any] = []
    for point_rows, res in zip(rows, resolved, strict=True):
        if point_rows is None:
            if key in SUMMARY_KEYS:
                return None
            point_rows = [{}]
        for row in point_rows:
            ok = (
                holds(row, res, {key: wanted})
                if part == "when"
                else matches(row, res, {key: wanted})
            )
            if ok:
                return None
            value = lookup(row, res, key)
            if value not in seen:
                seen.append(value)
    shown = ", ".join(str(v) for v in seen[:12]) + (", ..." if len(seen) > 12 else "")
    texts = [v for v in seen if isinstance(v, str)]
    wanted_text = wanted if not isinstance(wanted, list) else wanted[0]
    return f"no run has {wanted!r}; the runs have: {shown}" + close_names(wanted_text, texts)


def expected_checks(points: list[tuple[dict[str, Any], Scenario]], exp: Expectation) -> list[Check]:
    """``exp`` checked (testbed.config.expect.check) against stand-in summary rows of the runs
    ``points`` (sweep parameters, scenario) produce, each with the metric 1: the rows it tests.
    Empty when the workload's rows are not known before it runs."""
    rows = [_rows(sc) for _, sc in points]
    if not points or any(r is None for r in rows):
        return []
    summaries = []
    by_run: dict[str, dict[str, Any]] = {}
    for j, ((params, sc), point_rows) in enumerate(zip(points, rows, strict=True)):
        run_id = f"p{j:03d}-r0"
        by_run[run_id] = sc.model_dump(mode="json")
        summaries += [
            {**params, **row, "run_id": run_id, exp.metric: 1.0} for row in point_rows or []
        ]
    return check([exp], summaries, by_run, list(points[0][0]))


def _combined(
    i: int, exp: Expectation, points: list[tuple[dict[str, Any], Scenario]]
) -> list[tuple[str, str]]:
    """Whether the expectation's conditions together pick rows, and those rows have twins to
    compare with."""
    checks = expected_checks(points, exp)
    if not checks:
        return []
    if all(c.detail.startswith("no result matched") for c in checks):
        return [(f"expect[{i}]", "no run matches its where and when together")]
    if all(c.detail == "no twin row" for c in checks):
        return [(f"expect[{i}].compare_to", "no run to compare with: no row matches compare_to "
                 "and agrees with a chosen row on everything else")]  # fmt: skip
    return []
