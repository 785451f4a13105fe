"""analysis.steps: lining up tcp_info samples and phase timers with the timed iterations."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.steps import phase_medians, wan_step_starts


def samples(host: str, peer: str, rows: list[tuple[float, int, int]]) -> list[dict]:
    """(time, cwnd, bytes_sent) samples of one connection."""
    return [
        {"run_id": "r", "time": t, "host": host, "peer_host": peer, "local": f"{host}:1",
         "peer": f"{peer}:2", "cwnd": cwnd, "mss": 1000, "srtt_ms": 21.0, "min_rtt_ms": 20.0,
         "bytes_sent": sent, "retransmits": 0, "ssthresh": 7 if cwnd == 10 else None}
        for t, cwnd, sent in rows
    ]  # fmt: skip


def test_cwnd_at_the_first_new_bytes_and_idle_before_each_iteration() -> None:
    tcp = pd.DataFrame(
        samples("east-h0", "west-h0", [
            (9.0, 50, 0), (9.5, 60, 500_000),  # warm-up sends
            (10.0, 60, 500_000), (10.1, 10, 500_000), (10.2, 12, 900_000), (10.3, 40, 2_000_000),
        ])
        + samples("east-h0", "east-h1", [(10.1, 10, 0), (10.2, 10, 5_000_000)])  # not WAN
        + samples("west-h0", "east-h0", [(10.1, 10, 0), (10.2, 10, 48)])  # barrier-sized
    )  # fmt: skip
    coll = pd.DataFrame(
        [{"run_id": "r", "wan[0].rate": "1gbit", "algorithm": "flat", "size": 1 << 20,
          "iteration": 0, "rank": r, "start": 10.05, "seconds": 0.3} for r in (0, 1)]
    )  # fmt: skip
    got = wan_step_starts(tcp, coll)
    assert len(got) == 1
    row = got.iloc[0]
    assert (row["host"], row["peer_host"], row["wan[0].rate"]) == ("east-h0", "west-h0", "1gbit")
    assert row["cwnd_start"] == 10 * 1000  # the sample before the first growth, times the mss
    assert row["ssthresh_start"] == 7 * 1000
    assert row["cwnd_max"] == 40 * 1000
    assert row["idle_before"] == pytest.approx(10.05 - 9.5)
    assert row["sent_bytes"] == 1_500_000
    assert wan_step_starts(tcp.iloc[:0], coll).empty


def test_a_steps_srtt_is_its_samples_mean() -> None:
    """The window model's rate runs on the mean srtt: a burst's queue makes the samples skewed to
    the right, and the median would leave it out (docs/model.md)."""
    tcp = pd.DataFrame(
        samples("east-h0", "west-h0", [(9.9, 50, 0), (10.1, 50, 100_000), (10.2, 50, 200_000),
                                       (10.3, 50, 300_000)])
    )  # fmt: skip
    tcp["srtt_ms"] = [40.0, 40.0, 40.0, 100.0]
    coll = pd.DataFrame(
        [{"run_id": "r", "algorithm": "flat", "size": 1 << 20, "iteration": 0, "rank": 0,
          "start": 10.05, "seconds": 0.3}]
    )  # fmt: skip
    assert wan_step_starts(tcp, coll).iloc[0]["srtt_ms"] == pytest.approx((40 + 40 + 100) / 3)


def test_phase_medians_take_the_slowest_leader_not_a_waiting_member() -> None:
    rows = []
    for it, (lead, waiting) in enumerate([(0.10, 0.50), (0.30, 0.70), (0.20, 0.60)]):
        for rank, leaders_phase in ((0, lead), (1, None)):
            rows.append({"run_id": "r", "algorithm": "hierarchical", "size": 8, "iteration": it,
                         "rank": rank, "seconds": 1.0 + it,
                         "phases_leaders_all_reduce": leaders_phase,
                         "phases_cluster_broadcast": 0.01 if rank == 0 else waiting})  # fmt: skip
    got = phase_medians(pd.DataFrame(rows), leaders=[0]).iloc[0]
    assert got["seconds"] == 2.0
    assert got["phases_leaders_all_reduce"] == pytest.approx(0.20)
    assert got["phases_cluster_broadcast"] == pytest.approx(0.01)
