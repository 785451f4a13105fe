"""analysis.faults on hand-built tables: the RTO series, fault verdicts, trace replay, lateness."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.events import applied_events, directions_of, fault_windows, lateness_table
from analysis.faults import (
    SPURIOUS_RTO,
    drop_table,
    fault_metrics,
    fault_table,
    flow_stalls,
    spurious_rtos,
    summarize_faults,
    tcp_around_faults,
)
from analysis.operations import operation_table, rank_operations
from analysis.tcp import (
    RunContext,
    linux_rto,
    predict_stall,
    retransmit_times,
    slow_start_loss,
    tcp_give_up,
    tcp_timers,
    tlp_timeout,
)
from analysis.trace_replay import (
    achieved_rates,
    goodput_by_direction,
    goodput_in_bins,
    per_second,
    trace_table,
    trace_targets,
    zero_rate_spans,
)

T0 = 1_700_000_000.0


def test_rto_series_reproduces_the_notes_numbers() -> None:
    # faults-and-traces.md §2: RTT 80 ms -> RTO0 ~0.28 s; probes at 0.28, 0.84, 1.96, 4.20 ...
    rto0 = linux_rto(0.080, 0.0)
    assert rto0 == pytest.approx(0.28)
    times = retransmit_times(rto0, 17.0)
    assert times == pytest.approx([0.28, 0.84, 1.96, 4.20, 8.68, 17.64])
    for d, resume in ((1, 1.96), (2, 4.20), (5, 8.68), (10, 17.64)):
        pred = predict_stall([(0.0, float(d), False)], rto0)
        assert pred.resume_s == pytest.approx(resume) and pred.stall_s == pytest.approx(resume)
        assert not pred.gave_up


def test_linux_tail_loss_probe_comes_first() -> None:
    # Linux sends a TLP 2·srtt + 2 ms after the last ACK, then a full RTO0 from it, doubling:
    # on 80 ms (RTO0 0.28 s) probes at 0.162, 0.442, 1.002, 2.122, 4.362 s
    pto = tlp_timeout(0.080, 0.28)
    assert pto == pytest.approx(0.162)
    pred = predict_stall([(0.0, 2.0, False)], 0.28, pto_s=pto)
    assert pred.probes == pytest.approx((0.162, 0.442, 1.002, 2.122))
    assert pred.stall_s == pytest.approx(2.122)
    # measured here (bulk TCP, 100 Mbit/s, 40 ms one-way, userspace backend; ss: srtt 140 ms,
    # rto 340 ms; iptables DROP on the east gateway): the receiver saw data again after
    # 1.50 s (1.22 s blackhole), 2.95 s (2.53 s), 5.64 s (4.09 s), 11.43 s (6.02 s); the TLP
    # series puts each in the right probe, 5-15% early (delivery, timer slack)
    pto = tlp_timeout(0.140, 0.34)
    for d, seen in ((1.22, 1.50), (2.53, 2.95), (4.09, 5.64), (6.02, 11.43)):
        stall = predict_stall([(0.0, d, False)], 0.34, pto_s=pto).stall_s
        assert 1.0 <= seen / stall <= 1.2, (d, seen, stall)
    assert tlp_timeout(0.5, 0.7) == 0.7  # never after the RTO


def test_rto_is_capped_at_120_s() -> None:
    times = retransmit_times(100.0, 500.0)
    assert np.diff([0.0, *times]).tolist() == pytest.approx([100, 120, 120, 120, 120])


def test_icmp_outage_resumes_within_one_rto_of_the_repair() -> None:
    pred = predict_stall([(0.0, 2.0, True)], 0.28)
    assert 2.0 < pred.stall_s <= 2.0 + 0.28


def test_flap_stalls_add_up_and_reset_the_backoff() -> None:
    # two 0.5 s downs 3 s apart: each resumes at the 2nd probe (0.56 s after its start)
    pred = predict_stall([(0.0, 0.5, True), (3.5, 4.0, True)], 0.28)
    assert pred.stall_s == pytest.approx(2 * 0.56)
    # an outage that began before the flow had data in flight counts from when it has
    assert predict_stall([(-1.0, 1.0, False)], 0.28).stall_s == pytest.approx(1.96)


def test_kernel_give_up_and_a_never_repaired_blackhole() -> None:
    assert [tcp_give_up(r) for r in (15, 8, 5)] == pytest.approx([924.6, 102.2, 12.6])
    never = predict_stall([(0.0, None, False)], 0.28)
    assert never.gave_up and never.stall_s is None
    # a 20 s outage with tcp_retries2 = 5 (12.6 s) ends the connection first
    assert predict_stall([(0.0, 20.0, False)], 0.28, retries2=5).gave_up


def test_timers_prefer_tcp_info() -> None:
    tcp = pd.DataFrame({"time": [1.0, 2.0], "srtt_ms": [90.0, 90.0], "rttvar_ms": [5.0, 5.0]})
    assert tcp_timers(0.08, tcp, before=3.0) == pytest.approx((0.29, 0.09))
    assert tcp_timers(0.08, tcp.assign(rto_ms=[310.0, 310.0])) == pytest.approx((0.31, 0.09))
    assert tcp_timers(0.08) == pytest.approx((0.28, 0.08))


def test_slow_start_after_an_rto() -> None:
    """The RTO leaves one segment of window: what is left of the transfer goes out in slow
    start. 100 Mbit/s, 80 ms: BDP 690 segments, slow start to it takes ~log2(690) = 9.4 rounds,
    while the full rate would have sent them in about 2 of them: ~0.6 s lost with lots left."""
    lots = slow_start_loss(2.0, 1e8, 0.08)
    assert 0.5 < lots < 0.75
    # little left: still ~10 rounds for 0.1 s of data
    assert slow_start_loss(0.1, 1e8, 0.08) == pytest.approx(0.66, abs=0.05)
    # a shorter path recovers in proportion
    assert slow_start_loss(2.0, 1e8, 0.02) < lots / 2
    assert slow_start_loss(0.0, 1e8, 0.08) == 0.0


# -- fault verdicts ----------------------------------------------------------------------------
def _ops(durations: list[float], outcomes: dict[int, list[tuple]] | None = None, gap=0.1):
    """Two ranks, one all_reduce arm; ``outcomes``: iteration -> per-rank (outcome, end offset
    from start, error_type, error)."""
    rows, t = [], T0
    for i, d in enumerate(durations):
        for rank in (0, 1):
            outcome, end, etype, err = "ok", d, None, None
            if outcomes and i in outcomes:
                outcome, end, etype, err = outcomes[i][rank]
            rows.append(
                {
                    "results": "r",
                    "run_id": "p000-r0",
                    "arm": "all_reduce/flat/16777216",
                    "op": i,
                    "rank": rank,
                    "start": t,
                    "end": t + end,
                    "outcome": outcome,
                    "error_type": etype,
                    "error": err,
                }
            )
        t += max(d, 0) + gap
    return pd.DataFrame(rows)


def _events(rows: list[tuple]) -> pd.DataFrame:
    """(event, fault, action, applied offset from T0, link)."""
    return pd.DataFrame(
        [
            {
                "results": "r",
                "run_id": "p000-r0",
                "event": e,
                "source": "fault",
                "fault": f,
                "action": a,
                "link": link,
                "scheduled_unix": T0 + t - 0.002,
                "applied_unix": T0 + t,
                "late_s": 0.002,
                "error": None,
            }
            for e, f, a, t, link in rows
        ]
    )


CTX = {("r", "p000-r0"): RunContext(rto0_s=0.28, retries2=15, op_timeout_s=30.0)}


def test_a_2s_blackhole_during_an_all_reduce_is_survived_with_the_predicted_stall() -> None:
    # iterations of 1 s; iteration 3 (starts at 3.3 s) meets a blackhole 3.5 .. 5.5 s and
    # takes 1 s + 4.2 s (the RTO series from 3.5 s)
    ops = _ops([1.0, 1.0, 1.0, 5.2, 1.0, 1.0])
    events = _events(
        [(0, 0, "blackhole", 3.5, "east-west"), (1, 0, "unblackhole", 5.5, "east-west")]
    )
    table = fault_table(events, ops, CTX, {("r", "p000-r0"): {0: "blackhole"}})
    assert len(table) == 1
    f = table.iloc[0]
    assert f["kind"] == "blackhole" and f["link"] == "east-west"
    assert f["duration"] == pytest.approx(2.0)
    assert f["affected_ops"] == 1 and f["op_outcome"] == "ok"
    assert f["baseline_s"] == pytest.approx(1.0)
    assert f["stall_s"] == pytest.approx(4.2)
    assert f["predicted_stall_s"] == pytest.approx(4.2)
    assert f["stall_over_predicted"] == pytest.approx(1.0)
    assert f["predicted_outcome"] == "completes late"
    assert pd.isna(f["detect_s"])
    # iteration 3 ends at 3.3 + 5.2 = 8.5 s: 3 s after the blackhole ended
    assert f["recover_s"] == pytest.approx(3.0)
    assert bool(f["survived"])
    assert f["verdict"].startswith("survived: stalled 4.20 s (predicted 4.20 s)")
    m = fault_metrics(table, lateness_table(events))
    assert m["fault_stall"] == pytest.approx(4.2) and m["fault_survived"] == 1.0
    assert m["fault_detect"] is None and m["events_late"] == 0.0


def test_a_blackhole_longer_than_the_timeout_fails_the_group() -> None:
    timeout = "[gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 30000ms for recv"
    closed = "Connection closed by peer [10.1.0.2]:4321"
    fails = {
        2: [
            ("timeout", 30.0, "RuntimeError", timeout),
            ("error", 30.05, "RuntimeError", closed),
        ]
    }
    ops = _ops([1.0, 1.0, 30.0], fails)
    events = _events(
        [(0, 0, "blackhole", 2.3, "east-west"), (1, 0, "unblackhole", 42.3, "east-west")]
    )
    f = fault_table(events, ops, CTX).iloc[0]
    assert f["kind"] == "blackhole"  # inferred from the actions
    assert f["op_outcome"] == "timeout"
    # the iteration started at 2.2 s, the timeout fired 30 s later: 29.9 s after the fault began
    assert f["detect_s"] == pytest.approx(29.9)
    assert f["error_type"] == "RuntimeError" and "Timed out waiting" in f["error"]
    assert not f["survived"] and pd.isna(f["recover_s"])
    assert pd.isna(f["stall_s"])
    assert f["predicted_outcome"].startswith("timeout")
    assert f["verdict"].endswith("did not recover")
    assert "Timed out waiting 30000ms" in f["verdict"]


def test_a_reset_fails_fast_and_a_rebuilt_group_recovers() -> None:
    reset = "Connection reset by peer"
    ops = _ops(
        [1.0, 1.0, 1.0, 1.0],
        {1: [("error", 0.05, "RuntimeError", reset), ("error", 0.06, "RuntimeError", reset)]},
    )
    events = _events([(0, 0, "reset", 1.12, "east-west"), (1, 0, "unreset", 2.12, "east-west")])
    f = fault_table(events, ops, CTX).iloc[0]
    assert f["kind"] == "reset"
    assert f["detect_s"] == pytest.approx(0.03)
    assert pd.isna(f["predicted_stall_s"])  # a reset is no outage
    assert not f["survived"]  # an operation failed before the first ok one
    # iteration 2 ran 2.2 .. 3.2 s: 1.08 s after the reset window closed
    assert f["recover_s"] == pytest.approx(1.08, abs=1e-6)
    assert "recovered" in f["verdict"]


def test_flap_windows_and_a_fault_between_operations() -> None:
    events = _events(
        [
            (0, 0, "link_down", 10.0, "east-west"),
            (1, 0, "link_up", 10.5, "east-west"),
            (2, 0, "link_down", 13.5, "east-west"),
            (3, 0, "link_up", 14.0, "east-west"),
        ]
    )
    w = fault_windows(events).iloc[0]
    # a link down is silent for TCP: the gateway's ICMP is rate-limited to ~1/s
    assert w["kind"] == "flap"
    assert [(s - T0, e - T0, icmp) for s, e, icmp in w["intervals"]] == [
        pytest.approx((10.0, 10.5, False)),
        pytest.approx((13.5, 14.0, False)),
    ]
    # no operation at all during it: the first one after is the affected one
    ops = _ops([1.0] * 3)
    ops[["start", "end"]] += 20.0
    f = fault_table(events, ops, CTX).iloc[0]
    assert f["affected_ops"] == 1
    assert f["survived"]


def test_gateway_crash_without_restore_has_no_end() -> None:
    events = _events([(0, 0, "gateway_down", 1.5, None)]).assign(cluster="west")
    ops = _ops(
        [1.0, 40.0],
        {
            1: [
                ("timeout", 30.0, "RuntimeError", "Timed out"),
                ("timeout", 30.0, "RuntimeError", "Timed out"),
            ]
        },
    )
    f = fault_table(events, ops, CTX).iloc[0]
    assert f["kind"] == "gateway_crash" and f["link"] == "west"
    assert f["end"] is None or pd.isna(f["end"])
    # never repaired: the 30 s operation timeout fires before the kernel's 924.6 s give-up ...
    assert f["predicted_outcome"].startswith("timeout")
    # ... unless the operation may wait longer (gloo's default 30 min)
    slow = {("r", "p000-r0"): RunContext(rto0_s=0.28, retries2=15, op_timeout_s=1800.0)}
    assert fault_table(events, ops, slow).iloc[0]["predicted_outcome"].startswith("error")
    assert not f["survived"]


def test_a_diloco_sync_step_is_compared_with_sync_steps_only() -> None:
    # DiLoCo with a sync every 2 steps: inner steps of 0.02 s (no payload), sync steps of
    # 0.5 s; step 5 (a sync) meets a 2 s blackhole 0.1 s into it and takes 0.5 + 4.2 s
    rows, t = [], T0
    for step in range(10):
        sync = step % 2 == 1
        d = (4.7 if step == 5 else 0.5) if sync else 0.02
        for rank in (0, 1):
            payload = 1000 if sync else 0
            rows.append({"run_id": "p000-r0", "rank": rank, "algorithm": "diloco", "step": step,
                         "start": t, "end": t + d, "payload_bytes": payload})  # fmt: skip
        if step == 5:
            fault_at = t + 0.1
        t += d + 0.01
    ops = rank_operations(pd.DataFrame(), pd.DataFrame(rows)).assign(results="r")
    assert set(ops["arm"]) == {"diloco", "diloco/local"}
    events = _events(
        [(0, 0, "blackhole", fault_at - T0, "e-w"), (1, 0, "unblackhole", fault_at - T0 + 2, "e-w")]
    )
    f = fault_table(events, ops, CTX, {("r", "p000-r0"): {0: "blackhole"}}).iloc[0]
    # one median over all clear steps (5 inner, 4 sync) would be an inner step's 0.02 s, and
    # the stall 4.68 s
    assert f["affected_ops"] == 1 and f["baseline_s"] == pytest.approx(0.5)
    assert f["stall_s"] == pytest.approx(4.2)


def test_operation_table_folds_ranks() -> None:
    ops = _ops([1.0, 1.0], {1: [("ok", 1.0, None, None), ("error", 0.5, "ValueError", "bad")]})
    t = operation_table(ops)
    assert list(t["outcome"]) == ["ok", "error"]
    assert t.loc[1, "error_type"] == "ValueError" and t.loc[1, "duration"] == pytest.approx(1.0)


# -- trace replay and lateness -----------------------------------------------------------------
def _trace_run(achieved_factor: float = 0.95, noise: float = 0.0):
    rng = np.random.default_rng(1)
    times = np.arange(0.0, 60.0, 0.1)
    rates = 50e6 + 40e6 * np.sin(times / 5.0)  # bit/s
    events = pd.DataFrame(
        {
            "results": "r",
            "run_id": "p000-r0",
            "event": range(len(times)),
            "source": "trace",
            "fault": None,
            "action": "set",
            "direction": "east->west",
            "rate_bps": rates,
            "scheduled_unix": T0 + times,
            "applied_unix": T0 + times + 0.001,
            "late_s": 0.001,
        }
    )
    achieved = rates * achieved_factor * (1 + noise * rng.standard_normal(len(rates)))
    cumulative = np.concatenate([[0.0], np.cumsum(achieved * 0.1 / 8)])
    queues = pd.DataFrame(
        {
            "results": "r",
            "run_id": "p000-r0",
            "direction": "east->west",
            "time": T0 + 0.001 + np.arange(len(cumulative)) * 0.1,
            "bytes": cumulative,
        }
    )
    return events, queues


def test_trace_replay_follows_the_target() -> None:
    events, queues = _trace_run(noise=0.05)
    bins = achieved_rates(trace_targets(events), queues)
    assert len(bins) == 599  # the last bin has no end
    assert bins["achieved_bps"].iloc[5] == pytest.approx(0.95 * bins["target_bps"].iloc[5], rel=0.2)
    sec = per_second(bins)
    assert len(sec) == 59
    t = trace_table(bins).iloc[0]
    assert t["correlation"] > 0.95
    assert t["achieved_over_target"] == pytest.approx(0.95, rel=0.02)


def test_run_summary_carries_the_trace_correlation_for_expectations() -> None:
    events, queues = _trace_run(noise=0.05)
    events, queues = events.drop(columns="results"), queues.drop(columns="results")
    ops = rank_operations(pd.DataFrame())
    got = summarize_faults(events, ops, {}, 0.08, queues=queues)
    assert got["trace_correlation"] > 0.95
    assert summarize_faults(events, ops, {}, 0.08)["trace_correlation"] is None  # no counters


def test_trace_replay_that_does_not_follow_is_uncorrelated() -> None:
    events, queues = _trace_run()
    queues["bytes"] = np.arange(len(queues)) * 1e6  # constant rate whatever the trace says
    t = trace_table(achieved_rates(trace_targets(events), queues)).iloc[0]
    assert t["correlation"] is None or math.isnan(t["correlation"]) or abs(t["correlation"]) < 0.5


def test_goodput_samples_stand_in_for_queue_counters() -> None:
    events, _ = _trace_run()
    targets = trace_targets(events)
    goodput = pd.DataFrame(
        {
            "results": "r",
            "run_id": "p000-r0",
            "flow": "bulk0",
            "t": targets["start"] + 0.05,
            "goodput_bps": targets["target_bps"] * 0.9,
        }
    )
    t = trace_table(achieved_rates(targets, pd.DataFrame(), goodput)).iloc[0]
    assert t["correlation"] > 0.99


def test_goodput_samples_count_where_their_window_was_one_way_earlier() -> None:
    # 100 Mbit/s for 1 s, then 10 Mbit/s; the receiver reads it 20 ms later in 100 ms windows
    # on its own grid (ending 0.045 s after the bins' edges), each sample stamped at its end
    bins = pd.DataFrame(
        {"start": np.arange(20) * 0.1, "end": np.arange(1, 21) * 0.1, "delay_s": 0.02}
    )

    def sent(t: np.ndarray) -> np.ndarray:  # bytes left the bottleneck by time t
        return np.where(t < 1.0, t * 100e6, 100e6 + (t - 1.0) * 10e6) / 8

    ends = 0.045 + np.arange(1, 22) * 0.1
    goodput = pd.DataFrame(
        {"flow": 0, "t": ends, "seconds": 0.1, "bytes": sent(ends - 0.02) - sent(ends - 0.12)}
    )
    got = goodput_in_bins(bins, goodput)
    assert got[1:9] == pytest.approx(100e6) and got[11:19] == pytest.approx(10e6)
    # the one window holding the step is spread evenly over it: no byte counted twice or lost
    assert got[9:11].sum() == pytest.approx(110e6) and 10e6 < got[10] < 30e6
    # picked by their end time instead, the step's window (77.5 Mbit/s) would count in bin 10
    assert goodput.loc[(ends >= 1.0) & (ends < 1.1), "bytes"].item() * 80 == pytest.approx(77.5e6)


def test_a_traces_outages_can_be_left_out_of_the_seconds() -> None:
    bins = pd.DataFrame(
        {
            "start": np.arange(40) * 0.1,
            "end": np.arange(1, 41) * 0.1,
            "target_bps": [10e6] * 12 + [0.0] * 8 + [10e6] * 10 + [0.0] + [10e6] * 9,
            "achieved_bps": 10e6,
        }
    )
    spans = zero_rate_spans(bins)
    assert spans == [pytest.approx((1.2, 2.0)), pytest.approx((3.0, 3.1))]
    assert per_second(bins, spans)["second"].tolist() == [0, 2]  # 1 and 3 overlap outages


def test_a_zero_rate_bin_is_a_zero_target() -> None:
    events, _ = _trace_run()
    events.loc[10, "action"] = "blackhole"
    events.loc[10, "direction"] = None
    targets = trace_targets(events)
    assert targets.loc[targets["start"] == events.loc[10, "applied_unix"], "target_bps"].item() == 0


def test_lateness_summary() -> None:
    events = _events([(i, None, "set", i * 1.0, "east-west") for i in range(100)])
    events["late_s"] = np.linspace(0.0, 0.03, 100)
    events.loc[5, "error"] = "RTNETLINK answers: No such file"
    # a set of two directions is two rows of one event: counted once
    events = pd.concat([events, events.iloc[[99]]], ignore_index=True)
    t = lateness_table(events).iloc[0]
    assert t["events"] == 100 and t["errors"] == 1
    assert t["late"] == 33  # late_s > 20 ms
    assert t["late_p50_s"] == pytest.approx(0.015) and t["late_max_s"] == pytest.approx(0.03)


def test_tcp_info_around_a_fault() -> None:
    events = _events(
        [(0, 0, "blackhole", 3.5, "east-west"), (1, 0, "unblackhole", 5.5, "east-west")]
    )
    table = fault_table(events, _ops([1.0, 1.0, 1.0, 5.2, 1.0]), CTX)
    times = T0 + np.arange(0.0, 12.0, 0.5)
    sockets = pd.DataFrame(
        {
            "results": "r",
            "run_id": "p000-r0",
            "host": "east-h0",
            "local": "10.0.0.1:1",
            "peer": "10.1.0.1:2",
            "time": times,
            "retransmits": np.where(times > T0 + 3.5, 4, 0) + np.where(times > T0 + 9, 2, 0),
            "rto_ms": np.where((times > T0 + 3.5) & (times < T0 + 8), 1120.0, 280.0),
        }
    )
    f = tcp_around_faults(table, sockets).iloc[0]
    # the window is 2.5 .. 10.5 s: both bumps of the counter are in it
    assert f["tcp_retransmits"] == 6.0 and f["tcp_rto_max_ms"] == 1120.0
    assert "tcp_backoff_max" not in f  # tcp.parquet has no backoff column here


def test_an_rtt_sample_across_the_outage_flags_the_rto_spurious() -> None:
    """A 2 s blackhole: a socket whose srtt rose from 22 to 240 ms after it (a sample of ~1.8 s:
    the ACK of a segment sent before it) had a spurious RTO; one that rose 20 ms did not."""
    events = _events(
        [(0, 0, "blackhole", 3.5, "east-west"), (1, 0, "unblackhole", 5.5, "east-west")]
    )
    table = fault_table(events, _ops([1.0, 1.0, 1.0, 5.2, 1.0]), CTX)
    times = T0 + np.arange(0.0, 12.0, 0.1)

    def socket(rise_ms: float) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "results": "r",
                "run_id": "p000-r0",
                "host": "east-h0",
                "local": f"10.0.0.1:{int(rise_ms)}",
                "peer": "10.1.0.1:2",
                "time": times,
                "retransmits": np.where(times > T0 + 3.7, 4, 0),
                "srtt_ms": np.where(times > T0 + 5.8, 22.0 + rise_ms, 22.0),
            }
        )

    real = spurious_rtos(table, socket(20.0)).iloc[0]
    assert real["rto_spurious"] is False and "spurious" not in real["verdict"]
    # 2 s / 16 = 125 ms: a sample of at least half the outage, at its weight of 1/8
    undone = spurious_rtos(table, pd.concat([socket(20.0), socket(218.0)])).iloc[0]
    assert undone["rto_spurious"] is True and undone["verdict"].endswith(SPURIOUS_RTO)


def test_partition_and_burst_loss_windows() -> None:
    events = _events(
        [
            (0, 0, "blackhole", 1.0, "east-west"),
            (1, 0, "blackhole", 1.0, "east-south"),
            (2, 0, "unblackhole", 6.0, "east-west"),
            (3, 0, "unblackhole", 6.0, "east-south"),
            (4, 1, "set", 10.0, "east-west"),
            (5, 1, "set", 20.0, "east-west"),
        ]
    )
    w = fault_windows(events).set_index("fault")
    assert w.loc[0, "kind"] == "partition" and w.loc[0, "link"] == "east-west, east-south"
    assert w.loc[0, "end"] - w.loc[0, "start"] == pytest.approx(5.0)
    assert [(e - s, icmp) for s, e, icmp in w.loc[0, "intervals"]] == [(pytest.approx(5.0), False)]
    assert w.loc[1, "kind"] == "burst_loss" and not w.loc[1, "intervals"]
    assert w.loc[1, "end"] - w.loc[1, "start"] == pytest.approx(10.0)
    # the scenario's kind wins over the inference; an unfinished fault ends at its duration
    w = fault_windows(events.iloc[[0, 1]], {0: {"kind": "partition", "duration": 5.0}}).iloc[0]
    assert w["planned"] and w["end"] - w["start"] == pytest.approx(5.0)


def test_one_row_per_event_is_spread_over_its_directions() -> None:
    events, _ = _trace_run()
    both = events.assign(direction=None, directions=[["east->west", "west->east"]] * len(events))
    targets = trace_targets(both)
    assert set(targets["direction"]) == {"east->west", "west->east"}
    assert len(targets) == 2 * 599


def test_the_runners_conventions() -> None:
    # directions as comma-joined text, skipped rows without times, the undo row carrying the
    # start's event index with the closing action
    events = _events(
        [(0, 0, "blackhole", 1.0, "east-west"), (1, 0, "unblackhole", 50.0, "east-west")]
    )
    events["status"] = "applied"
    events.loc[1, ["status", "scheduled_unix", "applied_unix", "late_s"]] = [
        "skipped",
        None,
        None,
        None,
    ]
    undo = events.iloc[[0]].assign(
        action="unblackhole",
        status="undone",
        scheduled_unix=None,
        applied_unix=T0 + 9.0,
        late_s=None,
    )
    events = pd.concat([events, undo], ignore_index=True)
    events["directions"] = "east->west,west->east"
    applied = applied_events(events)
    assert list(applied["action"]) == ["blackhole", "unblackhole"]
    w = fault_windows(events).iloc[0]
    assert w["undone"] and w["end"] - w["start"] == pytest.approx(8.0)
    late = lateness_table(events).iloc[0]
    assert late["events"] == 1 and late["skipped"] == 1
    assert directions_of("a->b,b->a") == ["a->b", "b->a"] and directions_of(None) == []


def test_goodput_direction_from_the_flows_hosts() -> None:
    g = pd.DataFrame({"from": ["east-h1"], "to": ["west-h0"], "t": [1.0], "goodput_bps": [1e6]})
    assert goodput_by_direction(g)["direction"].tolist() == ["east->west"]


def test_a_bulk_flows_stall_against_the_rto_series() -> None:
    events = _events(
        [(0, 0, "blackhole", 10.0, "east-west"), (1, 0, "unblackhole", 12.0, "east-west")]
    )
    ends = np.round(np.arange(0.1, 30.0, 0.1), 3)  # a sample covers (t - 0.1, t]
    dark = (ends > 10.0) & (ends <= 14.2 + 1e-9)  # resumes at 10 + 4.2 s
    goodput = pd.DataFrame(
        {
            "results": "r",
            "run_id": "p000-r0",
            "flow": 0,
            "from": "east-h1",
            "to": "west-h1",
            "t": T0 + ends,
            "seconds": 0.1,
            "goodput_bps": np.where(dark, 0.0, 50e6),
        }
    )
    got = flow_stalls(events, goodput, CTX).iloc[0]
    assert got["flow_predicted_s"] == pytest.approx(4.2)
    assert got["flow_stall_s"] == pytest.approx(4.2, abs=0.11)  # one sample's resolution
    # a traffic-only run's summary carries it (no operation: no fault_stall)
    m = summarize_faults(
        events.drop(columns=["results"]), rank_operations(pd.DataFrame()), {}, 0.08,
        goodput=goodput.drop(columns=["results", "run_id"]),
    )  # fmt: skip
    assert m["fault_flow_stall"] == pytest.approx(4.2, abs=0.11) and m["fault_stall"] is None
    # a flow on another link does not count
    other = goodput.assign(**{"from": "south-h1", "to": "north-h1"})
    assert flow_stalls(events, other, CTX).empty or pd.isna(
        flow_stalls(events, other, CTX).iloc[0]["flow_stall_s"]
    )


def test_stall_ratio_metric_is_the_one_farthest_from_one() -> None:
    faults = pd.DataFrame({"stall_over_predicted": [1.1, 0.7, None], "survived": [True] * 3})
    assert fault_metrics(faults)["fault_stall_over_predicted"] == 0.7


def test_drops_by_fault_beside_the_queues_own() -> None:
    manifests = {
        "r": {
            "runs": {
                "p000-r0": {
                    "fault_drops": [
                        {"direction": "east->west", "fault_dropped_packets": 30,
                         "fault_reset_packets": 17},
                    ]
                },
                "p001-r0": {},  # no fault rules: no row
            }
        }
    }  # fmt: skip
    queues = pd.DataFrame(
        {
            "results": "r",
            "run_id": "p000-r0",
            "direction": "east->west",
            "time": [1.0, 2.0, 3.0],
            "dropped": [5, 6, 9],
        }
    )
    got = drop_table(manifests, queues).iloc[0].to_dict()
    assert got["fault_dropped_packets"] == 30 and got["fault_reset_packets"] == 17
    assert got["queue_dropped_packets"] == 4  # over the run: last - first sample
    assert drop_table(manifests, pd.DataFrame()).iloc[0]["queue_dropped_packets"] is None
    assert drop_table({}, queues).empty


def test_the_slow_start_after_an_outage_runs_on_the_slowest_connection_it_stalled():
    # a ring's north-west connection crosses two WAN links (40 ms), east-north one (20 ms); a
    # connection that did not retransmit during the outage (60 ms) was not stalled by it
    rows = [
        {"time": t, "host": h, "peer_host": p, "retransmits": r, "min_rtt_ms": m}
        for t in (9.5, 10.5, 11.5)
        for h, p, m, r in (
            ("east-h0", "north-h0", 20.0, 3),
            ("north-h0", "west-h0", 40.0, 3),
            ("west-h0", "south-h0", 60.0, 0),
        )
    ]
    ctx = RunContext(rto0_s=0.2, rate_bps=1e8, rtt_s=0.02, sockets=pd.DataFrame(rows))
    assert ctx.outage_rtt(10.0, 12.0) == pytest.approx(0.040)
    assert ctx.outage_rtt(20.0, 21.0) == 0.02  # nothing sampled during it: the configured RTT
    assert RunContext(rto0_s=0.2, rtt_s=0.02).outage_rtt(10.0, 12.0) == 0.02  # not traced
