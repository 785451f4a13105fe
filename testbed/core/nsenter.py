"""Entering a network namespace by name: ``setns(2)`` through ctypes (Python 3.11 has no
``os.setns``). Standard library only, so that the delay line (which may import only
:mod:`testbed.core` and the netlink framing) and :mod:`testbed.net.netns` share one
implementation.

``setns(CLONE_NEWNET)`` moves the calling *thread*; in a process that has only one thread (a
freshly forked child) that is the whole process, and ``/proc/net`` then shows the new namespace.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

CLONE_NEWNET = 0x40000000
NETNS_DIR = Path("/run/netns")

_libc = ctypes.CDLL(None, use_errno=True)


def setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def enter(ns: str) -> None:
    """Move the calling thread (or a freshly forked child) into the named namespace ``ns``.

    Opens the namespace file without creating anything: a missing namespace is an error here,
    never silently made (pyroute2's ``setns`` creates a missing namespace unless given flags=0)."""
    fd = os.open(NETNS_DIR / ns, os.O_RDONLY | os.O_CLOEXEC)
    try:
        setns(fd)
    finally:
        os.close(fd)
