"""The network verbs: ``validate``, ``plan`` (pure: the scenario and what would be built),
``up``, ``exec``, ``ls``, ``down``, ``clean`` (live testbeds on this machine) and ``doctor``
(what this kernel offers). Thin printing over :mod:`testbed.config`, :mod:`testbed.plan` and
:mod:`testbed.net`.

The scenario schema (pydantic), the plan, the link backends and ``testbed.run`` are imported
inside the verbs that use them: ``--help``, ``ls``, ``down`` and ``clean`` never need them, and
their import is most of the CLI's start-up.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from testbed.cli.common import add_engine_option, need_root
from testbed.cli.console import escape, make_console
from testbed.core.errors import TestbedError, UsageError
from testbed.core.units import format_duration, format_percent, format_rate, format_size
from testbed.net import build as net
from testbed.net import registry
from testbed.net.engines import node_name

if TYPE_CHECKING:
    from testbed.config.scenario import Scenario
    from testbed.net.probe import KernelFeatures
    from testbed.plan.timeline import Timeline
    from testbed.plan.topology import NetworkPlan

out = make_console()


def register(sub: Any) -> None:
    """Register the network verbs on the CLI's sub-parsers."""
    s = sub.add_parser("validate", help="check a scenario file")
    s.add_argument("file")
    s.set_defaults(fn=cmd_validate)
    s = sub.add_parser("plan", help="print what would be built, without touching the kernel")
    s.add_argument("file")
    s.set_defaults(fn=cmd_plan)
    s = sub.add_parser("up", help="build a network and leave it running")
    s.add_argument("file")
    s.add_argument("--name", help="testbed name (default: the scenario's name)")
    s.add_argument(
        "--foreground",
        action="store_true",
        help="stay in the foreground and tear down on Ctrl-C/SIGTERM",
    )
    add_engine_option(s)
    s.add_argument(
        "--cli",
        action="store_true",
        help="engine mininet: Mininet's own CLI (`west_h0 ping east_h1`); tears down on exit",
    )
    s.set_defaults(fn=cmd_up)
    s = sub.add_parser("exec", help="run a command inside a host: exec NAME HOST -- CMD...")
    s.add_argument("name")
    s.add_argument("host")
    s.add_argument("cmd", nargs=argparse.REMAINDER)
    s.set_defaults(fn=cmd_exec)
    s = sub.add_parser("ls", help="list testbeds on this machine")
    s.set_defaults(fn=cmd_ls)
    s = sub.add_parser("down", help="tear a testbed down")
    s.add_argument("name")
    s.set_defaults(fn=cmd_down)
    s = sub.add_parser("clean", help="remove what crashed testbeds left behind")
    s.add_argument("--all", action="store_true", help="also remove persistent `up` testbeds")
    s.set_defaults(fn=cmd_clean)
    s = sub.add_parser("doctor", help="what this kernel offers and which backend is used")
    s.add_argument("file", nargs="?")
    s.set_defaults(fn=cmd_doctor)


# -- pure verbs -------------------------------------------------------------------------------
def cmd_validate(args: argparse.Namespace) -> int:
    from testbed.config.scenario import load_scenario
    from testbed.plan.timeline import read_link_trace

    sc = load_scenario(args.file)
    for i, link in enumerate(sc.wan):
        if link.trace is not None:  # a missing or malformed trace file is bad input too
            read_link_trace(link, i, Path(args.file).parent, args.file)
    hosts = sum(c.hosts for c in sc.clusters.values())
    out.print(
        f"{args.file}: ok — {sc.name}: {len(sc.clusters)} clusters, {hosts} hosts, "
        f"{len(sc.wan)} WAN links"
    )
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from testbed.config.scenario import load_scenario
    from testbed.plan.timeline import build_timeline, default_horizon
    from testbed.plan.topology import build_plan

    sc = load_scenario(args.file)
    plan = build_plan(sc, "<prefix>", 64)
    base = Path(args.file).parent
    timeline = build_timeline(sc, plan, base, default_horizon(sc), source=args.file)
    out.print(f"[bold]{escape(sc.name)}[/]: {escape(sc.description)}")
    out.print(
        "Namespaces are named <prefix>-<label>; addresses come from 10.<slot>.0.0/16 "
        "(shown for slot 64; each live testbed gets its own slot)."
    )
    out.print(_namespace_table(plan))
    out.print(_wan_table(plan))
    multipath = [link for link in sc.wan if link.paths]
    if multipath:
        hashing = {"l3": "addresses (l3)", "l4": "addresses, protocol and ports (l4)"}
        out.print(
            f"routing: {sc.routing.mode}; the gateways hash flows onto a link's paths by "
            f"{hashing[sc.routing.ecmp.hash]}: "
            + "; ".join(
                f"{link.name} {len(link.paths)} paths, weights "
                + "/".join(str(p.weight) for p in link.paths)
                for link in multipath
            )
        )
    if plan.bgp is not None:
        b = plan.bgp
        bfd = (
            f"BFD every {b.bfd_interval_ms} ms x {b.bfd_multiplier}"
            if b.bfd_interval_ms is not None
            else "no BFD (a silent failure waits for the hold time)"
        )
        out.print(
            f"bgp (FRR in each gateway): hold {b.hold_s} s, keepalive {b.keepalive_s} s, {bfd}, "
            f"maximum-paths {b.maximum_paths}; sessions: "
            + "; ".join(
                f"{s.gateway} AS{s.asn} -> "
                + ", ".join(f"{n.address} ({n.link})" for n in s.neighbors)
                for s in b.speakers
            )
        )
    if plan.machines:
        by_machine: dict[str, list[str]] = {}
        for cluster, machine in plan.machines.items():
            by_machine.setdefault(machine, []).append(cluster)
        mtu = (
            f"every testbed interface at MTU {plan.mtu} (the underlay's "
            f"{sc.placement.underlay_mtu} cannot carry 1500 + the cable's 50 bytes)"
            if plan.mtu
            else "interfaces at 1500 (the underlay carries the cable's 50 bytes more)"
        )
        out.print(
            "placement (`testbed run --ray ADDRESS`, one agent per machine): "
            + "; ".join(f"{m}: {', '.join(cs)}" for m, cs in by_machine.items())
            + ". VXLAN cables (UDP 4789): "
            + (
                "; ".join(
                    f"{c.link} {c.wire_if} on {c.wire_machine} <-> {c.gw_if} on {c.gw_machine} "
                    f"(VNI {c.vni})"
                    for c in plan.cables
                )
                or "none (every link within one machine)"
            )
            + f"; {mtu}."
        )
    if plan.fabric:
        out.print(_fabric_table(sc))
    out.print(_tcp_table(sc, plan))
    if any(getattr(f, "kind", "") == "dcqcn" for f in sc.flows):
        out.print(_dcqcn_table(sc, plan))
    if any(link.preset or link.schedule or link.trace for link in sc.wan):
        out.print(_dynamics_table(sc, base, args.file, timeline))
    if sc.faults:
        out.print(_faults_table(sc, timeline))
    if timeline.events:
        origin = (
            "the start of the run"
            if sc.clock == "wall"
            else "the first measured iteration"
            if sc.rank_workload is not None
            else "the start of the traffic"
        )
        out.print(
            f"times count from {origin} (clock: {sc.clock}); {len(timeline.events)} events"
            + (
                f", looping traces expanded to {timeline.horizon:g} s (a run expands to its own "
                "length)"
                if timeline.horizon is not None
                else ""
            )
        )
    needs = plan.needs_propagation_emulation()
    out.print(
        f"backend: {sc.backend}; propagation emulation needed: {'yes' if needs else 'no'} "
        "(`testbed doctor` tells which backend this kernel gets)"
    )
    if sc.engine == "mininet":
        out.print(
            "engine: mininet (each namespace a Mininet node named like its label with _ for -, "
            "e.g. east_h0; docs/mininet.md)"
        )
    for w in plan.warnings:
        out.print(f"[yellow]warning:[/] {escape(w)}")
    return 0


def _namespace_table(plan: NetworkPlan) -> Table:
    t = Table(title="Namespaces and addresses")
    for col in ("namespace", "role", "interfaces", "routes"):
        t.add_column(col)
    for ns in plan.namespaces:
        addrs = [f"{a.ifname} {a.cidr}" for a in plan.addresses if a.ns == ns.name]
        routes = [
            f"{r.dst} via "
            + (", ".join(f"{gw} (weight {w})" for gw, w in r.nexthops) if r.nexthops else r.via)
            for r in plan.routes
            if r.ns == ns.name
        ]
        t.add_row(ns.label, ns.role, "\n".join(addrs), "\n".join(routes))
    return t


def _wan_table(plan: NetworkPlan) -> Table:
    t = Table(title="WAN directions (bottleneck: HTB on the sending gateway; docs/congestion.md)")
    for col in (
        "direction",
        "rate",
        "delay",
        "jitter",
        "loss",
        "reorder",
        "BDP",
        "buffer",
        "HTB burst",
        "netem limit",
        "queue",
    ):
        t.add_column(col, justify="right")
    for d in plan.wan:
        t.add_row(
            d.name,
            format_rate(d.rate),
            format_duration(d.delay),
            format_duration(d.jitter),
            format_percent(d.loss),
            format_percent(d.reorder),
            format_size(d.bdp),
            format_size(d.buffer),
            format_size(d.shaper.burst),
            f"{d.impairment.netem_limit} pkt",
            _queue_text(d.aqm),
        )
    return t


def _fabric_table(sc: Scenario) -> Table:
    t = Table(title="Fabric links (each host veth, both ends)")
    for col in ("cluster", "rate", "delay"):
        t.add_column(col)
    for name, spec in sc.clusters.items():
        if spec.fabric.rate or spec.fabric.delay:
            rate = format_rate(spec.fabric.rate) if spec.fabric.rate else "unshaped"
            t.add_row(name, rate, format_duration(spec.fabric.delay))
    return t


def _tcp_table(sc: Scenario, plan: NetworkPlan) -> Table:
    t = Table(title="TCP per cluster")
    for col in ("cluster", "congestion", "ecn", "tcp_rmem", "tcp_wmem"):
        t.add_column(col)
    for name in sc.clusters:
        host = next(h for h in plan.hosts if h.cluster == name)
        sysctls = next(n.sysctls for n in plan.namespaces if n.name == host.ns)
        t.add_row(
            name,
            host.tcp.congestion,
            str(host.tcp.ecn),
            sysctls["net.ipv4.tcp_rmem"],
            sysctls["net.ipv4.tcp_wmem"],
        )
    return t


def _dcqcn_table(sc: Scenario, plan: NetworkPlan) -> Table:
    """The DCQCN flows with what they run with in the testbed's units and, dilated, the real
    ones they stand for (times / s, rates x s)."""
    from testbed.run.flows import dcqcn_setup

    s = sc.dilation
    real = f" (real: / {s:g} for times, x {s:g} for rates)" if s != 1 else ""
    t = Table(title=escape(f"DCQCN flows, dilation {s:g}: emulated units [real units]{real}"))
    for col in ("flow", "from -> to", "start, duration", "line rate", "bottleneck, RTT"):
        t.add_column(col)
    t.add_column("N, K, T, B")
    t.add_column("variant: g, F, rai, rhai, min_dec_fac")

    def both_t(x: float) -> str:
        return f"{format_duration(x)} [{format_duration(x / s)}]" if s != 1 else format_duration(x)

    def both_r(x: float) -> str:
        return f"{format_rate(x)} [{format_rate(x * s)}]" if s != 1 else format_rate(x)

    for i, f in enumerate(sc.flows):
        if getattr(f, "kind", "") != "dcqcn":
            continue
        u = dcqcn_setup(f, plan, s)
        p = u["params"]
        b = "off" if p["byte_counter"] is None else format_size(p["byte_counter"])
        t.add_row(
            str(i),
            f"{f.from_} -> {f.to}",
            f"{both_t(f.start)}, {both_t(f.duration)}",
            both_r(u["line_rate_bps"]),
            f"{u['direction']} {both_r(u['bottleneck_bps'])}, {both_t(u['rtt_s'])}",
            ", ".join(both_t(p[k]) for k in ("cnp_interval", "alpha_timer", "rate_timer"))
            + f", {b}",
            f"{f.variant}: {p['g']:.4g}, {p['fast_recovery_steps']}, {both_r(p['rai'])}, "
            f"{both_r(p['rhai'])}, {format_percent(p['min_dec_fac'])}",
        )
    return t


def _dynamics_table(sc: Scenario, base: Path, source: str, timeline: Timeline) -> Table:
    from testbed.plan.timeline import read_link_trace

    t = Table(title="WAN links: preset and how they change (docs/faults.md)")
    for col in ("link", "preset (source)", "changes"):
        t.add_column(col)
    for i, link in enumerate(sc.wan):
        if link.trace is not None:
            tr = link.trace
            bins = read_link_trace(link, i, base, source)
            rates = [b.rate for b in bins.bins]
            dark = sum(1 for r in rates if r == 0)
            changes = (
                f"trace {tr.file} ({tr.format}, {tr.direction}"
                + (f", scale {tr.scale:g}" if tr.scale != 1 else "")
                + f"): {len(rates)} bins of {format_duration(tr.bin)}, mean "
                f"{format_rate(bins.mean_rate())}, {format_rate(min(rates))}.."
                f"{format_rate(max(rates))}"
                + (f", {dark} bins at rate 0 (blackholes)" if dark else "")
                + (
                    f", loops to {timeline.horizon:g} s"
                    if tr.loop and timeline.horizon is not None
                    else f", then holds {format_rate(bins.last.rate)}"
                )
            )
        elif link.schedule:
            steps = [e for e in timeline.events if e.source == "schedule" and e.link == link.name]
            changes = "\n".join(f"{e.at:g} s: {e.what}" for e in steps)
        else:
            changes = "constant"
        t.add_row(link.name, escape(_preset_text(link)), escape(changes))
    return t


def _preset_text(link) -> str:
    from testbed.config.presets import find

    if link.preset is None:
        return "-"
    p = find(link.preset)
    scaled = f" x {link.scale:g}" if link.scale != 1 else ""
    return "\n".join(x for x in (p.name + scaled, p.source, p.note) if x)


def _faults_table(sc: Scenario, timeline: Timeline) -> Table:
    t = Table(title="Faults (times from the clock origin; `after` from that iteration's start)")
    for col in ("#", "start", "end", "kind", "link / cluster", "what"):
        t.add_column(col)
    for j, f in enumerate(sc.faults):
        events = [e for e in timeline.events if e.fault == j]
        first, last = events[0], events[-1]
        start, end = f"{first.at:g} s", f"{last.at:g} s"
        if f.after is not None:
            it = f"iteration {f.after.iteration} + "
            start, end = it + format_duration(first.at), it + format_duration(last.at)
        if last is first:
            end = "never"
        if f.kind == "partition":
            where = ", ".join(dict.fromkeys(e.link for e in events if e.link))
        else:
            where = getattr(f, "link", None) or f.cluster
        what = first.what
        if f.kind == "flap":
            what = f"{f.count} x (down {format_duration(f.down)}, up {format_duration(f.up)})"
        t.add_row(str(j), start, end, f.kind, escape(where), escape(what))
    return t


def _queue_text(aqm) -> str:
    if aqm is None:
        return "drop-tail (bfifo)"
    if aqm.kind == "red":
        text = f"red {format_size(aqm.kmin)}..{format_size(aqm.kmax)} p {format_percent(aqm.pmax)}"
    elif aqm.kind == "step":
        text = f"step > {format_size(aqm.k)}"
    else:
        return "drop-tail"
    return text + (" ECN" if aqm.ecn else " drop")


# -- live verbs -------------------------------------------------------------------------------
def _print_hosts(tb) -> None:
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
    from testbed.config.scenario import load_scenario
    from testbed.run.testbed import Testbed

    need_root("up")
    sc = load_scenario(args.file)
    if args.engine:
        sc = sc.model_copy(update={"engine": args.engine})
    if args.cli and sc.engine != "mininet":
        raise UsageError("--cli is Mininet's CLI: use it with --engine mininet")
    foreground = args.foreground or args.cli
    tb = Testbed(sc, name=args.name or sc.name, persistent=not foreground, source=args.file)
    if args.cli:
        from mininet.cli import CLI
        from mininet.log import setLogLevel

        with tb:
            setLogLevel("output")  # the CLI prints at Mininet's "output" level
            _announce(tb)
            _print_hosts(tb)
            out.print("Mininet CLI: nodes are named like east_h0; `exit` tears the testbed down")
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
    _announce(tb)
    _print_hosts(tb)
    out.print(f"up; `testbed exec {tb.name} HOST -- CMD` runs a command, `testbed down {tb.name}`")
    return 0


def _announce(tb) -> None:
    out.print(f"backend: [bold]{tb.backend.name}[/] ({escape(tb.backend.reason)})")
    floors = [c.floor_s for c in tb.compensation if c.compensation_s]
    if floors:
        out.print(
            f"RTT compensation: measured floors of {format_duration(min(floors))} to "
            f"{format_duration(max(floors))} one way are subtracted from the emulated delays"
        )
    for w in tb.plan.warnings:
        out.print(f"[yellow]warning:[/] {escape(w)}")


def cmd_exec(args: argparse.Namespace) -> int:
    from testbed.run.testbed import Testbed

    need_root("exec")
    tb = Testbed.attach(args.name)
    argv = args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd
    if not argv:
        raise TestbedError("nothing to run: testbed exec NAME HOST -- CMD [ARGS...]")
    cmd = tb.command(args.host, argv)
    os.execvp(cmd[0], cmd)
    return 127  # not reached


def cmd_ls(args: argparse.Namespace) -> int:
    recs = registry.records()
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


def cmd_doctor(args: argparse.Namespace) -> int:
    from testbed.config.scenario import load_scenario
    from testbed.link.choose import choose_backend
    from testbed.net import probe as kernel
    from testbed.plan.topology import build_plan

    feats = kernel.probe()
    out.print(_features_table(feats))
    needs, marking, hold = True, False, False
    if args.file:
        sc = load_scenario(args.file)
        doctor_plan = build_plan(sc, "x", 64)
        needs, marking = doctor_plan.needs_propagation_emulation(), doctor_plan.needs_marking()
        hold = doctor_plan.needs_hold()
        requested = sc.backend
    else:
        requested = "auto"
    try:
        choice = choose_backend(requested, needs, feats, marking, hold)
        out.print(
            f"backend for {args.file or 'a scenario with WAN delay'}: "
            f"[bold]{choice.name}[/] — {escape(choice.reason)}"
        )
    except TestbedError as exc:
        out.print(f"[red]{escape(exc)}[/]")
    if not feats.has_qdisc("netem"):
        out.print(
            "netem is missing on this kernel: WAN delay/jitter/loss/reorder use the "
            "userspace delay line (backend: userspace)."
        )
    missing = [q for q in ("netem", "red", "fq") if not feats.has_qdisc(q)]
    if not feats.congestion_supported("dctcp"):
        missing.append("dctcp")
    if missing:
        out.print(
            f"for {', '.join(missing)}: `testbed vm -- testbed run FILE` runs a scenario on a "
            "stock distribution kernel in a throwaway guest (docs/vm.md)"
        )
    from testbed.net.engines import MininetEngine

    try:
        MininetEngine().check()
        out.print("engine mininet: available (`--engine mininet`)")
    except TestbedError as exc:
        out.print(f"engine mininet: [yellow]{escape(exc)}[/]")
    from testbed.net import frr

    why = frr.missing()
    if why:
        out.print(f"routing mode bgp: [yellow]{escape(why)}[/]")
    else:
        out.print(f"routing mode bgp: available ({escape(frr.version())}, {frr.FRR_LIB})")
    for note in feats.notes:
        out.print(f"note: {escape(note)}")
    return 0


def _features_table(feats: KernelFeatures) -> Table:
    t = Table(title=f"kernel {feats.release}")
    t.add_column("feature")
    t.add_column("status")
    t.add_column("used for")

    def yes(ok: bool) -> str:
        return "[green]yes[/]" if ok else "[red]missing[/]"

    t.add_row("root", yes(feats.root), "namespaces, qdiscs, iptables")
    t.add_row("network namespaces", yes(feats.netns), "hosts and gateways")
    uses = {
        "htb": "WAN/fabric rate",
        "bfifo": "byte-limited bottleneck buffer",
        "netem": "kernel delay/jitter/loss/reorder",
        "red": "RED/ECN marking (kernel)",
        "fq": "pacing",
        "fq_codel": "AQM",
        "tbf": "-",
    }
    for q, ok in feats.qdiscs.items():
        t.add_row(f"qdisc {q}", yes(ok), uses.get(q, ""))
    for cc in ("reno", "cubic", "bbr", "dctcp"):
        state = feats.congestion_supported(cc)
        t.add_row(f"tcp {cc}", yes(state), "tcp.congestion")
    t.add_row("iptables", yes(feats.iptables is not None), feats.iptables or "")
    t.add_row("NFQUEUE", yes(feats.nfqueue), "userspace delay line")
    t.add_row("torch", feats.torch or "[red]not installed[/]", "collectives")
    return t
