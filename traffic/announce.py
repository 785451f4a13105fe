"""Iteration announcements: rank 0 tells the runner, on a UNIX datagram socket, when each measured
iteration (collectives) or step (training) starts, so that the event runner
(testbed.experiment.events) can place schedule steps and faults on the workload's clock.

This module owns the message format, both ways (:func:`format_start`, :func:`format_end`,
:func:`parse`: one ASCII datagram ``iteration K start UNIX MONO`` or ``end UNIX MONO``) and the
sender (:class:`Announcer`). Standard library and the leaf testbed.core.clock only: the ranks
import it before torch, the runner imports it to read the messages.

A path socket (not an abstract one) is reachable from every network namespace. Sending never
blocks and never fails the rank (nobody listening and a full receive queue are ignored): an
announcement is a service to the runner, not part of the workload. ``CLOCK_MONOTONIC`` is one
clock for every process of the machine, so MONO compares directly with the runner's; both times
come from a :class:`~testbed.core.clock.Clock` (the machine's unless a test gives one).
"""

from __future__ import annotations

import contextlib
import socket
from dataclasses import dataclass
from typing import Any

from testbed.core.clock import SYSTEM, Clock

SPEC_KEY = "events_socket"  # in the ranks' spec: the socket's path; absent = no announcements


@dataclass(frozen=True)
class Announcement:
    kind: str  # "iteration" | "end"
    iteration: int | None
    unix: float
    mono: float


def format_start(k: int, unix: float, mono: float) -> bytes:
    return f"iteration {k} start {unix:.6f} {mono:.6f}".encode()


def format_end(unix: float, mono: float) -> bytes:
    return f"end {unix:.6f} {mono:.6f}".encode()


def parse(data: bytes) -> Announcement | None:
    """The message, or None when it is not one (a stray datagram is ignored, not an error)."""
    try:
        parts = data.decode("ascii").split()
        if len(parts) == 5 and parts[0] == "iteration" and parts[2] == "start":
            return Announcement("iteration", int(parts[1]), float(parts[3]), float(parts[4]))
        if len(parts) == 3 and parts[0] == "end":
            return Announcement("end", None, float(parts[1]), float(parts[2]))
    except (UnicodeDecodeError, ValueError):
        pass
    return None


class Announcer:
    """Sends a rank's announcements; a no-op unless this is rank 0 and the spec names a socket."""

    def __init__(self, path: str | None, *, clock: Clock = SYSTEM) -> None:
        self.path = path
        self.clock = clock
        self.sock: socket.socket | None = None
        if path:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK)

    @classmethod
    def from_spec(cls, spec: dict[str, Any], rank: int) -> Announcer:
        return cls(spec.get(SPEC_KEY) if rank == 0 else None)

    def _send(self, data: bytes) -> None:
        if self.sock is None or self.path is None:
            return
        # nobody listens (ENOENT, ECONNREFUSED) or the queue is full (EAGAIN): not the rank's error
        with contextlib.suppress(OSError):
            self.sock.sendto(data, self.path)

    def start(self, k: int) -> None:
        """Measured operation ``k`` starts now."""
        if self.sock is not None:
            self._send(format_start(k, self.clock.wall(), self.clock.now()))

    def end(self) -> None:
        """The workload is over on this rank (done or failed)."""
        if self.sock is not None:
            self._send(format_end(self.clock.wall(), self.clock.now()))
            self.sock.close()
            self.sock = None
