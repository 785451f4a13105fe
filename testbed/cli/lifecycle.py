"""The live verbs of testbeds on this machine: ``up`` (build one and leave it running, or in the
foreground, or under Mininet's CLI), ``exec`` (a command in one of its hosts), ``ls``, ``down``
and ``clean`` (what crashed testbeds left behind). Thin printing over :mod:`testbed.net` and
:class:`~testbed.live.network.Network`.

The scenario schema and ``testbed.live`` are imported inside ``up`` and ``exec``: ``ls``,
``down`` and ``clean`` need only the registry, and that import is most of the CLI's start-up.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from testbed.cli.common import need_root
from testbed.cli.console import escape, make_console
from testbed.core.errors import TestbedError, UsageError
from testbed.core.units import format_duration
from testbed.net import build as net
from testbed.net import registry
from testbed.net.engines import MininetEngine, node_name

if TYPE_CHECKING:
    from testbed.live.network import Network

out = make_console()


def _print_hosts(tb: Network) -> None:
    assert tb.record is not None  # claimed by up()
    t = Table(title=f"testbed {tb.name} (prefix {tb.record.prefix}, backend {tb.record.backend})")
    t.add_column("host")
    t.add_column("address")
    t.add_column("namespace")
    mininet = tb.record.engine == "mininet"
    if mininet:
        t.add_column("Mininet node")
    for name, addr in tb.hosts.items():
        node = [node_name(name)] if mininet else []
        t.add_row(name, addr, f"{tb.record.prefix}-{name}", *node)
    out.print(t)


def cmd_up(args: argparse.Namespace) -> int:
    from testbed.config.loading import load_scenario
    from testbed.live.network import Network

    need_root("up")
    sc = load_scenario(args.file)
    if args.engine:
        sc = sc.model_copy(update={"engine": args.engine})
    if args.cli and sc.engine != "mininet":
        raise UsageError("--cli is Mininet's CLI: use it with --engine mininet")
    foreground = args.foreground or args.cli
    tb = Network(sc, name=args.name or sc.name, persistent=not foreground, source=args.file)
    if args.cli:
        from mininet.cli import CLI
        from mininet.log import setLogLevel

        with tb:
            setLogLevel("output")  # the CLI prints at Mininet's "output" level
            _announce(tb)
            _print_hosts(tb)
            out.print("Mininet CLI: nodes are named like east_h0; `exit` tears the testbed down")
            assert isinstance(tb.engine, MininetEngine)  # the scenario's engine is mininet
            CLI(tb.engine.net)
        return 0
    if args.foreground:
        with tb:
            _announce(tb)
            _print_hosts(tb)
            out.print("up; press Ctrl-C to tear down")
            while True:
                time.sleep(3600)
    tb.up()
    assert tb.record is not None
    # `testbed link`, `fault` and `launch` rebuild its plan from this file, from any directory
    tb.record.extra["scenario_path"] = str(Path(args.file).resolve())
    tb.record.save()
    _announce(tb)
    _print_hosts(tb)
    out.print(f"up; `testbed exec {tb.name} HOST -- CMD` runs a command, `testbed down {tb.name}`")
    return 0


def _announce(tb: Network) -> None:
    assert tb.backend is not None and tb.plan is not None  # chosen and built by up()
    out.print(f"backend: [bold]{tb.backend.name}[/] ({escape(tb.backend.reason)})")
    # a direction is compensated only where its floor was measured
    floors = [c.floor_s for c in tb.compensation if c.compensation_s and c.floor_s is not None]
    if floors:
        out.print(
            f"RTT compensation: measured floors of {format_duration(min(floors))} to "
            f"{format_duration(max(floors))} one way are subtracted from the emulated delays"
        )
    for w in tb.plan.warnings:
        out.print(f"[yellow]warning:[/] {escape(w)}")


def cmd_exec(args: argparse.Namespace) -> int:
    from testbed.live.network import Network

    need_root("exec")
    tb = Network.attach(args.name)
    argv = args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd
    if not argv:
        raise TestbedError("nothing to run: testbed exec NAME HOST -- CMD [ARGS...]")
    cmd = tb.command(args.host, argv)
    os.execvp(cmd[0], cmd)
    return 127  # not reached


def cmd_ls(args: argparse.Namespace) -> int:
    recs = registry.records()
    if getattr(args, "json", False):
        print(json.dumps(ls_json(recs), indent=2))
        return 0
    if not recs:
        out.print("no testbeds")
        return 0
    t = Table()
    columns = ("name", "prefix", "state", "engine", "backend", "hosts", "owner", "age", "scenario")
    for col in columns:
        t.add_column(col)
    for r in recs:
        state = r.phase if r.live() else "leftover (testbed clean removes it)"
        owner = "persistent" if r.persistent else str(r.owner_pid)
        age = f"{time.time() - r.created:.0f}s"
        hosts = str(sum(1 for h in r.hosts if not h.endswith("-gw")))
        t.add_row(r.name, r.prefix, state, r.engine, r.backend, hosts, owner, age, r.scenario)
    out.print(t)
    return 0


def ls_json(recs: list[registry.Record]) -> dict[str, Any]:
    """``testbed ls --json`` (docs/json.md): every testbed's record, ``live`` false for one a
    crashed process left behind."""
    now = time.time()
    return {
        "version": 1,
        "testbeds": [
            {
                "name": r.name,
                "prefix": r.prefix,
                "state": r.phase if r.live() else "leftover",
                "live": r.live(),
                "engine": r.engine,
                "backend": r.backend,
                "hosts": {h: a for h, a in r.hosts.items() if not h.endswith("-gw")},
                "persistent": r.persistent,
                "owner_pid": r.owner_pid,
                "age_s": round(now - r.created, 3),
                "scenario": r.scenario,
            }
            for r in recs
        ],
    }


def cmd_down(args: argparse.Namespace) -> int:
    need_root("down")
    rec = registry.find(args.name)
    if not rec.persistent and registry.process_alive(rec.owner_pid, rec.owner_start):
        raise TestbedError(
            f"testbed {rec.name!r} belongs to running process {rec.owner_pid}; stop that process "
            "(it tears its testbed down)"
        )
    net.destroy(rec)
    out.print(f"{rec.name} ({rec.prefix}) is down")
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    need_root("clean")
    removed = net.clean(include_persistent=args.all)
    kept = [r for r in registry.records() if r.live()]
    out.print(
        f"removed {len(removed)} leftover testbed(s){': ' + ', '.join(removed) if removed else ''}"
    )
    if kept:
        names = ", ".join(
            f"{r.name} ({'persistent' if r.persistent else f'pid {r.owner_pid}'})" for r in kept
        )
        out.print(
            f"kept live testbeds: {names}"
            + ("" if args.all else "; `--all` also removes persistent ones made by `testbed up`")
        )
    return 0
