"""Scenario files in, a validated :class:`Scenario` or a :class:`ScenarioError` out: reading
the YAML (duplicate keys refused), and pydantic's errors worded for a user, one line per problem
naming the file, the field path (``wan[0].delay``), the bad value and what is allowed."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError

from testbed.config.clusters import Cluster
from testbed.config.dynamics import FAULT_KINDS, Fault
from testbed.config.fields import FieldError
from testbed.config.scenario import TRAFFIC_KINDS, Scenario
from testbed.config.workloads import DEFAULT_KIND, WORKLOAD_KINDS, Workload
from testbed.core.errors import ScenarioError
from testbed.core.paths import format_path


def _loc_to_path(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as a field path, without pydantic's validator tags."""
    tags = ("function-", "lax-", "literal[", "nullable")
    return format_path([p for p in loc if not str(p).startswith(tags)]) or "(top level)"


def _without_union_tag(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """pydantic puts a union's tag after the field (``faults[0].blackhole.x``)."""
    if len(loc) > 2 and loc[0] == "faults" and loc[2] in FAULT_KINDS:  # faults[0].blackhole.x
        return (*loc[:2], *loc[3:])
    if len(loc) > 2 and loc[0] == "traffic" and loc[2] in TRAFFIC_KINDS:  # traffic[0].bulk.x
        return (*loc[:2], *loc[3:])
    return loc


def _describe(error: Mapping[str, Any]) -> tuple[str, str]:
    """(field path, message) of one pydantic error, worded for a user."""
    ctx = error.get("ctx") or {}
    inner = ctx.get("error")
    loc = tuple(p for p in error["loc"] if not (isinstance(p, str) and "[" in p and "]" in p))
    loc = _without_union_tag(loc)
    path = _loc_to_path(loc)
    if isinstance(inner, FieldError):  # its path is relative to the model that raised it
        if loc and not inner.path.startswith(path):
            return f"{path}.{inner.path}", inner.message
        return inner.path, inner.message
    kind = error["type"]
    value = error.get("input")
    if kind == "union_tag_invalid":
        return (
            f"{path}.kind",
            f"{ctx.get('tag')!r} is not allowed; allowed: {ctx.get('expected_tags')}",
        )
    if kind == "extra_forbidden":
        return path, f"unknown key {str(loc[-1])!r}"
    if kind == "missing":
        return path, "missing required field"
    if kind == "value_error":
        message = str(inner) if inner else error["msg"]
        shown = repr(value)
        if not isinstance(value, dict | list) and shown not in message:
            message = f"{shown}: {message}"
        return path, message
    if kind == "literal_error":
        allowed = re.findall(r"'([^']*)'", str(ctx.get("expected")))
        return path, f"{value!r} is not allowed; allowed: {ctx.get('expected')}" + close_names(
            value, allowed
        )
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        bound = {
            "greater_than": f"greater than {ctx.get('gt')}",
            "greater_than_equal": f"at least {ctx.get('ge')}",
            "less_than": f"less than {ctx.get('lt')}",
            "less_than_equal": f"at most {ctx.get('le')}",
        }[kind]
        return path, f"{value!r} is out of range; must be {bound}"
    return path, _plain(kind, value, ctx)


# pydantic's error types -> what the value is not, in the project's words (its own messages,
# "Input should be a valid list", never reach a user)
_EXPECTED = {
    "list_type": "is not a list; write one as [a, b]",
    "tuple_type": "is not a list; write one as [a, b]",
    "set_type": "is not a list; write one as [a, b]",
    "dict_type": "is not a mapping of keys",
    "model_type": "is not a mapping of keys",
    "model_attributes_type": "is not a mapping of keys",
    "int_type": "is not a whole number",
    "int_parsing": "is not a whole number",
    "int_from_float": "is not a whole number",
    "float_type": "is not a number",
    "float_parsing": "is not a number",
    "finite_number": "is not a finite number",
    "bool_type": "is not true or false",
    "bool_parsing": "is not true or false",
    "string_type": "is not text",
    "union_tag_not_found": "has no `kind`",
}


def _plain(kind: str, value: Any, ctx: Mapping[str, Any]) -> str:
    """A pydantic error type the cases above do not word, worded without pydantic's text."""
    if kind in _EXPECTED:
        return f"{value!r} {_EXPECTED[kind]}"
    if kind in ("too_short", "too_long"):
        n = ctx.get("min_length" if kind == "too_short" else "max_length")
        bound = "needs at least" if kind == "too_short" else "takes at most"
        return f"{bound} {n} item{'s' if n != 1 else ''}, got {ctx.get('actual_length')}"
    return f"{value!r} is not allowed here"


def close_names(name: Any, known: Iterable[str], n: int = 1) -> str:
    """'; did you mean 'delay'?' when ``name`` is close to a known one (difflib), else ''."""
    close = difflib.get_close_matches(str(name), list(known), n=n, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def _with_allowed_keys(path: str, message: str, model: type[BaseModel] | None) -> str:
    if message.startswith("unknown key") and model is not None:
        key = path.rsplit(".", 1)[-1]
        return f"{message}; allowed: {', '.join(model.model_fields)}" + close_names(
            key, model.model_fields
        )
    return message


def describe_errors(exc: ValidationError, data: Any) -> list[tuple[str, str]]:
    """(field path, message) of every error of validating ``data`` as a scenario, worded for a
    user, in pydantic's order, without repeats."""
    found = []
    kind = _workload_kind(data) if isinstance(data, dict) else None
    for error in exc.errors():
        path, message = _describe(error)
        found.append(
            (path, _with_allowed_keys(path, message, _model_at(tuple(error["loc"]), kind)))
        )
    return list(dict.fromkeys(found))


def _model_at(loc: tuple[Any, ...], workload_kind: Any) -> type[BaseModel] | None:
    """The model whose keys apply at the parent of ``loc`` (for 'allowed keys' hints);
    under ``workload``, the schema of the scenario's ``workload_kind``."""
    model: Any = Scenario
    if len(loc) > 1 and loc[0] == "workload" and workload_kind in WORKLOAD_KINDS:
        model, loc = WORKLOAD_KINDS[workload_kind], loc[1:]
    parts = list(loc[:-1])
    while parts:
        part = parts.pop(0)
        if isinstance(part, int):
            continue
        fields = getattr(model, "model_fields", {})
        if part not in fields:
            return None
        if model is Scenario and part == "clusters":
            parts = parts[1:]  # skip the cluster's name
            model = Cluster
            continue
        model = _first_model(fields[part].annotation)
        if model is None:
            return None
    return model


def _first_model(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _first_model(arg)
        if found is not None:
            return found
    return None


def _workload_kind(data: dict[str, Any]) -> Any:
    workload = data.get("workload")
    return workload.get("kind", DEFAULT_KIND) if isinstance(workload, dict) else None


def parse_scenario(data: Any, source: str = "<scenario>") -> Scenario:
    """Validate already-loaded YAML data. Raises ScenarioError naming ``source`` and the field."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario is a mapping of keys (name, clusters, wan, ...)")
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        lines = [f"{source}: {path}: {message}" for path, message in describe_errors(exc, data)]
        raise ScenarioError("\n".join(dict.fromkeys(lines))) from None


_FAULTS = TypeAdapter(list[Fault])


def with_faults(scenario: Scenario, faults: Any, source: str = "faults") -> Scenario:
    """``scenario`` with ``faults`` (a list as written in a scenario file) instead of its own,
    validated like a scenario's (``source`` names where they came from in errors), for a
    caller that brings its own workload (run_ranks: ``after`` counts its iterations)."""
    if not isinstance(faults, list):
        raise ScenarioError(f"{source}: faults are a list, e.g. [{{kind: blackhole, ...}}]")
    try:
        parsed = _FAULTS.validate_python(faults)
    except ValidationError as exc:
        lines = []
        for error in exc.errors():
            path, message = _describe({**error, "loc": ("faults", *error["loc"])})
            lines.append(f"{source}: {path}: {message}")
        raise ScenarioError("\n".join(dict.fromkeys(lines))) from None
    copy = scenario.model_copy(update={"faults": parsed})
    # the caller's function is the workload `after` counts iterations of (run_ranks)
    check = copy.model_copy(update={"workload": scenario.workload or Workload()})
    try:
        check.check_dynamics()
    except FieldError as exc:
        raise ScenarioError(f"{source}: {exc.path}: {exc.message}") from None
    return copy


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys (PyYAML silently keeps the last one)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(path: str | Path) -> Any:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read scenario: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ScenarioError(
            f"{path}: cannot read scenario: not UTF-8 text (byte {exc.start})"
        ) from None
    if not text.strip():
        raise ScenarioError(f"{path}: the scenario file is empty")
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" line {mark.line + 1}, column {mark.column + 1}:"
        elif isinstance(exc, yaml.reader.ReaderError):
            line = text.count("\n", 0, exc.position) + 1
            column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
            where = f" line {line}, column {column}:"
        else:
            where = ""
        problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or str(exc)
        if isinstance(exc, yaml.reader.ReaderError):
            problem = f"unacceptable character #x{exc.character:04x}: {exc.reason}"
        raise ScenarioError(f"{path}:{where} YAML syntax error: {problem}") from None


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file."""
    return parse_scenario(load_yaml(path), str(path))
