"""Work inside network namespaces from Python (entering one: :mod:`testbed.core.nsenter`): sysctls,
sockets, the processes living in a namespace.

``setns(CLONE_NEWNET)`` changes the namespace of the calling *thread* only, so work inside a
namespace runs in a short-lived worker thread: the main thread never leaves the initial namespace,
even if the work raises.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from testbed.core.nsenter import CLONE_NEWNET, NETNS_DIR, enter, setns

__all__ = ["CLONE_NEWNET", "NETNS_DIR", "enter", "setns"]

T = TypeVar("T")


def run_in(ns_work: list[tuple[str, Callable[[], T]]]) -> list[T]:
    """Run each callable inside its namespace, in order, in one worker thread; return results.
    Consecutive items of the same namespace enter it once."""
    results: list[T] = []
    error: list[BaseException] = []

    def worker() -> None:
        try:
            current = None
            for ns, fn in ns_work:
                if ns != current:
                    enter(ns)
                    current = ns
                results.append(fn())
        except BaseException as exc:  # re-raised in the caller's thread
            error.append(exc)

    t = threading.Thread(target=worker, name="netns-worker")
    t.start()
    t.join()
    if error:
        raise error[0]
    return results


def write_sysctls(per_ns: dict[str, dict[str, str]]) -> None:
    """Write ``net.*`` sysctls inside each namespace (``/proc/sys/net`` follows the thread's ns)."""

    def writer(settings: dict[str, str]) -> Callable[[], None]:
        def write() -> None:
            for key, value in settings.items():
                Path("/proc/sys", *key.split(".")).write_text(value)

        return write

    run_in([(ns, writer(s)) for ns, s in per_ns.items() if s])


def read_sysctls(ns: str, keys: list[str]) -> dict[str, str]:
    def read() -> dict[str, str]:
        return {k: Path("/proc/sys", *k.split(".")).read_text().strip() for k in keys}

    return run_in([(ns, read)])[0]


def netns_inode(ns: str) -> int | None:
    try:
        return os.stat(NETNS_DIR / ns).st_ino
    except OSError:
        return None


def pids_in(namespaces: list[str]) -> list[int]:
    """Processes whose network namespace is one of ``namespaces`` (like ``ip netns pids``)."""
    inodes = {i for ns in namespaces if (i := netns_inode(ns)) is not None}
    if not inodes:
        return []
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            link = os.readlink(f"/proc/{entry}/ns/net")
        except OSError:
            continue
        if int(link[5:-1]) in inodes:  # "net:[4026532300]"
            found.append(int(entry))
    return found
