"""Rank 0's iteration announcements across machines (:class:`Relay`, the agent's side).

Rank 0 announces each measured iteration on a UNIX datagram socket (traffic.announce), a path
on its own machine; the driver's origin clock is on another. The agent of rank 0's machine
binds that socket here and keeps what arrives; the driver takes it every few tens of ms and puts
its unix times on its own timeline with the machine's clock offset
(testbed.experiment.spanned_events). The messages are kept as they came (bytes): their format
is traffic.announce's alone.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path

READ_POLL = 0.1  # s: the reader's receive timeout (how fast close() is noticed)


class Relay:
    """A socket in a private directory of this machine that keeps every datagram it receives
    with this machine's unix time of receipt, until :meth:`take`."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="testbed-relay-")
        self.path = str(Path(self.dir) / "sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(READ_POLL)
        self.got: list[tuple[float, bytes]] = []
        self.lock = threading.Lock()
        self.closed = False
        self.thread = threading.Thread(target=self._read, name="announce-relay", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while not self.closed:
            try:
                data = self.sock.recv(256)
            except TimeoutError:
                continue
            except OSError:  # closed under us
                return
            with self.lock:
                self.got.append((time.time(), data))

    def take(self) -> list[tuple[float, bytes]]:
        """What came since the last call: (receipt unix time, datagram)."""
        with self.lock:
            got, self.got = self.got, []
        return got

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self.sock.close()
        self.thread.join(timeout=2 * READ_POLL)
        shutil.rmtree(self.dir, ignore_errors=True)
