"""One run's job: the command, its environment and directories, as the guest's stage 2 script.

The job directory here is shared with the guest; it holds ``stage2.sh`` (``guest/stage2.sh``
below this run's settings) and, afterwards, the command's exit code. This module also decides
what the command sees: which environment variables pass (``guest_env``) and which program runs
(``guest_argv``, resolved as a shell would, with ``testbed`` meaning this installation's).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed.vm.common import GUEST_DIR, GUEST_PATH, MSIZE, VmError, guest_script, shell_settings

# Allowed in the guest's init namespace: a non-initial namespace may only pick an algorithm in
# the init namespace's net.ipv4.tcp_allowed_congestion_control (else EPERM).
CONGESTION_CONTROLS = ("reno", "cubic", "bbr", "dctcp", "htcp", "vegas", "westwood", "bic")
# Environment passed to the command: these names and every TESTBED_* one (plus --env).
_ENV_WORDS = """HOME USER LOGNAME LANG LANGUAGE TZ TERM NO_COLOR FORCE_COLOR CI VIRTUAL_ENV
PYTHONPATH PYTHONUNBUFFERED PYTHONDONTWRITEBYTECODE PYTEST_ADDOPTS OMP_NUM_THREADS
OPENBLAS_CORETYPE OPENBLAS_L2_SIZE"""
ENV_PASSED = frozenset(_ENV_WORDS.split())
VERBS = {"validate", "plan", "up", "exec", "ls", "down", "clean", "doctor", "run"}  # a hint only


@dataclass(frozen=True)
class Share:
    """A host directory the guest mounts at the same path."""

    tag: str  # 9p mount tag (at most 31 bytes)
    host_path: str
    readonly: bool = False


@dataclass(frozen=True)
class GuestJob:
    """One command to run in the guest, with what stage 2 needs to set up around it."""

    argv: tuple[str, ...]  # argv[0] is an absolute path (busybox's sh prefers its applets)
    cwd: str
    env: tuple[tuple[str, str], ...]
    shares: tuple[Share, ...]
    modules: str  # this machine's path of the unpacked lib/modules (read through the 9p root)
    token: str  # marks the console lines the host looks for
    hostname: str = "testbed-vm"
    tty: bool = False  # give the command the console as its terminal (else a pipe)
    columns: int = 100
    lines: int = 40
    congestion: tuple[str, ...] = CONGESTION_CONTROLS
    modprobe: str = "/sbin/modprobe"  # this machine's kmod (the kernel calls it too)

    @property
    def start_marker(self) -> str:
        return f"@@testbed-vm:{self.token}:start"

    @property
    def exit_marker(self) -> str:
        return f"@@testbed-vm:{self.token}:exit="


def _function(name: str, body: Iterable[str]) -> list[str]:
    """A shell function; its status is its last command's (``:`` when it has none)."""
    lines = [f"  {line}" for line in body] or ["  :"]
    return [f"{name}() {{", *lines, "}"]


def stage2_script(job: GuestJob, busybox: bool, msize: int = MSIZE) -> str:
    """Stage 2, PID 1 on the host's (overlaid) root: ``guest/stage2.sh`` below this job's
    settings and three functions (its shares, environment and command).

    Its helpers are busybox applets when the initramfs had busybox (``$BB mount``), else the
    host's programs; the command itself always runs this machine's programs.
    """
    settings = [
        ("BB", f"{GUEST_DIR}/bin/busybox" if busybox else ""),
        ("MSIZE", str(msize)),
        ("KMODULES", job.modules),
        ("MODPROBE", job.modprobe),
        ("GUEST_HOSTNAME", job.hostname),
        ("CONGESTION", " ".join(job.congestion)),
        ("CWD", job.cwd),
        ("TTY", "1" if job.tty else "0"),
        ("TERM_COLUMNS", str(job.columns)),
        ("TERM_LINES", str(job.lines)),
        ("START_MARKER", job.start_marker),
        ("EXIT_MARKER", job.exit_marker),
    ]
    q = shlex.quote
    lines = shell_settings("testbed vm: stage 2 (testbed/vm/job.py), this run's settings", settings)
    # parents first: a share inside another is mounted over it, not under it
    shares = sorted(job.shares, key=lambda s: s.host_path.count("/"))
    lines += _function(
        "job_shares",
        (f"share {s.tag} {q(s.host_path)}" + (" ro" if s.readonly else "") for s in shares),
    )
    lines += _function("job_env", (f"export {k}={q(v)}" for k, v in job.env))
    lines += _function("job_command", [shlex.join(job.argv)])
    return "\n".join(lines) + "\n" + guest_script("stage2.sh")


def guest_env(extra: Iterable[str] = (), environ: Mapping[str, str] | None = None) -> list:
    """The command's environment: ENV_PASSED, TESTBED_*, and ``NAME=VALUE``/``NAME`` extras."""
    environ = os.environ if environ is None else environ
    env = {k: v for k, v in environ.items() if k in ENV_PASSED or k.startswith("TESTBED_")}
    env.pop("TESTBED_VM_CACHE", None)
    for item in extra:
        name, eq, value = item.partition("=")
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            raise VmError(f"--env {item!r}: not NAME=VALUE or NAME")
        if eq:
            env[name] = value
        elif name in environ:
            env[name] = environ[name]
    # This installation's scripts first: `testbed`, `python` and friends resolve as here.
    env["PATH"] = f"{Path(sys.executable).parent}:{environ.get('PATH', '')}:{GUEST_PATH}"
    return sorted(env.items())


def guest_argv(argv: Sequence[str], path: str) -> list[str]:
    """The command with its program as an absolute path, found in ``path`` like a shell would
    (``testbed`` is this installation's, whatever ``path`` says)."""
    argv = list(argv)
    if not argv:
        raise VmError("nothing to run: testbed vm [OPTIONS] -- COMMAND [ARGS...]")
    if "/" in argv[0]:
        return argv
    mine = Path(sys.executable).with_name(argv[0])
    found = (
        str(mine) if argv[0] == "testbed" and mine.exists() else shutil.which(argv[0], path=path)
    )
    if not found:
        hint = f"; for the testbed's own verb: -- testbed {argv[0]}" if argv[0] in VERBS else ""
        err = VmError(f"{argv[0]}: command not found in the guest's PATH{hint}")
        err.exit_code = 127
        raise err
    return [found, *argv[1:]]
