"""The tables testbed run prints and the report shows (analysis.display): units, "-" for what
is missing, the runs they skip."""

from __future__ import annotations

import math

from analysis.display import (
    collectives_display,
    dcqcn_display,
    dynamics_display,
    selfcheck_display,
    training_display,
)


def test_dynamics_shows_the_worst_fault_per_run_with_events_only() -> None:
    runs = {
        "p000-r0": {"params": {"faults[0].duration": "2s"}, "events": {"applied": 4, "late": 1}},
        "p001-r0": {"params": {"faults[0].duration": "40s"}},  # no timeline: not shown
    }
    summary = [
        {"run_id": "p000-r0", "fault_detect": 0.5, "fault_stall": None, "fault_flow_stall": 2.1,
         "fault_stall_over_predicted": math.nan, "fault_survived": 1.0},
    ]  # fmt: skip
    shown = dynamics_display(runs, summary, ["faults[0].duration"])
    assert shown.to_dict("records") == [
        {"faults[0].duration": "2s", "events": "4", "late": "1", "failed": "0",
         "detect": "500 ms", "stall": "2.1 s", "stall/pred": "-", "recover": "-",
         "survived": "✓", "trace corr": "-"},
    ]  # fmt: skip


def test_dcqcn_puts_each_measurement_beside_the_model() -> None:
    summary = [
        {"dcqcn_flows": 2, "dcqcn_rate_mean_bps": 4e9, "dcqcn_jain": 0.99,
         "dcqcn_pred_jain": 1.0, "dcqcn_lost": 3, "dcqcn_lossy": True},
        {"collective": "all_reduce"},  # not a DCQCN row
    ]  # fmt: skip
    shown = dcqcn_display(summary, [])
    assert len(shown) == 1
    row = shown.iloc[0].tolist()
    assert row[:3] == ["2", "4 Gbit/s", "0.990"] and row[-1] == "3 LOSSY"


def test_missing_values_read_as_a_dash_in_every_table() -> None:
    link = {"direction": "east->west", "rtt_configured_s": 0.04, "rtt_median_s": None,
            "goodput_configured_bps": 95.6e6, "goodput_bps": 0, "congestion": "cubic",
            "ok": False, "problem": "RTT 60 ms"}  # fmt: skip
    (row,) = selfcheck_display([link]).to_dict("records")
    assert row["RTT p50"] == "-" and row["goodput"] == "-" and row["status"] == "✗ RTT 60 ms"
    coll = {"collective": "all_reduce", "algorithm": "flat", "size": 1 << 20, "ranks": 4,
            "time_p50": 0.3, "time_p95": 0.31, "algbw": 3.5e6, "busbw": 5.2e6,
            "predicted": math.nan, "measured_over_predicted": None, "correct": False,
            "cpu_saturated": True}  # fmt: skip
    (row,) = collectives_display([coll], []).to_dict("records")
    assert row["predicted"] == "-" and row["meas/pred"] == "-"
    assert row["flags"] == "CPU-saturated WRONG" and row["size"] == "1 MiB"
    (row,) = training_display([{"algorithm": "ddp", "final_loss": 3.1}], []).to_dict("records")
    assert row["step p50"] == "-" and row["time to loss"] == "-" and row["flags"] == ""
