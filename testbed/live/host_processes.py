"""What a launcher does to a process running in a host, on whichever machine it runs: signal the
process group it leads (:func:`signal_group`) and ask whether its namespace listens on a TCP port
(:func:`listens`). On one machine the process is a Popen and both act here (``os.killpg``, its
``/proc/PID/net/tcp``); across machines it is a proxy (testbed.live.spanned.remote) whose pid is
a pid of another machine, so both go to that machine's agent.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

TCP_LISTEN = "0A"  # the state column of a listening socket in /proc/net/tcp


def signal_group(proc: Any, signum: int) -> None:
    """``signum`` to the process group ``proc`` leads (started in a session of its own); nothing
    when the group is gone."""
    remote = getattr(proc, "signal_group", None)
    if remote is not None:
        remote(signum)
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)


def listens(proc: Any, port: int, ns_inode: int | None = None) -> bool:
    """Whether a TCP socket listens on ``port`` in the network namespace of ``proc`` (with
    ``ns_inode``, once the process is in that namespace: :func:`listening`)."""
    remote = getattr(proc, "listening", None)
    if remote is not None:
        return bool(remote(port))
    return listening(proc.pid, port, ns_inode)


def listening(pid: int, port: int, ns_inode: int | None = None) -> bool:
    """Whether a TCP socket listens on ``port`` in the network namespace of process ``pid``
    (its /proc/PID/net/tcp and tcp6: every socket of the namespace, whichever process holds
    it). With ``ns_inode``, only once the process is in that namespace (``ip netns exec``
    enters it after the fork: until then the machine's own sockets would answer)."""
    try:
        if ns_inode is not None and os.stat(f"/proc/{pid}/ns/net").st_ino != ns_inode:
            return False
        for table in ("tcp", "tcp6"):
            with open(f"/proc/{pid}/net/{table}") as f:
                for line in f.read().splitlines()[1:]:
                    fields = line.split()
                    if fields[3] == TCP_LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        return True
    except (OSError, IndexError, ValueError):
        return False
    return False
