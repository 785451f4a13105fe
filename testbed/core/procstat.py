"""What ``/proc/<pid>/stat`` says of a process: its start time (which tells a process from a later
owner of its pid), its parent and its CPU time. The one parser of that file: the registry, the
rank server and the benchmarks read processes through it."""

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
