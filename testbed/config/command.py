"""``workload: kind: command``: a user's own program, unchanged, on every rank or host
(docs/command.md).

The schema (:class:`CommandWorkload`, with its :class:`Service` list), its placeholders and their
check (:func:`placeholders_in`, pure: an unknown ``{name}`` is a scenario error naming the
field), and the checks the runner makes before it builds the network: the files it names
(:func:`missing_files`: executables and script arguments, relative to the scenario's directory)
and the services' hosts (:func:`unknown_service_hosts`). Registered with the scenario
parser on import (testbed.config.scenario imports it).
"""

from __future__ import annotations

import os
import re
import shutil
import string
import sys
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import ConfigDict, Field, model_validator

from testbed.config.fields import Duration, FieldError, Strict
from testbed.config.workloads import RankWorkloadModel, register_workload
from testbed.core.metrics import Metric

# what ``{name}`` in argv and env values may name; per: host has no rank of its own
PLACEHOLDERS = (
    "rank", "local_rank", "world_size", "node_rank", "nnodes", "nproc_per_node", "master_addr",
    "master_port", "host", "cluster", "host_addr", "run_dir",
)  # fmt: skip
RANK_ONLY = ("rank", "local_rank")
# a service runs on a host of its own choosing, which need not hold a node
SERVICE_PLACEHOLDERS = tuple(p for p in PLACEHOLDERS if p not in (*RANK_ONLY, "node_rank"))
SERVICE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# an argument that names a script beside the scenario (checked to exist before the run)
SCRIPT_SUFFIXES = (".py", ".sh", ".bash", ".pl", ".rb", ".js", ".lua", ".R")


def allowed_placeholders(per: str) -> tuple[str, ...]:
    return tuple(p for p in PLACEHOLDERS if per == "rank" or p not in RANK_ONLY)


def placeholders_in(text: str) -> list[str]:
    """The names ``{name}`` in ``text`` refers to (``{{`` and ``}}`` are literal braces).
    Raises ValueError for a malformed one (an unmatched brace)."""
    names = []
    for _, name, spec, conversion in string.Formatter().parse(text):
        if name is None:
            continue
        if spec or conversion:
            raise ValueError(f"{{{name}...}}: a placeholder is a bare name, e.g. {{rank}}")
        names.append(name)
    return names


def _check_placeholders(path: str, text: str, per: str) -> None:
    allowed = allowed_placeholders(per) if per != "service" else SERVICE_PLACEHOLDERS
    try:
        names = placeholders_in(text)
    except ValueError as exc:
        raise FieldError(
            path, f"{text!r}: {exc} (write {{{{ and }}}} for literal braces)"
        ) from None
    for name in names:
        if name not in allowed:
            if per == "service" and name in PLACEHOLDERS:
                why = f"a service has no {{{name}}} (it is no rank's and no node's)"
            elif name in RANK_ONLY:
                why = f"per: host has no {{{name}}} (torchrun gives each of its processes its own)"
            else:
                why = f"unknown placeholder {{{name}}}"
            shown = ", ".join(f"{{{a}}}" for a in allowed)
            raise FieldError(path, f"{text!r}: {why}; allowed: {shown}")


def expand(text: str, values: dict[str, object]) -> str:
    """``text`` with its placeholders replaced (they were checked by the schema)."""
    return text.format(**values)


class Ready(Strict):
    """When a service counts as ready: a TCP port listening in its host (``port``) or a line
    of its log matching a regular expression (``log``); exactly one."""

    port: int | None = Field(default=None, ge=1, le=65535)
    log: str | None = None

    def describe(self) -> str:
        return f"port {self.port} listening" if self.port is not None else f"log /{self.log}/"


class Service(Strict):
    """A process the workload needs before it starts (a rendezvous server, torchft's
    lighthouse): started on ``host`` with the same launcher as the ranks, ready when ``ready``
    says so within ``timeout``, stopped when the workload ends."""

    name: str
    host: str
    argv: list[str] = Field(min_length=1)
    cwd: str | None = None  # relative to the scenario file; None: the workload's cwd
    env: dict[str, str] = Field(default_factory=dict)
    ready: Ready
    timeout: Duration = 60.0

    @property
    def log(self) -> str:
        """Its stdout and stderr, a file name in the run directory."""
        return f"service-{self.name}.log"


def _check_service(i: int, service: Service) -> None:
    at = f"workload.services[{i}]"
    if not SERVICE_NAME.match(service.name):
        raise FieldError(
            f"{at}.name", f"{service.name!r}: letters, digits, '_', '.', '-' (it names a log file)"
        )
    if service.timeout <= 0:
        raise FieldError(f"{at}.timeout", "a timeout must be positive; examples: 30s")
    if not service.argv[0]:
        raise FieldError(f"{at}.argv[0]", "the program is empty")
    ready = service.ready
    if (ready.port is None) == (ready.log is None):
        raise FieldError(f"{at}.ready", "exactly one of port: N or log: REGEX")
    if ready.log is not None:
        try:
            re.compile(ready.log)
        except re.error as exc:
            raise FieldError(f"{at}.ready.log", f"{ready.log!r}: not a regex: {exc}") from None
    for j, arg in enumerate(service.argv):
        _check_placeholders(f"{at}.argv[{j}]", arg, "service")
    for key, value in service.env.items():
        _check_placeholders(f"{at}.env.{key}", value, "service")
        if not key or "=" in key:
            raise FieldError(f"{at}.env.{key}", "not a variable name")


class CommandWorkload(RankWorkloadModel):
    """A user's program: ``argv`` run once per rank (``per: rank``) or per host (``per: host``,
    e.g. torchrun), with torchrun's environment (docs/command.md)."""

    # the scenario's ``metrics:`` (what stdout's lines are) is ``metrics_format`` here: the name
    # ``metrics`` is every schema's list of what ``expect`` may test
    model_config = ConfigDict(
        extra="forbid", frozen=True, serialize_by_alias=True, validate_by_name=True
    )
    kind: Literal["command"]
    metrics: ClassVar[tuple[Metric, ...]] = (
        Metric("exit_code", "code", "a process's exit code (one summary row per process)"),
        Metric("duration", "s", "a process's start to its exit (one summary row per process)"),
        Metric("p50", "1", "median of a json-lines metric (one summary row per metric_name)"),
        Metric("samples", "count", "lines of a json-lines metric (one row per metric_name)"),
        Metric("wan_bytes", "B", "bytes through a WAN direction (a row per wan_direction)"),
    )
    per: Literal["rank", "host"] = "rank"
    argv: list[str] = Field(min_length=1)
    cwd: str = "."  # relative to the scenario file's directory
    env: dict[str, str] = Field(default_factory=dict)
    timeout: Duration = 600.0  # the whole workload's limit
    on_failure: Literal["stop-all", "wait"] = "stop-all"
    metrics_format: Literal["json-lines", "none"] = Field("json-lines", alias="metrics")
    # started first, in order, each ready before the next; stopped when the workload ends
    services: list[Service] = Field(default_factory=list)

    @model_validator(mode="after")
    def _placeholders(self) -> CommandWorkload:
        if self.timeout <= 0:
            raise FieldError("workload.timeout", "a timeout must be positive; examples: 600s")
        if not self.argv[0]:
            raise FieldError("workload.argv[0]", "the program is empty")
        for i, arg in enumerate(self.argv):
            _check_placeholders(f"workload.argv[{i}]", arg, self.per)
        for key, value in self.env.items():
            _check_placeholders(f"workload.env.{key}", value, self.per)
            if not key or "=" in key:
                raise FieldError(f"workload.env.{key}", "not a variable name")
        seen: set[str] = set()
        for i, service in enumerate(self.services):
            _check_service(i, service)
            if service.name in seen:
                raise FieldError(f"workload.services[{i}].name", f"{service.name!r} twice")
            seen.add(service.name)
        return self


def search_path(path: str | None = None) -> str:
    """The PATH a command runs with: the testbed's interpreter's directory first (as an
    activated virtual environment would have it), then ``path`` (ours by default)."""
    here = str(Path(sys.executable).parent)
    rest = os.environ.get("PATH", os.defpath) if path is None else path
    return os.pathsep.join([here, *[p for p in rest.split(os.pathsep) if p and p != here]])


def missing_files(workload: CommandWorkload, base: Path) -> list[tuple[str, str]]:
    """(field, message) for each file the command or a service names that is not there: the
    program (``argv[0]``, not on :func:`search_path` and no such file) and every argument that
    looks like a script relative to ``cwd`` (``bench.py``). ``base``: the scenario file's
    directory."""
    problems = _missing(workload.argv, base / workload.cwd, "workload")
    for i, service in enumerate(workload.services):
        cwd = base / (service.cwd if service.cwd is not None else workload.cwd)
        problems += _missing(service.argv, cwd, f"workload.services[{i}]")
    return problems


def _missing(argv: list[str], directory: Path, at: str) -> list[tuple[str, str]]:
    cwd = directory.resolve()
    if not cwd.is_dir():
        return [(f"{at}.cwd", f"{str(cwd)!r} is not a directory")]
    problems = []
    program = argv[0]
    if not placeholders_in(program):
        if "/" in program:
            if not (cwd / program).is_file():
                problems.append((f"{at}.argv[0]", f"{program!r}: no such file in {cwd}"))
        elif shutil.which(program, path=search_path()) is None:
            hint = f" (a file there? write ./{program})" if (cwd / program).is_file() else ""
            where = f"not on PATH ({search_path()}){hint}"
            problems.append((f"{at}.argv[0]", f"{program!r} is {where}"))
    for i, arg in enumerate(argv[1:], start=1):
        if placeholders_in(arg) or arg.startswith("-") or "://" in arg or "=" in arg:
            continue
        relative = arg.endswith(SCRIPT_SUFFIXES) and not Path(arg).is_absolute()
        if relative and not (cwd / arg).is_file():
            problems.append((f"{at}.argv[{i}]", f"{arg!r}: no such file in {cwd}"))
    return problems


def unknown_service_hosts(workload: CommandWorkload, hosts: list[str]) -> list[tuple[str, str]]:
    """(field, message) for each service whose ``host`` is none of ``hosts`` (the
    scenario's: ``east-h0``, ...)."""
    return [
        (f"workload.services[{i}].host", f"no host {s.host!r}; hosts are: {', '.join(hosts)}")
        for i, s in enumerate(workload.services)
        if s.host not in hosts
    ]


register_workload("command", CommandWorkload)
