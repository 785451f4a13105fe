"""Entering a network namespace by name: ``setns(2)`` through ctypes (Python 3.11 has no
``os.setns``). Standard library only, so that the delay line (which may import only
:mod:`testbed.core` and the netlink framing), :mod:`testbed.net.netns` and the rank server
(traffic.zygote, whose children enter their host as ``ip netns exec`` does: :func:`enter_host`)
share one implementation.

``setns(CLONE_NEWNET)`` moves the calling *thread*; in a process that has only one thread (a
freshly forked child) that is the whole process, and ``/proc/net`` then shows the new namespace.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

CLONE_NEWNET = 0x40000000
CLONE_NEWNS = 0x00020000
MS_REC = 0x4000
MS_SLAVE = 1 << 19
MS_BIND = 0x1000
MS_RDONLY = 1
MNT_DETACH = 2
NETNS_DIR = Path("/run/netns")
# The files ``ip netns exec NS`` binds over /etc's (hosts, resolv.conf): /etc/netns/NS/*.
ETC_NETNS = Path("/etc/netns")

_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str = "") -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}" if what else os.strerror(err))


def setns(fd: int) -> None:
    _check(_libc.setns(fd, CLONE_NEWNET))


def enter(ns: str) -> None:
    """Move the calling thread (or a freshly forked child) into the named namespace ``ns``.

    Opens the namespace file without creating anything: a missing namespace is an error here,
    never silently made (pyroute2's ``setns`` creates a missing namespace unless given flags=0)."""
    fd = os.open(NETNS_DIR / ns, os.O_RDONLY | os.O_CLOEXEC)
    try:
        setns(fd)
    finally:
        os.close(fd)


def enter_host(ns: str) -> None:
    """Move this (single-threaded) process into network namespace ``ns`` the way iproute2's
    ``ip netns exec`` does: setns, a private mount namespace with ``/`` a recursive slave,
    ``/sys`` remounted (so /sys/class/net shows the namespace's devices), and every file of
    ``/etc/netns/NS`` bound over ``/etc`` (hosts, resolv.conf)."""
    enter(ns)
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(_libc.mount(b"", b"/", b"none", MS_SLAVE | MS_REC, None), "mount / rslave")
    _check(_libc.umount2(b"/sys", MNT_DETACH), "umount /sys")
    if _libc.mount(ns.encode(), b"/sys", b"sysfs", 0, None) != 0:  # as ip: read-only if refused
        _check(_libc.mount(ns.encode(), b"/sys", b"sysfs", MS_RDONLY, None), "mount /sys")
    etc = ETC_NETNS / ns
    if etc.is_dir():
        for entry in sorted(etc.iterdir()):
            target = Path("/etc") / entry.name
            ret = _libc.mount(str(entry).encode(), str(target).encode(), b"none", MS_BIND, None)
            _check(ret, f"bind {entry} over {target}")
