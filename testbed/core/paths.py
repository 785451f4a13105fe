"""Field paths (``wan[0].rate``, ``clusters.east.hosts``): how sweeps, ``--set``, expectations,
error messages and the analysis name a field of a scenario. PURE, standard library only."""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from typing import Any

_PART = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*)((?:\[[0-9]+\])*)")
MISSING: Any = object()  # get_path's default: tells "absent" apart from a stored None


def format_path(parts: Sequence[Any]) -> str:
    """['wan', 0, 'rate'] -> 'wan[0].rate': how every message names a field."""
    path = ""
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


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


def get_path(data: Any, path: str, default: Any = None) -> Any:
    """The value at ``path`` inside nested mappings and lists, or ``default`` if it is absent
    (or ``path`` is not a field path)."""
    try:
        steps = parse_path(path)
    except ValueError:
        return default
    here = data
    for step in steps:
        if isinstance(step, int):
            if not isinstance(here, list) or step >= len(here):
                return default
            here = here[step]
        else:
            if not isinstance(here, dict) or step not in here:
                return default
            here = here[step]
    return here


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
        here[last] = copy.deepcopy(value)
    else:
        if not isinstance(here, dict):
            raise ValueError(f"{path}: {format_path(steps[:-1])} is not a mapping")
        here[last] = copy.deepcopy(value)
