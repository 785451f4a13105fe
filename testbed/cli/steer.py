"""The verbs that act on a testbed ``testbed up`` left running: ``launch`` (the command
workload's launcher, as in a scenario run), ``link`` (change a WAN link now) and ``fault``
(apply a fault now), thin over :mod:`testbed.experiment.steer`; and :class:`Follower`, which
streams processes' logs to the terminal while they run (``launch`` and ``testbed run``'s
``--follow``).

The experiment layer is imported inside the verbs: it is most of the CLI's start-up.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from testbed.cli.common import need_root
from testbed.cli.console import escape, make_console
from testbed.core.errors import UsageError
from testbed.core.units import parse_duration

out = make_console()
FOLLOW_POLL = 0.1  # s between two looks at the followed logs


# -- following logs ------------------------------------------------------------------------------
def follow_choice(value: str) -> str:
    """``--follow``: all | none | a rank (a non-negative integer)."""
    if value in ("all", "none") or value.isdigit():
        return value
    raise argparse.ArgumentTypeError(f"{value!r}: allowed: all, none, or a rank such as 0")


class Follower:
    """Prints the lines of a run directory's process logs as they are written, each prefixed
    with its log's name: every ``rank-*.log`` and ``host-*.log`` (``all``) or rank R's alone
    (its ``rank-R.log``, or with one process per host, the log of rank R's host as spec.json
    places it). A thread looks every FOLLOW_POLL; :meth:`stop` prints what is left."""

    def __init__(self, run_dir: Path, which: str, emit: Callable[[Text], None]) -> None:
        self.run_dir = run_dir
        self.which = which
        self.emit = emit
        self.offsets: dict[Path, int] = {}
        self.partial: dict[Path, bytes] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="follow-logs", daemon=True)

    def __enter__(self) -> Follower:
        if self.which != "none":
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        self._stop.set()
        self._thread.join()
        self.poll(final=True)

    def files(self) -> list[Path]:
        if self.which == "all":
            return sorted(self.run_dir.glob("rank-*.log")) + sorted(self.run_dir.glob("host-*.log"))
        own = self.run_dir / f"rank-{self.which}.log"
        if own.exists():
            return [own]
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            spec = json.loads((self.run_dir / "spec.json").read_text())
            host = next(r["host"] for r in spec["ranks"] if r["rank"] == int(self.which))
            path = self.run_dir / f"host-{host}.log"
            return [path] if path.exists() else []
        return []

    def _loop(self) -> None:
        while not self._stop.wait(FOLLOW_POLL):
            with contextlib.suppress(OSError):
                self.poll()

    def poll(self, final: bool = False) -> None:
        """Print what the logs gained since the last look (``final``: a last line without its
        newline too)."""
        with self._lock:
            self._read(final)

    def _read(self, final: bool) -> None:
        for path in self.files():
            try:
                size = path.stat().st_size
            except OSError:
                continue
            at = self.offsets.get(path, 0)
            if size < at:  # truncated: a new launch wrote it
                at, self.partial[path] = 0, b""
            if size == at and not final:
                continue
            with open(path, "rb") as f:
                f.seek(at)
                data = self.partial.get(path, b"") + f.read(size - at)
            self.offsets[path] = size
            *lines, rest = data.split(b"\n")
            if final and rest:
                lines, rest = [*lines, rest], b""
            self.partial[path] = rest
            for line in lines:
                text = line.decode(errors="replace").rstrip("\r")
                self.emit(Text.assemble((f"[{path.stem}] ", "dim"), text))


# -- launch --------------------------------------------------------------------------------------
def _workload(args: argparse.Namespace, argv: list[str]) -> Any:
    """The command workload of ``launch``'s options; a UsageError names the option."""
    from pydantic import ValidationError

    from testbed.config.command import CommandWorkload

    env = {}
    for item in args.env:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise UsageError(f"--env {item!r}: write NAME=VALUE, e.g. --env OMP_NUM_THREADS=2")
        env[key] = value
    data = {
        "kind": "command", "per": args.per, "ranks_per_host": args.ranks_per_host,
        "placement": args.placement, "argv": argv, "cwd": args.cwd, "env": env,
        "timeout": args.timeout, "on_failure": args.on_failure, "metrics": args.metrics,
    }  # fmt: skip
    try:
        return CommandWorkload.model_validate(data)
    except ValidationError as exc:
        lines = []
        for e in exc.errors():
            inner = (e.get("ctx") or {}).get("error")
            path = getattr(inner, "path", ".".join(str(p) for p in e["loc"]))
            message = getattr(inner, "message", e["msg"])
            path = path.removeprefix("workload.").replace("argv[", "ARGV[")
            lines.append(f"{path}: {message}")
        raise UsageError("; ".join(lines)) from None


def launch_argv(args: argparse.Namespace) -> list[str]:
    """The program and its arguments: what follows ``--``. Options written between NAME and
    ``--`` (argparse hands them over with the program) are parsed into ``args`` first."""
    cmd = list(args.cmd)
    if "--" not in cmd:
        return cmd
    i = cmd.index("--")
    if i:
        options = argparse.ArgumentParser(prog="testbed launch NAME", add_help=False)
        add_launch_options(options)
        options.parse_args(cmd[:i], namespace=args)
    return cmd[i + 1 :]


def cmd_launch(args: argparse.Namespace) -> int:
    from testbed.config.command import missing_files
    from testbed.experiment.steer import attach_live, launch

    need_root("launch")
    argv = launch_argv(args)
    if not argv:
        raise UsageError("ARGV: nothing to run: testbed launch NAME -- PROGRAM [ARGS...]")
    workload = _workload(args, argv)
    missing = missing_files(workload, Path.cwd())
    if missing:
        raise UsageError(
            "; ".join(f"{f.removeprefix('workload.')}: {m}" for f, m in missing).replace(
                "argv[", "ARGV["
            )
        )
    tb = attach_live(args.name)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = (Path(args.out) / f"launch-{tb.name}-{stamp}").resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    # the launch begins for the user here: an event applied once this line is out is its own,
    # though the processes start a moment later (a loaded host took long enough that a change
    # applied between the two fell outside the launch's event log)
    since = time.time()
    out.print(f"logs: {escape(run_dir)}", highlight=False, soft_wrap=True)
    try:
        with Follower(run_dir, args.follow, lambda t: out.print(t, soft_wrap=True)):
            problems, info = launch(tb, workload, run_dir, since)
    except KeyboardInterrupt:
        out.print(f"interrupted; its processes are stopped, their logs in {escape(run_dir)}")
        return 130
    t = Table(title=f"launch on {tb.name}")
    for col in ("process", "host", "exit code", "duration", "log"):
        t.add_column(col)
    for p in info["processes"]:
        took = p["duration"]
        t.add_row(
            p["process"], p["host"], str(p["exit_code"]) if p["exit_code"] is not None else "-",
            f"{took:.2f} s" if took is not None else "-", p["log"],
        )  # fmt: skip
    out.print(t)
    if problems:
        # as torchrun's summary: the first failure first, then what it stopped
        for line in problems:
            out.print(Text.assemble(("failed: ", "bold red"), line), soft_wrap=True)
        return 1
    out.print("[green]every process exited 0[/]")
    return 0


# -- link and fault ------------------------------------------------------------------------------
class RowPrinter:
    """One line per applied event (a ``set`` has a row per direction; the first stands for
    them): its status, action, what and link; the operation is in the event log."""

    def __init__(self) -> None:
        self.seen: set[tuple[Any, ...]] = set()

    def __call__(self, r: dict[str, Any]) -> None:
        key = (r["event"], r["status"], r["action"])
        if key in self.seen:
            return
        self.seen.add(key)
        status = r["status"]
        colour = {"applied": "green", "undone": "green"}.get(status, "red")
        where = r["link"] or r["cluster"] or ""
        line = Text.assemble((f"{status} ", colour), f"{r['action']} {where}: {r['what']}")
        if r.get("error"):
            line.append(f": {r['error']}", "red")
        out.print(line, soft_wrap=True, highlight=False)


def cmd_link(args: argparse.Namespace) -> int:
    from testbed.experiment.steer import (
        Steering,
        attach_live,
        command_line,
        link_event,
        parse_settings,
        run_now,
    )

    need_root("link")
    if args.action == "set":
        settings = parse_settings(args.settings)
        what = " ".join(args.settings)
    else:
        if args.settings:
            raise UsageError(f"restore takes no FIELD=VALUE (got {' '.join(args.settings)})")
        settings, what = None, "restore the configured settings"
    tb = attach_live(args.name)
    steering = Steering(tb, command_line())
    events, kept = link_event(tb, steering, args.link, args.direction, settings, what)
    rows = run_now(steering, events, kept, on_row=RowPrinter())
    return 1 if any(r["status"] == "failed" for r in rows) else 0


def cmd_fault(args: argparse.Namespace) -> int:
    from testbed.experiment.steer import (
        LIVE_FAULTS,
        Steering,
        attach_live,
        command_line,
        end_events,
        fault_events,
        note_in_force,
        run_now,
    )

    need_root("fault")
    if args.kind not in LIVE_FAULTS:
        raise UsageError(
            f"KIND: {args.kind!r} is not a fault applied now; allowed: {', '.join(LIVE_FAULTS)} "
            "(flap, burst_loss and partition are scenario `faults:`)"
        )
    duration = None
    if args.for_ is not None:
        if args.end:
            raise UsageError("--for and --end do not go together")
        try:
            duration = parse_duration(args.for_)
        except ValueError as exc:
            raise UsageError(f"--for: {exc}") from None
        if duration <= 0:
            raise UsageError(f"--for {args.for_!r}: a fault lasts a positive time, e.g. 2s")
    tb = attach_live(args.name)
    steering = Steering(tb, command_line())
    if args.end:
        if args.direction is not None:
            raise UsageError("--direction: --end ends the fault as it was started")
        events = end_events(steering.state(), args.kind, args.target)
    else:
        events = fault_events(tb, args.kind, args.target, duration, args.direction)
    if duration is not None:
        out.print(f"{args.kind} on {args.target} for {duration:g} s", highlight=False)
    try:
        with _sigterm_interrupts():
            rows = run_now(steering, events, on_row=RowPrinter(), keep=duration is None)
    except KeyboardInterrupt:
        out.print("interrupted; what it started is undone (see the event log)")
        return 130
    failed_events = {r["event"] for r in rows if r["status"] == "failed"}
    applied = [e for i, e in enumerate(events) if i not in failed_events]
    if duration is None:
        started = [e for e in applied if not args.end]
        ended = [e for e in applied if args.end]
        note_in_force(steering, started, ended)
        if started:
            out.print(
                f"in force until `testbed fault {tb.name} {args.kind} {args.target} --end`",
                highlight=False,
            )
    return 1 if failed_events else 0


def add_launch_options(s: argparse.ArgumentParser) -> None:
    """``launch``'s options (also parsed where they follow NAME: see :func:`launch_argv`)."""
    s.add_argument("--per", choices=["rank", "host"], default="rank", help="default: %(default)s")
    s.add_argument("--ranks-per-host", type=int, default=1, metavar="N", help="default: 1")
    s.add_argument(
        "--placement", choices=["by-cluster", "interleaved"], default="by-cluster",
        help="default: %(default)s",
    )  # fmt: skip
    s.add_argument("--cwd", default=".", help="where it runs (default: the current directory)")
    s.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="repeatable")
    s.add_argument("--timeout", default="600s", help="the whole launch's limit (default: 600s)")
    s.add_argument(
        "--on-failure", choices=["stop-all", "wait"], default="stop-all",
        help="stop-all: the first non-zero exit stops the rest, as torchrun (default)",
    )  # fmt: skip
    s.add_argument(
        "--metrics", choices=["json-lines", "none"], default="json-lines",
        help="stdout lines that are JSON objects with a metric key also go to rank-R.jsonl "
        "(default: %(default)s)",
    )  # fmt: skip
    s.add_argument(
        "--follow", type=follow_choice, default="0", metavar="all|RANK|none",
        help="print these processes' output as it comes (default: rank 0)",
    )  # fmt: skip
    s.add_argument(
        "--out", default="results", help="where the run directory goes (default: %(default)s)"
    )


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM as Ctrl-C: a fault with ``--for`` is lifted either way."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


# -- the parser ----------------------------------------------------------------------------------
def register(sub: Any) -> None:
    """Register ``launch``, ``link`` and ``fault`` on the CLI's sub-parsers."""
    s = sub.add_parser(
        "launch",
        help="run a program on a live testbed's ranks, as workload kind command: launch NAME -- "
        "ARGV...",
        usage="testbed launch NAME [options] -- ARGV...",
        description="Run ARGV on every rank (or host) of the live testbed NAME through the "
        "command workload's launcher: torchrun's environment, placeholders such as {rank} and "
        "{master_addr}, each host's own hostname, one log per process in a run directory it "
        "prints (docs/command.md). Exit code 0 when every process exited 0, else 1 with the "
        "first failure named.",
    )
    s.add_argument("name", metavar="NAME", help="the testbed's name (testbed ls lists them)")
    add_launch_options(s)
    s.add_argument(
        "cmd", nargs=argparse.REMAINDER, metavar="-- ARGV...", help="the program, after `--`"
    )
    s.set_defaults(fn=cmd_launch)

    s = sub.add_parser(
        "link",
        help="change a live testbed's WAN link now: link NAME LINK set delay=30ms ...",
        usage="testbed link NAME LINK {set FIELD=VALUE... | restore} [--direction A->B]",
        description="Change a WAN link of the live testbed NAME now, as a schedule step would "
        "(the same mechanism; recorded in the testbed's event log). Fields: rate, delay, "
        "jitter, loss, reorder, buffer, e.g. `testbed link lab east-west set delay=50ms "
        "loss=1%`; `restore` goes back to the scenario's settings.",
    )
    s.add_argument("name", metavar="NAME", help="the testbed's name")
    s.add_argument("link", metavar="LINK", help="a WAN link (east-west) or a path (east-west/1)")
    s.add_argument("action", choices=["set", "restore"], help="set FIELD=VALUE... | restore")
    s.add_argument(
        "settings", nargs="*", metavar="FIELD=VALUE", help="with set: e.g. delay=50ms loss=1%%"
    )
    s.add_argument("--direction", metavar="A->B", help="one direction (default: both)")
    s.set_defaults(fn=cmd_link)

    s = sub.add_parser(
        "fault",
        help="apply a fault to a live testbed now: fault NAME KIND LINK [--for 2s]",
        usage="testbed fault NAME KIND {LINK | CLUSTER} [--for DURATION | --end] "
        "[--direction A->B]",
        description="Apply a fault to the live testbed NAME now, as a scenario's fault would "
        "(the same mechanism; recorded in the testbed's event log). KIND: blackhole, reset, "
        "link_down (on a LINK) or gateway_crash (on a CLUSTER). With --for it ends after that "
        "long (the command waits; Ctrl-C ends it at once); without, it stays in force until "
        "the same command with --end.",
    )
    s.add_argument("name", metavar="NAME", help="the testbed's name")
    s.add_argument("kind", metavar="KIND", help="blackhole | reset | link_down | gateway_crash")
    s.add_argument("target", metavar="LINK", help="a WAN link (a cluster for gateway_crash)")
    s.add_argument("--for", dest="for_", metavar="DURATION", help="how long, e.g. 2s")
    s.add_argument("--end", action="store_true", help="end this fault, in force since")
    s.add_argument("--direction", metavar="A->B", help="a blackhole of one direction")
    s.set_defaults(fn=cmd_fault)
