"""The userspace backend: the delay line (one process per wire namespace) behind HTB, started,
watched and stopped like a real component.

All lines come from one Python start-up (:mod:`testbed.link.delayline.launch`); they outlive the
launcher and are watched and stopped by pid (with its start time, never a stranger). Order
matters: a line binds its queues before any iptables rule sends packets to it, and at shutdown the
rules go before the process; there is no ``--queue-bypass``, so a dead line drops its directions'
packets and ``problems()`` reports the link failed (docs/delayline.md).

A direction with an ``aqm`` or a trace has no kernel shaper on this backend: its line *is* the
bottleneck (rate, drop-tail buffer, marking profile), so it knows the queue it marks on and can
hold it through a trace's zero-rate bins. CE marks are set by the verdict's skb mark plus one
mangle rule (``TOS --set-tos 0x03/0x03``) on the wire's egress.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from testbed.core.aqm import marking_point
from testbed.core.errors import NetError, UnsupportedError
from testbed.core.files import atomic_write_text
from testbed.link.base import LinkBackend
from testbed.link.delayline import (
    DEFAULT_CE_MARK,
    deletions_of,
    iptables_rules,
    read_stats,
    restore_command,
    restore_input,
)
from testbed.net import procs, registry
from testbed.net.registry import Record
from testbed.plan.model import Impairment, NetworkPlan, WanDirection
from testbed.plan.sizing import MIN_BUFFER

STATS_INTERVAL = 0.5
STOP_TIMEOUT = 5.0  # seconds a line gets to flush and exit after SIGTERM before SIGKILL
RELOAD_TIMEOUT = 5.0  # s for a line to acknowledge a SIGHUP (its stats' ``reloads`` count)


@dataclass
class LineProcess:
    """One delay-line process serving the directions of one wire namespace."""

    ns: str
    directions: list[WanDirection]
    config_path: Path
    stats_path: Path
    pid: int | None = None  # set once the line said READY
    start: int | None = None  # its start time (registry.process_start): a reused pid is not it
    rules: list[list[str]] = field(default_factory=list)
    rules_installed: bool = False
    exit_code: int | None = None  # known only when it failed before READY
    stderr_tail: str = ""

    def alive(self) -> bool:
        return self.pid is not None and registry.process_alive(self.pid, self.start)

    @property
    def log_path(self) -> Path:
        return self.config_path.with_suffix(".log")

    @property
    def rules_path(self) -> Path:
        return self.config_path.with_suffix(".rules")

    @property
    def trace_path(self) -> Path:
        return self.config_path.with_suffix(".queues.jsonl")


def queue_number(index: int) -> int:
    """Queues are per namespace; the first direction of a wire is queue 1, the second queue 2."""
    return index + 1


def _ns_exec(ns: str, argv: list[str]) -> list[str]:
    return ["ip", "netns", "exec", ns, *argv]


def _restore_all(per_ns: dict[str, list[list[str]]]) -> list[tuple[str, str]]:
    """Apply each namespace's rules with one ``iptables-restore``, all namespaces side by side
    (``-w`` queues them on the xtables lock, but their start-up overlaps); the namespaces that
    failed, with the tool's stderr."""
    running = []
    for ns, rules in per_ns.items():
        if not rules:
            continue
        proc = subprocess.Popen(
            _ns_exec(ns, restore_command()),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        running.append((ns, proc, restore_input(rules)))
    failed = []
    for ns, proc, text in running:
        _, stderr = proc.communicate(text)  # a few lines: fits the pipe, never blocks the others
        if proc.returncode != 0:
            failed.append((ns, stderr.strip()))
    return failed


def line_holds_queue(d: WanDirection) -> bool:
    """On this backend every direction with an ``aqm`` has its bottleneck queue in the line
    (docs/congestion.md): the line must know the queue it marks on. So does a direction that
    replays a trace: a zero-rate bin holds its queue (Mahimahi's semantics), which HTB cannot
    (a rate of 0 is refused, a tiny one leaves a token debt of seconds per packet)."""
    return d.aqm is not None or d.traced


def _line_aqm(aqm: Any) -> dict[str, Any]:
    """A direction's marking profile as the line's config takes it (``at`` resolved)."""
    return aqm.model_dump() | {"at": marking_point(aqm.at, "userspace")}


class UserspaceBackend(LinkBackend):
    """Delay, jitter, loss and reorder by the delay line; rates by HTB, except where the line
    holds the queue."""

    name: ClassVar[str] = "userspace"

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason)
        self.supervisor: DelayLineSupervisor | None = None
        self._stats: list[dict] = []
        self._queue_trace: list[dict] = []

    def check(self, plan: NetworkPlan) -> None:
        if any(p.delay for p in plan.fabric):
            raise UnsupportedError(
                "clusters.*.fabric.delay needs netem (backend: kernel); the userspace delay "
                "line emulates WAN links only (unsupported on this kernel: netem). Remove "
                "the fabric delay or run in the Vagrant VM"
            )
        for d in plan.wan:
            if d.aqm is not None and d.reorder:
                raise UnsupportedError(
                    f"{d.name}: reorder with an aqm profile is unsupported on this kernel's "
                    "userspace delay line (it emulates the bottleneck queue in order); use the "
                    "kernel backend (testbed vm) or drop one of them"
                )

    def owns_queue(self, d: WanDirection) -> bool:
        return line_holds_queue(d)

    def prepare(
        self, plan: NetworkPlan, record: Record, trace_interval: float | None
    ) -> Callable[[], None]:
        # The launcher's interpreter starts during the build; the lines only need their
        # namespaces: they bind their queues and apply their rules while the build goes on.
        self.supervisor = DelayLineSupervisor(plan, record, trace_interval)
        self.supervisor.launch()
        return self.supervisor.go

    def start(self, plan: NetworkPlan, record: Record, trace_interval: float | None) -> None:
        super().start(plan, record, trace_interval)
        if self.supervisor is None:
            self.supervisor = DelayLineSupervisor(plan, record, trace_interval)
        self.supervisor.start()

    def set_impairments(self, changes: dict[str, Impairment]) -> None:
        assert self.supervisor is not None, "the delay lines are not running"
        self.supervisor.set_impairments(changes)

    def set_rate(self, changes: dict[str, tuple[int, int]]) -> None:
        """HTB in place where the kernel holds the queue (the base class), the line's reload
        where the line is the bottleneck (its emulated queue keeps what it holds)."""
        owned = {n: c for n, c in changes.items() if line_holds_queue(self._direction(n))}
        kernel = {n: c for n, c in changes.items() if n not in owned}
        if kernel:
            super().set_rate(kernel)
        if owned:
            assert self.supervisor is not None, "the delay lines are not running"
            self.supervisor.set_rates(owned)

    def stop(self) -> None:
        # The lines' files go with the testbed's state directory: keep what they said.
        if self.supervisor is not None:
            self.supervisor.stop()
            self._stats = self.supervisor.stats()
            self._queue_trace = self.supervisor.queue_trace()
            self.supervisor = None

    def problems(self) -> list[str]:
        return self.supervisor.problems() if self.supervisor is not None else []

    def link_stats(self) -> list[dict]:
        return self.supervisor.stats() if self.supervisor is not None else list(self._stats)

    def queue_trace(self) -> list[dict]:
        if self.supervisor is not None:
            return self.supervisor.queue_trace()
        return list(self._queue_trace)


class DelayLineSupervisor:
    def __init__(
        self, plan: NetworkPlan, record: Record, trace_interval: float | None = None
    ) -> None:
        self.plan = plan
        self.trace_interval = trace_interval
        self.record = record
        self.dir = record.state_dir
        # What each direction's line emulates now: the plan's, until set_impairments (and, where
        # the line is the bottleneck, set_rates).
        self.impairments: dict[str, Impairment] = {d.name: d.impairment for d in plan.wan}
        self.rates: dict[str, tuple[int, int]] = {d.name: (d.rate, d.buffer) for d in plan.wan}
        self.held: set[str] = set()  # directions whose line serves nothing now (set_rates)
        self.lines: list[LineProcess] = []
        self.launcher: subprocess.Popen | None = None  # until it has reported every line
        by_wire: dict[str, list[WanDirection]] = {}
        for d in plan.wan:
            # A direction that a schedule, trace or fault changes later gets its line now, idle
            # or not: a running testbed cannot add one (its queue number is in the wire's rules).
            if not plan.has_ns(d.impairment.ns):  # its wire is on another machine
                continue
            if d.impairment.active or line_holds_queue(d) or d.changes_later:
                by_wire.setdefault(d.impairment.ns, []).append(d)
        for ns, dirs in by_wire.items():
            label = ns.removeprefix(f"{plan.prefix}-")
            self.lines.append(
                LineProcess(ns, dirs, self.dir / f"{label}.json", self.dir / f"{label}.stats.json")
            )

    @staticmethod
    def ce_iface(d: WanDirection) -> str | None:
        """Where the CE-marking rule of ``d`` sits (its wire egress), if ``d`` marks."""
        return d.impairment.egress_if if line_holds_queue(d) else None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """All lines start at once (one launcher forks them, see :meth:`launch`); each binds
        its queues, then applies its rules, then says READY: no packet reaches a line that is
        not listening."""
        self.launch()
        try:
            self._collect()
        finally:
            # One save for all lines: each save rewrites the whole record. Until it lands, a
            # teardown still finds the lines, as processes living in the testbed's namespaces.
            self.record.add_processes(
                [(line.pid, f"delay line {line.ns}") for line in self.lines if line.pid]
            )
            for line in self.lines:
                if line.pid is not None:
                    line.start = registry.process_start(line.pid)

    def _config(self, line: LineProcess) -> dict:
        queues = []
        for i, d in enumerate(line.directions):
            imp = self.impairments[d.name]
            queues.append(
                {
                    "num": queue_number(i),
                    "name": d.name,
                    "delay": imp.delay,
                    "jitter": imp.jitter,
                    "loss": imp.loss,
                    "reorder": imp.reorder,
                    "ge_p": imp.ge_p,
                    "ge_r": imp.ge_r,
                    # Reproducible per direction, different between directions.
                    "seed": zlib.crc32(f"{self.plan.scenario}/{d.name}".encode()),
                }
            )
            if line_holds_queue(d):
                rate, buffer = self.rates[d.name]
                queues[-1].update(
                    rate=rate,
                    buffer=buffer,
                    aqm=None if d.aqm is None else _line_aqm(d.aqm),
                    ce_mark=DEFAULT_CE_MARK,
                    held=d.name in self.held,
                )
        config = {
            "queues": queues,
            "stats_file": str(line.stats_path),
            "stats_interval": STATS_INTERVAL,
        }
        if self.trace_interval:
            config.update(trace_file=str(line.trace_path), trace_interval=self.trace_interval)
        return config

    def launch(self) -> None:
        """Start one launcher for all lines (one Python start-up, ~80 ms of CPU, instead of one
        per wire); it needs the wire namespaces, nothing else. Idempotent."""
        if not self.lines or self.launcher is not None or any(line.pid for line in self.lines):
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "testbed.link.delayline", "--wait"]
        for line in self.lines:
            line.config_path.write_text(json.dumps(self._config(line), indent=1))
            argv += ["--line", line.ns, str(line.config_path), str(line.log_path)]
            # Each line applies its own rules once its queues are bound, before READY: still
            # never a packet for a queue nobody listens on, and no `ip netns exec` per wire.
            for i, d in enumerate(line.directions):
                line.rules += iptables_rules(
                    d.impairment.ingress_if,
                    queue_number(i),
                    ce_iface=self.ce_iface(d),
                    bridged=d.impairment.bridged,
                )
            line.rules_path.write_text(restore_input(line.rules))
            argv += ["--rules", line.ns, str(line.rules_path)]
            line.rules_installed = True  # from here on, stop() deletes them (absent ones: no-op)
        # The lines' stderr goes to their log files: they must outlive a `testbed up`.
        with open(self.dir / "launcher.log", "w") as log:
            self.launcher = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,  # the go (see go())
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                # Its own session, inherited by the lines: a Ctrl-C in the terminal must not kill
                # a line before the rules are gone (that would drop what it holds and fail the
                # run spuriously).
                start_new_session=True,
            )

    def set_impairments(self, changes: dict[str, Impairment]) -> None:
        """New delay, jitter, loss, reorder and burst loss for the lines' directions (see
        :meth:`reload`)."""
        self._served(changes)
        self.impairments.update(changes)
        self.reload(changes)

    def set_rates(self, changes: dict[str, tuple[int, int]]) -> None:
        """New (rate bit/s, buffer bytes) of directions whose bottleneck is the line; rate 0
        holds (a trace's zero-rate bin: nothing leaves, the queue keeps up to its buffer)."""
        self._served(changes)
        for n, (rate, buffer) in changes.items():
            if rate == 0:  # a hold: the line keeps the rate it had, serving nothing
                self.held.add(n)
                rate = self.rates[n][0]
            else:
                self.held.discard(n)
            self.rates[n] = (rate, max(buffer, MIN_BUFFER))
        self.reload(changes)

    def _served(self, changes: dict[str, Any]) -> dict[str, LineProcess]:
        served = {d.name: line for line in self.lines for d in line.directions}
        missing = sorted(set(changes) - set(served))
        if missing:
            raise UnsupportedError(
                f"{', '.join(missing)}: no delay line runs for these directions (they had "
                "nothing to emulate at bring-up and no schedule, trace or fault marked them "
                "`changes_later`); a running testbed cannot add one"
            )
        return served

    def reload(self, changed: dict[str, Any]) -> None:
        """Rewrite the config of each line serving a changed direction, SIGHUP it, and wait
        for its acknowledgement (the ``reloads`` count in its stats file, rewritten right after
        the reload); a refused reload or a silent line is a NetError."""
        served = self._served(changed)
        waiting = []
        for line in {id(served[n]): served[n] for n in changed}.values():
            assert line.pid is not None
            before = self._stats(line).get("reloads", 0)
            atomic_write_text(line.config_path, json.dumps(self._config(line), indent=1))
            os.kill(line.pid, signal.SIGHUP)
            waiting.append((line, before + 1))
        deadline = time.monotonic() + RELOAD_TIMEOUT
        while waiting:
            line, want = waiting[0]
            stats = self._stats(line)
            if stats.get("reloads", 0) >= want:
                refused = [e for e in stats.get("errors", []) or [] if "reload refused" in e]
                if refused:
                    raise NetError(f"delay line in {line.ns}: {refused[0]}")
                waiting.pop(0)
            elif time.monotonic() > deadline or not line.alive():
                raise NetError(f"delay line in {line.ns} did not apply its new config (SIGHUP)")
            else:
                time.sleep(0.001)

    def go(self) -> None:
        """Let the launcher fork the lines: their namespaces exist now. Idempotent."""
        if self.launcher is None or self.launcher.stdin is None:
            return
        stdin, self.launcher.stdin = self.launcher.stdin, None  # communicate() must not touch it
        with contextlib.suppress(OSError):  # it died: _collect() reports that
            stdin.write("go\n")
            stdin.close()

    def _collect(self) -> None:
        """Each line's pid once it is READY (the launcher exits once every line is READY or
        has failed). Raises NetError naming the namespace and the reason of a line that did
        not start."""
        self.go()  # if the build did not already
        launcher, self.launcher = self.launcher, None
        if launcher is None:
            return
        try:
            out, _ = launcher.communicate(timeout=procs.READY_TIMEOUT)
        except subprocess.TimeoutExpired:
            procs.stop(launcher)
            out = ""  # the lines that did start are in the namespaces: teardown finds them
        by_ns = {line.ns: line for line in self.lines}
        for text in out.splitlines():
            match text.split():
                case ["READY", ns, pid] if ns in by_ns:
                    by_ns[ns].pid = int(pid)
                case ["FAILED", ns, _pid, code] if ns in by_ns:
                    by_ns[ns].exit_code = int(code)
        for line in self.lines:
            if line.pid is None:
                with contextlib.suppress(OSError):
                    line.stderr_tail = line.log_path.read_text().strip()[-500:]
                if not line.stderr_tail and line.exit_code is None:
                    with contextlib.suppress(OSError):
                        line.stderr_tail = (self.dir / "launcher.log").read_text().strip()[-500:]
                why = (
                    f"exit code {line.exit_code}"
                    if line.exit_code is not None
                    else f"no READY within {procs.READY_TIMEOUT:g} s"
                )
                raise NetError(
                    f"delay line in {line.ns} did not start: {why}; "
                    f"{line.stderr_tail or 'no output'}"
                )

    def stop(self) -> None:
        """Rules first, then SIGTERM; the line writes its final stats and exits."""
        deletions: dict[str, list[list[str]]] = {}
        for line in self.lines:
            if line.rules_installed:
                deletions[line.ns] = deletions_of(line.rules)
                line.rules_installed = False
        # A namespace whose rules never went in fails its deletion as a whole: nothing to remove.
        _restore_all(deletions)
        if self.launcher is not None:  # the build failed after launch()
            if self.launcher.stdin is not None:  # before the go: it exits, forking nothing
                stdin, self.launcher.stdin = self.launcher.stdin, None
                with contextlib.suppress(OSError):
                    stdin.close()
            with contextlib.suppress(NetError):
                self._collect()  # the pids of the lines it did start
        running = [line for line in self.lines if line.alive()]
        for line in running:
            assert line.pid is not None
            with contextlib.suppress(ProcessLookupError):
                os.kill(line.pid, signal.SIGTERM)
        # Not our children (the launcher was their parent): gone means exited, zombie or not.
        deadline = time.monotonic() + STOP_TIMEOUT
        while running and time.monotonic() < deadline:
            time.sleep(0.01)
            running = [line for line in running if line.alive()]
        for line in running:
            assert line.pid is not None
            with contextlib.suppress(ProcessLookupError):
                os.kill(line.pid, signal.SIGKILL)

    # -- watching ----------------------------------------------------------------------------
    def problems(self) -> list[str]:
        """Why links are broken right now: a dead line, or overflow it reported."""
        out = []
        for line in self.lines:
            names = ", ".join(d.name for d in line.directions)
            if line.pid is not None and line.rules_installed and not line.alive():
                out.append(
                    f"link {names} failed: its delay line (pid {line.pid}) died; the kernel "
                    f"drops its packets{self._log_tail(line)}"
                )
            for err in self._stats(line).get("errors", []) or []:
                out.append(f"link {names}: delay line error: {err}")
        return out

    @staticmethod
    def _log_tail(line: LineProcess) -> str:
        """The last words of a line's stderr, for a problem report ("" if it said nothing)."""
        try:
            said = line.log_path.read_text().strip().splitlines()
        except OSError:
            return ""
        return f" (its log: {' / '.join(said[-2:])[-300:]})" if said else ""

    def _stats(self, line: LineProcess) -> dict:
        try:
            return read_stats(line.stats_path)
        except (OSError, ValueError):
            return {}

    def queue_trace(self) -> list[dict]:
        """The lines' samples of their bottleneck queues (complete once the lines stopped)."""
        return [row for line in self.lines for row in line_trace_rows(line.trace_path)]

    def stats(self) -> list[dict]:
        """One row per direction: the line's counters (flattened), plus its process' CPU."""
        rows = []
        for line in self.lines:
            data = self._stats(line)
            per_queue = {q.get("name"): q for q in (data.get("queues") or {}).values()}
            for d in line.directions:
                q = per_queue.get(d.name, {})
                row = {"direction": d.name, "namespace": line.ns}
                for key, value in q.items():
                    if isinstance(value, dict):
                        row.update({f"{key}_{k}": v for k, v in value.items()})
                    elif not isinstance(value, list):
                        row[key] = value
                for key in ("cpu_seconds", "cpu_percent_avg", "uptime_s", "reloads", "final"):
                    if key in data:
                        row[f"process_{key}"] = data[key]
                row["errors"] = "; ".join(data.get("errors", []) or [])
                rows.append(row)
        return rows


def line_trace_rows(path: Path) -> list[dict[str, Any]]:
    """The delay line's JSONL samples as queue-trace rows (a torn last line is skipped)."""
    rows = []
    with contextlib.suppress(OSError), open(path, encoding="utf-8") as f:
        for line in f:
            try:
                s = json.loads(line)
            except ValueError:
                continue
            rows.append(
                {
                    "time": s["time"],
                    "direction": s["direction"],
                    "source": "delayline",
                    "backlog_bytes": s["backlog_bytes"],
                    "backlog_packets": s["backlog_packets"],
                    "packets": s["packets"],
                    "bytes": s["bytes"],
                    "dropped": s["dropped"],
                    "marked": s["marked"],
                }
            )
    return rows
