"""Traces during a real collective: tcp_info of the ranks' sockets, WAN queue samples and flows
from headers-only pcaps, on one clock; the algorithm and ECN in effect recorded per run; a point
whose congestion control this kernel lacks is skipped with the reason."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers import RUN_TAG

from testbed.config.sweep import expand
from testbed.experiment.sweep import Experiment
from testbed.net import probe as kernel

pytestmark = pytest.mark.live


def traced(name: str, **extra) -> dict:
    return {
        "name": f"{RUN_TAG}-{name}"[:32],
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": [{"between": ["east", "west"], "rate": "50mbit", "delay": "10ms", "buffer": "2bdp"}],
        "tcp": {"congestion": "bbr", "ecn": True},
        "workload": {"sizes": ["4MiB"], "warmup": 0, "iterations": 2, "timeout": "120s"},
        "trace": {"tcp_info": "100ms", "queues": "10ms", "pcap": "8MiB"},
        **extra,
    }


@pytest.fixture(scope="module")
def bbr_run(tmp_path_factory) -> Experiment:
    if not kernel.probe().root:
        pytest.skip("needs root: network namespaces and qdiscs")
    out = tmp_path_factory.mktemp("traces")
    exp = Experiment(expand(traced("tr"), "test"), "test", out, resume=False)
    exp.run(selfcheck_seconds=0.5)
    run = exp.manifest["runs"]["p000-r0"]
    assert run["status"] == "ok", run["reason"]
    return exp


def table(exp: Experiment, name: str) -> pd.DataFrame:
    return pd.read_parquet(exp.results.path / f"{name}.parquet")


def test_algorithm_and_ecn_in_effect_are_read_from_the_ranks_sockets(bbr_run) -> None:
    run = bbr_run.manifest["runs"]["p000-r0"]
    assert run["tcp_sysctls"] == {
        "east": {"congestion": "bbr", "ecn": "1"},
        "west": {"congestion": "bbr", "ecn": "1"},
    }
    assert run["tcp_in_effect"] == {
        "east-h0": {"congestion": ["bbr"], "ecn": [True]},
        "west-h0": {"congestion": ["bbr"], "ecn": [True]},
    }


@pytest.mark.timing
def test_tcp_trace_has_sane_samples_of_the_wan_flows(bbr_run) -> None:
    tcp = table(bbr_run, "tcp")
    coll = table(bbr_run, "collectives")
    assert {"time", "host", "peer_host", "cwnd", "srtt_ms", "delivery_rate_bps"} <= set(tcp)
    wan = tcp[tcp["peer_host"].isin(["east-h0", "west-h0"]) & (tcp["host"] != tcp["peer_host"])]
    assert len(wan) >= 10
    assert (wan["algorithm"] == "bbr").all()
    # the WAN RTT is 20 ms; the queue may add up to 2 BDP (40 ms) on top
    # 19: the compensated 20 ms less rtt_within_tolerance's 1 ms floor; 65 = 20 + 40 + 5 ms of
    # slack (one 64 KiB GSO packet takes 10.5 ms at 50 Mbit/s); tcp_info's srtt is in us
    assert 19 <= wan["srtt_ms"].median() <= 65
    assert wan["bbr_bw_bps"].max() > 10e6
    # The kernel's per-ACK rate samples can exceed the link briefly (ACKs released together
    # arrive compressed), so the bound is on the busy samples' median, not on every sample.
    busy = wan["delivery_rate_bps"][wan["delivery_rate_bps"] > 5e6]
    print(busy.describe())
    # upper: the ceiling (rate x 1448/1514 = 47.8) + 5%, on the median of the ~10-30 busy
    # 100 ms samples of two 0.7 s iterations; lower 20 (0.42 x): each iteration's ramp is in.
    # No RESULTS.md table gives tcpi_delivery_rate's spread: the 5% is not derived from one.
    assert 20e6 <= busy.median() <= 50e6 * 1448 / 1514 * 1.05
    # one clock: samples span the timed iterations (0.2 s: two tcp_info periods of 100 ms)
    begin = coll["start"].min()
    end = (coll["start"] + coll["seconds"]).max()
    assert tcp["time"].min() <= begin and tcp["time"].max() >= end - 0.2


@pytest.mark.timing
def test_queue_trace_follows_the_bottleneck(bbr_run) -> None:
    q = table(bbr_run, "queues")
    assert set(q["direction"]) == {"east->west", "west->east"}
    assert set(q["source"]) == {"qdisc:bfifo"}  # drop-tail in the HTB leaf
    for _, d in q.groupby("direction"):
        gaps = d["time"].diff().dropna()
        # the sampler stays on a 10 ms grid (PeriodicSampler's drift rule: overrun ticks are
        # skipped, not bunched), so the median gap is the period + a read's delay (< 1 ms);
        # 0.5-3 periods is far wider than that (a busy host skipping most ticks still passes)
        assert 0.005 <= gaps.median() <= 0.03
        # the bfifo leaf's limit is the buffer, 2 BDP = 250 000 B here (bfifo never exceeds its
        # limit); the bound, 2 x 250 000 + 64 KiB, is 2.26x that
        assert d["backlog_bytes"].between(0, 2 * 250_000 + 65_536).all()  # within the buffer
        assert d["packets"].is_monotonic_increasing and d["packets"].iloc[-1] > 100
    # the 4 MiB all-reduce moves data both ways: some queue builds in each direction
    assert (q.groupby("direction")["backlog_bytes"].max() > 0).all()


@pytest.mark.timing
def test_flows_from_the_pcaps_carry_the_collective(bbr_run) -> None:
    flows = table(bbr_run, "flows")
    assert set(flows["capture"]) == {"east->west@to-west", "west->east@to-east"}
    per_capture = flows.groupby("capture")["payload_bytes"].sum()
    # a 2-rank ring all-reduce sends ~the whole buffer each way per iteration (2 iterations)
    assert (per_capture >= 2 * 4 * 2**20 * 0.9).all(), per_capture
    # per 0.1 s bin after the shaper: the ceiling (47.8) + HTB's burst (67 KB = 5.3 Mbit/s a
    # bin) + one 64 KiB GSO packet on the bin's edge (5.2 Mbit/s) = 58.3 Mbit/s <= 60
    assert flows["throughput_bps"].max() <= 60e6
    pcap = bbr_run.manifest["runs"]["p000-r0"]["pcap"]
    assert all(p["dropped_by_kernel"] == 0 and not p["truncated"] for p in pcap)


def test_missing_congestion_control_skips_the_point_with_the_reason(root, tmp_path) -> None:
    feats = kernel.probe()
    missing = next(
        (c for c in ("dctcp", "vegas", "westwood") if not feats.congestion_supported(c)), None
    )
    if missing is None:
        pytest.skip("this kernel has every congestion control the test could ask for")
    data = traced("skip", sweep={"tcp.congestion": ["cubic", missing]})
    data["workload"]["sizes"] = ["64KiB"]
    data["trace"] = {"tcp_info": "100ms"}
    exp = Experiment(expand(data, "test"), "test", tmp_path, resume=False)
    assert exp.run(selfcheck_seconds=0.3)  # a skipped point does not fail the sweep
    runs = exp.manifest["runs"]
    assert runs["p000-r0"]["status"] == "ok"
    assert runs["p000-r0"]["tcp_in_effect"]["east-h0"]["congestion"] == ["cubic"]
    assert runs["p001-r0"]["status"] == "skipped"
    assert f"unsupported on this kernel: {missing}" in runs["p001-r0"]["reason"]
    tcp = table(exp, "tcp")
    assert set(tcp["run_id"]) == {"p000-r0"}
