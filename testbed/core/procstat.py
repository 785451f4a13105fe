"""What ``/proc/<pid>/stat`` says of a process: its start time (which tells a process from a later
owner of its pid), its parent and its CPU time, alone or with its descendants'. The one parser of
that file: the registry, the rank server, the test suite's timing plugin and the benchmarks read
processes through it."""

from __future__ import annotations

import os
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")  # clock ticks per second (stat's times are in ticks)


def stat_fields(pid: int) -> list[str] | None:
    """The fields after the command name (the state first), None: no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may contain spaces and parentheses: split after the last ')'.
    return stat.rsplit(")", 1)[1].split()


def start_time(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot, or None if it does not exist or has
    exited (a zombie, which stays until its parent reaps it, counts as exited)."""
    fields = stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` (None: gone)."""
    fields = stat_fields(pid)
    return None if fields is None else (int(fields[11]) + int(fields[12])) / TICK


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds (user + system) spent by ``root`` and all its descendants so far: the live ones
    read directly, the exited ones through their reaped times (a parent's cutime/cstime). A
    descendant that a daemon's double fork gave to init is not counted. 0.0: ``root`` is gone."""
    children: dict[int, list[int]] = {}
    times: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = stat_fields(int(entry.name))
        if fields is None or len(fields) < 15:
            continue
        pid = int(entry.name)
        children.setdefault(int(fields[1]), []).append(pid)
        times[pid] = sum(int(x) for x in fields[11:15]) / TICK  # utime stime cutime cstime
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += times.get(pid, 0.0)
        todo.extend(children.get(pid, []))
    return total
