"""``workload: kind: command``: a user's own program, unchanged, on every rank or host
(docs/command.md).

The schema (:class:`CommandWorkload`), its placeholders and their check (:func:`placeholders_in`,
pure: an unknown ``{name}`` is a scenario error naming the field), and the check of the files it
names (:func:`missing_files`: the executable and script arguments, relative to the scenario's
directory), which the runner calls before it builds the network. Registered with the scenario
parser on import (testbed.config.scenario imports it).
"""

from __future__ import annotations

import os
import shutil
import string
import sys
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import ConfigDict, Field, model_validator

from testbed.config.fields import Duration, FieldError
from testbed.config.workloads import RankWorkloadModel, register_workload
from testbed.core.metrics import Metric

# what ``{name}`` in argv and env values may name; per: host has no rank of its own
PLACEHOLDERS = (
    "rank", "local_rank", "world_size", "node_rank", "nnodes", "nproc_per_node", "master_addr",
    "master_port", "host", "cluster", "host_addr", "run_dir",
)  # fmt: skip
RANK_ONLY = ("rank", "local_rank")
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
    allowed = allowed_placeholders(per)
    try:
        names = placeholders_in(text)
    except ValueError as exc:
        raise FieldError(
            path, f"{text!r}: {exc} (write {{{{ and }}}} for literal braces)"
        ) from None
    for name in names:
        if name not in allowed:
            why = (
                f"per: host has no {{{name}}} (torchrun gives each of its processes its own)"
                if name in RANK_ONLY
                else f"unknown placeholder {{{name}}}"
            )
            shown = ", ".join(f"{{{a}}}" for a in allowed)
            raise FieldError(path, f"{text!r}: {why}; allowed: {shown}")


def expand(text: str, values: dict[str, object]) -> str:
    """``text`` with its placeholders replaced (they were checked by the schema)."""
    return text.format(**values)


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
    )
    per: Literal["rank", "host"] = "rank"
    argv: list[str] = Field(min_length=1)
    cwd: str = "."  # relative to the scenario file's directory
    env: dict[str, str] = Field(default_factory=dict)
    timeout: Duration = 600.0  # the whole workload's limit
    on_failure: Literal["stop-all", "wait"] = "stop-all"
    metrics_format: Literal["json-lines", "none"] = Field("json-lines", alias="metrics")

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
        return self


def search_path(path: str | None = None) -> str:
    """The PATH a command runs with: the testbed's interpreter's directory first (as an
    activated virtual environment would have it), then ``path`` (ours by default)."""
    here = str(Path(sys.executable).parent)
    rest = os.environ.get("PATH", os.defpath) if path is None else path
    return os.pathsep.join([here, *[p for p in rest.split(os.pathsep) if p and p != here]])


def missing_files(workload: CommandWorkload, base: Path) -> list[tuple[str, str]]:
    """(field, message) for each file the command names that is not there: the program
    (``argv[0]``, not on :func:`search_path` and no such file) and every argument that looks like
    a script relative to ``cwd`` (``bench.py``). ``base``: the scenario file's directory."""
    cwd = (base / workload.cwd).resolve()
    problems = []
    if not cwd.is_dir():
        problems.append(("workload.cwd", f"{str(cwd)!r} is not a directory"))
        return problems
    program = workload.argv[0]
    if not placeholders_in(program):
        if "/" in program:
            if not (cwd / program).is_file():
                problems.append(("workload.argv[0]", f"{program!r}: no such file in {cwd}"))
        elif shutil.which(program, path=search_path()) is None:
            hint = f" (a file there? write ./{program})" if (cwd / program).is_file() else ""
            where = f"not on PATH ({search_path()}){hint}"
            problems.append(("workload.argv[0]", f"{program!r} is {where}"))
    for i, arg in enumerate(workload.argv[1:], start=1):
        if placeholders_in(arg) or arg.startswith("-") or "://" in arg or "=" in arg:
            continue
        relative = arg.endswith(SCRIPT_SUFFIXES) and not Path(arg).is_absolute()
        if relative and not (cwd / arg).is_file():
            problems.append((f"workload.argv[{i}]", f"{arg!r}: no such file in {cwd}"))
    return problems


register_workload("command", CommandWorkload)
