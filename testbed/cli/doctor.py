"""``testbed doctor``: what this kernel offers (qdiscs, congestion controls, iptables, NFQUEUE,
torch), which link backend a scenario would get and why, and whether the Mininet engine and
BGP routing (FRR) are available here.

The probe, the backend choice and the scenario schema are imported inside the verb: ``--help``
and the other verbs do not pay for their import.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rich.table import Table

from testbed.cli.console import escape, make_console
from testbed.core.errors import TestbedError

if TYPE_CHECKING:
    from testbed.net.probe import KernelFeatures

out = make_console()


def cmd_doctor(args: argparse.Namespace) -> int:
    from testbed.config.loading import load_scenario
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
