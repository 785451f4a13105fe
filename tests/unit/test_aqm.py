"""Marking profiles, pure parts: schema, plan checks, sch_red rendering, the delay line's
bottleneck arithmetic and marking law, the CE rule, and the backend choice."""

from __future__ import annotations

import random

import numpy as np
import pytest

from testbed.config.loading import parse_scenario
from testbed.core.aqm import mark_probability
from testbed.core.errors import PlanError, ScenarioError, UnsupportedError
from testbed.link.choose import choose_backend
from testbed.link.delayline import (
    Config,
    ConfigError,
    QueueConfig,
    iptables_delete_rules,
    iptables_rules,
)
from testbed.link.delayline.config import HOLD_RATE
from testbed.link.delayline.model import (
    HOLD,
    Queue,
    decide,
    dequeue_verdict,
    enqueue,
    retime,
    wire_bytes,
)
from testbed.link.delayline.nfqueue import NF_ACCEPT, NF_DROP
from testbed.link.kernel import KernelBackend, ShapingOnlyBackend
from testbed.link.userspace import UserspaceBackend
from testbed.net.probe import KernelFeatures
from testbed.plan.render import rate_change_ops, red_args, tc_line, wan_shaper_lines
from testbed.plan.topology import build_plan

RED = {"kind": "red", "kmin": "20KB", "kmax": "200KB", "pmax": "1%"}
STEP = {"kind": "step", "k": "65KB"}


def data(aqm=None, **wan):
    link = {"between": ["east", "west"], "rate": "100mbit", "delay": "10ms", "buffer": "4bdp"}
    link.update(wan)
    if aqm is not None:
        link["aqm"] = aqm
    return {
        "name": "aqm",
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": [link],
        "tcp": {"ecn": True},
    }


def plan_of(d):
    return build_plan(parse_scenario(d, "aqm.yaml"), "mctb0001", 64)


# -- schema ------------------------------------------------------------------------------------
def test_red_and_step_parse_to_bytes_and_fractions() -> None:
    red = parse_scenario(data(RED)).wan[0].aqm
    assert (red.kind, red.kmin, red.kmax, red.pmax, red.ecn) == ("red", 20000, 200000, 0.01, True)
    step = parse_scenario(data(STEP)).wan[0].aqm
    assert (step.kind, step.k, step.threshold) == ("step", 65000, 65000)


@pytest.mark.parametrize(
    ("aqm", "message"),
    [
        ({"kind": "red", "kmin": "20KB"}, "aqm kind red needs kmax, pmax"),
        ({"kind": "step"}, "aqm kind step needs k"),
        ({"kind": "step", "k": "1KB", "kmin": "1KB"}, "aqm kind step takes no kmin"),
        ({"kind": "droptail", "k": "1KB"}, "aqm kind droptail takes no k"),
        ({**RED, "kmin": "300KB"}, "kmin (300000 B) must be below kmax"),
        ({**RED, "pmax": "0%"}, "pmax must be above 0%"),
        ({"kind": "codel"}, "allowed: 'droptail', 'red' or 'step'"),
        ({**STEP, "threshold": 3}, "threshold"),
    ],
)
def test_bad_profiles_name_the_field(aqm, message) -> None:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(data(aqm), "aqm.yaml")
    assert "aqm.yaml: wan[0].aqm" in str(err.value)
    assert message in str(err.value)


def test_reverse_inherits_the_profile_and_may_override_it() -> None:
    link = parse_scenario(data(RED, reverse={"aqm": STEP})).wan[0]
    assert link.direction(False)["aqm"].kind == "red"
    assert link.direction(True)["aqm"].kind == "step"
    plain = parse_scenario(data(RED)).wan[0]
    assert plain.direction(True)["aqm"].kind == "red"


def test_trace_settings() -> None:
    d = data()
    d["trace"] = {"tcp_info": "100ms", "queues": "off", "pcap": True}
    t = parse_scenario(d).trace
    assert (t.tcp_info, t.queues, t.pcap) == (0.1, None, 64 << 20)
    assert parse_scenario(data()).trace.pcap == 0
    d["trace"] = {"tcp_info": "100us"}
    with pytest.raises(ScenarioError, match=r"trace\.tcp_info"):
        parse_scenario(d)


# -- plan and kernel rendering ----------------------------------------------------------------
def test_threshold_above_buffer_is_refused() -> None:
    with pytest.raises(PlanError, match=r"east->west: aqm threshold 2000000 B is not below"):
        plan_of(data({"kind": "step", "k": "2MB"}))


def test_red_leaf_replaces_bfifo_on_the_kernel_backend() -> None:
    plan = plan_of(data(RED))
    fwd = plan.wan[0]
    assert fwd.marking and plan.needs_marking()
    args = red_args(fwd)
    # 100 Mbit/s x 20 ms = 250 kB BDP, 4 BDP of buffer; burst 20000 // 1514 + 1 = 14 (weight 1/2)
    assert args == (
        "red limit 1000000 min 20000 max 200000 avpkt 1514 burst 14 probability 0.01 "
        "bandwidth 100000000bit ecn"
    )
    gw = KernelBackend().tc_batches(plan)[fwd.shaper.ns]
    assert gw[-1] == f"qdisc add dev w-west parent 1:1 handle 10: {args}"
    assert not any("bfifo" in line for line in gw)


def test_step_is_red_with_a_one_byte_ramp_and_certain_marking() -> None:
    fwd = plan_of(data({**STEP, "ecn": False})).wan[0]
    assert red_args(fwd).startswith("red limit 1000000 min 65000 max 65001 avpkt 1514 burst 43 ")
    assert "probability 1 " in red_args(fwd)
    assert not red_args(fwd).endswith("ecn")


def test_droptail_profile_keeps_bfifo_and_needs_no_red() -> None:
    plan = plan_of(data({"kind": "droptail"}))
    assert not plan.needs_marking()
    assert "bfifo limit 1000000" in KernelBackend().tc_batches(plan)[plan.wan[0].shaper.ns][-1]


def test_line_queues_take_the_shaper_away_from_profiled_directions() -> None:
    plan = plan_of(data(RED, reverse={"aqm": None}))
    tc = UserspaceBackend().tc_batches(plan)
    assert plan.wan[1].aqm is not None  # reverse inherits: None means "same as forward"
    assert plan.wan[0].shaper.ns not in tc and plan.wan[1].shaper.ns not in tc
    plain = plan_of(data())
    assert UserspaceBackend().tc_batches(plain) == ShapingOnlyBackend().tc_batches(plain)


# -- backend choice -----------------------------------------------------------------------------
def feats(**qdiscs: bool) -> KernelFeatures:
    f = KernelFeatures(release="6.x", root=True, netns=True, qdiscs=qdiscs)
    f.iptables, f.nfqueue = "/usr/sbin/iptables", True
    return f


def test_marking_without_sch_red_goes_to_the_delay_line() -> None:
    c = choose_backend("auto", True, feats(netem=True, red=False), needs_marking=True)
    assert c.name == "userspace" and "no sch_red" in c.reason
    c = choose_backend("auto", False, feats(netem=False, red=False), needs_marking=True)
    assert c.name == "userspace"
    assert choose_backend("auto", True, feats(netem=True, red=True), True).name == "kernel"
    assert choose_backend("auto", False, feats(red=True), True).name == "kernel"


def test_kernel_backend_without_red_is_unsupported() -> None:
    with pytest.raises(UnsupportedError, match="unsupported on this kernel: red"):
        choose_backend("kernel", True, feats(netem=True), needs_marking=True)


def test_a_trace_needs_sch_plug_in_the_kernel_or_the_delay_line_holds_it() -> None:
    c = choose_backend("auto", True, feats(netem=True), needs_hold=True)
    assert c.name == "userspace" and "no sch_plug" in c.reason
    assert choose_backend("auto", True, feats(netem=True, plug=True), needs_hold=True).name == (
        "kernel"
    )
    with pytest.raises(UnsupportedError, match="unsupported on this kernel: plug"):
        choose_backend("kernel", True, feats(netem=True), needs_hold=True)


def test_a_traced_direction_has_a_plug_leaf_that_closes_at_rate_0() -> None:
    trace = {"file": "t.csv", "format": "csv", "direction": "forward"}
    link = {"between": ["east", "west"], "rate": "100mbit", "delay": "5ms", "trace": trace}
    plan = plan_of(
        {
            "name": "t",
            "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
            "wan": [link],
            "traffic": [{"kind": "bulk", "from": "east-h0", "to": "west-h0", "duration": "1s"}],
        }
    )
    fwd, rev = plan.wan
    assert (fwd.traced, rev.traced, plan.needs_hold()) == (True, False, True)
    assert wan_shaper_lines(fwd)[-1].endswith("handle 10: plug")
    assert "bfifo" in wan_shaper_lines(rev)[-1]
    dev = fwd.shaper.ifname
    assert [tc_line(op) for op in rate_change_ops(fwd, 0, 400_000)] == [
        f"qdisc change dev {dev} parent 1:1 handle 10: plug limit 400000",
        f"qdisc change dev {dev} parent 1:1 handle 10: plug block",
    ]
    assert [tc_line(op) for op in rate_change_ops(fwd, 10_000_000, 400_000)][1:] == [
        f"qdisc change dev {dev} parent 1:1 handle 10: plug limit 400000",
        f"qdisc change dev {dev} parent 1:1 handle 10: plug release_indefinite",
    ]
    assert UserspaceBackend().owns_queue(fwd) and not KernelBackend().owns_queue(fwd)


# -- the delay line's bottleneck ------------------------------------------------------------------
def test_wire_bytes_count_headers_per_segment_like_htb() -> None:
    assert wire_bytes(52) == 66  # a pure ACK
    assert wire_bytes(1500) == 1514  # one full segment
    # a 10-segment GSO packet: one IP length, ten frames on the wire
    assert wire_bytes(52 + 10 * 1448) == 10 * 1514


def test_marking_law() -> None:
    red = {"kind": "red", "kmin": 20000, "kmax": 200000, "pmax": 0.01}
    assert mark_probability(red, 20000) == 0.0
    assert mark_probability(red, 110000) == pytest.approx(0.005)
    assert mark_probability(red, 200000) == pytest.approx(0.01)
    assert mark_probability(red, 200001) == 1.0
    step = {"kind": "step", "k": 65000}
    assert [mark_probability(step, b) for b in (65000, 65001)] == [0.0, 1.0]
    assert mark_probability(None, 1e9) == mark_probability({"kind": "droptail"}, 1e9) == 0.0


def bottleneck(**aqm) -> Queue:
    cfg = QueueConfig.from_dict(
        {"num": 1, "rate": 8e6, "buffer": 200_000, "aqm": aqm or None}  # 1 MB/s
    )
    return Queue(cfg, random.Random(1))


def test_queue_drains_at_the_rate_and_drops_at_the_buffer() -> None:
    q = bottleneck()
    full = 52 + 40 * 1448  # ~60 kB GSO packets
    departs = [enqueue(q, pid, 0.0, full, 0) for pid in range(4)]
    size = wire_bytes(full)
    assert departs[:3] == pytest.approx([size / 1e6 * k for k in (1, 2, 3)])
    assert departs[3] == -1.0 and q.dropped_queue == 1  # 3 x 60.6 kB + 60.6 kB > 200 kB
    assert q.backlog(0.0) == (pytest.approx(3 * size), 3)
    assert q.backlog(departs[0])[1] == 2
    # the counter says what left (as HTB's), not what arrived (4 packets, one dropped); like
    # backlog(), asked at non-decreasing times
    assert q.wire_bytes == 4 * size
    assert q.departed_bytes(departs[1]) == pytest.approx(2 * size)
    assert q.backlog(1.0) == (0.0, 0)
    assert q.departed_bytes(1.0) == pytest.approx(3 * size)


def test_a_rate_change_drains_the_queued_packets_at_the_new_rate() -> None:
    # 1 MB/s, 10 ms delay: ten 1514 B packets arrive at 0, queued back to back
    cfg = QueueConfig.from_dict({"num": 1, "rate": 8e6, "buffer": 200_000, "delay": 0.01})
    q = Queue(cfg, random.Random(1))
    assert all(decide(q, pid, 0.0, 1500, 0) == HOLD for pid in range(10))
    gap = 1514 / 1e6
    assert list(q.deadlines) == pytest.approx([0.01 + gap * k for k in range(1, 11)])
    # after 3 left, the rate drops to a tenth: the 7 still queued leave 10x slower, from now
    now = 3.5 * gap
    q.cfg = QueueConfig.from_dict({"num": 1, "rate": 8e5, "buffer": 200_000, "delay": 0.01})
    retime(q, now, 8e6)
    held = list(q.deadlines)
    assert held[:3] == pytest.approx([0.01 + gap * k for k in (1, 2, 3)])  # gone: unchanged
    assert held[3] == pytest.approx(0.01 + now + 0.5 * gap * 10)  # the half left of packet 4
    assert np.diff(held[3:]) == pytest.approx([gap * 10] * 6)
    assert q.backlog(now) == (pytest.approx(6.5 * 1514), 7)  # the same bytes as before
    assert q.busy_until == pytest.approx(held[-1] - 0.01)
    # a new packet queues behind them, at the new rate
    decide(q, 10, now, 1500, 0)
    assert q.deadlines[-1] == pytest.approx(held[-1] + gap * 10)
    # back up: what is left leaves at the fast rate again
    q.cfg = cfg
    retime(q, now, 8e5)
    assert q.deadlines[-1] == pytest.approx(0.01 + now + 7.5 * gap)


def test_a_held_bottleneck_keeps_its_queue_and_serves_it_at_the_release() -> None:
    # a trace's zero-rate bin (Mahimahi semantics): nothing leaves, arrivals queue up to the
    # buffer, and at the release the queue leaves at the new rate with nothing lost
    base = {"num": 1, "rate": 8e6, "buffer": 131_072, "delay": 0.01}
    q = Queue(QueueConfig.from_dict(base), random.Random(1))
    gap = 1514 / 1e6
    assert all(decide(q, pid, 0.0, 1500, 0) == HOLD for pid in range(5))
    now = 2.5 * gap  # 2 left, 2.5 packets queued
    q.cfg = QueueConfig.from_dict(base | {"held": True})
    retime(q, now, 8e6)
    assert q.backlog(now) == (pytest.approx(2.5 * 1514), 3)
    assert q.backlog(now + 60.0) == (pytest.approx(2.5 * 1514, abs=8), 3)  # a minute: 7.5 B left
    # arrivals wait up to the buffer (84 more packets of 1514 B), then drop-tail
    verdicts = [decide(q, 10 + k, now + 0.001 * k, 1500, 0) for k in range(90)]
    assert verdicts.count(HOLD) == 84 and q.dropped_queue == 6
    assert q.backlog(now + 0.1)[1] == 87
    # released two seconds later at a tenth of the rate: the 86.5 packets left, 10x slower
    later = now + 2.0
    q.cfg = QueueConfig.from_dict(base | {"rate": 8e5})
    retime(q, later, HOLD_RATE)
    assert q.backlog(later) == (pytest.approx(86.5 * 1514, rel=1e-5), 87)
    assert q.deadlines[-1] == pytest.approx(later + 86.5 * gap * 10 + 0.01, rel=1e-5)
    assert q.deadlines[2] == pytest.approx(later + 0.5 * gap * 10 + 0.01, rel=1e-5)


def test_marking_at_dequeue_sees_the_queue_a_packet_leaves_behind() -> None:
    # ten 1514 B ECT packets arrive together at 1 MB/s, step k = 3000 B: at arrival the third
    # and later find > k queued (2..9 marked); at dequeue the first eight leave > k behind
    def marked(at: str) -> list[int]:
        cfg = {"num": 1, "rate": 8e6, "buffer": 200_000, "delay": 0.01}
        cfg["aqm"] = {"kind": "step", "k": 3000, "ecn": True, "at": at}
        q = Queue(QueueConfig.from_dict(cfg), random.Random(1))
        assert all(decide(q, pid, 0.0, 1500, 0x02) == HOLD for pid in range(10))
        if at == "arrival":
            return sorted(q.marked_ids)
        got = [dequeue_verdict(q, pid, due) for pid, due in zip(q.ids, q.deadlines, strict=True)]
        assert q.marked == got.count(HOLD) and not q.at_dequeue
        return [pid for pid, v in enumerate(got) if v == HOLD]

    assert marked("arrival") == [2, 3, 4, 5, 6, 7, 8, 9]
    assert marked("dequeue") == [0, 1, 2, 3, 4, 5, 6, 7]


def test_marking_at_dequeue_counts_only_what_arrived_before_the_departure() -> None:
    # one packet every 2 ms at 1 MB/s (1.5 ms each): none finds a queue, none leaves one behind,
    # however many arrive later; a non-ECT packet above k is dropped at dequeue
    cfg = {"num": 1, "rate": 8e6, "buffer": 200_000, "delay": 0.01}
    cfg["aqm"] = {"kind": "step", "k": 1000, "at": "dequeue"}
    q = Queue(QueueConfig.from_dict(cfg), random.Random(1))
    for pid in range(5):
        decide(q, pid, pid * 0.002, 1500, 0x02)
    assert [dequeue_verdict(q, pid, due) for pid, due in zip(q.ids, q.deadlines, strict=True)] == [
        NF_ACCEPT
    ] * 5
    q = Queue(QueueConfig.from_dict(cfg), random.Random(1))
    decide(q, 0, 0.0, 1500, 0x00)
    decide(q, 1, 0.0, 1500, 0x00)
    assert dequeue_verdict(q, 0, q.deadlines[0]) == NF_DROP and q.dropped_aqm == 1


def test_step_marks_ect_and_drops_non_ect_above_k() -> None:
    q = bottleneck(kind="step", k=1000, ecn=True)
    assert enqueue(q, 1, 0.0, 1500, 0x02) > 0  # empty queue: no mark
    assert enqueue(q, 2, 0.0, 1500, 0x02) > 0  # 1514 B queued > k: marked
    assert q.marked_ids == {2} and q.marked == 1
    assert enqueue(q, 3, 0.0, 1500, 0x00) == -1.0  # not ECN-capable: dropped
    assert q.dropped_aqm == 1 and q.ect == 2
    q = bottleneck(kind="step", k=1000, ecn=False)
    enqueue(q, 1, 0.0, 1500, 0x02)
    assert enqueue(q, 2, 0.0, 1500, 0x02) == -1.0  # ecn off: RED drops instead


def test_bottleneck_config_is_checked() -> None:
    with pytest.raises(ConfigError, match="buffer"):
        QueueConfig.from_dict({"num": 1, "rate": 1e8, "buffer": 1000})
    with pytest.raises(ConfigError, match="reorder"):
        QueueConfig.from_dict({"num": 1, "rate": 1e8, "buffer": 1 << 20, "reorder": 0.1})
    with pytest.raises(ConfigError, match="needs a bottleneck rate"):
        QueueConfig.from_dict({"num": 1, "aqm": {"kind": "step", "k": 1}})
    with pytest.raises(ConfigError, match="trace_interval"):
        Config.from_dict({"queues": [{"num": 1}], "trace_interval": 0})


def test_ce_rule_sits_in_postrouting_and_is_deleted_with_the_queue_rule() -> None:
    rules = iptables_rules("to-east", 1, ce_iface="to-west")
    assert rules[1] == [
        "iptables", "-w", "-t", "mangle", "-A", "POSTROUTING", "-o", "to-west",
        "-m", "mark", "--mark", "0x1/0x1", "-j", "TOS", "--set-tos", "0x03/0x03",
    ]  # fmt: skip
    deleted = iptables_delete_rules("to-east", 1, ce_iface="to-west")
    assert [r[4] for r in deleted] == ["-D", "-D"] and len(iptables_rules("to-east", 1)) == 1
