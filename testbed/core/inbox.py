"""A datagram inbox (:class:`DatagramInbox`): a UNIX datagram socket in a private temporary
directory of this machine, read by a thread of its own that hands each datagram to its owner.

The one receive loop of the ranks' announcements: the origin clock reads them where the driver
runs (testbed.experiment.clock), an agent keeps them for the driver where rank 0 runs on another
machine (testbed.live.spanned.announce). Standard library only.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

READ_POLL = 0.1  # s: the reader's receive timeout (how fast close() is noticed)
DATAGRAM_MAX = 256  # bytes read per datagram (an announcement is one short line)


class DatagramInbox:
    """A socket at ``path`` (in a private directory: a short path, since sun_path holds 108
    bytes and run directories can be longer; reachable from every network namespace; removed
    by :meth:`close`). Each datagram that arrives is handed to ``deliver`` on the reader
    thread (named ``name``), in the order it came."""

    def __init__(self, deliver: Callable[[bytes], None], *, prefix: str, name: str) -> None:
        self.deliver = deliver
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self.path = str(Path(self.dir) / "sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(READ_POLL)
        self.closed = False
        self.thread = threading.Thread(target=self._read, name=name, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while not self.closed:
            try:
                data = self.sock.recv(DATAGRAM_MAX)
            except TimeoutError:
                continue
            except OSError:  # closed under us
                return
            self.deliver(data)

    def close(self) -> None:
        """Stop reading (within :data:`READ_POLL`) and remove the socket and its directory."""
        self.closed = True
        with contextlib.suppress(OSError):
            self.sock.close()
        self.thread.join(timeout=2 * READ_POLL)
        shutil.rmtree(self.dir, ignore_errors=True)
