"""Marking profiles on the userspace backend, with real packets: the delay line emulates the WAN
bottleneck queue, marks ECN-capable packets CE, drops the others, and the senders see the marks.

One bulk TCP flow east -> west, 100 Mbit/s, 10 ms one-way, 4 BDP (1 MB) of buffer, cubic.
"""

from __future__ import annotations

import statistics

import pytest

from testbed.live.selfcheck import measure_goodput
from testbed.trace.tcp import TcpInfoSampler

pytestmark = pytest.mark.live

RED = {"kind": "red", "kmin": "20KB", "kmax": "200KB", "pmax": "1%"}
SECONDS = 4.0


def run_flow(make_testbed, aqm: dict, ecn: bool) -> dict:
    data = {
        "name": "aqm",
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": [
            {
                "between": ["east", "west"],
                "rate": "100mbit",
                "delay": "10ms",
                "buffer": "4bdp",
                "aqm": aqm,
            }
        ],
        "tcp": {"congestion": "cubic", "ecn": ecn},
        "backend": "userspace",
        "trace": {"queues": "10ms"},
    }
    tb = make_testbed(data)
    sampler = TcpInfoSampler({"east-h0": tb.namespace("east-h0")}, 0.1)
    with sampler:
        good = measure_goodput(tb, "east-h0", "west-h0", SECONDS)
    tb.down()  # the line's samples and counters are final after teardown
    (stats,) = [r for r in tb.link_stats() if r["direction"] == "east->west"]
    backlog = [
        r["backlog_bytes"] for r in tb.backend_queue_trace() if r["direction"] == "east->west"
    ]
    flow = sampler.rows  # east-h0 holds only the bulk sender's connection
    return {
        "goodput": good.get("goodput_bps", good),
        "stats": stats,
        "median_backlog": statistics.median(backlog[len(backlog) // 4 :]),
        "delivered_ce": max((r.get("delivered_ce") or 0) for r in flow) if flow else 0,
        "samples": len(backlog),
    }


@pytest.mark.timing
def test_red_with_ecn_marks_instead_of_dropping_and_keeps_the_queue_short(make_testbed) -> None:
    tail = run_flow(make_testbed, {"kind": "droptail"}, ecn=True)
    red = run_flow(make_testbed, RED, ecn=True)
    print(f"drop-tail: {tail}\nred: {red}")
    # samples every 10 ms for the whole life of the line
    # the line lives longer than the 4 s flow (>= 400 samples); a sample is postponed (never
    # dropped) while a deadline is due within STATS_QUIET: 0.8 allows 80 of them lost anyway
    assert red["samples"] >= SECONDS / 0.01 * 0.8
    # drop-tail: cubic fills the 1 MB buffer and overflows it
    assert tail["stats"]["marked"] == 0
    assert tail["stats"]["dropped_queue"] > 0
    # cubic's sawtooth in a 4-BDP (1 MB) buffer: window 0.7-1 x (BDP 250 KB + 1 MB), so the
    # queue swings 625 KB-1 MB for a bulk flow; RESULTS.md "ecn-profiles" (an all-reduce, not
    # bulk) read p50 386 kB: 300 KB is below both. Samples: 10 ms, bytes exact.
    assert tail["median_backlog"] > 300_000
    # red: the sender is told by marks, the queue stays near the thresholds, no drops
    assert red["stats"]["marked"] > 0
    assert red["stats"]["dropped_queue"] == red["stats"]["dropped_aqm"] == 0
    # RED keeps the queue between kmin (20 KB) and kmax (200 KB, the bound); RESULTS.md
    # "ecn-profiles", same link and profile: p50 23 kB, p95 136 kB vs drop-tail's 386 kB (/4 = 96)
    assert red["median_backlog"] < 200_000
    assert red["median_backlog"] < tail["median_backlog"] / 4
    # the CE marks reached the receiver and came back as ECE: the sender counts them
    assert red["delivered_ce"] > 0


def test_step_drops_non_ect_traffic_instead_of_marking(make_testbed) -> None:
    r = run_flow(make_testbed, {"kind": "step", "k": "30KB"}, ecn=False)
    print(r)
    assert r["stats"]["marked"] == 0
    assert r["stats"]["ect_packets"] == 0
    assert r["stats"]["dropped_aqm"] > 0
    assert r["delivered_ce"] == 0
