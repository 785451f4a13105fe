"""The rank pre-fork server ("zygote"): one process that imports torch, torch._dynamo and the rank
modules once, then forks a child per rank that enters the rank's host and runs its module as
``__main__``, in place of one ``ip netns exec NS python -m MODULE ...`` per rank that each pay
the imports (about 2 s of CPU for torch and 1.5-2 s more for torch._dynamo, which the first
optimizer or DDP call imports; four ranks at once on two cores).

    python -m traffic.zygote        # started by the launcher (Zygote.start), in no namespace

The protocol, one JSON object a line: requests on stdin, replies on stdout.

- ``READY``: the first line, once the imports are done (``{"ready": true}``) or failed
  (``{"error": TEXT}``, then it exits 1).
- ``{"op": "start", "id": N, "ns": NAME, "module": M, "args": [...], "env": {...}, "log": PATH}``
  -> ``{"id": N, "pid": PID}`` or ``{"id": N, "error": TEXT}``. The child enters namespace NAME
  as ``ip netns exec`` does (iproute2 ip/ipnetns.c: ``setns`` of ``/run/netns/NAME``, a mount
  namespace of its own with ``/`` a slave, ``/sys`` remounted for the new network namespace, every
  file of ``/etc/netns/NAME`` bound over its ``/etc`` namesake), takes ``env`` as its whole
  environment, writes stdout and stderr to ``PATH`` (truncated), and runs ``python -m M args``.
- ``{"op": "signal", "pid": PID, "sig": S}``: ``S`` to a child not yet reaped (never a stranger
  that reused the pid); no reply.
- ``{"pid": PID, "code": C}``: sent when a child was reaped; ``C`` as Popen's returncode
  (``-signal`` for a signal).
- stdin's end: the server exits once it reaped its children (the launcher stops them by pid).

Fork safety: a fork copies only the forking thread, so the server forks only while it has no
other thread. It starts none itself (one loop on ``selectors``, SIGCHLD through a wakeup pipe),
and the imports start none with ``OMP_NUM_THREADS=1`` (the rank environment: without it, importing
torch starts one OpenMP thread; torch's intra-op pool starts lazily, at the first parallel
operator, which the server never runs). The server checks ``/proc/self/task`` before every fork
and answers a start with an error rather than fork beside a thread.

:class:`Zygote` is the launcher's side (one machine, root): it starts the server and offers each
child as a :class:`ZygoteProcess`, which has the shape of a Popen that the rank launcher uses
(``pid``, ``returncode``, ``poll``, ``wait``, ``send_signal``, ``terminate``, ``kill``).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import IO, Any

from testbed.core.errors import TestbedError
from testbed.core.nsenter import enter_host
from testbed.core.procstat import start_time

PRELOAD = ("torch", "torch._dynamo", "torch.distributed", "traffic.train_rank", "traffic.rank")
IMPORT_NICENESS = 19  # the server's priority while it imports (the lowest)


def _child(req: dict[str, Any], log: int, keep: int) -> int:
    """In the forked child: become the rank process (stdout and stderr to the open ``log``)
    and run its module; its exit code."""
    signal.set_wakeup_fd(-1)
    for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGPIPE, signal.SIGUSR1):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.closerange(3, max(keep, log) + 1)  # the server's pipes and selector, the log's first fd
    enter_host(req["ns"])
    os.environ.clear()
    os.environ.update(req["env"])
    os.chdir(req.get("cwd") or os.getcwd())
    import runpy

    sys.argv = [req["module"], *req["args"]]
    try:
        runpy.run_module(req["module"], run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        traceback.print_exc()
        return 128 + signal.SIGINT
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


# -- the server ----------------------------------------------------------------------------------
def threads() -> int:
    """Threads of this process (the kernel's count: native ones included)."""
    return len(os.listdir("/proc/self/task"))


class _Server:
    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.children: set[int] = set()

    def say(self, doc: dict[str, Any]) -> None:
        self.out.write(json.dumps(doc) + "\n")
        self.out.flush()

    def start(self, req: dict[str, Any], keep: int) -> None:
        if threads() != 1:
            self.say({"id": req.get("id"), "error": f"{threads()} threads: no fork beside one"})
            return
        try:  # opened here: the log exists once the launcher has the pid, as with Popen
            log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        except OSError as e:
            self.say({"id": req.get("id"), "error": f"{req['log']}: {e.strerror}"})
            return
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _child(req, log, keep)
            except BaseException:
                with contextlib.suppress(Exception):
                    traceback.print_exc()
            finally:
                with contextlib.suppress(Exception):
                    sys.stdout.flush()
                with contextlib.suppress(Exception):
                    sys.stderr.flush()
                os._exit(code)
        os.close(log)
        self.children.add(pid)
        self.say({"id": req.get("id"), "pid": pid})

    def signal(self, req: dict[str, Any]) -> None:
        pid = int(req["pid"])
        if pid in self.children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, int(req["sig"]))

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.children.discard(pid)
            self.say({"pid": pid, "code": os.waitstatus_to_exitcode(status)})


def serve() -> int:
    """The server's loop (see the module doc)."""
    out = sys.stdout
    server = _Server(out)
    # Ctrl-C and SIGTERM are for the ranks and the launcher: the server ends with its stdin
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # The imports run beside the network's bring-up and self-check (whose delay lines and
    # probes need the CPU at once): at the lowest priority, which the ranks do not inherit.
    base = os.getpriority(os.PRIO_PROCESS, 0)
    os.setpriority(os.PRIO_PROCESS, 0, IMPORT_NICENESS)
    try:
        import importlib

        for name in PRELOAD:
            importlib.import_module(name)
    except BaseException as e:
        server.say({"error": f"importing {name}: {e!r}"})
        return 1
    try:
        os.setpriority(os.PRIO_PROCESS, 0, base)  # back up: root only, as the testbed runs
    except PermissionError:
        server.say({"error": "cannot restore the priority after the imports (not root)"})
        return 1
    if threads() != 1:
        server.say({"error": f"{threads()} threads after the imports (OMP_NUM_THREADS unset?)"})
        return 1
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    stdin = sys.stdin.buffer.raw  # type: ignore[attr-defined]
    sel = selectors.DefaultSelector()
    sel.register(stdin, selectors.EVENT_READ, "in")
    sel.register(wake_r, selectors.EVENT_READ, "wake")
    keep = max(wake_r, wake_w, sel.fileno(), stdin.fileno(), out.fileno())
    server.say({"ready": True, "pid": os.getpid()})
    pending = b""
    open_in = True
    while open_in or server.children:
        for key, _ in sel.select(timeout=1.0):
            if key.data == "wake":
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 512)
            elif open_in:
                chunk = os.read(stdin.fileno(), 65536)
                if not chunk:
                    open_in = False
                    sel.unregister(stdin)
                    continue
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    if line.strip():
                        req = json.loads(line)
                        if req.get("op") == "start":
                            server.start(req, keep)
                        elif req.get("op") == "signal":
                            server.signal(req)
        server.reap()
    return 0  # stdin ended and every child was reaped


# -- the launcher's side -------------------------------------------------------------------------
class ZygoteError(TestbedError):
    """The server could not start, or could not start a child."""


class ZygoteProcess:
    """A child of the server, as the launcher sees it (a Popen's shape: see the module doc)."""

    def __init__(self, zygote: Zygote, pid: int) -> None:
        self.zygote = zygote
        self.pid = pid
        self.args = [f"zygote child {pid}"]
        self.start_time = start_time(pid)  # tells the child from a later owner of its pid

    @property
    def returncode(self) -> int | None:
        return self.zygote.codes.get(self.pid)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        with self.zygote.cond:
            while self.pid not in self.zygote.codes:
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
                if self.zygote.gone:  # the server died: its children were reparented
                    self._orphan_wait(left)
                    continue
                self.zygote.cond.wait(left if left is not None else 0.5)
        return self.zygote.codes[self.pid]

    def _orphan_wait(self, left: float | None) -> None:
        """The server is gone (killed): the child's end can only be seen by its pid's absence
        (its exit code is lost: -SIGKILL stands for it)."""
        if not self._orphan_alive():
            self.zygote.codes.setdefault(self.pid, -signal.SIGKILL)
            return
        self.zygote.cond.wait(min(0.05, left) if left is not None else 0.05)

    def _orphan_alive(self) -> bool:
        return self.start_time is not None and start_time(self.pid) == self.start_time

    def send_signal(self, signum: int, /) -> None:
        if self.returncode is not None:
            return
        sent = not self.zygote.gone and self.zygote.request(
            {"op": "signal", "pid": self.pid, "sig": int(signum)}
        )
        if not sent and self._orphan_alive():  # nobody reaps it here: its start time guards the pid
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """The server, started with ``env`` (the rank environment: ``OMP_NUM_THREADS=1``), its
    stderr into ``log``. ``start`` returns a :class:`ZygoteProcess` per child; a reader thread
    keeps ``codes`` (pid -> exit code). ``close`` ends its stdin (the server then exits once
    it reaped what it started, or at once if nothing runs)."""

    def __init__(self, env: dict[str, str], log: Path | None = None) -> None:
        self.codes: dict[int, int] = {}
        self.cond = threading.Condition()
        self.replies: dict[int, dict[str, Any]] = {}
        self.gone = False
        self._next = 0
        self._write = threading.Lock()
        stderr = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "traffic.zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
        )
        if log is not None:
            stderr.close()  # type: ignore[union-attr]
        self.ready: dict[str, Any] | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in iter(self.proc.stdout.readline, b""):
            with contextlib.suppress(ValueError):
                doc = json.loads(line)
                with self.cond:
                    if "code" in doc:
                        self.codes[int(doc["pid"])] = int(doc["code"])
                    elif "id" in doc:
                        self.replies[int(doc["id"])] = doc
                    elif self.ready is None:
                        self.ready = doc
                    self.cond.notify_all()
        with self.cond:
            self.gone = True
            self.cond.notify_all()

    def wait_ready(self, timeout: float) -> None:
        """Until the imports are done; ZygoteError if they failed or took longer. The ranks
        wait on them now: the server's imports leave their lowest priority (the launcher's own)."""
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, self.proc.pid, os.getpriority(os.PRIO_PROCESS, 0))
        end = time.monotonic() + timeout
        with self.cond:
            while self.ready is None and not self.gone:
                left = end - time.monotonic()
                if left <= 0:
                    raise ZygoteError(f"the rank server was not ready within {timeout} s")
                self.cond.wait(left)
        if self.ready is None or not self.ready.get("ready"):
            raise ZygoteError(f"the rank server failed: {(self.ready or {}).get('error', 'gone')}")

    def request(self, doc: dict[str, Any]) -> bool:
        """Send ``doc``; whether it went (not to a server that is gone)."""
        assert self.proc.stdin is not None
        with self._write:
            try:
                self.proc.stdin.write((json.dumps(doc) + "\n").encode())
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError):
                return False
        return True

    def start(
        self,
        ns: str,
        module: str,
        args: list[str],
        env: dict[str, str],
        log: Path,
        timeout: float = 10.0,
    ) -> ZygoteProcess:
        """``python -m module args`` in namespace ``ns``, stdout and stderr into ``log``."""
        self.wait_ready(timeout=120.0)
        with self.cond:
            self._next += 1
            ident = self._next
        self.request(
            {
                "op": "start",
                "id": ident,
                "ns": ns,
                "module": module,
                "args": args,
                "env": env,
                "log": str(log),
                "cwd": os.getcwd(),
            }
        )
        end = time.monotonic() + timeout
        with self.cond:
            while ident not in self.replies:
                left = end - time.monotonic()
                if self.gone or left <= 0:
                    raise ZygoteError(f"the rank server did not start {module} in {ns}")
                self.cond.wait(left)
            reply = self.replies.pop(ident)
        if "pid" not in reply:
            raise ZygoteError(f"the rank server did not start {module} in {ns}: {reply['error']}")
        return ZygoteProcess(self, int(reply["pid"]))

    def close(self, timeout: float = 5.0) -> None:
        """End the server (its children, if any still run, are the launcher's to stop)."""
        with contextlib.suppress(OSError, ValueError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=timeout)


if __name__ == "__main__":
    sys.exit(serve())
