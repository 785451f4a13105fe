"""What a process started in a host gets there: a TCP port free in the host's namespace (a rank
master's) and the environment of a torch rank. Both live networks need them (the one on one
machine picks the port, the one across machines forwards the rank environment to the
machine's agent), and so does the rank launcher above them.
"""

from __future__ import annotations

import os
import socket

from testbed.net import netns

RANK_ENV_DROPPED = ("LOCAL_WORLD_SIZE", "LOCAL_RANK")
RANK_ENV = {
    # Without it gloo advertises what the hostname resolves to, 127.0.0.1, and the mesh fails.
    "GLOO_SOCKET_IFNAME": "eth0",
    # explicit: Ray sets it to a worker's CPU count for what its workers start
    "OMP_NUM_THREADS": "1",
    "PYTHONUNBUFFERED": "1",
    # torch 2.13 deprecates names gloo still needs on older versions; keep logs readable.
    "PYTHONWARNINGS": "ignore::FutureWarning",
}


def rank_env() -> dict[str, str]:
    """The environment of a rank process: ours, minus what would confuse torch, plus gloo's."""
    env = {k: v for k, v in os.environ.items() if k not in RANK_ENV_DROPPED}
    env.update(RANK_ENV)
    return env


def master_port(ns: str) -> int:
    """A TCP port free in namespace ``ns`` right now, chosen by the kernel (bind to port 0).

    The namespace is the master host's, private to one testbed, and one launch runs there at a
    time: nothing else binds a port between this call and the master's store binding it. (A
    random pick from a fixed range, as before, could meet a port still held by a previous call's
    sockets.)"""

    def pick() -> int:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            return int(s.getsockname()[1])

    return netns.run_in([(ns, pick)])[0]
