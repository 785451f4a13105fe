"""``testbed run --ray local``: a throwaway Ray cluster on this machine for one run, stopped
afterwards.

The cluster is started by this process (``ray.init`` with ``address="local"``: never one that
is already running, whatever ``RAY_ADDRESS`` says), one node offering one ``testbed`` resource
and no CPUs, as ``testbed ray-node --head`` would, its files in a temporary directory of its
own. Its processes are recorded by pid (with their start time, so a reused pid is never hit) as
they appear; stopping it is ``ray.shutdown()``, then SIGTERM and SIGKILL to every recorded
process still alive, then the directory removed. Never ``ray stop``: that stops every Ray
cluster of the machine, a user's own too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from testbed.core.errors import UsageError
from testbed.live.ray_common import RESOURCE, require_ray
from testbed.net.registry import process_alive, process_start

STOP_GRACE_S = 5.0  # SIGTERM to SIGKILL


def _children(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError):
                out += [int(c) for c in (task / "children").read_text().split()]
    return out


class LocalRay:
    """A Ray cluster of this machine alone for the length of a ``with`` block."""

    def __init__(self) -> None:
        self.pids: dict[int, int] = {}  # pid -> its start time (process_start)
        self.temp: Path | None = None
        self.ray: Any = None

    def __enter__(self) -> LocalRay:
        ray = require_ray()
        if ray.is_initialized():
            raise UsageError("--ray local: this process is already connected to a Ray cluster")
        self.temp = Path(tempfile.mkdtemp(prefix="testbed-ray-"))
        try:
            ray.init(
                address="local",
                num_cpus=0,
                resources={RESOURCE: 1},
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
                _temp_dir=str(self.temp),
            )
        except BaseException:
            self.snapshot()
            self.stop()
            raise
        self.ray = ray
        self.snapshot()
        return self

    def snapshot(self) -> None:
        """Record the cluster's processes now: the node's own and every descendant of them
        (the raylet's workers come and go)."""
        roots: list[int] = []
        try:
            from ray._private import worker as ray_worker

            node = getattr(ray_worker, "_global_node", None)
        except ImportError:
            node = None
        for infos in (getattr(node, "all_processes", None) or {}).values():
            for info in infos:
                proc = getattr(info, "process", None)
                if proc is not None and proc.pid:
                    roots.append(proc.pid)
        seen = set(self.pids)
        todo = roots + [p for p in self.pids if process_alive(p, self.pids[p])]
        while todo:
            pid = todo.pop()
            if pid == os.getpid():
                continue
            if pid not in seen:
                seen.add(pid)
                start = process_start(pid)
                if start is None:  # gone already: its pid may be another's soon
                    continue
                self.pids[pid] = start
            todo += [c for c in _children(pid) if c not in seen]

    def alive(self) -> list[int]:
        """The recorded processes still running."""
        return [pid for pid, start in self.pids.items() if process_alive(pid, start)]

    def stop(self) -> None:
        """Shut the cluster down and make sure each of its processes is gone."""
        with contextlib.suppress(Exception):
            self.snapshot()
        ray = self.ray or require_ray()
        with contextlib.suppress(Exception):
            if ray.is_initialized():
                ray.shutdown()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            left = self.alive()
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + STOP_GRACE_S
            while left and time.monotonic() < deadline:
                time.sleep(0.1)
                left = self.alive()
            if not left:
                break
        if self.temp is not None:
            shutil.rmtree(self.temp, ignore_errors=True)

    def __exit__(self, *exc: object) -> None:
        self.stop()
