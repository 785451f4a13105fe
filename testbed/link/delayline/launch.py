"""One Python start-up for many delay lines: fork one line process per wire namespace.

``python -m testbed.link.delayline --line NS CONFIG LOG [--line ...] [--rules NS FILE ...]``
runs in the initial namespace, having imported the delay line once; each ``--line`` gets a
forked child that logs to ``LOG``, enters ``NS`` (``setns``: the child has one thread, so the whole
process moves) and runs the :class:`~testbed.link.delayline.loop.DelayLine` as ``ip netns exec NS
python -m testbed.link.delayline --config CONFIG`` would. One process per wire still: all cores
are used and a dead line fails only its own links. ``--wait`` holds the forks until a line on
stdin, so the start-up overlaps the build; ``--rules`` has each line apply its iptables rules once
its queues are bound, before READY.

Protocol on stdout (the supervisor's, :mod:`testbed.link.userspace`): ``READY NS PID`` or ``FAILED
NS PID CODE`` per child, each child reporting through a pipe of its own; then the launcher exits
(0 if every line got ready) and the lines live on. Exit codes and the rest: docs/delayline.md.
"""

from __future__ import annotations

import os
import select
import sys

from testbed.core.nsenter import enter
from testbed.link.delayline.config import Config, ConfigError
from testbed.link.delayline.loop import DelayLine
from testbed.link.delayline.rules import restore_command

EXIT_NAMESPACE = 3
EXIT_RULES = 4


def apply_rules(path: str) -> None:
    """``iptables-restore`` of the file ``path`` in this namespace, as a normal-priority process
    (the line may already be SCHED_FIFO); its stderr goes to ours. OSError if it failed."""
    argv = restore_command()
    pid = os.posix_spawnp(
        argv[0],
        argv,
        os.environ,
        file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, path, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
        ],
        scheduler=(os.SCHED_OTHER, os.sched_param(0)),
    )
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise OSError(f"{' '.join(argv)} < {path} exited with code {code}")


def run_line(config: str, ready_fd: int | None = None, rules: str | None = None) -> int:
    """Load ``config``, bind the queues, apply ``rules`` (a restore file) if given, and serve;
    the exit codes of the package docstring. READY goes to ``ready_fd`` (stdout if None)."""
    try:
        cfg = Config.load(config)
    except ConfigError as e:
        print(f"delayline: config error: {e}", file=sys.stderr)
        return 2
    line = DelayLine(cfg, config_path=config)
    try:
        line.setup()
    except OSError as e:
        print(f"delayline: setup failed: {e}", file=sys.stderr)
        return 1
    if rules is not None:
        try:
            apply_rules(rules)
        except OSError as e:
            print(f"delayline: iptables rules failed: {e}", file=sys.stderr)
            line.unbind()
            return EXIT_RULES
    if ready_fd is None:
        return line.run()
    with os.fdopen(ready_fd, "w") as ready:
        return line.run(ready)


def _child(ns: str, config: str, log: str, ready_fd: int, rules: str | None) -> int:
    """In the forked child: stderr to ``log``, stdout away (the launcher's stdout is the
    supervisor's protocol), into ``ns``, then the line."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 2)
    os.close(fd)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    try:
        enter(ns)
    except OSError as e:
        print(f"delayline: cannot enter namespace {ns}: {e}", file=sys.stderr)
        return EXIT_NAMESPACE
    return run_line(config, ready_fd, rules)


def launch(
    lines: list[tuple[str, str, str]], rules: dict[str, str] | None = None, wait: bool = False
) -> int:
    """Fork one line per (namespace, config, log), with ``rules[namespace]`` (a restore file)
    if given; relay READY/FAILED; 0 if all got ready. With ``wait``, first wait for a line on
    stdin (the namespaces exist); EOF: exit 1 without forking."""
    rules = rules or {}
    if wait and not sys.stdin.readline():
        print("delayline: launcher: stdin closed before the go: no lines started", file=sys.stderr)
        return 1
    waiting: dict[int, tuple[str, int]] = {}  # read end of a child's ready pipe -> (ns, pid)
    for ns, config, log in lines:
        r, w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the launcher's code
            code = 1
            try:
                os.close(r)
                for other in waiting:
                    os.close(other)
                code = _child(ns, config, log, w, rules.get(ns))
            except BaseException as e:  # a crash must still end this process, with a reason
                print(f"delayline: {type(e).__name__}: {e}", file=sys.stderr)
            finally:
                sys.stderr.flush()
                os._exit(code)
        os.close(w)
        waiting[r] = (ns, pid)
    out = sys.stdout
    failed = 0
    pending = bytearray()
    got: dict[int, bytearray] = {r: bytearray() for r in waiting}
    while waiting:
        ready, _, _ = select.select(list(waiting), [], [])
        for r in ready:
            ns, pid = waiting[r]
            chunk = os.read(r, 64)
            got[r] += chunk
            if b"READY\n" in got[r]:
                pending += f"READY {ns} {pid}\n".encode()
            elif chunk:
                continue  # part of the line: read on
            else:  # EOF before READY: the child exited; reap it for its code
                _, status = os.waitpid(pid, 0)
                code = os.waitstatus_to_exitcode(status)
                pending += f"FAILED {ns} {pid} {code}\n".encode()
                failed += 1
            os.close(r)
            del waiting[r]
        out.write(pending.decode())
        out.flush()
        pending.clear()
    return 1 if failed else 0
