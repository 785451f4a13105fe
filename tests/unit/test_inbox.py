"""The datagram inbox (testbed.core.inbox) under both of its owners: the origin clock's
announcements and the agent's relay get every datagram in order, and close() removes the
socket's directory."""

from __future__ import annotations

import os
import socket
import threading
import time

from testbed.core.inbox import DatagramInbox
from testbed.experiment.clock import OriginClock
from testbed.live.spanned.announce import Relay


def _send(path: str, *datagrams: bytes) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        for d in datagrams:
            s.sendto(d, path)


def test_every_datagram_in_order_then_the_directory_is_gone():
    got: list[bytes] = []
    done = threading.Event()

    def deliver(data: bytes) -> None:
        got.append(data)
        if len(got) == 3:
            done.set()

    inbox = DatagramInbox(deliver, prefix="testbed-inbox-", name="inbox-test")
    assert len(inbox.path) < 108  # sun_path's limit
    _send(inbox.path, b"a", b"b", b"c")
    assert done.wait(5.0)
    assert got == [b"a", b"b", b"c"]
    inbox.close()
    assert not os.path.exists(inbox.dir)
    assert not inbox.thread.is_alive()


def test_the_relay_keeps_datagrams_with_their_receipt_time():
    relay = Relay()
    try:
        before = time.time()
        _send(relay.path, b"iteration 0 start 1.0 2.0")
        deadline = time.monotonic() + 5.0
        got: list[tuple[float, bytes]] = []
        while not got and time.monotonic() < deadline:
            got = relay.take()
            time.sleep(0.01)
        ((at, data),) = got
        assert data == b"iteration 0 start 1.0 2.0" and at >= before
        assert relay.take() == []
    finally:
        relay.close()
    assert not os.path.exists(relay.inbox.dir)


def test_the_origin_clock_reads_announcements_from_its_inbox():
    with OriginClock(from_iterations=True) as clock:
        _send(clock.path, b"iteration 3 start 100.5 7.25")
        at = clock.wait_iteration(3, timeout=5.0)
        assert at is not None and (at.unix, at.mono) == (100.5, 7.25)
        assert clock.origin == at
    assert not os.path.exists(clock.dir)
