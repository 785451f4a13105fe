"""The pure verbs: ``validate`` (every problem of a scenario file at once, as ``testbed run``
would find them: testbed.plan.check) and ``plan`` (what a run would build and do: namespaces and
addresses, WAN directions, fabric, TCP, DCQCN flows, how links change, faults; the sweep's runs,
rank placement, predicted times and estimated duration, expectations, the backend chosen here:
testbed.experiment.forecast; or the topology as a graph). Nothing here touches the kernel.

Settings print in the scenario's own syntax (testbed.core.syntax), so that a value can be
copied into a scenario or a ``--set``; a table wider than the console prints as stacked rows
(:func:`emit`). ``--json`` shapes are docs/json.md's.

The scenario schema (pydantic), the plan and the timeline are imported inside the verbs: their
import is most of the CLI's start-up, which ``--help`` and the live verbs do not need.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.measure import Measurement
from rich.table import Table

from testbed.cli.console import escape, make_console
from testbed.core.errors import ScenarioError
from testbed.core.syntax import duration_text, percent_text, rate_text, size_text
from testbed.core.units import format_duration, format_percent, format_rate, format_size

if TYPE_CHECKING:
    from rich.console import Console

    from testbed.config.scenario import Scenario
    from testbed.config.sweep import RunSpec
    from testbed.config.wan import Aqm, WanLink
    from testbed.experiment.forecast import Forecast
    from testbed.plan.check import Checked
    from testbed.plan.model import NetworkPlan
    from testbed.plan.ranks import RankSlot
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
    from testbed.config.loading import load_yaml
    from testbed.config.sweep import expand, parse_override
    from testbed.experiment.forecast import forecast
    from testbed.plan.check import check_data
    from testbed.plan.graph import graph
    from testbed.plan.timeline import build_timeline, default_horizon
    from testbed.plan.topology import build_plan

    overrides = [parse_override(s) for s in args.set]
    if args.engine:
        overrides.append(("engine", args.engine))
    data = load_yaml(args.file)
    base = Path(args.file).parent
    checked = check_data(data, args.file, base, overrides)
    if checked.problems and args.json:
        print(json.dumps(validate_json(checked), indent=2))
        return 2
    if checked.problems:
        raise ScenarioError(checked.text())
    runs = expand(data, args.file, overrides)
    shown = runs
    if args.point is not None:
        if not 0 <= args.point < len(runs):
            raise ScenarioError(
                f"--point {args.point}: {args.file} has {len(runs)} run(s): 0 to {len(runs) - 1}"
            )
        shown = [runs[args.point]]
    sc = shown[0].scenario
    plan = build_plan(sc, "<prefix>", 64)
    if args.graph:
        print(graph(args.graph, sc, plan), end="")
        return 0
    plans = {r.run_id: plan if r is shown[0] else build_plan(r.scenario, "<prefix>", 64)
             for r in shown}  # fmt: skip
    forecasts = [forecast(r, plans[r.run_id], args.selfcheck) for r in shown]
    if args.json:
        print(json.dumps(plan_json(args.file, runs, shown, plans, forecasts), indent=2))
        return 0
    timeline = build_timeline(sc, plan, base, default_horizon(sc), source=args.file)
    _print_overview(args.file, runs, shown, forecasts)
    if len(shown) > 1 and any(r.params for r in shown):
        out.print(f"The network below is {shown[0].run_id}'s ({escape(shown[0].label())}).")
    _print_network(args, sc, plan, timeline, base)
    _print_workload(sc, forecasts[0])
    emit(_runs_table(shown, forecasts))
    if sc.expect:
        emit(_expect_table(sc, runs))
    _print_backend(sc, plan)
    for w in plan.warnings:
        out.print(f"[yellow]warning:[/] {escape(w)}")
    return 0


def _print_network(
    args: argparse.Namespace, sc: Scenario, plan: NetworkPlan, timeline: Timeline, base: Path
) -> None:
    """The network sections: namespaces, WAN, routing, placement, fabric, TCP, DCQCN, how
    links change, faults."""
    out.print(
        "Namespaces are named <prefix>-<label>; addresses come from 10.<slot>.0.0/16 "
        "(shown for slot 64; each live testbed gets its own slot)."
    )
    emit(_namespace_table(plan))
    emit(_wan_table(plan))
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
        emit(_fabric_table(sc))
    emit(_tcp_table(sc, plan))
    if any(getattr(f, "kind", "") == "dcqcn" for f in sc.flows):
        emit(_dcqcn_table(sc, plan))
    if any(link.preset or link.schedule or link.trace for link in sc.wan_paths):
        emit(_dynamics_table(sc, base, args.file, timeline))
    if sc.faults:
        emit(_faults_table(sc, timeline))
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
                f", looping traces expanded to {duration_text(timeline.horizon)} (a run expands "
                "to its own length)"
                if timeline.horizon is not None
                else ""
            )
        )
    if sc.engine == "mininet":
        out.print(
            "engine: mininet (each namespace a Mininet node named like its label with _ for -, "
            "e.g. east_h0; docs/mininet.md)"
        )


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
            rate_text(d.rate),
            duration_text(d.delay),
            duration_text(d.jitter),
            percent_text(d.loss),
            percent_text(d.reorder),
            size_text(d.bdp),
            size_text(d.buffer),
            size_text(d.shaper.burst),
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
            rate = rate_text(spec.fabric.rate) if spec.fabric.rate else "unshaped"
            t.add_row(name, rate, duration_text(spec.fabric.delay))
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
    for i, link in ((i, p) for i, w in enumerate(sc.wan) for p in w.paths_of()):
        if link.trace is not None:
            tr = link.trace
            bins = read_link_trace(link, i, base, source)
            rates = [b.rate for b in bins.bins]
            dark = sum(1 for r in rates if r == 0)
            changes = (
                f"trace {tr.file} ({tr.format}, {tr.direction}"
                + (f", scale {tr.scale:g}" if tr.scale != 1 else "")
                + f"): {len(rates)} bins of {duration_text(tr.bin)}, mean "
                f"{rate_text(bins.mean_rate())}, {rate_text(min(rates))}.."
                f"{rate_text(max(rates))}"
                + (f", {dark} bins at rate 0 (blackholes)" if dark else "")
                + (
                    f", loops to {duration_text(timeline.horizon)}"
                    if tr.loop and timeline.horizon is not None
                    else f", then holds {rate_text(bins.last.rate)}"
                )
            )
        elif link.schedule:
            steps = [e for e in timeline.events if e.source == "schedule" and e.link == link.name]
            changes = "\n".join(f"{duration_text(e.at)}: {e.what}" for e in steps)
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
        start, end = duration_text(first.at), duration_text(last.at)
        if f.after is not None:
            it = f"iteration {f.after.iteration} + "
            start, end = it + duration_text(first.at), it + duration_text(last.at)
        if last is first:
            end = "never"
        if f.kind == "partition":
            where = ", ".join(dict.fromkeys(e.link for e in events if e.link))
        else:
            where = f.cluster if f.kind == "gateway_crash" else f.link
        what = first.what
        if f.kind == "flap":
            what = f"{f.count} x (down {duration_text(f.down)}, up {duration_text(f.up)})"
        t.add_row(str(j), start, end, f.kind, escape(where), escape(what))
    return t


def _queue_text(aqm: Aqm | None) -> str:
    if aqm is None:
        return "drop-tail (bfifo)"
    if aqm.kind == "red":
        # Aqm's validator requires the fields of its kind
        assert aqm.kmin is not None and aqm.kmax is not None and aqm.pmax is not None
        text = f"red {size_text(aqm.kmin)}..{size_text(aqm.kmax)} p {percent_text(aqm.pmax)}"
    elif aqm.kind == "step":
        assert aqm.k is not None
        text = f"step > {size_text(aqm.k)}"
    else:
        return "drop-tail"
    return text + (" ECN" if aqm.ecn else " drop")


# -- what the runs will do ---------------------------------------------------------------------
def emit(table: Table, console: Console | None = None) -> None:
    """``table`` as a table when it fits the console's width, else as stacked rows: each row's
    first cell, then one ``column: value`` line per other cell (a narrow terminal keeps every
    value whole instead of cutting each column to ``dir…``)."""
    c = console or out
    natural = Measurement.get(c, c.options.update_width(1 << 20), table).maximum
    if natural <= c.width:
        c.print(table)
        return
    if table.title:
        c.print(str(table.title), style="italic", highlight=False)
    headers = [escape(str(col.header)) for col in table.columns]
    cells = [list(col.cells) for col in table.columns]
    for i in range(table.row_count):
        row = [str(cells[j][i]) for j in range(len(headers))]
        c.print(f"[bold]{row[0]}[/]", highlight=False)
        for header, value in zip(headers[1:], row[1:], strict=True):
            if not value.strip():
                continue
            first, *rest = value.split("\n")
            c.print(f"  {header}: {first}", highlight=False)
            for line in rest:
                c.print(f"    {line}", highlight=False)


def human_duration(seconds: float) -> str:
    """``43 s``, ``6 min 42 s``, ``1 h 5 min``: a duration a person plans with."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def _written(value: Any) -> str:
    """A sweep value as the scenario writes it."""
    if isinstance(value, list):
        return "[" + ", ".join(_written(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_written(v)}" for k, v in value.items()) + "}"
    return "(scenario's)" if value is None else str(value)


def _caveats(forecasts: list[Forecast]) -> list[str]:
    return list(dict.fromkeys(f.unknown for f in forecasts if f.unknown))


def _print_overview(
    file: str, runs: list[RunSpec], shown: list[RunSpec], forecasts: list[Forecast]
) -> None:
    from testbed.experiment.forecast import total_seconds

    sc = shown[0].scenario
    out.print(f"[bold]{escape(sc.name)}[/]: {escape(sc.description)}", highlight=False)
    for key, label in (("question", "Question"), ("expected", "Expected")):
        text = getattr(sc, key, None)
        if text:
            out.print(f"{label}: {escape(text)}", highlight=False)
    points = len({r.point for r in runs})
    axes = ", ".join(f"{escape(p)} x {len(v)}" for p, v in sc.sweep.items())
    line = (
        f"runs: [bold]{len(runs)}[/] ({points} point{'s' if points != 1 else ''} x "
        f"{sc.repeat} repeat{'s' if sc.repeat != 1 else ''}" + (f": {axes}" if axes else "") + ")"
    )
    if len(shown) < len(runs):
        line += f"; shown: {shown[0].run_id} (--point)"
    caveats = _caveats(forecasts)
    line += f"; estimated duration [bold]{human_duration(total_seconds(forecasts))}[/]"
    if caveats:
        line += " or more (it leaves out " + escape("; ".join(caveats)) + ")"
    out.print(line, highlight=False)


def _print_workload(sc: Scenario, fc: Forecast) -> None:
    from testbed.config.workloads import SyntheticModel, TrainingWorkload, Workload

    w = sc.workload
    if w is None:
        flows = f"traffic only: {len(sc.flows)} flow(s)" if sc.flows else "nothing"
        out.print(f"workload: none ({flows})", highlight=False)
        return
    if isinstance(w, Workload):
        text = (
            f"collectives {', '.join(w.collectives)} x algorithms {', '.join(w.algorithms)} x "
            f"sizes {', '.join(size_text(x) for x in w.sizes)}; {w.dtype}; warmup {w.warmup}, "
            f"iterations {w.iterations}; timeout {duration_text(w.timeout)}"
        )
    elif isinstance(w, TrainingWorkload) and w.compute is not None:  # emulated compute
        model = w.model
        if isinstance(model, SyntheticModel):
            spec = model.synthetic
            model = f"synthetic {spec.params:.3g} params ({spec.dtype}, {spec.layers} layers)"
        text = (
            f"training {model}, emulated compute {duration_text(w.compute.step)} per step, "
            f"scale {w.scale:g}: {w.algorithm}, {w.steps} steps; timeout "
            f"{duration_text(w.timeout)}"
        )
    elif isinstance(w, TrainingWorkload):
        text = (
            f"training {w.model} on {w.data}: {w.algorithm}, {w.steps} steps, batch {w.batch} "
            f"per rank, lr {w.lr:g}; timeout {duration_text(w.timeout)}"
        )
    else:
        text = w.kind + (f", {len(sc.flows)} flow(s)" if sc.flows else "")
    out.print(f"workload: {escape(text)}", highlight=False)
    if fc.ranks:
        rw = sc.rank_workload
        assert rw is not None
        out.print(
            f"ranks: {len(fc.ranks)} ({rw.ranks_per_host} per host, {rw.placement})",
            highlight=False,
        )
        emit(_ranks_table(fc.ranks, sc))


def _spans(numbers: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    out_: list[str] = []
    for n in numbers:
        if out_ and out_[-1].split("-")[-1] == str(n - 1):
            out_[-1] = f"{out_[-1].split('-')[0]}-{n}"
        else:
            out_.append(str(n))
    return ", ".join(out_)


def _ranks_table(ranks: list[RankSlot], sc: Scenario) -> Table:
    w = sc.rank_workload
    assert w is not None
    t = Table(title="Rank placement")
    for col in ("host", "cluster", "ranks"):
        t.add_column(col)
    by_host: dict[str, list[RankSlot]] = {}
    for r in ranks:
        by_host.setdefault(r.host, []).append(r)
    for host, mine in by_host.items():
        t.add_row(escape(host), escape(mine[0].cluster), _spans([r.rank for r in mine]))
    return t


def _runs_table(shown: list[RunSpec], forecasts: list[Forecast]) -> Table:
    paths = list(dict.fromkeys(p for r in shown for p in r.params))
    t = Table(title="Runs: the α-β model's prediction per operation (docs/model.md), the estimate")
    t.add_column("run")
    for p in paths:
        t.add_column(escape(p))
    t.add_column("predicted")
    t.add_column("estimate", justify="right")
    for r, fc in zip(shown, forecasts, strict=True):
        predicted = "\n".join(
            escape(
                f"{p.what}: "
                + (duration_text(float(f"{p.seconds:.3g}")) if p.seconds is not None else "-")
                + (f" x{p.times}" if p.times > 1 else "")
                + (f" ({p.note})" if p.note else "")
            )
            for p in fc.predicted
        )
        t.add_row(
            r.run_id,
            *(escape(_written(r.params.get(p))) for p in paths),
            predicted or "-",
            human_duration(fc.seconds),
        )
    return t


def _expect_table(sc: Scenario, runs: list[RunSpec]) -> Table:
    from testbed.plan.check import expected_checks

    points = [(r.params, r.scenario) for r in runs if r.repeat == 0]
    t = Table(title="Expectations (checked after the runs; a failed one exits 1)")
    for col in ("#", "expectation", "rows it tests"):
        t.add_column(col)
    for i, exp in enumerate(sc.expect):
        checks = expected_checks(points, exp)
        rows = [c.row for c in checks if c.row]
        tested = f"{len(rows)}: " + ", ".join(rows[:2]) + (", ..." if len(rows) > 2 else "")
        t.add_row(str(i), escape(exp.describe()), escape(tested if rows else "none"))
    return t


def _print_backend(sc: Scenario, plan: NetworkPlan) -> None:
    from testbed.experiment.forecast import backend_here

    choice = backend_here(sc, plan)
    asked = f" (scenario: backend {sc.backend})" if sc.backend != "auto" else ""
    out.print(
        f"backend: [bold]{escape(choice.name)}[/]{asked} — {escape(choice.reason)}",
        highlight=False,
    )


def plan_json(
    file: str,
    runs: list[RunSpec],
    shown: list[RunSpec],
    plans: dict[str, NetworkPlan],
    forecasts: list[Forecast],
) -> dict[str, Any]:
    """``testbed plan --json``: see docs/json.md. Quantities in SI units (bit/s, s, bytes,
    fractions)."""
    from testbed.experiment.forecast import backend_here, total_seconds

    sc = shown[0].scenario
    plan = plans[shown[0].run_id]
    choice = backend_here(sc, plan)
    points = [(r.params, r.scenario) for r in runs if r.repeat == 0]
    from testbed.plan.check import expected_checks

    return {
        "version": JSON_VERSION,
        "file": file,
        "scenario": sc.name,
        "description": sc.description,
        "sweep": {
            "paths": list(sc.sweep),
            "points": len({r.point for r in runs}),
            "repeat": sc.repeat,
            "runs": len(runs),
        },
        "estimate_s": total_seconds(forecasts),
        "estimate_leaves_out": _caveats(forecasts),
        "backend": {"requested": sc.backend, "chosen": choice.name, "reason": choice.reason},
        "engine": sc.engine,
        "network": {
            "namespaces": [
                {
                    "label": ns.label,
                    "role": ns.role,
                    "cluster": ns.cluster,
                    "addresses": [
                        f"{a.ifname} {a.cidr}" for a in plan.addresses if a.ns == ns.name
                    ],
                }
                for ns in plan.namespaces
            ],
            "wan": [
                {
                    "direction": d.name,
                    "rate_bps": d.rate,
                    "delay_s": d.delay,
                    "jitter_s": d.jitter,
                    "loss": d.loss,
                    "reorder": d.reorder,
                    "bdp_bytes": d.bdp,
                    "buffer_bytes": d.buffer,
                    "queue": _queue_text(d.aqm),
                }
                for d in plan.wan
            ],
        },
        "workload": sc.workload.model_dump(mode="json") if sc.workload is not None else None,
        "ranks": [r.as_dict() for r in forecasts[0].ranks],
        "expectations": [
            {
                "index": i,
                "description": exp.describe(),
                "metric": exp.metric,
                "relation": exp.relation,
                "rows": [c.row for c in expected_checks(points, exp) if c.row],
            }
            for i, exp in enumerate(sc.expect)
        ],
        "runs": [
            {
                "run_id": r.run_id,
                "point": r.point,
                "repeat": r.repeat,
                "params": r.params,
                "predicted": [
                    {"what": p.what, "seconds": p.seconds, "times": p.times, "note": p.note}
                    for p in fc.predicted
                ],
                "estimate_s": fc.seconds,
                "estimate_parts_s": fc.parts,
                "estimate_leaves_out": fc.unknown,
            }
            for r, fc in zip(shown, forecasts, strict=True)
        ],
        "warnings": list(plan.warnings),
    }
