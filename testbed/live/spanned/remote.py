"""What the driver hands back for a server or a process an agent runs: objects shaped like
:class:`subprocess.Popen` (``communicate``; ``poll``, ``wait``, ``send_signal``, ...) whose calls
go to that agent through Ray, so the link self-check and the rank launcher use them unchanged.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

from testbed.live.spanned.lines import RemoteLines


class RemoteServer:
    """A server an agent runs: what ``serving`` yields (``communicate`` like a Popen's)."""

    def __init__(self, ray: Any, agent: Any, handle: int) -> None:
        self.ray, self.agent, self.handle = ray, agent, handle

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        return self.ray.get(self.agent.communicate.remote(self.handle, timeout or 60.0))


class RemoteProcess:
    """A process an agent runs, as :class:`subprocess.Popen` looks to the rank launcher
    (``poll``, ``wait``, ``send_signal``, ``kill``, ``terminate``, ``returncode``, ``pid``;
    ``stdout``: with ``lines``, the stdout lines the agent read, testbed.live.spanned.lines).
    Each ``poll`` also brings the driver's copy of its directory up to date (``outputs`` gets
    the names of the files that came back), until its stdout has ended too. ``signal_group``
    and ``listening`` act on its machine (testbed.live.host_processes)."""

    def __init__(
        self,
        ray: Any,
        agent: Any,
        handle: int,
        local_dir: Path,
        lines: bool = False,
        outputs: set[str] | None = None,
    ) -> None:
        self.ray, self.agent, self.pid, self.dir = ray, agent, handle, local_dir
        self.returncode: int | None = None
        self.stdout: RemoteLines | None = RemoteLines(self._sync) if lines else None
        self.outputs = outputs if outputs is not None else set()
        self._ended = not lines  # its stdout's end seen (nothing to wait for without lines)
        self._lock = threading.Lock()  # the launcher's loop and the reader of its lines

    def _sync(self) -> None:
        with self._lock:
            if self.returncode is not None and self._ended:
                return
            try:
                code, gained, lines, ended = self.ray.get(self.agent.poll.remote(self.pid))
            except self.ray.exceptions.RayActorError:
                # its agent is gone, and the process with it (an agent's teardown ends what
                # it started): a launcher that looks after teardown sees it killed
                code, gained, lines, ended = self.returncode or -signal.SIGKILL, {}, [], True
            for name, (offset, data) in gained.items():
                self.outputs.add(name)
                (self.dir / name).parent.mkdir(parents=True, exist_ok=True)  # a subdirectory's
                with open(self.dir / name, "r+b" if offset else "wb") as f:
                    f.seek(offset)
                    f.write(data)
            if self.stdout is not None:
                self.stdout.add(lines, ended)
            self._ended = ended
            self.returncode = code

    def poll(self) -> int | None:
        self._sync()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.ray.get(self.agent.wait.remote(self.pid, timeout))
            if self.poll() is None:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            self.ray.get(self.agent.signal.remote(self.pid, signum))

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def signal_group(self, signum: int) -> None:
        """``signum`` to the process group it leads, on its machine (nothing once its agent
        is gone: the group went with it)."""
        with contextlib.suppress(self.ray.exceptions.RayActorError):
            self.ray.get(self.agent.signal_group.remote(self.pid, signum))

    def listening(self, port: int) -> bool:
        """Whether its host's namespace listens on TCP ``port``, on its machine."""
        return bool(self.ray.get(self.agent.listening.remote(self.pid, port)))
