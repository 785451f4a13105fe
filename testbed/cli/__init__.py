"""The ``testbed`` command: one small function per verb over the API, errors without tracebacks.

Exit codes: 0 success, 1 a run or check failed, 2 bad input (scenario, arguments), 125 the
`testbed vm` guest itself failed, 127 command not found in the guest, 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from rich.table import Table

from testbed import vm
from testbed.cli.console import escape, make_console
from testbed.config.scenario import load_scenario
from testbed.core.errors import TestbedError
from testbed.core.units import format_duration, format_percent, format_rate, format_size
from testbed.link.choose import choose_backend
from testbed.net import build as net
from testbed.net import probe as kernel
from testbed.net import registry
from testbed.plan.topology import build_plan

DESCRIPTION = (
    "Emulate a multi-datacenter network (clusters in Linux namespaces joined by slow, long, lossy "
    "WAN links) and run real PyTorch collectives across it."
)
out = make_console()
err = make_console(stderr=True)


def _need_root(verb: str) -> None:
    if os.geteuid() != 0:
        raise TestbedError(
            f"`testbed {verb}` needs root (network namespaces, qdiscs); run it with sudo"
        )


# -- pure verbs -------------------------------------------------------------------------------
def cmd_validate(args: argparse.Namespace) -> int:
    sc = load_scenario(args.file)
    hosts = sum(c.hosts for c in sc.clusters.values())
    out.print(
        f"{args.file}: ok — {sc.name}: {len(sc.clusters)} clusters, {hosts} hosts, "
        f"{len(sc.wan)} WAN links"
    )
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    sc = load_scenario(args.file)
    plan = build_plan(sc, "<prefix>", 64)
    out.print(f"[bold]{escape(sc.name)}[/]: {escape(sc.description)}")
    out.print(
        "Namespaces are named <prefix>-<label>; addresses come from 10.<slot>.0.0/16 "
        "(shown for slot 64; each live testbed gets its own slot)."
    )
    t = Table(title="Namespaces and addresses")
    for col in ("namespace", "role", "interfaces", "routes"):
        t.add_column(col)
    for ns in plan.namespaces:
        addrs = [f"{a.ifname} {a.cidr}" for a in plan.addresses if a.ns == ns.name]
        routes = [f"{r.dst} via {r.via}" for r in plan.routes if r.ns == ns.name]
        t.add_row(ns.label, ns.role, "\n".join(addrs), "\n".join(routes))
    out.print(t)
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
    out.print(t)
    if plan.fabric:
        t = Table(title="Fabric links (each host veth, both ends)")
        for col in ("cluster", "rate", "delay"):
            t.add_column(col)
        for name, spec in sc.clusters.items():
            if spec.fabric.rate or spec.fabric.delay:
                rate = format_rate(spec.fabric.rate) if spec.fabric.rate else "unshaped"
                t.add_row(name, rate, format_duration(spec.fabric.delay))
        out.print(t)
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
    out.print(t)
    needs = plan.needs_propagation_emulation()
    out.print(
        f"backend: {sc.backend}; propagation emulation needed: {'yes' if needs else 'no'} "
        "(`testbed doctor` tells which backend this kernel gets)"
    )
    for w in plan.warnings:
        out.print(f"[yellow]warning:[/] {escape(w)}")
    return 0


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
    for name, addr in tb.hosts.items():
        t.add_row(name, addr, f"{tb.record.prefix}-{name}")
    out.print(t)


def cmd_up(args: argparse.Namespace) -> int:
    from testbed.run.testbed import Testbed

    _need_root("up")
    sc = load_scenario(args.file)
    tb = Testbed(sc, name=args.name or sc.name, persistent=not args.foreground, source=args.file)
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
    for w in tb.plan.warnings:
        out.print(f"[yellow]warning:[/] {escape(w)}")


def cmd_exec(args: argparse.Namespace) -> int:
    from testbed.run.testbed import Testbed

    _need_root("exec")
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
    for col in ("name", "prefix", "state", "backend", "hosts", "owner", "age", "scenario"):
        t.add_column(col)
    for r in recs:
        state = r.phase if r.live() else "leftover (testbed clean removes it)"
        owner = "persistent" if r.persistent else str(r.owner_pid)
        age = f"{time.time() - r.created:.0f}s"
        hosts = str(sum(1 for h in r.hosts if not h.endswith("-gw")))
        t.add_row(r.name, r.prefix, state, r.backend, hosts, owner, age, r.scenario)
    out.print(t)
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    _need_root("down")
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
    _need_root("clean")
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
    feats = kernel.probe()
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
    out.print(t)
    needs, marking = True, False
    if args.file:
        sc = load_scenario(args.file)
        doctor_plan = build_plan(sc, "x", 64)
        needs, marking = doctor_plan.needs_propagation_emulation(), doctor_plan.needs_marking()
        requested = sc.backend
    else:
        requested = "auto"
    try:
        choice = choose_backend(requested, needs, feats, marking)
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
    for note in feats.notes:
        out.print(f"note: {escape(note)}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from testbed.config.sweep import load_runs, parse_override
    from testbed.run.experiment import Experiment

    _need_root("run")
    runs = load_runs(args.file, [parse_override(s) for s in args.set])
    exp = Experiment(runs, args.file, args.resume or args.out, resume=bool(args.resume))
    pending = [r for r in runs if not exp.done(r)]
    out.print(f"{len(runs)} run(s), {len(pending)} to do; results: {escape(exp.results.path)}")
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    interrupted = False
    with Progress(*columns, console=out, transient=True) as progress:
        task = progress.add_task("starting", total=len(pending))

        def on_start(spec) -> None:
            progress.update(task, description=escape(f"{spec.run_id} {spec.label()}"))

        def on_done(spec, result) -> None:
            progress.advance(task)
            colour = {"ok": "green", "skipped": "yellow"}.get(result.status, "red")
            backend = result.info.get("backend") or "-"
            text = f"[{colour}]{result.status}[/] {escape(spec.run_id)} {escape(spec.label())} "
            text += f"(backend {escape(backend)})"
            if result.reason:
                text += f": {escape(result.reason)}"
            progress.console.print(text, highlight=False)

        try:
            ok = exp.run(args.selfcheck, on_start, on_done)
        except KeyboardInterrupt:
            interrupted, ok = True, False
    print_summary(exp)
    checks = [] if interrupted else exp.check_expectations()
    for c in checks:
        colour = {"passed": "green", "failed": "red"}.get(c.status, "yellow")
        out.print(f"[{colour}]{escape(c.text())}[/]", highlight=False)
    failed_checks = [c for c in checks if c.status == "failed"]
    if checks:
        out.print(
            f"expectations: {sum(c.status == 'passed' for c in checks)} passed, "
            f"{len(failed_checks)} failed, {sum(c.status == 'unchecked' for c in checks)} unchecked"
        )
    if interrupted:
        err.print(
            f"interrupted; what was measured is in {exp.results.path} "
            f"(continue with --resume {exp.results.path})"
        )
        return 130
    out.print(f"results: {escape(exp.results.path)}")
    return 0 if ok and not failed_checks else 1


def print_summary(exp) -> None:
    links = exp.tables.get("links") or []
    if links:
        print_checks([_Row(r) for r in links])
    if exp.summaries:
        t = Table(title="collectives (time = slowest rank per iteration)")
        params = list(exp.runs[0].params)
        for col in (
            *params,
            "collective",
            "algorithm",
            "size",
            "n",
            "p50",
            "p95",
            "algbw",
            "busbw",
            "predicted",
            "meas/pred",
            "flags",
        ):
            t.add_column(col, justify="right")
        for s in exp.summaries:
            flags = []
            if s.get("cpu_saturated"):
                flags.append("CPU-saturated")
            if not s.get("correct", True):
                flags.append("WRONG")
            pred = s.get("predicted")
            ratio = s.get("measured_over_predicted")
            t.add_row(
                *(escape(s.get(p, "")) for p in params),
                escape(s["collective"]),
                escape(s["algorithm"]),
                format_size(s["size"]),
                str(s["ranks"]),
                format_duration(s["time_p50"]),
                format_duration(s["time_p95"]),
                f"{s['algbw'] / 1e6:.1f} MB/s",
                f"{s['busbw'] / 1e6:.1f} MB/s",
                format_duration(pred) if pred else "-",
                f"{ratio:.2f}" if ratio else "-",
                " ".join(flags),
            )
        out.print(t)
    for run_id, info in exp.manifest["runs"].items():
        if info["status"] != "ok":
            colour = "yellow" if info["status"] == "skipped" else "red"
            out.print(
                f"[{colour}]{info['status']}[/] {escape(run_id)}: {escape(info['reason'])}",
                highlight=False,
            )
        for skip in info.get("skipped_combinations") or []:
            out.print(
                f"[yellow]not run[/] {escape(run_id)} {escape(skip.get('collective'))} "
                f"{escape(skip.get('algorithm'))}: {escape(skip.get('skipped'))}",
                highlight=False,
            )


class _Row:
    """A links.parquet row read back, shaped like a LinkCheck for print_checks."""

    def __init__(self, row: dict) -> None:
        self.__dict__.update(row)


def print_checks(checks) -> None:
    t = Table(title="link self-check")
    for col in (
        "direction",
        "RTT conf",
        "RTT p50",
        "RTT p99",
        "goodput conf",
        "goodput",
        "ratio",
        "cc",
        "status",
    ):
        t.add_column(col, justify="right")
    for c in checks:
        t.add_row(
            c.direction,
            format_duration(c.rtt_configured_s),
            format_duration(c.rtt_median_s) if c.rtt_median_s is not None else "-",
            format_duration(c.rtt_p99_s) if c.rtt_p99_s is not None else "-",
            format_rate(c.goodput_configured_bps),
            format_rate(c.goodput_bps) if c.goodput_bps else "-",
            f"{c.goodput_ratio:.1%}" if c.goodput_ratio else "-",
            c.congestion,
            "[green]ok[/]" if c.ok else f"[red]{c.problem}[/]",
        )
    out.print(t)


def cmd_vm(args: argparse.Namespace) -> int:
    return vm.cmd(args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="testbed", description=DESCRIPTION)
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = p.add_subparsers(dest="verb", required=True, metavar="VERB")
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
    s = sub.add_parser(
        "run",
        help="build each sweep point, self-check the links, run the workload, write results",
    )
    s.add_argument("file")
    s.add_argument("--out", default="results", help="results root directory (default: results)")
    s.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override a field, e.g. --set wan[0].delay=50ms (repeatable)",
    )
    s.add_argument("--resume", metavar="DIR", help="continue an interrupted run in DIR")
    s.add_argument(
        "--selfcheck",
        type=float,
        default=1.0,
        help="seconds of bulk TCP per WAN direction in the link self-check",
    )
    s.set_defaults(fn=cmd_run)
    s = sub.add_parser(
        "vm",
        help="run a command in a throwaway QEMU guest with a stock kernel (netem, fq, red, dctcp)",
    )
    vm.add_arguments(s)
    s.set_defaults(fn=cmd_vm)
    from testbed.cli import report as cli_report

    cli_report.add_parsers(sub)  # report, compare
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.fn(args)
    except TestbedError as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        err.print("interrupted; torn down")
        return 130
