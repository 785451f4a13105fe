"""What the driver hands back for a server or a process an agent runs: objects shaped like
:class:`subprocess.Popen` (``communicate``; ``poll``, ``wait``, ``send_signal``, ...) whose calls
go to that agent through Ray, so the link self-check and the rank launcher use them unchanged.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any


class RemoteServer:
    """A server an agent runs: what ``serving`` yields (``communicate`` like a Popen's)."""

    def __init__(self, ray: Any, agent: Any, handle: int) -> None:
        self.ray, self.agent, self.handle = ray, agent, handle

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        return self.ray.get(self.agent.communicate.remote(self.handle, timeout or 60.0))


class RemoteProcess:
    """A process an agent runs, as :class:`subprocess.Popen` looks to the rank launcher
    (``poll``, ``wait``, ``send_signal``, ``kill``, ``terminate``, ``returncode``, ``pid``). Each
    ``poll`` also brings the driver's copy of its directory up to date."""

    def __init__(self, ray: Any, agent: Any, handle: int, local_dir: Path) -> None:
        self.ray, self.agent, self.pid, self.dir = ray, agent, handle, local_dir
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            code, gained = self.ray.get(self.agent.poll.remote(self.pid))
            for name, (offset, data) in gained.items():
                with open(self.dir / name, "r+b" if offset else "wb") as f:
                    f.seek(offset)
                    f.write(data)
            self.returncode = code
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
