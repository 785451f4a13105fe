"""The α-β model and the nccl-tests metrics: pure arithmetic, no kernel, no torch."""

from __future__ import annotations

from itertools import pairwise

import pytest

from analysis.metrics import COLLECTIVES, algbw, bus_factor, busbw
from analysis.model import (
    ALGORITHMS,
    Link,
    Topology,
    predict,
    predict_all,
    rank_clusters,
    wan_path,
)

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
) -> Topology:
    names = [f"c{i}" for i in range(clusters)]
    links = [lk for a, b in pairwise(names) for lk in two_way(a, b, rate, delay)]
    return Topology(
        clusters=tuple((c, ranks) for c in names),
        links=tuple(links),
        fabric_goodput_bps={c: None for c in names},
        fabric_delay_s={c: 0.0 for c in names},
        placement=placement,
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
    t2 = topo(ranks=2)  # FIELD-NOTES measured 0.54-0.65 for this shape
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
    t = Topology((("a", 1), ("b", 0), ("c", 1)), links, {}, {})
    path = wan_path(t, "a", "c")
    assert [(lk.src, lk.dst) for lk in path] == [("a", "b"), ("b", "c")]
    assert min(lk.goodput_bps for lk in path) == pytest.approx(50e6 * GOODPUT)
    assert sum(lk.delay_s for lk in path) == pytest.approx(0.015)
    expected = 2 * (ALPHA + 0.015 + (S / 2) * 8 / (50e6 * GOODPUT))
    assert predict("all_reduce", "flat", S, t) == pytest.approx(expected, rel=1e-9)


def test_fabric_shaping_and_same_host_ranks() -> None:
    shaped = Topology((("a", 2),), (), {"a": 1e9}, {"a": 0.001})
    expected = 2 * (ALPHA + 2 * 0.001 + (S / 2) * 8 / 1e9)  # host -> gateway -> host
    assert predict("all_reduce", "flat", S, shaped) == pytest.approx(expected, rel=1e-9)
    one_host = Topology((("a", 2),), (), {"a": 1e9}, {"a": 0.001}, ranks_per_host=2)
    expected = 2 * (ALPHA + (S / 2) * 8 / one_host.host_bw_bps)  # loopback copy
    assert predict("all_reduce", "flat", S, one_host) == pytest.approx(expected, rel=1e-9)
