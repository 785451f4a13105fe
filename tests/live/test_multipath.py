"""Live tests of a multipath WAN link (static routing): with an L4 hash several flows
cross every path; a path's ports down move its flows to the others (the kernel drops the dead
nexthop) and back up restores the multipath route; a blackhole on one path is that path's."""

from __future__ import annotations

import pytest
from helpers import flows_over_paths as flows
from helpers import two_path_scenario

from testbed.net.faults import FaultOps

pytestmark = pytest.mark.live


def two_paths(hash_: str = "l4") -> dict:
    return two_path_scenario({"ecmp": {"hash": hash_}})


@pytest.mark.timing
def test_flows_cross_every_path_and_a_downed_path_moves_them(make_testbed):
    tb = make_testbed(two_paths())
    assert [d.name for d in tb.plan.wan] == [
        "east->west/0", "west->east/0", "east->west/1", "west->east/1",
    ]  # fmt: skip
    routes = tb.run("east-gw", ["ip", "route", "show", "10.0.0.0/8"]).stdout
    per_path, rate = flows(tb)
    # 16 flows, an L4 hash: each path gets some (all on one: 2^-15 by chance, per call)
    assert all(b > 2_000_000 for b in per_path.values()), (per_path, routes)
    # one path's ceiling is 100 x 1448/1514 = 95.6 Mbit/s; 110 is 1.15x it. iperf3's bytes over
    # 3 s resolve 0.2 Mbit/s; no RESULTS.md table measures this iperf3 run.
    assert rate > 110e6, rate  # more than one 100 Mbit/s path carries
    ops = FaultOps(tb.plan)
    ops.link("east-west/1", up=False)
    try:
        per_path, rate = flows(tb)
        assert per_path["p1-west"] < 100_000 and per_path["p0-west"] > 20_000_000, per_path
        # upper: one ceiling (95.6) + HTB's burst and one 64 KiB over 3 s (0.4 Mbit/s) < 100;
        # lower 70 (0.73 x): 16 flows' slow start inside the 3 s (no omit); not from a table
        assert 70e6 < rate < 100e6, rate  # one path's worth
    finally:
        ops.link("east-west/1", up=True)
    shown = tb.run("east-gw", ["ip", "route"]).stdout
    assert shown.count("nexthop via") >= 2, shown  # the multipath route is back whole
    per_path, _ = flows(tb)
    assert all(b > 2_000_000 for b in per_path.values()), per_path


@pytest.mark.timing
def test_l3_hash_keeps_one_host_pair_on_one_path(make_testbed):
    tb = make_testbed(two_paths("l3"))
    per_path, rate = flows(tb, parallel=4)
    # addresses only: all flows of one host pair take the same path
    assert sorted(per_path.values())[0] < 100_000, per_path
    # one path: its ceiling (95.6 Mbit/s) + burst and one 64 KiB over 3 s (0.4) < 100
    assert rate < 100e6, rate
