"""Routing events and failover, pure: the gateways' route monitor output and FRR's
logs -> routing.parquet rows; fault + routing rows -> the failover table."""

# ruff: noqa: E501, W291  (the monitor and log lines are verbatim)
from __future__ import annotations

from datetime import datetime

import pandas as pd
import pytest

from analysis.routing import failover_metrics, failover_table, path_directions
from testbed.trace.routing import parse_frr_log, parse_monitor

PORTS = {"p0-west": "east->west/0", "p1-west": "east->west/1"}
SUBNETS = {"10.64.1.0/24"}


def unix(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def test_route_monitor_lines_become_fib_rows():
    text = """\
[2026-12-05T07:19:51.690711] 10.64.1.0/24 via 10.64.128.2 dev p0-west proto bgp metric 20 
[2026-12-05T07:19:52.000001] 10.64.128.5 via 10.64.128.2 dev p0-west src 10.64.128.1 
[2026-12-05T07:19:54.791807] 10.64.1.0/24 proto bgp metric 20 
	nexthop via 10.64.128.2 dev p0-west weight 1 
	nexthop via 10.64.128.10 dev p1-west weight 1 
[2026-12-05T07:19:59.003921] 2: p0-west@if2: <BROADCAST,MULTICAST> mtu 1500 qdisc htb state DOWN
    link/ether e2:6c:15:0f:59:08 brd ff:ff:ff:ff:ff:ff link-netns x
[2026-12-05T07:20:00.000000] Deleted 10.64.1.0/24 proto bgp metric 20 
"""
    rows = parse_monitor(text, "east-gw", SUBNETS, PORTS)
    assert [(r["time"], r["event"], r["paths"], r["n_paths"]) for r in rows] == [
        (unix("2026-12-05T07:19:51.690711"), "route", "east->west/0", 1),
        (unix("2026-12-05T07:19:54.791807"), "route", "east->west/0,east->west/1", 2),
        (unix("2026-12-05T07:20:00"), "deleted", "", 0),
    ]
    assert {r["gateway"] for r in rows} == {"east-gw"} and {r["source"] for r in rows} == {"fib"}


def test_frr_log_lines_become_bfd_and_bgp_rows():
    text = """\
2026/12/05 07:19:11.415539 BFD: [PSB4R-8T1TJ] session-new: mhop:yes peer:10.64.128.5 local:10.64.128.1 vrf:default
2026/12/05 07:19:13.250272 BFD: [J1C6V-VMRW5] state-change: [mhop:yes peer:10.64.128.13 local:10.64.128.9 vrf:default] init -> up
2026/12/05 07:19:14.063279 BFD: [SEY1D-NT8EQ] state-change: [mhop:yes peer:10.64.128.13 local:10.64.128.9 vrf:default] up -> down reason:control-expired
2026/12/05 07:19:14.063300 BGP: [PXVXG-TFNNT] %ADJCHANGE: neighbor 10.64.128.13(west-gw) in vrf default Down BFD down received
2026/12/05 07:19:17.081397 BGP: [RZMGQ-A03CG] 10.64.128.13(west-gw) rcvd UPDATE about 10.64.0.0/24 IPv4 unicast -- DENIED due to: as-path contains our own AS;
2026/12/05 07:19:17.081412 BGP: [YCKEM-GB33T] 10.64.128.13(west-gw) rcvd 10.64.1.0/24 IPv4 unicast
2026/12/05 07:19:18.000000 BGP: [XXXXX-XXXXX] 10.64.128.5(west-gw) rcvd UPDATE about 10.64.1.0/24 IPv4 unicast -- withdrawn
2026/12/05 07:19:22.452578 BGP: [N9HHH-F8H1M] %ADJCHANGE: neighbor 10.64.128.5(west-gw) in vrf default Up
"""
    links = {"10.64.128.5": "east-west/0", "10.64.128.13": "east-west/1"}
    since = datetime(2026, 12, 5, 7, 19, 12).timestamp()
    rows = parse_frr_log(text, "east-gw", links, SUBNETS, since)
    assert [(r["source"], r["event"], r["peer"], r["link"], r["detail"]) for r in rows] == [
        ("bfd", "up", "10.64.128.13", "east-west/1", "init -> up"),
        ("bfd", "down", "10.64.128.13", "east-west/1", "control-expired"),
        ("bgp", "down", "10.64.128.13", "east-west/1", "BFD down received"),
        ("bgp", "announce", "10.64.128.13", "east-west/1", "10.64.1.0/24"),
        ("bgp", "withdraw", "10.64.128.5", "east-west/0", "10.64.1.0/24"),
        ("bgp", "up", "10.64.128.5", "east-west/0", None),
    ]  # before `since` (the session's start) and other prefixes are left out


def events(kind: str = "blackhole", start: float = 100.0, end: float | None = 110.0):
    close = {"blackhole": "unblackhole", "link_down": "link_up"}[kind]
    rows = [(start, kind)] + ([(end, close)] if end is not None else [])
    return pd.DataFrame(
        [
            {"run_id": "p0", "event": i, "source": "fault", "fault": 0, "action": action,
             "link": "east-west/1", "scheduled_unix": t, "applied_unix": t, "status": "applied"}
            for i, (t, action) in enumerate(rows)
        ]
    )  # fmt: skip


def routing(*rows):
    cols = ["time", "gateway", "source", "event", "link", "paths"]
    return pd.DataFrame([dict(zip(cols, r, strict=True)) for r in rows]).assign(run_id="p0")


def test_failover_times_from_bfd_and_the_fib_of_both_gateways():
    r = routing(
        (100.14, "east-gw", "bfd", "down", "east-west/1", None),
        (100.15, "west-gw", "bfd", "down", "east-west/1", None),
        (100.21, "east-gw", "fib", "route", None, "east->west/0"),
        (100.22, "west-gw", "fib", "route", None, "west->east/0"),
        (112.30, "west-gw", "fib", "route", None, "west->east/0,west->east/1"),
        (112.40, "east-gw", "fib", "route", None, "east->west/0,east->west/1"),
    )
    (row,) = failover_table(events(), r).to_dict("records")
    assert row["detected_by"] == "bfd"
    assert row["detect_s"] == pytest.approx(0.14)
    assert row["moved_s"] == pytest.approx(0.22)  # the later gateway
    assert row["restored_s"] == pytest.approx(2.40)
    assert failover_metrics(events(), r) == pytest.approx(
        {"failover_detect_s": 0.14, "failover_moved_s": 0.22, "failover_restored_s": 2.40}
    )


def test_a_bgp_down_that_bfd_caused_counts_as_bfds_detection():
    # bgpd and bfdd stamp their own logs: the notification BFD's down caused may come first
    # (66 us before it in a run); a BGP hold timer's expiry alone is BGP's
    r = routing(
        (100.120344, "west-gw", "bgp", "down", "east-west/1", None),
        (100.120410, "west-gw", "bfd", "down", "east-west/1", None),
    )
    (row,) = failover_table(events(), r).to_dict("records")
    assert row["detected_by"] == "bfd" and row["detect_s"] == pytest.approx(0.120344)
    hold = routing(
        (109.0, "west-gw", "bgp", "down", "east-west/1", None),
        (109.5, "west-gw", "bfd", "down", "east-west/1", None),
    )
    (row,) = failover_table(events(), hold).to_dict("records")
    assert row["detected_by"] == "bgp"


def test_static_routing_never_moves_and_a_whole_link_fault_has_no_failover():
    (row,) = failover_table(events(), routing()).to_dict("records")
    assert row["detected_by"] is None or pd.isna(row["detected_by"])
    assert pd.isna(row["moved_s"]) and pd.isna(row["restored_s"])
    whole = events().assign(link="east-west")
    assert failover_table(whole, routing()).empty and failover_metrics(whole, routing()) == {}
    assert path_directions("east-west/1") == {"east->west/1", "west->east/1"}
    assert path_directions("east-west") == set()
