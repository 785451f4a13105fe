"""The self-check's pure parts: probe sizing from the BDP and the flag rule."""

from __future__ import annotations

import pytest

from testbed.core.frames import MSS
from testbed.core.vocab import SELFCHECK_LEAK as LEAK
from testbed.live.selfcheck import (
    judge,
    out_of_order_before_every_start,
    probe_tcp_again,
    size_probes,
)


def test_initial_window_is_one_bdp_of_segments():
    s = size_probes(200e6, 0.180)
    assert s.initcwnd == pytest.approx(200e6 * 0.180 / 8 / MSS, abs=1)
    assert size_probes(1e6, 0.001).initcwnd == 10  # never below the kernel's default


def test_buffers_hold_several_bdps():
    s = size_probes(1e9, 0.3)
    assert s.buffer >= 2 * 1e9 * 0.3 / 8


@pytest.mark.parametrize("rtt", [0.001, 0.04, 0.18, 0.3])
def test_probe_time_is_bounded_and_scales_with_the_rtt(rtt):
    s = size_probes(1e9, rtt)
    assert s.tcp_warmup > rtt  # past the handshake and the first flight
    assert s.mark_spacing >= rtt / 2
    # sending time of both probes stays within 4 s even at 300 ms RTT (plus start-up and pings)
    assert s.capacity_send + s.tcp_duration <= 1.0 + 0.8 + 3 * rtt + 0.2 + 1.0 + 1e-9


def test_capacity_window_lies_inside_what_is_sent():
    s = size_probes(100e6, 0.04)
    assert s.capacity_skip + s.capacity_window < s.capacity_send - 0.04 / 2


def test_a_correct_link_is_not_flagged():
    assert judge(0.998, 0.995) == []
    assert judge(1.009, 0.93) == []


@pytest.mark.parametrize("capacity", [1.011, 1.2])
def test_capacity_above_101_percent_is_a_leak(capacity):
    (problem,) = judge(capacity, 0.99)
    assert problem.startswith("LEAK")


def test_goodput_above_the_ceiling_is_a_leak_too():
    (problem,) = judge(1.0, LEAK + 0.01)
    assert problem.startswith("LEAK: TCP")


def test_low_capacity_and_low_goodput_are_flagged_separately():
    assert len(judge(0.9, 0.8)) == 2
    assert judge(0.96, 1.0) == ["capacity 96.0% of the configured rate"]
    assert judge(1.0, 0.89) == ["TCP goodput 89.0% of the configured ceiling"]


def test_a_missing_capacity_reading_is_flagged():
    assert judge(None, 1.0) == ["capacity probe gave no result"]


def test_the_capacity_window_opens_after_the_full_token_bucket_is_spent() -> None:
    # 50 Mbit/s, 67 kB bucket: at 1.05 x the bucket lasts 0.21 s, past the old 0.1 s skip.
    s = size_probes(50e6, 0.02, burst=67050)
    assert s.capacity_overdrive == 1.05
    spent_by = 67050 * 8 / ((s.capacity_overdrive - 1) * 50e6)
    assert s.capacity_skip >= spent_by
    # a slow link gets more overdrive instead of a long skip: the probe stays short
    slow = size_probes(5e6, 0.02, burst=67050)
    assert slow.capacity_overdrive > 1.05 and slow.capacity_skip <= 0.31
    assert size_probes(5e9, 0.05, burst=625000).capacity_skip == 0.1


def test_a_tcp_over_reading_taken_inside_a_loss_repair_is_flagged_not_a_leak() -> None:
    # 100 Mbit/s, 80 ms RTT: the slow-start overshoot's repair held in-order delivery until
    # after every window start (out-of-order packets at each), reading 101.3%; UDP read 100.0%
    (problem,) = judge(1.0, 1.013, repairing=True)
    assert not problem.startswith("LEAK") and "out of order (a loss repair)" in problem
    # a capacity leak still makes the TCP reading one, and clean starts are judged as before
    assert judge(1.02, 1.013, repairing=True)[0].startswith("LEAK")
    assert judge(1.0, 1.013)[0].startswith("LEAK")


def test_a_high_tcp_reading_with_out_of_order_data_before_every_start_is_probed_again() -> None:
    # traffic.bulk's marks carry tcpi_rcv_ooopack, a count since the connection began
    repaired = [{"ooo_packets": 3}, {"ooo_packets": 3}, {"ooo_packets": 9}]
    clean_first = [{"ooo_packets": 0}, {"ooo_packets": 3}]
    assert out_of_order_before_every_start(repaired)
    assert not out_of_order_before_every_start(clean_first)  # the first start read in order
    assert not out_of_order_before_every_start([{"ooo_packets": None}])  # an old kernel: no count
    assert not out_of_order_before_every_start([])
    assert probe_tcp_again(1.043, repairing=True)  # the 104.3% a correct link read once
    assert not probe_tcp_again(1.043, repairing=False)  # a leak: judged at once
    assert not probe_tcp_again(LEAK, repairing=True)  # within the band: nothing to probe
