"""The α-β model and the nccl-tests metrics: pure arithmetic, no kernel, no torch."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

import pytest

from analysis.metrics import algbw, bus_factor, busbw
from analysis.model import (
    Link,
    Topology,
    gloo_ring_lengths,
    gloo_ring_segments,
    host_bw_from_phases,
    predict,
    predict_all,
    predict_phases,
    predict_push_pull,
    predict_terms,
    predict_timed,
    rank_clusters,
    wan_path,
)
from analysis.model.harness import barrier_exits
from analysis.model.topology import rank_hosts
from analysis.tcp import (
    INITIAL_CWND_SEGMENTS,
    TcpWindow,
    burst_overflow_bytes,
    cwnd_after_idle,
    linux_rto,
    ssthresh_after_idle,
    window_at_step_start,
)
from testbed.core.frames import MSS as MSS_BYTES
from testbed.core.vocab import ALGORITHMS, COLLECTIVES

MiB = 1 << 20
S = 16 * MiB
GOODPUT = 1448 / 1514  # TCP payload per 1514-byte frame (testbed.core.frames.GOODPUT_FACTOR)
ALPHA = 50e-6


def two_way(a: str, b: str, rate: float, delay: float) -> tuple[Link, Link]:
    return Link(a, b, rate * GOODPUT, delay), Link(b, a, rate * GOODPUT, delay)


def topo(
    ranks: int = 2,
    clusters: int = 2,
    rate: float = 100e6,
    delay: float = 0.02,
    placement: str = "by-cluster",
    ring: str = "synchronous",
) -> Topology:
    """The closed forms below are the synchronous α-β ring; gloo's segmented ring has tests of
    its own (ring="gloo", the runner's default)."""
    names = [f"c{i}" for i in range(clusters)]
    links = [lk for a, b in pairwise(names) for lk in two_way(a, b, rate, delay)]
    return Topology(
        clusters=tuple((c, ranks) for c in names),
        links=tuple(links),
        fabric_goodput_bps={c: None for c in names},
        fabric_delay_s={c: 0.0 for c in names},
        placement=placement,
        ring=ring,
    )


# --- metrics ---------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 4, 8])
def test_bus_factors_follow_nccl_tests(n: int) -> None:
    assert bus_factor("all_reduce", n) == pytest.approx(2 * (n - 1) / n)
    for c in ("all_gather", "reduce_scatter", "all_to_all"):
        assert bus_factor(c, n) == pytest.approx((n - 1) / n)
    assert bus_factor("broadcast", n) == 1.0


def test_bus_factor_edges() -> None:
    assert bus_factor("all_gather", 1) == 0.0
    with pytest.raises(ValueError, match="unknown collective"):
        bus_factor("gather", 4)
    with pytest.raises(ValueError, match="at least 1"):
        bus_factor("all_reduce", 0)


def test_algbw_and_busbw() -> None:
    assert algbw(8 * MiB, 0.5) == 16 * MiB
    assert busbw("all_reduce", 8 * MiB, 0.5, 4) == pytest.approx(16 * MiB * 1.5)
    assert busbw("broadcast", 1000, 2.0, 8) == 500
    with pytest.raises(ValueError, match="positive"):
        algbw(1, 0)


# --- model -----------------------------------------------------------------------------------


def test_flat_all_reduce_matches_hand_computation() -> None:
    # 2 clusters x 2 ranks, ring 0->3->2->1->0 crosses each WAN direction once per step:
    # 2(n-1) = 6 steps of alpha + delay + (S/4)*8/goodput (the WAN edge is the slowest).
    n, g = 4, 100e6 * GOODPUT
    expected = 2 * (n - 1) * (ALPHA + 0.02 + (S / n) * 8 / g)
    got = predict("all_reduce", "flat", S, topo())
    assert got == pytest.approx(expected, rel=1e-6)
    assert got == pytest.approx(2.2253308, rel=1e-6)
    # ... which is the bandwidth term 2(n-1)/n * S*8/goodput plus 2(n-1) latencies.
    assert got == pytest.approx(2 * (n - 1) / n * S * 8 / g + 6 * (0.02 + ALPHA), rel=1e-9)


def test_hierarchical_wins_on_a_slow_wan() -> None:
    t = topo(ranks=4)
    ratio = predict("all_reduce", "hierarchical", S, t) / predict("all_reduce", "flat", S, t)
    assert 0.4 < ratio < 0.8
    t2 = topo(ranks=2)  # measured 0.54-0.65 for this shape at 100 Mbit/s (docs/model.md)
    ratio2 = predict("all_reduce", "hierarchical", S, t2) / predict("all_reduce", "flat", S, t2)
    assert 0.5 < ratio2 < 0.7


def test_hierarchical_does_not_win_when_wan_is_as_fast_as_the_fabric() -> None:
    t = topo(ranks=4, rate=20e9, delay=0.0)
    ratio = predict("all_reduce", "hierarchical", S, t) / predict("all_reduce", "flat", S, t)
    assert ratio >= 0.9


def test_bandwidth_term_linear_latency_term_for_tiny_sizes() -> None:
    t = topo()
    big = [predict("all_reduce", "flat", k * 256 * MiB, t) for k in (1, 2, 4)]
    assert big[2] - big[1] == pytest.approx(2 * (big[1] - big[0]), rel=1e-9)
    assert big[1] / big[0] > 1.95
    tiny = predict("all_reduce", "flat", 4, t)
    assert tiny == pytest.approx(6 * (0.02 + ALPHA), rel=1e-3)


def test_interleaved_placement_is_slower_for_flat_all_reduce() -> None:
    by_cluster = predict("all_reduce", "flat", S, topo())
    interleaved = predict("all_reduce", "flat", S, topo(placement="interleaved"))
    # every ring edge crosses the WAN and two edges share each direction
    assert interleaved > 1.5 * by_cluster


def test_rank_placement_matches_the_testbed_layout() -> None:
    t = topo()
    assert rank_clusters(t) == ("c0", "c0", "c1", "c1")
    uneven = Topology(
        (("a", 3), ("b", 1)), two_way("a", "b", 1e9, 0), {}, {}, placement="interleaved"
    )
    assert rank_clusters(uneven) == ("a", "b", "a", "a")


def test_broadcast_is_a_binomial_tree_and_all_to_all_one_step() -> None:
    g = 100e6 * GOODPUT
    t = topo()
    # round 1 sends 0->2 and 1->3: the buffer crosses the WAN twice; hierarchical once
    assert predict("broadcast", "flat", S, t) == pytest.approx(2 * S * 8 / g, rel=0.02)
    assert predict("broadcast", "hierarchical", S, t) == pytest.approx(S * 8 / g, rel=0.03)
    # all_to_all: 2x2 pairs x S/4 cross each direction = S, all at once
    assert predict("all_to_all", "flat", S, t) == pytest.approx(S * 8 / g + 0.02 + ALPHA, rel=1e-3)


def test_reduce_scatter_flat_is_gloos_all_reduce_hierarchical_is_direct() -> None:
    t = topo()
    assert predict("reduce_scatter", "flat", S, t) == predict("all_reduce", "flat", S, t)
    # leaders exchange cluster blocks with all_to_all_single: S/2 crosses each direction once
    g = 100e6 * GOODPUT
    got = predict("reduce_scatter", "hierarchical", S, t)
    assert got == pytest.approx(S / 2 * 8 / g + 0.02, rel=0.03)


def test_invalid_combinations_raise_clear_errors() -> None:
    uneven = Topology((("a", 2), ("b", 3)), two_way("a", "b", 1e9, 0.01), {}, {})
    with pytest.raises(ValueError, match=r"same number of ranks.*a=2, b=3"):
        predict("all_reduce", "hierarchical-2d", S, uneven)
    with pytest.raises(ValueError, match="only for all_reduce"):
        predict("all_gather", "hierarchical-2d", S, topo())
    with pytest.raises(ValueError, match="hierarchical all_to_all does not exist"):
        predict("all_to_all", "hierarchical", S, topo())
    with pytest.raises(ValueError, match="unknown algorithm"):
        predict("all_reduce", "tree", S, topo())
    with pytest.raises(ValueError, match="unknown placement"):
        topo(placement="random")
    with pytest.raises(ValueError, match="no WAN path"):
        predict("all_reduce", "flat", S, Topology((("a", 1), ("b", 1)), (), {}, {}))


def test_predict_all_lists_only_existing_combinations() -> None:
    got = predict_all(topo(), S)
    assert len(got) == len(COLLECTIVES) + (len(COLLECTIVES) - 1) + 1
    assert ("all_reduce", "hierarchical-2d") in got
    assert all(a in ALGORITHMS and t > 0 for (_, a), t in got.items())


def test_multi_hop_path_uses_min_goodput_and_summed_delay() -> None:
    links = two_way("a", "b", 100e6, 0.010) + two_way("b", "c", 50e6, 0.005)
    t = Topology((("a", 1), ("b", 0), ("c", 1)), links, {}, {}, ring="synchronous")
    path = wan_path(t, "a", "c")
    assert [(lk.src, lk.dst) for lk in path] == [("a", "b"), ("b", "c")]
    assert min(lk.goodput_bps for lk in path) == pytest.approx(50e6 * GOODPUT)
    assert sum(lk.delay_s for lk in path) == pytest.approx(0.015)
    expected = 2 * (ALPHA + 0.015 + (S / 2) * 8 / (50e6 * GOODPUT))
    assert predict("all_reduce", "flat", S, t) == pytest.approx(expected, rel=1e-9)


def test_fabric_shaping_and_same_host_ranks() -> None:
    shaped = Topology((("a", 2),), (), {"a": 1e9}, {"a": 0.001}, ring="synchronous")
    expected = 2 * (ALPHA + 2 * 0.001 + (S / 2) * 8 / 1e9)  # host -> gateway -> host
    assert predict("all_reduce", "flat", S, shaped) == pytest.approx(expected, rel=1e-9)
    one_host = Topology(
        (("a", 2),), (), {"a": 1e9}, {"a": 0.001}, ranks_per_host=2, ring="synchronous"
    )
    expected = 2 * (ALPHA + (S / 2) * 8 / one_host.host_bw_bps)  # loopback copy
    assert predict("all_reduce", "flat", S, one_host) == pytest.approx(expected, rel=1e-9)


# --- gloo's segmented ring (the runner's default) and the TCP terms --------------------------


def pair(rate: float, delay: float, buffer: float | None = None, **kw: object) -> Topology:
    """One rank in each of two clusters: the ring is the WAN, both ways."""
    links = tuple(
        Link(lk.src, lk.dst, lk.goodput_bps, lk.delay_s, buffer)
        for lk in two_way("a", "b", rate, delay)
    )
    return Topology((("a", 1), ("b", 1)), links, {}, {}, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("size", "g", "expected"),
    [
        (16 * MiB, 4, (16, MiB)),  # capped at 1 MiB segments
        (MiB, 4, (8, MiB // 8)),  # at least 2 segments per rank
        (64 * MiB, 2, (64, MiB)),
        (4000, 3, (6, 668)),  # 667 rounded up to whole float32 elements
    ],
)
def test_gloo_ring_segments_follow_allreduce_cc(size: int, g: int, expected: tuple) -> None:
    assert gloo_ring_segments(size, g) == expected


@pytest.mark.parametrize(("size", "g"), [(16 * MiB, 4), (MiB, 4), (4000, 3), (12 * MiB + 4, 5)])
def test_gloo_ring_moves_g_minus_1_shares_per_phase_and_sends_pair_with_receives(
    size: int, g: int
) -> None:
    for phase in (0, 1):
        io = [gloo_ring_lengths(size, g, k, phase) for k in range(g)]
        # every byte crosses g-1 edges in each phase, whatever the rounding of the segments
        assert sum(snd for rank in io for snd, _ in rank) == (g - 1) * size
        for k in range(g):  # rank k sends to k-1 what k-1 receives at the same iteration
            assert [snd for snd, _ in io[k]] == [rcv for _, rcv in io[(k - 1) % g]]


def test_gloo_ring_is_the_bandwidth_term_when_segments_outlast_the_round_trip() -> None:
    t = pair(100e6, 0.0001)  # t_seg = 88 ms >> RTT = 0.2 ms: the link never waits for a notify
    bandwidth = 2 * (S / 2) * 8 / (100e6 * GOODPUT)  # two phases of S/2 on each direction
    assert predict("all_reduce", "flat", S, t) == pytest.approx(bandwidth, rel=0.01)


def test_gloo_ring_is_window_limited_at_two_segments_per_round_trip() -> None:
    # 64 MiB over 2 ranks: 32 segments of 1 MiB per phase; at 1 Gbit/s t_seg = 8.8 ms < RTT 20 ms,
    # so each pair of segments costs t_seg + RTT (the receiver posts segment i+2's receive when
    # segment i has arrived, and its notify takes another one-way delay), not 2 t_seg.
    size, goodput, delay = 64 * MiB, 1e9 * GOODPUT, 0.01
    t_seg = MiB * 8 / goodput
    got = predict("all_reduce", "flat", size, pair(1e9, delay))
    window = 2 * 16 * (t_seg + 2 * delay)
    assert got == pytest.approx(window, rel=0.03)
    synchronous = predict("all_reduce", "flat", size, pair(1e9, delay, ring="synchronous"))
    assert synchronous == pytest.approx(2 * (ALPHA + delay + (size / 2) * 8 / goodput))
    assert got > 1.5 * synchronous  # what the α-β ring missed at 1 Gbit/s


def test_notify_waits_behind_data_at_most_the_wan_buffer() -> None:
    # 4 ranks by cluster: the notify for the west->east data crosses east->west behind rank 0's
    # data to rank 3; it can wait at most what the bottleneck's buffer holds.
    def flat(buffer: float | None) -> float:
        links = tuple(
            Link(lk.src, lk.dst, lk.goodput_bps, lk.delay_s, buffer)
            for lk in two_way("a", "b", 100e6, 0.01)
        )
        return predict("all_reduce", "flat", S, Topology((("a", 2), ("b", 2)), links, {}, {}))

    no_queue, bdp, unbounded = flat(0.0), flat(100e6 * 0.02 / 8), flat(None)
    assert no_queue <= bdp <= unbounded
    assert no_queue < unbounded


def test_linux_rto_and_cwnd_after_idle() -> None:
    assert linux_rto(0.020, 0.001) == pytest.approx(0.220)  # variance floored at TCP_RTO_MIN
    assert linux_rto(1.0, 0.5) == pytest.approx(3.0)
    assert linux_rto(100.0, 10.0) == 120.0
    iw = INITIAL_CWND_SEGMENTS * MSS_BYTES
    big = 2000 * MSS_BYTES
    assert cwnd_after_idle(big, 0.1, 0.22) == big  # idle shorter than the RTO: untouched
    assert cwnd_after_idle(big, 0.3, 0.22) == big / 2  # one RTO elapsed beyond: halved once
    assert cwnd_after_idle(big, 0.5, 0.22) == big / 4
    assert cwnd_after_idle(big, 60.0, 0.22) == iw  # never below the initial window
    assert cwnd_after_idle(5 * MSS_BYTES, 60.0, 0.22) == 5 * MSS_BYTES  # nor raised to it


def test_window_at_step_start_restarts_only_after_an_rto_of_idle() -> None:
    big, th = 2000 * MSS_BYTES, 1500 * MSS_BYTES
    assert window_at_step_start(big, th, 0.2, 0.02) == (big, th)  # RTO = 0.22 s
    cwnd, ssthresh = window_at_step_start(big, th, 0.5, 0.02)  # one RTO beyond: halved once
    assert cwnd == big / 4 and ssthresh == 0.75 * big
    assert ssthresh_after_idle(big, None) is None  # still the initial "infinite" one
    assert ssthresh_after_idle(big, 3000 * MSS_BYTES) == 3000 * MSS_BYTES


def test_tcp_window_line_rate_when_the_window_covers_the_burst() -> None:
    w = TcpWindow(4 * MiB)
    assert w.send(1.0, MiB, 1e9, 0.02) == pytest.approx(1.0 + MiB * 8 / 1e9)


def test_tcp_window_below_two_segments_waits_a_round_trip() -> None:
    # Measured at 1 Gbit/s, 20 ms: the west->east leaders' window was 1.1 MB at a 4 MiB step,
    # below gloo's two 1 MiB segments: the second one waits for the first one's ACKs.
    w = TcpWindow(1.1e6)
    first = w.send(0.0, MiB, 1e9, 0.02)
    second = w.send(first, MiB, 1e9, 0.02)
    assert first == pytest.approx(MiB * 8 / 1e9)
    # the window fills after 1.1 MB; the rest leaves as the first bytes' ACKs stream back
    assert second == pytest.approx(0.02 + (2 * MiB - 1.1e6) * 8 / 1e9, rel=0.03)
    assert TcpWindow(4 * MiB).send(first, MiB, 1e9, 0.02) == pytest.approx(2 * first)


def test_tcp_window_slow_start_from_the_initial_window_doubles_per_round_trip() -> None:
    iw = INITIAL_CWND_SEGMENTS * MSS_BYTES
    w = TcpWindow(iw, ssthresh_bytes=1e9)  # after an idle restart, ssthresh stays high
    # 6 round trips carry iw * (1 + 2 + ... + 32) = 63 iw, the rest leaves at the link rate
    end = w.send(0.0, MiB, 1e9, 0.02)
    assert 6 * 0.02 < end < 7 * 0.02
    with pytest.raises(ValueError, match="cwnd"):
        TcpWindow(0)


def test_cwnd_term_counts_slow_start_from_the_initial_window() -> None:
    t = pair(1e9, 0.01, cwnd_start_bytes=INITIAL_CWND_SEGMENTS * MSS_BYTES)
    terms = predict_terms("all_reduce", "flat", S, t)
    assert set(terms) == {"alpha_beta", "segments_and_notify", "cwnd", "loss", "barrier_skew"}
    assert terms["cwnd"] > 0 and terms["segments_and_notify"] > 0
    without_skew = sum(v for k, v in terms.items() if k != "barrier_skew")
    assert without_skew == pytest.approx(predict("all_reduce", "flat", S, t))
    assert sum(terms.values()) == pytest.approx(predict_timed("all_reduce", "flat", S, t))
    assert predict_terms("all_reduce", "flat", S, pair(1e9, 0.01))["cwnd"] == 0.0


@pytest.mark.parametrize("algorithm", ["hierarchical", "hierarchical-2d"])
def test_phases_are_named_like_the_rank_timers_and_sum_to_the_prediction(algorithm: str) -> None:
    t = topo(ranks=2, rate=1e9, delay=0.01, ring="gloo")
    phases = predict_phases("all_reduce", algorithm, S, t)
    names = {
        "hierarchical": ["cluster_reduce", "leaders_all_reduce", "cluster_broadcast"],
        "hierarchical-2d": ["cluster_reduce_scatter", "column_all_reduce", "cluster_all_gather"],
    }
    assert list(phases) == names[algorithm]  # traffic.collectives' ctx.timer names
    assert sum(phases.values()) == pytest.approx(predict("all_reduce", algorithm, S, t))
    assert predict_phases("all_reduce", "flat", S, t) == {
        "all_reduce": predict("all_reduce", "flat", S, t)
    }


def test_host_bw_from_an_unshaped_wan_run_inverts_the_intra_cluster_phases() -> None:
    t = topo(ranks=2, rate=10e9, delay=0.0, ring="gloo")
    names = ("cluster_reduce", "cluster_broadcast")
    truth = Topology(t.clusters, t.links, {}, {}, host_bw_bps=3e9)
    measured = sum(predict_phases("all_reduce", "hierarchical", S, truth)[n] for n in names)
    got = host_bw_from_phases(measured, names, "all_reduce", "hierarchical", S, t)
    assert got == pytest.approx(3e9, rel=1e-6)
    with pytest.raises(ValueError, match="not above"):
        host_bw_from_phases(1e-9, names, "all_reduce", "hierarchical", S, t)
    with pytest.raises(ValueError, match="no phase"):
        host_bw_from_phases(1.0, ["nope"], "all_reduce", "hierarchical", S, t)


def test_ring_model_names_are_checked() -> None:
    with pytest.raises(ValueError, match="ring model"):
        pair(1e9, 0.01, ring="pipelined")


def test_wan_asymmetry_point_leaders_bursts_overflow_the_buffer_flat_ones_do_not() -> None:
    # scenarios/wan-asymmetry.yaml at 300 Mbit/s, 5 ms, buffer 1 BDP (375 kB), 1 MiB; measured
    # (tcp_info): the leaders' window after warm-up 688 segments (996 kB), later 267 (387 kB);
    # host_bw measured 3.6 Gbit/s on an unshaped WAN.
    buffer, rate, host = 300e6 * 0.010 / 8, 300e6, 3.6e9
    _, leaders_seg = gloo_ring_segments(MiB, 2)  # 256 KiB segments, two in flight
    _, flat_seg = gloo_ring_segments(MiB, 4)  # 128 KiB
    assert burst_overflow_bytes(2 * leaders_seg, 688 * MSS_BYTES, buffer, rate, host) > 0
    assert burst_overflow_bytes(2 * leaders_seg, 267 * MSS_BYTES, buffer, rate, host) == 0
    assert burst_overflow_bytes(2 * flat_seg, 375 * MSS_BYTES, buffer, rate, host) == 0
    # at 1 Gbit/s, 10 ms the 2 MiB bursts fit the 2.5 MB buffer (0 retransmits measured)
    assert burst_overflow_bytes(2 * MiB, 2940 * MSS_BYTES, 2.5e6, 1e9, host) == 0
    assert burst_overflow_bytes(MiB, MiB, 0, 1e9, 1e9) == 0  # no faster than it drains


def test_push_pull_first_cluster_servers_pull_every_west_worker_over_one_wan_direction() -> None:
    # servers 0 and 1 (east): the west workers 2 and 3 push S/2 to each, four transfers sharing
    # the west->east WAN; the pull mirrors it east->west.
    t, g = topo(ranks=2, rate=100e6, delay=0.02), 100e6 * GOODPUT
    want = 2 * (ALPHA + 0.02 + 8 * (S / 2) / (g / 4))
    assert predict_push_pull(S, "first-cluster", t) == pytest.approx(want)


def test_push_pull_one_server_per_cluster_halves_the_wan_share() -> None:
    # servers 0 (east) and 2 (west): two transfers per WAN direction per phase
    t, g = topo(ranks=2, rate=100e6, delay=0.02), 100e6 * GOODPUT
    want = 2 * (ALPHA + 0.02 + 8 * (S / 2) / (g / 2))
    assert predict_push_pull(S, "per-cluster", t) == pytest.approx(want)


def test_push_pull_refuses_unknown_servers_and_empty_payloads() -> None:
    with pytest.raises(ValueError, match="first-cluster, per-cluster"):
        predict_push_pull(S, "everywhere", topo())
    with pytest.raises(ValueError, match="positive"):
        predict_push_pull(0, "first-cluster", topo())


def test_gloo_barrier_lets_the_ranks_away_from_rank_0s_cluster_out_one_way_delay_apart() -> None:
    # 2 clusters x 2 ranks by cluster, 20 ms one way: in round 1 ranks 0 and 2 wait for a WAN
    # message (from 3 and 1), ranks 1 and 3 for a local one; round 2 is all WAN, so 1 and 3 leave
    # one one-way delay before 0 and 2 (the live demo's ranks: 20.0 ms apart at the median)
    t = topo(ranks=2, rate=1e8, delay=0.02)
    where = rank_hosts(t)
    exits = barrier_exits(t, where, [0, 1, 2, 3], dict.fromkeys(range(4), 0.0))
    assert exits[0] - exits[1] == pytest.approx(0.02, abs=1e-3)
    assert exits[2] - exits[3] == pytest.approx(0.02, abs=1e-3)
    assert exits[0] == pytest.approx(exits[2])


def test_timed_loop_adds_the_skew_the_slowest_rank_waits_for() -> None:
    # hierarchical: a non-leader leaves the barrier first and waits for its leader's ring, so
    # the slowest rank's timer holds the skew; the term is what the loop adds to predict()
    t = topo(ranks=2, rate=1e8, delay=0.02, ring="gloo")
    terms = predict_terms("all_reduce", "hierarchical", MiB, t)
    assert terms["barrier_skew"] > 0.01
    assert sum(terms.values()) == pytest.approx(predict_timed("all_reduce", "hierarchical", MiB, t))
    # one cluster: no WAN, the barrier leaves everyone within microseconds of each other
    one = Topology(clusters=(("a", 4),), links=(), fabric_goodput_bps={}, fabric_delay_s={})
    assert abs(predict_terms("all_reduce", "flat", MiB, one)["barrier_skew"]) < 1e-3


def test_a_loss_window_cuts_the_window_and_costs_time() -> None:
    # 1 Gbit/s, 20 ms RTT: BDP 2.5 MB. A window that loses at 2 MB falls to 0.7 x 2 MB and
    # sends below the BDP from then on; without the loss it grows and stays link-limited
    start = 1.995e6  # in congestion avoidance: past 2 MB within a few round trips
    lossy = TcpWindow(start, start, loss_at=2e6, beta=0.7)
    end_lossy = lossy.send(0.0, 64 * MiB, 1e9, 0.02)
    assert lossy.cwnd < 2e6 and lossy.ssthresh == pytest.approx(1.4e6)
    end_clean = TcpWindow(start, start).send(0.0, 64 * MiB, 1e9, 0.02)
    assert end_lossy > end_clean * 1.2
    t = pair(1e9, 0.01, cwnd_start_bytes=start)
    lossy_topo = replace(t, links=tuple(replace(lk, cwnd_loss_bytes=2e6) for lk in t.links))
    terms = predict_terms("all_reduce", "flat", 64 * MiB, lossy_topo)
    assert terms["loss"] > 0
    assert predict_terms("all_reduce", "flat", 64 * MiB, t)["loss"] == 0.0
