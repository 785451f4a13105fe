"""The pure verbs: ``validate`` (a scenario file is sound) and ``plan`` (what would be built,
as tables: namespaces and addresses, WAN directions, fabric, TCP, DCQCN flows, how links change,
faults). Nothing here touches the kernel.

The scenario schema (pydantic), the plan and the timeline are imported inside the verbs: their
import is most of the CLI's start-up, which ``--help`` and the live verbs do not need.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from testbed.cli.console import escape, make_console
from testbed.core.errors import ScenarioError
from testbed.core.units import format_duration, format_percent, format_rate, format_size

if TYPE_CHECKING:
    from testbed.config.scenario import Scenario
    from testbed.config.wan import Aqm, WanLink
    from testbed.plan.check import Checked
    from testbed.plan.model import NetworkPlan
    from testbed.plan.timeline import Timeline

out = make_console()
JSON_VERSION = 1  # of validate's and plan's --json shape (docs/json.md); raised when it changes


def cmd_validate(args: argparse.Namespace) -> int:
    from testbed.config.sweep import parse_override
    from testbed.plan.check import check_file

    checked = check_file(args.file, [parse_override(s) for s in getattr(args, "set", [])])
    if getattr(args, "json", False):
        print(json.dumps(validate_json(checked), indent=2))
        return 2 if checked.problems else 0
    if checked.problems:
        raise ScenarioError(checked.text())
    points = f"{checked.points} point{'s' if checked.points != 1 else ''}"
    repeats = f"{checked.repeat} repeat{'s' if checked.repeat != 1 else ''}"
    out.print(
        f"{escape(args.file)}: ok — {escape(checked.name)}: {checked.runs} "
        f"run{'s' if checked.runs != 1 else ''} ({points} x {repeats})",
        highlight=False,
        soft_wrap=True,
    )
    return 0


def validate_json(checked: Checked) -> dict[str, Any]:
    """``testbed validate --json``: see docs/json.md."""
    return {
        "version": JSON_VERSION,
        "file": checked.file,
        "ok": not checked.problems,
        "problems": [p.as_dict() for p in checked.problems],
        "scenario": checked.name,
        "runs": checked.runs,
        "points": checked.points,
        "repeat": checked.repeat,
    }


def cmd_plan(args: argparse.Namespace) -> int:
    from testbed.config.loading import load_scenario
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
        assert sc.placement is not None  # the plan's machines come from it
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
    from testbed.experiment.flows import dcqcn_setup

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
        if f.kind != "dcqcn":
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


def _preset_text(link: WanLink) -> str:
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
            where = f.cluster if f.kind == "gateway_crash" else f.link
        what = first.what
        if f.kind == "flap":
            what = f"{f.count} x (down {format_duration(f.down)}, up {format_duration(f.up)})"
        t.add_row(str(j), start, end, f.kind, escape(where), escape(what))
    return t


def _queue_text(aqm: Aqm | None) -> str:
    if aqm is None:
        return "drop-tail (bfifo)"
    if aqm.kind == "red":
        # Aqm's validator requires the fields of its kind
        assert aqm.kmin is not None and aqm.kmax is not None and aqm.pmax is not None
        text = f"red {format_size(aqm.kmin)}..{format_size(aqm.kmax)} p {format_percent(aqm.pmax)}"
    elif aqm.kind == "step":
        assert aqm.k is not None
        text = f"step > {format_size(aqm.k)}"
    else:
        return "drop-tail"
    return text + (" ECN" if aqm.ecn else " drop")


def add_set_option(parser: argparse.ArgumentParser) -> None:
    """``--set PATH=VALUE`` as ``testbed run`` takes it."""
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override a field, e.g. --set wan[0].delay=50ms (repeatable; as `testbed run`)",
    )
