"""Routing events of one run: the gateways' FIB changes, BFD and BGP session changes.

Recorded for a run whose network has a multipath link or BGP routing (``routing.parquet``, one
row per event, unix seconds): ``fib`` (a gateway's route to another cluster changed its paths,
from ``ip -ts monitor route``), ``bfd`` (a session down or up, bfdd's ``debug bfd peer`` log) and
``bgp`` (a session down or up, a route withdrawn or announced). Each row names the gateway, the
peer and the WAN path where it has one; the columns and what makes no event: docs/results.md.
FRR's logs are read from the gateways' directories before the testbed goes down; only lines from
the run's start on are kept.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from testbed.net import frr
from testbed.net.procs import stop
from testbed.net.registry import Record
from testbed.plan.model import NetworkPlan

COLUMNS = ("time", "gateway", "source", "event", "peer", "link", "paths", "n_paths", "detail")

_MONITOR_HEAD = re.compile(r"^\[(?P<ts>[0-9T:.-]+)\]\s+(?P<deleted>Deleted\s+)?(?P<route>.*)$")
_VIA = re.compile(r"\bvia\s+\S+\s+dev\s+(?P<dev>\S+)")
_FRR_TIME = re.compile(
    r"^(?P<ts>\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d+)\s+(?P<daemon>\w+):\s+(?P<msg>.*)$"
)
_BFD = re.compile(
    r"state-change: \[mhop:\S+ peer:(?P<peer>\S+) local:\S+ vrf:\S+\] "
    r"(?P<old>\S+) -> (?P<new>\S+)(?: reason:(?P<reason>\S+))?"
)
_ADJ = re.compile(
    r"%ADJCHANGE: neighbor (?P<peer>[0-9.]+)\S* in vrf \S+ (?P<state>Up|Down)(?P<why>.*)"
)
_WITHDRAWN = re.compile(r"^(?P<peer>[0-9.]+)\S* rcvd UPDATE about (?P<prefix>\S+) .*-- withdrawn")
_ANNOUNCED = re.compile(r"^(?P<peer>[0-9.]+)\S* rcvd (?P<prefix>[0-9./]+) IPv4 unicast\s*$")


def _row(t: float, gateway: str, source: str, event: str, **more: Any) -> dict[str, Any]:
    return (
        {c: None for c in COLUMNS}
        | {
            "time": t,
            "gateway": gateway,
            "source": source,
            "event": event,
        }
        | more
    )


def parse_monitor(
    text: str, gateway: str, subnets: set[str], ports: dict[str, str]
) -> list[dict[str, Any]]:
    """``ip -ts monitor route`` output of one gateway -> fib rows for the routes to
    ``subnets``; ``ports``: the gateway's WAN port -> the direction it sends (``p1-west`` ->
    ``east->west/1``)."""
    rows: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for line in text.splitlines():
        head = _MONITOR_HEAD.match(line)
        if head is None:
            if current is not None and (via := _VIA.search(line)):  # a multipath route's nexthop
                current["_devs"].append(via.group("dev"))
            continue
        route = head.group("route").split()
        if not route or route[0] not in subnets:
            current = None
            continue
        t = datetime.fromisoformat(head.group("ts")).timestamp()
        deleted = bool(head.group("deleted"))
        current = _row(t, gateway, "fib", "deleted" if deleted else "route", detail=route[0])
        current["_devs"] = [] if deleted else [m.group("dev") for m in _VIA.finditer(line)]
        rows.append(current)
    for r in rows:
        devs: list[str] = r.pop("_devs")
        paths = [ports.get(dev, dev) for dev in devs]
        r["paths"] = ",".join(paths)
        r["n_paths"] = len(paths)
    return rows


def parse_frr_log(
    text: str, gateway: str, links: dict[str, str], subnets: set[str], since: float
) -> list[dict[str, Any]]:
    """bfdd's or bgpd's log of one gateway -> bfd and bgp rows from ``since`` on; ``links``:
    BGP peer address -> the path's name."""
    rows = []
    for line in text.splitlines():
        m = _FRR_TIME.match(line)
        if m is None:
            continue
        t = datetime.strptime(m.group("ts"), "%Y/%m/%d %H:%M:%S.%f").timestamp()
        if t < since:
            continue
        msg = m.group("msg")
        if (b := _BFD.search(msg)) is not None and b.group("new") in ("up", "down"):
            peer = b.group("peer")
            rows.append(
                _row(t, gateway, "bfd", b.group("new"), peer=peer, link=links.get(peer),
                     detail=b.group("reason") or f"{b.group('old')} -> {b.group('new')}")
            )  # fmt: skip
        elif (a := _ADJ.search(msg)) is not None:
            peer = a.group("peer")
            rows.append(
                _row(t, gateway, "bgp", a.group("state").lower(), peer=peer,
                     link=links.get(peer), detail=a.group("why").strip() or None)
            )  # fmt: skip
        else:
            body = msg.split("] ", 1)[-1]  # after FRR's message id "[XXXXX-XXXXX]"
            for pattern, event in ((_WITHDRAWN, "withdraw"), (_ANNOUNCED, "announce")):
                u = pattern.match(body)
                if u is not None and u.group("prefix") in subnets:
                    peer = u.group("peer")
                    rows.append(
                        _row(t, gateway, "bgp", event, peer=peer, link=links.get(peer),
                             detail=u.group("prefix"))
                    )  # fmt: skip
    return rows


def wanted(plan: NetworkPlan) -> bool:
    """Whether a run on ``plan`` records routing events (a multipath link or BGP)."""
    return plan.bgp is not None or any(d.multipath for d in plan.wan)


class RoutingEvents:
    """Around one run: a route monitor in each gateway; ``rows`` once left. On a machine's
    part of a topology across machines (``NetworkPlan.part``): the gateways of that part."""

    def __init__(self, plan: NetworkPlan, record: Record, run_dir: Path) -> None:
        self.plan, self.record = plan, record
        here = {n.name for n in plan.namespaces}
        self.gateways = [g for g in plan.gateways if g.ns in here]
        self.dir = run_dir / "routing"
        self.procs: dict[str, subprocess.Popen] = {}
        self.rows: list[dict[str, Any]] = []
        self.since = 0.0

    def __enter__(self) -> RoutingEvents:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.since = time.time()
        started = []
        try:
            for g in self.gateways:
                with open(self.dir / f"{g.name}.monitor", "wb") as out:
                    proc = subprocess.Popen(
                        ["ip", "-ts", "-n", g.ns, "monitor", "route"],
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
                self.procs[g.name] = proc
                started.append((proc.pid, f"route monitor {g.name}"))
        finally:
            self.record.add_processes(started)
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs.values():
            stop(proc, grace=0.5)
        subnets = {g.subnet for g in self.plan.gateways}
        for g in self.gateways:
            ports = {d.shaper.ifname: d.name for d in self.plan.wan if d.shaper.ns == g.ns}
            with contextlib.suppress(OSError):
                text = (self.dir / f"{g.name}.monitor").read_text(errors="replace")
                self.rows += parse_monitor(text, g.name, subnets - {g.subnet}, ports)
        if self.plan.bgp is not None:
            for s in self.plan.bgp.speakers:
                links = {n.address: n.link for n in s.neighbors}
                d = frr.gateway_dir(self.record, s.gateway)
                for daemon in ("bfdd", "bgpd"):
                    with contextlib.suppress(OSError):
                        text = (d / f"{daemon}.log").read_text(errors="replace")
                        self.rows += parse_frr_log(
                            text, s.gateway, links, subnets - {s.network}, self.since
                        )
        self.rows.sort(key=lambda r: r["time"])
