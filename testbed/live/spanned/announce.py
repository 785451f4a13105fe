"""Rank 0's iteration announcements across machines (:class:`Relay`, the agent's side).

Rank 0 announces each measured iteration on a UNIX datagram socket (traffic.announce), a path
on its own machine; the driver's origin clock is on another. The agent of rank 0's machine
binds that socket here and keeps what arrives; the driver takes it every few tens of ms and puts
its unix times on its own timeline with the machine's clock offset
(testbed.experiment.spanned_events). The messages are kept as they came (bytes): their format
is traffic.announce's alone.
"""

from __future__ import annotations

import threading
import time

from testbed.core.inbox import DatagramInbox


class Relay:
    """A socket in a private directory of this machine (:class:`DatagramInbox`) that keeps every
    datagram it receives with this machine's unix time of receipt, until :meth:`take`."""

    def __init__(self) -> None:
        self.got: list[tuple[float, bytes]] = []
        self.lock = threading.Lock()
        self.inbox = DatagramInbox(self._keep, prefix="testbed-relay-", name="announce-relay")
        self.path = self.inbox.path

    def _keep(self, data: bytes) -> None:
        with self.lock:
            self.got.append((time.time(), data))

    def take(self) -> list[tuple[float, bytes]]:
        """What came since the last call: (receipt unix time, datagram)."""
        with self.lock:
            got, self.got = self.got, []
        return got

    def close(self) -> None:
        self.inbox.close()
