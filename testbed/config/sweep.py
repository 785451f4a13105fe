"""Sweeps: a scenario's ``sweep`` block (and the CLI's ``--set``) -> concrete, validated runs.

PURE. A sweep maps field paths (``wan[0].rate``, ``workload.algorithms``, ``tcp.congestion``,
``clusters.east.hosts``) to lists of values; the runs are the cartesian product, in the order the
paths are written, times ``repeat``. The key ``cases`` is one axis of hand-picked points, each a
mapping of several paths (``- {workload.algorithm: ddp, workload.ddp.hook: fp16}``): a path a
case does not set keeps the scenario's value. Values are substituted into the raw YAML data *before*
validation, so every point is validated like a hand-written scenario and an error names the
point (``sweep point wan[0].rate=fast: ...``).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from testbed.config.loading import load_yaml, parse_scenario
from testbed.config.scenario import Scenario
from testbed.core.errors import ScenarioError
from testbed.core.paths import parse_path, set_path

CASES = "cases"


@dataclass(frozen=True)
class RunSpec:
    run_id: str  # p000-r0: sweep point and repeat index; stable, used by --resume
    point: int
    repeat: int
    params: dict[str, Any]  # path -> value of this point (empty without a sweep)
    scenario: Scenario

    def label(self) -> str:
        return _label(self.params) or "(no sweep)"


def _show(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ",".join(_show(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_show(v)}" for k, v in value.items()) + "}"
    return str(value)


def parse_override(text: str) -> tuple[str, Any]:
    """'wan[0].delay=50ms' -> ('wan[0].delay', '50ms'); values are YAML ('[flat]' is a list)."""
    if "=" not in text:
        raise ScenarioError(f"--set {text!r}: expected PATH=VALUE, e.g. wan[0].delay=50ms")
    path, raw = text.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return path.strip(), value


def expand(
    data: dict[str, Any], source: str = "<scenario>", overrides: Sequence[tuple[str, Any]] = ()
) -> list[RunSpec]:
    """Raw scenario data (+ ``--set`` overrides) -> one validated RunSpec per point x repeat."""
    if not isinstance(data, dict):
        parse_scenario(data, source)  # raises the usual 'not a mapping' error
    base = copy.deepcopy(data)
    for path, value in overrides:
        try:
            set_path(base, path, value)
        except ValueError as exc:
            raise ScenarioError(f"{source}: --set {exc}") from None
    sweep = base.pop("sweep", None) or {}
    if not isinstance(sweep, dict):
        raise ScenarioError(f"{source}: sweep: expected a mapping of field path -> list of values")
    for path, values in sweep.items():
        if not isinstance(values, list) or not values:
            raise ScenarioError(
                f"{source}: sweep.{path}: expected a non-empty list of values, got {values!r}"
            )
        for p in _case_paths(source, values) if path == CASES else [path]:
            try:
                parse_path(p)
            except ValueError as exc:
                raise ScenarioError(f"{source}: sweep: {exc}") from None
    specs: list[RunSpec] = []
    axes = [_case_axis(sweep[p]) if p == CASES else [{p: v} for v in sweep[p]] for p in sweep]
    for point, (params, concrete, unset) in enumerate(sweep_points(base, axes)):
        if unset:
            raise ScenarioError(f"{source}: sweep: {unset[0][1]}")
        where = source if not params else f"{source} (sweep point {_label(params)})"
        scenario = parse_scenario({**concrete, "sweep": sweep}, where)
        for r in range(scenario.repeat):
            specs.append(RunSpec(f"p{point:03d}-r{r}", point, r, params, scenario))
    return specs


def sweep_points(
    base: dict[str, Any], axes: Sequence[Sequence[dict[str, Any]]]
) -> Iterator[tuple[dict[str, Any], dict[str, Any], list[tuple[str, str]]]]:
    """Each point of the product of ``axes`` (each a list of {path: value} settings): its
    parameters, a copy of ``base`` with them set, and (path, reason) for each that could not be
    set. A None value is a case that leaves its path at the scenario's value."""
    for combo in itertools.product(*axes):
        params = {k: v for part in combo for k, v in part.items()}
        concrete = copy.deepcopy(base)
        unset: list[tuple[str, str]] = []
        for path, value in params.items():
            if value is None:
                continue
            try:
                set_path(concrete, path, value)
            except ValueError as exc:
                unset.append((path, str(exc)))
        yield params, concrete, unset


def _case_paths(source: str, cases: list[Any]) -> list[str]:
    """Every path the ``cases`` of a sweep set (each case a mapping of paths to values)."""
    if not all(isinstance(c, dict) and c for c in cases):
        raise ScenarioError(
            f"{source}: sweep.cases: expected a list of mappings of field path -> value, e.g. "
            "- {workload.algorithm: diloco, workload.diloco.inner_steps: 30}"
        )
    return list(dict.fromkeys(p for c in cases for p in c))


def _case_axis(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One point per case; a path another case sets is None (the scenario's value) here, so
    every run has the same parameter columns."""
    paths = _case_paths("", cases)
    return [{p: c.get(p) for p in paths} for c in cases]


def _label(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_show(v)}" for k, v in params.items() if v is not None)


def load_runs(path: str, overrides: Sequence[tuple[str, Any]] = ()) -> list[RunSpec]:
    return expand(load_yaml(path), str(path), overrides)
