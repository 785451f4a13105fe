"""Live test of ``routing.mode: bgp`` across two machines (stand-ins on one kernel,
testbed.testing.machines): each machine's agent runs FRR in its gateway, the eBGP and BFD
sessions of both paths of the link cross the VXLAN cables, every route is learned over both
paths; a third cluster (north, on node-b) joined to east by a link of one path has its session,
its BFD and its routes on both gateways of that link; an all-reduce over all three clusters runs,
BFD leaves a path blackholed across the cables and BGP takes it back, the routing events of both
machines land in one table, and nothing of FRR is left after teardown."""

from __future__ import annotations

import json
import time

import pytest
from helpers import two_path_scenario, unique_name

from testbed.config.loading import parse_scenario
from testbed.net import frr, registry

pytestmark = pytest.mark.live
ray = pytest.importorskip("ray", reason="the [ray] extra is not installed")

BGP = {"hold": "9s", "bfd": {"interval": "50ms", "multiplier": 3}}


@pytest.fixture
def frr_present() -> None:
    if why := frr.missing():
        pytest.skip(why)


def bgp_routes(tb, gateway: str) -> dict[str, int]:
    """The gateway's routes installed by FRR (destination: its nexthops), read on its machine."""
    r = tb.run(gateway, ["ip", "-j", "route", "show", "proto", "bgp"])
    return {x["dst"]: len(x.get("nexthops") or [x]) for x in json.loads(r.stdout or "[]")}


def nexthops(tb, gateway: str) -> int:
    """The most nexthops of the gateway's BGP routes to the other clusters (0: none): the route
    over the two-path link (a route over the link of one path has one)."""
    return max(bgp_routes(tb, gateway).values(), default=0)


def bfd_peers(tb, part, gateway: str) -> list[tuple[str, str]]:
    """(peer, status) of the gateway's BFD sessions, from its bfdd through its machine's agent."""
    d = frr.gateway_dir(part, gateway)
    got = tb.run(gateway, ["vtysh", "--vty_socket", str(d), "-c", "show bfd peers json"])
    assert got.returncode == 0, got.stdout + got.stderr
    return sorted((p["peer"], p["status"]) for p in json.loads(got.stdout))


def blackhole_path_1(tb, on: bool) -> None:
    """Drop every packet that arrives on a gateway's port of path 1 (both ways: east's on node-a,
    west's on node-b, each through its machine's agent); iptables rules in the gateways, so the
    ports and their routes stay (a port set down loses the routes through it)."""
    for gateway, port in (("east-gw", "p1-west"), ("west-gw", "p1-east")):
        op = "-I" if on else "-D"
        argv = [f"iptables {op} {chain} -i {port} -j DROP" for chain in ("INPUT", "FORWARD")]
        r = tb.run(gateway, ["sh", "-ec", "; ".join(argv)])
        assert r.returncode == 0, r.stdout + r.stderr


def wait_nexthops(tb, gateway: str, want: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while nexthops(tb, gateway) != want:
        assert time.monotonic() < deadline, (gateway, want, tb.run(gateway, ["ip", "route"]).stdout)
        time.sleep(0.02)


@pytest.mark.timing
def test_bgp_with_bfd_across_two_machines_routes_fails_over_and_leaves_nothing(
    frr_present, machines, tmp_path
):
    from testbed.experiment.ranks import RankLaunch, RankSpec
    from testbed.experiment.workloads import KINDS
    from testbed.live.ray_common import NODE_DIR
    from testbed.live.spanned import SpannedNetwork
    from testbed.plan.ranks import place_ranks

    address, _ = machines
    doc = two_path_scenario({"mode": "bgp", "ecmp": {"hash": "l4"}, "bgp": BGP})
    # north, on node-b, joined to east by a link of one path (its session crosses the cables)
    doc["clusters"]["north"] = {"hosts": 1}
    doc["wan"].append({"between": ["east", "north"], "rate": "100mbit", "delay": "5ms"})
    doc["placement"] = {"machines": {"east": "node-a", "west": "node-b", "north": "node-b"}}
    tb = SpannedNetwork(parse_scenario(doc, "test"), name=unique_name("spanbgp"), address=address)
    tb.up()  # returns once both machines' kernels hold every route and every BFD session is up
    pids: list[tuple[int, int | None]] = []
    try:
        prefix, slot = tb.plan.prefix, tb.record.slot
        parts = {r.machine: r for r in registry.records() if r.prefix == prefix}
        daemons = {m: sorted(w for _, _, w in r.processes if w.startswith("frr ")) for m, r in
                   parts.items()}  # fmt: skip
        assert daemons == {
            "node-a": ["frr bfdd east-gw", "frr bgpd east-gw", "frr zebra east-gw"],
            "node-b": sorted(
                f"frr {d} {g}-gw" for d in ("bfdd", "bgpd", "zebra") for g in ("west", "north")
            ),
        }
        pids += [(p, s) for r in parts.values() for p, s, w in r.processes if w.startswith("frr ")]
        # BFD up on both paths' sessions and on the link of one path's, which cross the cables
        # from node-a's wires; north's end of its session up on node-b
        speakers = {s.gateway: s for s in tb.plan.bgp.speakers}
        (to_north,) = [n for n in speakers["east-gw"].neighbors if n.link == "east-north"]
        assert bfd_peers(tb, parts["node-a"], "east-gw") == sorted([
            (f"10.{slot}.128.13", "up"),
            (f"10.{slot}.128.5", "up"),
            (to_north.address, "up"),
        ])  # fmt: skip
        assert bfd_peers(tb, parts["node-b"], "north-gw") == [(to_north.local, "up")]
        # every route installed by FRR: over both paths between east and west, over the one
        # path between east and north (both of its gateways), and west's to north through east
        net = {g.removesuffix("-gw"): s.network for g, s in speakers.items()}
        assert bgp_routes(tb, "east-gw") == {net["west"]: 2, net["north"]: 1}
        assert bgp_routes(tb, "north-gw") == {net["east"]: 1, net["west"]: 1}
        assert bgp_routes(tb, "west-gw") == {net["east"]: 2, net["north"]: 2}
        with tb.routing_events(tmp_path) as routing:
            # a real all-reduce across the machines over the learned routes, checked by each rank:
            # north's rank's traffic crosses the link of one path
            ranks = place_ranks(tb.plan, 1, "interleaved")
            assert "north-h0" in {r.host for r in ranks}, ranks
            keys = {"collectives": ["all_reduce"], "algorithms": ["flat"], "sizes": [1 << 20],
                    "dtype": "float32", "warmup": 1, "iterations": 3}  # fmt: skip
            master = tb.plan.host(ranks[0].host).address
            spec = RankSpec.build(tb, master, ranks, tmp_path, 60.0, **keys)
            launch = RankLaunch(tb, ranks, spec, tmp_path, KINDS["collectives"].rank_module)
            assert launch.run(120) == []
            assert set(launch.codes.values()) == {0}, [launch.log(r) for r in launch.codes]
            for r in launch.codes:
                rows = [json.loads(line) for line in (tmp_path / f"rank-{r}.jsonl").open()]
                assert len(rows) == 3 and all(row["correct"] for row in rows), rows
            # path 1 blackholed across the cable: both BFD sessions on it go down and each
            # gateway's route leaves it; then BGP takes it back (connect retry 2 s)
            before = time.time()
            blackhole_path_1(tb, on=True)
            after = time.time()
            wait_nexthops(tb, "east-gw", 1, timeout=5.0)
            wait_nexthops(tb, "west-gw", 1, timeout=5.0)
            blackhole_path_1(tb, on=False)
            wait_nexthops(tb, "east-gw", 2, timeout=30.0)
            wait_nexthops(tb, "west-gw", 2, timeout=30.0)
        rows = routing.rows
        assert (tmp_path / "routing" / "east-gw.monitor").exists()
        assert (tmp_path / "routing" / "west-gw.monitor").exists()
        downs = [r for r in rows if r["source"] == "bfd" and r["event"] == "down"]
        assert {(r["gateway"], r["link"]) for r in downs} == {
            ("east-gw", "east-west/1"),
            ("west-gw", "east-west/1"),
        }, rows
        # east's route to west over path 0 alone, then over both again: from node-a's monitor
        fib = [r for r in rows if r["source"] == "fib" and r["gateway"] == "east-gw"]
        assert [r["paths"] for r in fib if r["time"] > before][:1] == ["east->west/0"], fib
        assert fib[-1]["n_paths"] == 2, fib
        # and from node-b's: west's route to east over path 0 alone, then both again
        west = [r["n_paths"] for r in rows if r["source"] == "fib" and r["gateway"] == "west-gw"]
        assert 1 in west and west[-1] == 2, rows
        assert any(r["source"] == "bgp" and r["event"] == "up" for r in rows), rows
        # detection: BFD's 3 x 50 ms after the last control packet, then bgpd and zebra
        # (~75 ms): ~0.23 s, as on one machine (RESULTS.md "Multipath WAN links: failover":
        # moved 0.221-0.231 s). The routing rows are on the driver's timeline (the test's
        # clock: each machine's offset, 0 within its bound on the stand-ins); `before`..`after`
        # (the two agents' calls that install the drops) is the resolution.
        moved = next(r["time"] for r in fib if r["time"] > before) - before
        assert 0.1 < moved < 1.0, (moved, after - before)
    finally:
        tb.down()
    assert all(not registry.process_alive(pid, start) for pid, start in pids)
    assert registry.namespaces_with_prefix(prefix) == []
    assert not [r for r in registry.records() if r.prefix == prefix]
    assert not list(registry.STATE_DIR.glob(f"{prefix}*"))
    assert not list(NODE_DIR.glob(f"{prefix}-*"))
