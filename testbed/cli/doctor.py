"""``testbed doctor``: what this kernel offers (qdiscs, congestion controls, iptables, NFQUEUE,
torch), which link backend a scenario would get and why, and whether the Mininet engine and
BGP routing (FRR) are available here; ``--json`` prints the same as one object (docs/json.md).

The probe, the backend choice and the scenario schema are imported inside the verb: ``--help``
and the other verbs do not pay for their import.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from rich.table import Table

from testbed.cli.console import escape, make_console
from testbed.core.errors import TestbedError

if TYPE_CHECKING:
    from testbed.net.probe import KernelFeatures

out = make_console()


def cmd_doctor(args: argparse.Namespace) -> int:
    feats, found = diagnose(args.file)
    if getattr(args, "json", False):
        print(json.dumps(doctor_json(feats, found), indent=2))
        return 0
    out.print(_features_table(feats))
    backend = found["backend"]
    if backend["chosen"] is not None:
        out.print(
            f"backend for {args.file or 'a scenario with WAN delay'}: "
            f"[bold]{backend['chosen']}[/] — {escape(backend['reason'])}"
        )
    else:
        out.print(f"[red]{escape(backend['reason'])}[/]")
    if not feats.has_qdisc("netem"):
        out.print(
            "netem is missing on this kernel: WAN delay/jitter/loss/reorder use the "
            "userspace delay line (backend: userspace)."
        )
    if found["missing"]:
        out.print(
            f"for {', '.join(found['missing'])}: `testbed vm -- testbed run FILE` runs a scenario "
            "on a stock distribution kernel in a throwaway guest (docs/vm.md)"
        )
    mininet = found["engines"]["mininet"]
    if mininet["available"]:
        out.print("engine mininet: available (`--engine mininet`)")
    else:
        out.print(f"engine mininet: [yellow]{escape(mininet['reason'])}[/]")
    bgp = found["routing"]["bgp"]
    if bgp["available"]:
        out.print(f"routing mode bgp: available ({escape(bgp['version'])}, {bgp['lib']})")
    else:
        out.print(f"routing mode bgp: [yellow]{escape(bgp['reason'])}[/]")
    for note in feats.notes:
        out.print(f"note: {escape(note)}")
    return 0


def diagnose(file: str | None) -> tuple[KernelFeatures, dict[str, Any]]:
    """The kernel's features and what follows from them: the backend ``file`` (or a scenario
    with WAN delay) gets, what a stock kernel would add, the Mininet engine, BGP routing."""
    from testbed.config.loading import load_scenario
    from testbed.link.choose import choose_backend
    from testbed.net import frr
    from testbed.net import probe as kernel
    from testbed.net.engines import MininetEngine
    from testbed.plan.topology import build_plan

    feats = kernel.probe()
    needs, marking, hold = True, False, False
    requested = "auto"
    if file:
        sc = load_scenario(file)
        doctor_plan = build_plan(sc, "x", 64)
        needs, marking = doctor_plan.needs_propagation_emulation(), doctor_plan.needs_marking()
        hold = doctor_plan.needs_hold()
        requested = sc.backend
    backend: dict[str, Any] = {"scenario": file, "requested": requested}
    try:
        choice = choose_backend(requested, needs, feats, marking, hold)
        backend |= {"chosen": choice.name, "reason": choice.reason}
    except TestbedError as exc:
        backend |= {"chosen": None, "reason": str(exc)}
    missing = [q for q in ("netem", "red", "fq") if not feats.has_qdisc(q)]
    if not feats.congestion_supported("dctcp"):
        missing.append("dctcp")
    try:
        MininetEngine().check()
        mininet: dict[str, Any] = {"available": True, "reason": ""}
    except TestbedError as exc:
        mininet = {"available": False, "reason": str(exc)}
    why = frr.missing()
    bgp: dict[str, Any] = (
        {"available": False, "reason": why}
        if why
        else {"available": True, "version": frr.version(), "lib": str(frr.FRR_LIB)}
    )
    found = {
        "backend": backend,
        "missing": missing,
        "engines": {"native": {"available": True, "reason": ""}, "mininet": mininet},
        "routing": {"bgp": bgp},
    }
    return feats, found


def doctor_json(feats: KernelFeatures, found: dict[str, Any]) -> dict[str, Any]:
    """``testbed doctor --json`` (docs/json.md)."""
    return {
        "version": 1,
        "kernel": feats.release,
        "root": feats.root,
        "netns": feats.netns,
        "qdiscs": dict(feats.qdiscs),
        "congestion": {cc: feats.congestion_supported(cc) for cc in CONGESTION},
        "congestion_available": list(feats.congestion_available),
        "iptables": feats.iptables,
        "nfqueue": feats.nfqueue,
        "torch": feats.torch,
        "backend": found["backend"],
        "missing_for_vm": found["missing"],
        "engines": found["engines"],
        "routing": found["routing"],
        "notes": list(feats.notes),
    }


CONGESTION = ("reno", "cubic", "bbr", "dctcp")


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
    for cc in CONGESTION:
        state = feats.congestion_supported(cc)
        t.add_row(f"tcp {cc}", yes(state), "tcp.congestion")
    t.add_row("iptables", yes(feats.iptables is not None), feats.iptables or "")
    t.add_row("NFQUEUE", yes(feats.nfqueue), "userspace delay line")
    t.add_row("torch", feats.torch or "[red]not installed[/]", "collectives")
    return t
