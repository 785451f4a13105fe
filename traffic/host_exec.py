"""Run a program as a testbed host: its own hostname and the testbed's hosts file, then exec it.

``python -m traffic.host_exec --hostname east-h0 --hosts FILE [--cwd DIR] -- PROGRAM ARGS...``
makes a private UTS namespace (the hostname) and a private mount namespace (``/`` made private,
so nothing propagates out; FILE bind-mounted over ``/etc/hosts``: every testbed host's name
resolves to its address), changes to DIR and execs PROGRAM in place (same pid, same
environment). Both namespaces belong to the process and its children alone: nothing is left on
the machine when they end. Without it a program in a host's network namespace sees the machine's
hostname, which resolves to 127.0.0.1, so c10d cannot name its peers and every host looks like
the same one. Needs CAP_SYS_ADMIN (root). Standard library only: it runs before the program.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import socket
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
HOSTS = "/etc/hosts"


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def become_host(hostname: str, hosts_file: str) -> None:
    """This process's own hostname and /etc/hosts (see the module doc)."""
    libc = ctypes.CDLL(None, use_errno=True)
    _check(libc.unshare(CLONE_NEWUTS | CLONE_NEWNS), "unshare(CLONE_NEWUTS|CLONE_NEWNS)")
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "making / private")
    socket.sethostname(hostname)
    src, dst = os.fsencode(os.path.abspath(hosts_file)), os.fsencode(HOSTS)
    _check(libc.mount(src, dst, None, MS_BIND, None), f"bind-mounting {hosts_file} on {HOSTS}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m traffic.host_exec", description=__doc__)
    parser.add_argument("--hostname", required=True)
    parser.add_argument("--hosts", required=True, help="the hosts file to see as /etc/hosts")
    parser.add_argument("--cwd", help="the directory to run the program in")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="-- PROGRAM ARGS...")
    args = parser.parse_args(argv)
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        parser.error("no program to run (after --)")
    try:
        become_host(args.hostname, args.hosts)
        if args.cwd:
            os.chdir(args.cwd)
        os.execvpe(program[0], program, os.environ)
    except OSError as exc:
        print(f"traffic.host_exec: {program[0]}: {exc}", file=sys.stderr, flush=True)
        sys.exit(127)


if __name__ == "__main__":
    main()
