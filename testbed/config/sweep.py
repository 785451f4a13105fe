"""Sweeps: a scenario's ``sweep`` block (and the CLI's ``--set``) -> concrete, validated runs.

PURE. A sweep maps field paths (``wan[0].rate``, ``workload.algorithms``, ``tcp.congestion``,
``clusters.east.hosts``) to lists of values; the runs are the cartesian product, in the order the
paths are written, times ``repeat``. Values are substituted into the raw YAML data *before*
validation, so every point is validated like a hand-written scenario and an error names the
point (``sweep point wan[0].rate=fast: ...``).
"""

from __future__ import annotations

import copy
import itertools
import re
from dataclasses import dataclass
from typing import Any

import yaml

from testbed.config.scenario import Scenario, format_path, load_yaml, parse_scenario
from testbed.core.errors import ScenarioError

_PART = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*)((?:\[[0-9]+\])*)")


@dataclass(frozen=True)
class RunSpec:
    run_id: str  # p000-r0: sweep point and repeat index; stable, used by --resume
    point: int
    repeat: int
    params: dict[str, Any]  # path -> value of this point (empty without a sweep)
    scenario: Scenario

    def label(self) -> str:
        return ", ".join(f"{k}={_show(v)}" for k, v in self.params.items()) or "(no sweep)"


def _show(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ",".join(_show(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_show(v)}" for k, v in value.items()) + "}"
    return str(value)


def parse_path(path: str) -> list[str | int]:
    """'wan[0].rate' -> ['wan', 0, 'rate']."""
    steps: list[str | int] = []
    for piece in path.split("."):
        m = _PART.fullmatch(piece)
        if not m:
            raise ValueError(f"{path!r} is not a field path; examples: wan[0].rate, tcp.congestion")
        steps.append(m.group(1))
        steps += [int(i) for i in re.findall(r"\[([0-9]+)\]", m.group(2))]
    return steps


def set_path(data: dict[str, Any], path: str, value: Any) -> None:
    """Set ``value`` at ``path`` inside raw scenario data (missing mapping keys are created)."""
    steps = parse_path(path)
    here: Any = data
    for i, step in enumerate(steps[:-1]):
        nxt = steps[i + 1]
        if isinstance(step, int):
            if not isinstance(here, list) or step >= len(here):
                raise ValueError(f"{path}: there is no {format_path(steps[: i + 1])}")
            here = here[step]
        else:
            if not isinstance(here, dict):
                raise ValueError(f"{path}: {format_path(steps[:i])} is not a mapping")
            if step not in here or here[step] is None:
                if isinstance(nxt, int):
                    raise ValueError(f"{path}: there is no {format_path(steps[: i + 1])}")
                here[step] = {}
            here = here[step]
    last = steps[-1]
    if isinstance(last, int):
        if not isinstance(here, list) or last >= len(here):
            raise ValueError(f"{path}: there is no {path}")
    elif not isinstance(here, dict):
        raise ValueError(f"{path}: {format_path(steps[:-1])} is not a mapping")
    here[last] = copy.deepcopy(value)


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
    data: dict[str, Any], source: str = "<scenario>", overrides: list[tuple[str, Any]] = ()
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
        try:
            parse_path(path)
        except ValueError as exc:
            raise ScenarioError(f"{source}: sweep: {exc}") from None
    specs: list[RunSpec] = []
    paths = list(sweep)
    for point, combo in enumerate(itertools.product(*(sweep[p] for p in paths))):
        params = dict(zip(paths, combo, strict=True))
        concrete = copy.deepcopy(base)
        for path, value in params.items():
            try:
                set_path(concrete, path, value)
            except ValueError as exc:
                raise ScenarioError(f"{source}: sweep: {exc}") from None
        where = source if not params else f"{source} (sweep point {_label(params)})"
        scenario = parse_scenario({**concrete, "sweep": sweep}, where)
        for r in range(scenario.repeat):
            specs.append(RunSpec(f"p{point:03d}-r{r}", point, r, params, scenario))
    return specs


def _label(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_show(v)}" for k, v in params.items())


def load_runs(path: str, overrides: list[tuple[str, Any]] = ()) -> list[RunSpec]:
    return expand(load_yaml(path), str(path), overrides)
