"""One machine's part of a spanned testbed, as a Ray actor (:class:`MachineAgent`). It builds its
part of the plan (``NetworkPlan.part``): its clusters, the wires of the links whose first cluster
it holds, its ends of the VXLAN cables (testbed.net.cables) over each machine's underlay address;
then runs what the driver asks in its hosts: commands, servers, and processes whose files live in
a directory of the driver (ranks), copied here, their output sent back as it grows.

A node's ``testbed-netns`` label makes a network namespace stand for the machine (its cables are
made there): how the tests run two "machines" on one kernel.

Ray pickles the class by its module path: a worker imports it from here, in the same install.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from testbed.config.scenario import Scenario, Trace
from testbed.core.errors import NetError
from testbed.core.nsenter import NETNS_DIR
from testbed.live.host_processes import listening
from testbed.live.network import Network
from testbed.live.ray_common import NODE_DIR, node_identity
from testbed.live.spanned.announce import Relay
from testbed.live.spanned.changes import Action, MachineChanges
from testbed.live.spanned.lines import LineReader
from testbed.live.spanned.traces import MachineTraces
from testbed.net import frr, procs
from testbed.net.cables import Underlay
from testbed.net.registry import Record
from testbed.plan.model import Impairment
from testbed.plan.topology import build_plan
from testbed.trace.routing import RoutingEvents

UNDERLAY_PINGS = 10


class MachineAgent:
    """One machine's part of a spanned testbed, as a Ray actor: a :class:`Network` of the part
    (its namespaces, cables, link emulation and processes) and the helpers it runs there."""

    def __init__(self, machine: str, netns: str | None = None) -> None:
        self.machine = machine
        self.netns = netns
        self.tb: Network | None = None
        self.servers: dict[int, subprocess.Popen] = {}
        self.procs: dict[int, tuple[subprocess.Popen, str]] = {}  # pid -> (it, driver's dir)
        self.dirs: dict[str, Path] = {}  # the driver's directory -> this machine's copy
        # ... -> file -> bytes the driver has (a file it shipped: its length here)
        self.synced: dict[str, dict[str, int]] = {}
        self.readers: dict[int, LineReader] = {}  # pid -> the reader of its stdout's lines
        self.hosts: dict[int, str] = {}  # pid -> the host it runs in
        self.groups: set[int] = set()  # the pids that lead a process group
        self.changes: MachineChanges | None = None  # the WAN's changes and faults, once asked
        self.relay: Relay | None = None  # rank 0's announcements, when it runs here
        self.traces: MachineTraces | None = None
        self.routing: RoutingEvents | None = None

    def identity(self) -> dict[str, Any]:
        return {**node_identity(), "machine": self.machine}

    def up(
        self,
        scenario: Scenario,
        name: str,
        source: str,
        addresses: dict[str, str],
        reserve: tuple[str, int] | None,
        calibrating: bool,
    ) -> tuple[Record, str, str]:
        """Build this machine's part; its registry record and link backend (name, why)."""
        underlay = Underlay(self.machine, dict(addresses), self.netns)
        self.tb = Network(
            scenario, name=name, source=source, underlay=underlay, reserve=reserve,
            compensate_rtt=calibrating,
        )  # fmt: skip
        self.tb.up()
        assert self.tb.record is not None and self.tb.backend is not None
        return self.tb.record, self.tb.backend.name, self.tb.backend.reason

    def underlay_rtt(self, peer: str) -> list[float]:
        from testbed.net.cables import rtt

        assert self.tb is not None and self.tb.underlay is not None
        return rtt(self.tb.underlay, peer, UNDERLAY_PINGS)

    def set_impairments(self, changes: dict[str, Impairment]) -> None:
        assert self.tb is not None and self.tb.backend is not None
        self.tb.backend.set_impairments(changes)

    # -- one clock; the WAN's changes and faults (testbed.live.spanned.clocks, .changes) ---
    def now(self) -> float:
        """This machine's unix time (the driver's clock exchange)."""
        return time.time()

    def apply_wan(self, actions: list[Action], due_unix: float | None) -> tuple[str, float, float]:
        """Rates, impairments and faults at ``due_unix`` (this machine's clock): see
        :meth:`MachineChanges.apply`."""
        return self._changes().apply(actions, due_unix)

    def wan_fault_drops(self) -> list[dict]:
        return self.changes.fault_drops() if self.changes is not None else []

    def relay_start(self) -> str:
        """A socket here for rank 0's announcements (testbed.live.spanned.announce): its path."""
        if self.relay is None:
            self.relay = Relay()
        return self.relay.path

    def relay_take(self) -> list[tuple[float, bytes]]:
        return self.relay.take() if self.relay is not None else []

    def _changes(self) -> MachineChanges:
        if self.changes is None:
            tb = self.tb
            assert tb is not None and tb.plan is not None and tb.backend is not None
            assert tb.scenario is not None and tb.record is not None
            whole = build_plan(tb.scenario, tb.record.prefix, tb.record.slot)
            here = frozenset(n.name for n in tb.plan.namespaces)
            self.changes = MachineChanges(whole, here, tb.backend)
        return self.changes

    def run(self, host: str, argv: list[str], timeout: float | None) -> tuple[int, str, str]:
        assert self.tb is not None
        r = self.tb.run(host, argv, timeout=timeout)
        return r.returncode, r.stdout, r.stderr

    def serve(self, host: str, module: str, args: list[str]) -> int:
        """Start ``python -m module args`` in ``host`` and wait for its READY; a handle."""
        assert self.tb is not None
        proc = self.tb.python(
            host, module, *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        got = procs.wait_ready(proc)
        if not got:
            procs.stop(proc)
            raise NetError(f"{module} server on {host} did not start ({got.reason}): {got.output}")
        self.servers[proc.pid] = proc
        return proc.pid

    def communicate(self, handle: int, timeout: float) -> tuple[str, str]:
        return self.servers[handle].communicate(timeout=timeout)

    def stop(self, handle: int) -> None:
        proc = self.servers.pop(handle, None)
        if proc is not None:
            procs.stop(proc)

    # -- processes whose files live in a directory of the driver (ranks) ----------------------
    def start(
        self,
        host: str,
        argv: list[str],
        what: str,
        env: dict[str, str],
        dropped: list[str],
        remote_dir: str,
        files: dict[str, bytes],
        log: str,
        lines: bool = False,
        group: bool = False,
    ) -> int:
        """Start ``argv`` in ``host`` with its output to ``log`` in this machine's copy of the
        driver's directory ``remote_dir`` (whose path in ``argv``, in ``env``'s values and in
        ``files``, written there first, is replaced by the copy's); ``env`` over this agent's
        environment, less ``dropped``. ``lines``: its stdout is read line by line (into the
        log, and kept for ``poll``: testbed.live.spanned.lines). ``group``: it leads a process
        group of its own (a new session). A handle (the pid)."""
        assert self.tb is not None and self.tb.record is not None
        local = self.workdir(remote_dir)
        for name, data in files.items():
            here_data = data.replace(remote_dir.encode(), str(local).encode())
            (local / name).write_bytes(here_data)
            # the driver's own: only what a process appends to it later goes back
            self.synced[remote_dir][name] = len(here_data)
        here = str(local)
        full = {k: v for k, v in os.environ.items() if k not in dropped}
        full |= {k: v.replace(remote_dir, here) for k, v in env.items()}
        argv = [a.replace(remote_dir, here) for a in argv]
        # truncated, then appended to by the process and by the reader of its stdout (two
        # descriptors without O_APPEND would each write at its own offset, over the other's)
        (local / log).write_bytes(b"")
        with open(local / log, "ab") as out:
            proc = self.tb.popen(
                host, argv, what=what, env=full, start_new_session=group,
                stdout=subprocess.PIPE if lines else out,
                stderr=out if lines else subprocess.STDOUT,
            )  # fmt: skip
        self.procs[proc.pid] = (proc, remote_dir)
        self.hosts[proc.pid] = host
        if group:
            self.groups.add(proc.pid)
        if lines:
            assert proc.stdout is not None
            self.readers[proc.pid] = LineReader(proc.stdout, local / log)
        return proc.pid

    def workdir(self, remote_dir: str) -> Path:
        assert self.tb is not None and self.tb.record is not None
        if remote_dir not in self.dirs:
            NODE_DIR.mkdir(parents=True, exist_ok=True)
            self.dirs[remote_dir] = Path(
                tempfile.mkdtemp(prefix=f"{self.tb.record.prefix}-", dir=NODE_DIR)
            )
            self.synced[remote_dir] = {}
        return self.dirs[remote_dir]

    def poll(
        self, handle: int
    ) -> tuple[int | None, dict[str, tuple[int, bytes]], list[tuple[float, bytes]], bool]:
        """The process's exit code (None: running), what its directory's files gained since
        the last call (name -> (offset, bytes), for the driver's copy), and with ``lines`` the
        stdout lines read since then and whether its stdout has ended (True without)."""
        proc, remote_dir = self.procs[handle]
        code = proc.poll()  # first: what a process wrote before it exited is then complete
        reader = self.readers.get(handle)
        lines, ended = reader.take() if reader is not None else ([], True)
        return code, self._gained(remote_dir), lines, ended

    def _gained(self, remote_dir: str) -> dict[str, tuple[int, bytes]]:
        out = {}
        sent = self.synced[remote_dir]
        root = self.dirs[remote_dir]
        for path in sorted(root.rglob("*")):  # a process's output directory (DCQCN's) too
            name = path.relative_to(root).as_posix()
            done = sent.get(name, 0)
            if not path.is_file():
                continue
            with open(path, "rb") as f:
                f.seek(done)
                data = f.read()
            if data:
                out[name] = (done, data)
                sent[name] = done + len(data)
        return out

    def signal(self, handle: int, signum: int) -> None:
        proc, _ = self.procs[handle]
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signum)

    def signal_group(self, handle: int, signum: int) -> None:
        """``signum`` to the process group the process leads (nothing when it is gone)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(handle, signum)

    def listening(self, handle: int, port: int) -> bool:
        """Whether a TCP socket listens on ``port`` in the process's host's namespace."""
        assert self.tb is not None and self.tb.plan is not None
        inode = None
        with contextlib.suppress(OSError):
            inode = os.stat(NETNS_DIR / self.tb.plan.host(self.hosts[handle]).ns).st_ino
        return listening(handle, port, inode)

    def wait(self, handle: int, timeout: float | None) -> int | None:
        proc, _ = self.procs[handle]
        with contextlib.suppress(subprocess.TimeoutExpired):
            return proc.wait(timeout)
        return None

    def free_port(self, host: str) -> int:
        assert self.tb is not None
        return self.tb.free_port(host)

    def sysctls(self, host: str, keys: list[str]) -> dict[str, str]:
        assert self.tb is not None
        return self.tb.sysctls(host, keys)

    def link_stats(self) -> list[dict]:
        """The link backend's counters (also after ``down``: what it counted)."""
        return self.tb.link_stats() if self.tb is not None else []

    def problems(self) -> list[str]:
        return self.tb.problems() if self.tb is not None else []

    # -- FRR and routing events of this part (testbed.live.spanned.routing) -------------------
    def frr_not_converged(self) -> list[str]:
        assert self.tb is not None and self.tb.plan is not None and self.tb.record is not None
        assert self.tb.plan.bgp is not None
        return frr.not_converged(self.tb.plan.bgp, self.tb.record)

    def frr_not_converged_reason(self) -> str:
        assert self.tb is not None and self.tb.plan is not None and self.tb.record is not None
        assert self.tb.plan.bgp is not None
        return frr.not_converged_reason(self.tb.plan.bgp, self.tb.record)

    def routing_start(self) -> None:
        """Route monitors in this part's gateways (their output in a directory of the part)."""
        assert self.tb is not None and self.tb.plan is not None and self.tb.record is not None
        NODE_DIR.mkdir(parents=True, exist_ok=True)
        where = Path(tempfile.mkdtemp(prefix=f"{self.tb.record.prefix}-", dir=NODE_DIR))
        self.dirs[str(where)] = where  # removed at down
        self.routing = RoutingEvents(self.tb.plan, self.tb.record, where)
        self.routing.__enter__()

    def routing_stop(self) -> tuple[list[dict[str, Any]], dict[str, bytes]]:
        """The routing events of this part since ``routing_start`` and its monitors' output."""
        assert self.routing is not None
        routing, self.routing = self.routing, None
        routing.__exit__(None, None, None)
        files = {p.name: p.read_bytes() for p in sorted(routing.dir.iterdir()) if p.is_file()}
        return routing.rows, files

    # -- the run's traces of this part (testbed.live.spanned.traces) -------------------------
    def trace_start(self, trace: Trace, hosts: list[str]) -> None:
        """Sample what this part holds (``hosts``: the run's hosts placed here)."""
        assert self.tb is not None
        self.traces = MachineTraces(self.tb, trace, hosts)
        self.traces.start()

    def trace_stop(self) -> tuple[dict[str, bytes], list[dict], dict[str, Any], list[str]]:
        """Stop sampling: the captures, their statistics, what is in effect, the problems
        (nothing when sampling never started here: another machine's start failed first)."""
        if self.traces is None:
            return {}, [], {}, []
        return self.traces.stop()

    def traced(self) -> dict[str, list[dict]]:
        """This part's trace tables (complete after ``down``)."""
        return self.traces.tables if self.traces is not None else {}

    def down(self) -> None:
        if self.relay is not None:
            self.relay.close()
        for handle in list(self.servers):
            self.stop(handle)
        for pid in self.groups:  # what a group's leader started goes with it
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        for proc, _ in self.procs.values():
            procs.stop(proc)
        for d in self.dirs.values():
            shutil.rmtree(d, ignore_errors=True)
        if self.tb is not None:
            self.tb.down()
        if self.traces is not None:
            self.traces.finish()
