"""Changing a running WAN, the pure parts: the rate change lines, which emulators a direction
that changes later gets at bring-up, and what the faults act on (links, ports, routes)."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any

import pytest

from testbed.config.loading import parse_scenario
from testbed.core.errors import NetError
from testbed.link.base import LinkBackend
from testbed.link.kernel import KernelBackend
from testbed.link.userspace import DelayLineSupervisor
from testbed.net import rtnl
from testbed.net.faults import (
    BLACKHOLE_RULES,
    RESET_RULES,
    FaultOps,
    parse_counters,
    restore_text,
    wire_rules,
)
from testbed.net.registry import Record
from testbed.plan.model import NetworkPlan
from testbed.plan.render import (
    LinkDown,
    LinkGroup,
    LinkUp,
    RouteAdd,
    ip_line,
    rate_change_lines,
    wan_shaper_lines,
)
from testbed.plan.sizing import MIN_BUFFER, htb_burst
from testbed.plan.topology import build_plan


def plan(clusters: tuple[str, ...] = ("east", "west"), **wan: Any) -> NetworkPlan:
    links = [{"between": [a, b], "rate": "100mbit", **wan} for a, b in itertools.pairwise(clusters)]
    data = {"name": "changes", "clusters": {c: {"hosts": 2} for c in clusters}, "wan": links}
    return build_plan(parse_scenario(data, "changes.yaml"), "mctb0002", 65)


def later(p: NetworkPlan, *names: str) -> NetworkPlan:
    """``p`` with ``names`` marked as changed later (what the timeline's build_plan sets)."""
    wan = tuple(dataclasses.replace(d, changes_later=d.name in names) for d in p.wan)
    return dataclasses.replace(p, wan=wan)


def test_rate_change_lines_change_the_class_and_the_leaf_in_place() -> None:
    d = plan().wan[0]
    cls, leaf = rate_change_lines(d, 30_000_000, 400_000)
    dev = d.shaper.ifname
    burst = htb_burst(30_000_000)
    assert cls == (
        f"class change dev {dev} parent 1: classid 1:1 htb rate 30000000bit ceil 30000000bit "
        f"burst {burst}b cburst {burst}b quantum {d.shaper.quantum}"
    )
    assert leaf == f"qdisc change dev {dev} parent 1:1 handle 10: bfifo limit 400000"
    # the same class and leaf as at bring-up, with the verb changed
    _, add_cls, add_leaf = wan_shaper_lines(d)
    assert add_cls.split(" htb ")[0] == cls.replace("change", "add", 1).split(" htb ")[0]
    assert add_leaf.split(" bfifo ")[0] == leaf.replace("change", "add", 1).split(" bfifo ")[0]


def test_a_marking_leaf_changes_its_limit_and_bandwidth() -> None:
    d = plan(delay="5ms", buffer="8bdp", aqm={"kind": "step", "k": "30KB"}).wan[0]
    _, leaf = rate_change_lines(d, 20_000_000, 500_000)
    assert leaf.startswith(f"qdisc change dev {d.shaper.ifname} parent 1:1 handle 10: red ")
    assert "limit 500000 " in leaf and "bandwidth 20000000bit" in leaf


def test_set_rate_refuses_unknown_directions_and_a_zero_rate() -> None:
    b = LinkBackend()
    with pytest.raises(NetError, match="not started"):
        b.set_rate({"east->west": (10_000_000, MIN_BUFFER)})
    b.directions = {d.name: d for d in plan().wan}
    with pytest.raises(NetError, match=r"no WAN direction 'north->west'.*east->west"):
        b.set_rate({"north->west": (10_000_000, MIN_BUFFER)})
    with pytest.raises(NetError, match="positive rate"):
        b.set_rate({"east->west": (0, MIN_BUFFER)})


def test_the_kernel_backend_installs_netem_from_the_start_for_a_direction_changed_later() -> None:
    p = plan()  # nothing to delay at bring-up
    assert KernelBackend().wire_lines(p) == {}
    lines = KernelBackend().wire_lines(later(p, "west->east"))
    ((ns, (netem,)),) = lines.items()
    assert ns == p.wan[1].impairment.ns
    assert netem.startswith(f"qdisc add dev {p.wan[1].impairment.egress_if} root handle 1: netem")
    assert "delay 0us" in netem


def test_the_kernel_backend_grows_netems_limit_with_a_later_delay_or_rate(monkeypatch) -> None:
    """The plan sizes netem's packet limit for the configured link (1000 here); a delay or rate
    raised while it runs gets a limit for the new one, in the same `tc qdisc replace`, and a
    rate change alone replaces netem only when the limit must grow (never shrinks)."""
    import testbed.link.kernel as kernel_mod
    from testbed.plan.sizing import netem_limit

    batches: list[tuple[str, str]] = []
    monkeypatch.setattr(
        kernel_mod, "run_batches", lambda b: batches.extend((c[-1], x) for c, ls in b for x in ls)
    )
    monkeypatch.setattr(rtnl, "apply", lambda ops: None)
    p = plan(delay="10ms")
    fwd, rev = p.wan
    assert fwd.impairment.netem_limit == 1000
    b = KernelBackend()
    b.start(p, None, None)  # type: ignore[arg-type]

    def limit(line: str) -> int:
        return int(line.split(" limit ")[1].split()[0])

    b.set_impairments({fwd.name: dataclasses.replace(fwd.impairment, delay=0.5)})
    ((ns, line),) = batches
    want = netem_limit(fwd.rate, rev.rate, 0.5, 0.0, fwd.buffer)
    assert ns == fwd.impairment.ns and limit(line) == want > 1000
    assert "delay 500000us" in line
    batches.clear()
    b.set_rate({fwd.name: (50_000_000, fwd.buffer)})  # slower: needs fewer, keeps the limit
    assert batches == []
    b.set_rate({fwd.name: (400_000_000, fwd.buffer)})  # faster: grows, keeps the 0.5 s delay
    # (the reverse carries 400 Mbit/s of ACKs for 10 ms now: still under its 1000)
    ((_, grown),) = batches
    assert limit(grown) == netem_limit(400_000_000, rev.rate, 0.5, 0.0, fwd.buffer)
    assert "delay 500000us" in grown and f"dev {fwd.impairment.egress_if} " in grown


def test_the_delay_line_runs_for_a_direction_changed_later(tmp_path: Path) -> None:
    p = plan()
    rec = Record(name="x", prefix=p.prefix, slot=65, owner_pid=0, owner_start=None)
    assert DelayLineSupervisor(p, rec).lines == []
    sup = DelayLineSupervisor(later(p, "east->west"), rec)
    (line,) = sup.lines
    assert [d.name for d in line.directions] == ["east->west"]
    (q,) = sup._config(line)["queues"]
    assert (q["delay"], q["loss"], q["ge_p"], q["ge_r"]) == (0.0, 0.0, 0.0, 0.0)


def test_fault_ops_find_each_links_wire_and_gateway_ports() -> None:
    p = plan(("east", "mid", "west"))
    ops = FaultOps(p)
    assert set(ops.links) == {"east-mid", "mid-west"}
    em = ops.links["east-mid"]
    assert em.wire == f"{p.prefix}-wan-east-mid"
    assert em.ends == ((f"{p.prefix}-east-gw", "w-mid"), (f"{p.prefix}-mid-gw", "w-east"))
    assert ops.ports(f"{p.prefix}-mid-gw") == ["w-east", "w-west", "h0", "h1", "br0"]
    with pytest.raises(NetError, match=r"no WAN link 'east-west'.*east-mid, mid-west"):
        ops.reset("east-west", True)
    with pytest.raises(NetError, match="no WAN direction 'west->east'"):
        ops.blackhole(["west->east"], True)
    with pytest.raises(NetError, match="no cluster 'north'"):
        ops.gateway("north", True)


def test_routes_through_a_port_include_the_clusters_beyond_it() -> None:
    p = plan(("east", "mid", "west"))
    ops = FaultOps(p)
    east_gw = f"{p.prefix}-east-gw"
    through = ops.routes_through(east_gw, "w-mid")
    # east reaches mid's subnet and west's (two hops away) over the same port
    assert sorted(r.dst for r in through) == [f"10.65.{k}.0/24" for k in (1, 2)]
    assert through == [r for r in p.routes if r.ns == east_gw]
    mid_gw = f"{p.prefix}-mid-gw"
    assert [r.dst for r in ops.routes_through(mid_gw, "w-west")] == ["10.65.2.0/24"]
    assert [r.dst for r in ops.routes_through(mid_gw, "w-east")] == ["10.65.0.0/24"]


def test_a_ports_pair_names_both_ends_addresses_and_their_holders() -> None:
    """What a port back up and its peer learn of each other (FaultOps._pin): a WAN port's peer
    is its wire's end; a bridge port's address is its bridge's, its peer a host's interface."""
    p = plan(("east", "mid", "west"))
    ops = FaultOps(p)
    (east, mid) = ops.pairs(ops.links["east-mid"].ends)
    addr = {(a.ns, a.ifname): a.cidr.split("/")[0] for a in p.addresses}
    wire = f"{p.prefix}-wan-east-mid"
    assert (east.ns, east.port, east.dev, east.peer_ns, east.peer_if, east.peer_dev) == (
        f"{p.prefix}-east-gw",
        "w-mid",
        "w-mid",
        wire,
        "to-east",
        "to-east",
    )
    assert (east.ip, east.peer_ip) == (addr[east.ns, "w-mid"], addr[wire, "to-east"])
    assert (mid.port, mid.peer_if) == ("w-east", "to-mid")
    mid_gw = f"{p.prefix}-mid-gw"
    lan = [x for x in ops.pairs([(mid_gw, q) for q in ops.ports(mid_gw)]) if x.port == "h0"]
    assert [(x.dev, x.ip, x.peer_ns, x.peer_dev) for x in lan] == [
        ("br0", addr[mid_gw, "br0"], f"{p.prefix}-mid-h0", "eth0")
    ]


def test_restore_text_inserts_first_and_deletes_one_copy() -> None:
    assert restore_text("raw", ["PREROUTING -i to-east -j DROP"], True) == (
        "*raw\n-I PREROUTING -i to-east -j DROP\nCOMMIT\n"
    )
    assert restore_text("filter", ["FORWARD -p udp -j DROP"], False) == (
        "*filter\n-D FORWARD -p udp -j DROP\nCOMMIT\n"
    )
    assert ip_line(LinkDown("w-west")) == "link set w-west down"


def test_fault_requests_set_the_link_down_and_replace_routes() -> None:
    kind, flags, body = rtnl.request(LinkDown("w-west"))  # by name: no index lookup
    _family, _type, _index, ifflags, change = rtnl.IFINFOMSG.unpack_from(body)
    assert (kind, flags, ifflags, change) == (rtnl.RTM_NEWLINK, rtnl.ACK, 0, rtnl.IFF_UP)
    _, _, up_body = rtnl.request(LinkUp("w-west"))
    assert rtnl.IFINFOMSG.unpack_from(up_body)[3:] == (rtnl.IFF_UP, rtnl.IFF_UP)
    op = RouteAdd("10.2.3.0/24", "10.9.0.2", "10.1.0.1", replace=True)
    kind, flags, _ = rtnl.request(op)
    assert (kind, flags) == (rtnl.RTM_NEWROUTE, rtnl.REPLACE)
    assert flags & 0x200 == 0  # no NLM_F_EXCL: an existing route is not an error
    assert ip_line(op) == "route replace 10.2.3.0/24 via 10.9.0.2 src 10.1.0.1"


def test_the_wire_rules_act_only_on_ports_in_their_device_group() -> None:
    text = wire_rules(["in-a"])
    assert text == (
        "*raw\n-I PREROUTING -i in-a -m devgroup --src-group 0x100000/0x100000 -j DROP\nCOMMIT\n"
        "*filter\n"
        "-I FORWARD -i in-a -p udp -m devgroup --src-group 0x200000/0x200000 -j DROP\n"
        "-I FORWARD -i in-a -p tcp -m devgroup --src-group 0x200000/0x200000 -j REJECT "
        "--reject-with tcp-reset\n"
        "COMMIT\n"
    )
    # one rule per ingress port, so that each direction's drops are counted apart
    assert wire_rules(["in-a", "in-b"]).count("-j DROP") == 4
    # iptables-save -c prints the rules back with the same words: their counters are found
    saved = (
        "*raw\n:PREROUTING ACCEPT [10:800]\n"
        "[3:4500] -A PREROUTING -i in-a -m devgroup --src-group 0x100000/0x100000 -j DROP\n"
        "COMMIT\n*filter\n"
        "[2:120] -A FORWARD -i in-a -p tcp -m devgroup --src-group 0x200000/0x200000 -j REJECT "
        "--reject-with tcp-reset\nCOMMIT\n"
    )
    counters = parse_counters(saved)
    assert counters[("raw", BLACKHOLE_RULES[1][0].format(port="in-a"))] == (3, 4500)
    assert counters[("filter", RESET_RULES[1][0].format(port="in-a"))] == (2, 120)
    assert ip_line(LinkGroup("to-east", 1 << 20)) == "link set dev to-east group 1048576"
    _, _, body = rtnl.request(LinkGroup("to-east", 1 << 20))
    assert rtnl.IFINFOMSG.unpack_from(body)[3:] == (0, 0)  # the admin state is left alone
