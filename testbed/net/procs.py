"""The readiness handshake of helper processes: start, read until the ready line, stop.

A helper the testbed starts (a self-check server, tcpdump, a delay line) is useful once it prints
its ready line (``READY``, tcpdump's ``listening on ...``). :func:`wait_ready` reads the raw file
descriptor *byte by byte* (``select``) up to the end of that line and no further, so whatever the
process writes after it stays in the pipe for the caller; it returns at the line, at EOF, when the
process exited or at the timeout, and never raises or kills. :func:`ready` is the context manager
over it: a process that did not get ready raises :class:`~testbed.core.errors.NetError` with its
reason and output, and the process is killed and reaped on the way out.

The stream must not have been read through its buffered file object before (its buffer would hold
bytes this module cannot see); after :func:`wait_ready` either way of reading is fine. The timeout
is kept on an injectable :class:`~testbed.core.clock.Clock` (the machine's by default).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any, Protocol

from testbed.core.clock import SYSTEM, Clock
from testbed.core.errors import NetError

READY = "READY"
READY_TIMEOUT = 15.0  # seconds; a Python helper in a namespace starts in well under one
POLL = 0.1  # seconds between two checks whether the process still lives, while it is silent


@dataclass
class Readiness:
    """The outcome of :func:`wait_ready`; true when the process got ready."""

    ok: bool
    output: str  # what was read: the lines before the ready line, and the ready line itself
    returncode: int | None = None  # set when the process had exited
    timed_out: bool = False

    def __bool__(self) -> bool:
        return self.ok

    @property
    def reason(self) -> str:
        if self.ok:
            return "ready"
        if self.timed_out:
            return "no ready line within the timeout"
        if self.returncode is not None:
            return f"exited with code {self.returncode}"
        return "closed its output"


def wait_ready(
    proc: subprocess.Popen,
    token: str = READY,
    timeout: float = READY_TIMEOUT,
    *,
    stream: IO[Any] | None = None,
    substring: bool = False,
    clock: Clock = SYSTEM,
) -> Readiness:
    """Read ``stream`` (``proc.stdout`` by default) until a line equal to ``token`` (stripped;
    with ``substring``: containing it), EOF, the process's exit, or ``timeout`` seconds (on
    ``clock``)."""
    pipe = stream if stream is not None else proc.stdout
    if pipe is None:
        raise ValueError("wait_ready needs the process's output as a pipe (stdout=PIPE)")
    fd = pipe.fileno()
    deadline = clock.now() + timeout
    read = bytearray()
    line = bytearray()

    def outcome(ok: bool, timed_out: bool = False) -> Readiness:
        text = bytes(read).decode(errors="replace")
        return Readiness(ok, text, proc.poll(), timed_out)

    while True:
        left = deadline - clock.now()
        if left <= 0:
            return outcome(False, timed_out=True)
        if not clock.readable(fd, min(left, POLL)):
            if proc.poll() is not None:  # exited, but a child may still hold the pipe open
                return outcome(False)
            continue
        byte = os.read(fd, 1)  # one byte: never consume what follows the ready line
        if not byte:  # EOF: the process closed its output (usually: it exited)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=POLL)
            return outcome(False)
        read += byte
        if byte != b"\n":
            line += byte
            continue
        text = bytes(line).decode(errors="replace")
        line.clear()
        if (token in text) if substring else (text.strip() == token):
            return outcome(True)


@contextlib.contextmanager
def ready(
    proc: subprocess.Popen,
    what: str,
    token: str = READY,
    timeout: float = READY_TIMEOUT,
    *,
    stream: IO[Any] | None = None,
    substring: bool = False,
    clock: Clock = SYSTEM,
) -> Iterator[subprocess.Popen]:
    """``proc`` once it is ready; on the way out (also after an error) killed and reaped.

    Raises NetError("<what> did not start (<reason>): <output>") when it did not get ready; the
    output is what it wrote on the watched stream and, if its stderr is another pipe, there."""
    try:
        got = wait_ready(proc, token, timeout, stream=stream, substring=substring, clock=clock)
        if not got:
            stop(proc)
            said = got.output.strip()
            if proc.stderr is not None and proc.stderr is not (stream or proc.stdout):
                with contextlib.suppress(OSError, ValueError):
                    err = proc.stderr.read()
                    said += "\n" + (err.decode(errors="replace") if isinstance(err, bytes) else err)
            raise NetError(f"{what} did not start ({got.reason}): {said.strip() or 'no output'}")
        yield proc
    finally:
        stop(proc)


class Stoppable(Protocol):
    """What :func:`stop` uses of a process: a Popen, or what stands for one on another machine
    (testbed.live.protocol.HostProcess)."""

    def poll(self) -> int | None: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...

    def wait(self, timeout: float | None = None) -> int: ...


def stop(proc: Stoppable, grace: float = 0.0) -> int:
    """Kill ``proc`` if it still runs (Popen knows whether it reaped the pid: never a stranger)
    and reap it; its exit code. With ``grace`` it is first asked to end (SIGTERM) and killed
    only if it has not ended that many seconds later (a helper that writes its records then)."""
    if grace > 0 and proc.poll() is None:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace)
    if proc.poll() is None:
        proc.kill()
    return proc.wait()
