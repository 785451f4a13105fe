"""analysis.dcqcn_marks, DCQCN with discrete marks, beside the fluid model: on the one-flow
scenario's own parameters (a mark per ~10 RTTs) it cuts less often and less deeply than the mean
field says; with marks at a high rate the two agree; a seed gives one trajectory."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from analysis import dcqcn, dcqcn_marks, dcqcn_model, display
from testbed.config.dcqcn import DcqcnTraffic
from testbed.config.loading import load_yaml, parse_scenario
from testbed.core.dcqcn import DcqcnParams, defaults, dilate
from testbed.experiment.flows import dcqcn_setup
from testbed.plan.topology import build_plan

ONE_FLOW = Path(__file__).parents[2] / "scenarios" / "dcqcn-one-flow.yaml"


def one_flow() -> tuple[DcqcnParams, dict[str, Any]]:
    """The one-flow scenario's RP parameters (dilated) and the model inputs its run uses."""
    sc = parse_scenario(load_yaml(ONE_FLOW))
    flow = sc.flows[0]
    assert isinstance(flow, DcqcnTraffic)
    u = dcqcn_setup(flow, build_plan(sc, "t", 9), sc.dilation)
    inputs = {
        k: u[k] for k in ("line_rate_bps", "bottleneck_bps", "rtt_s", "aqm", "size", "buffer_bytes")
    }
    return DcqcnParams(**u["params"]), inputs | {"starts_s": [0.0], "duration_s": 60.0}


def test_the_one_flow_scenario_cuts_less_often_and_less_deeply_than_the_fluid_model() -> None:
    params, inputs = one_flow()
    assert params == dilate(defaults("paper"), 400) and inputs["rtt_s"] == pytest.approx(0.034)
    fluid = dcqcn_model.summary(dcqcn.predict(params, **inputs))
    runs = dcqcn.predict_discrete(params, **inputs)
    assert [r.seed for r in runs] == list(dcqcn.DISCRETE_SEEDS)
    for res in runs:
        s = dcqcn_marks.summary(res)
        # a cut per ~10 RTTs: far from the fluid model's fixed point, each cut is a step after
        # which the queue drains below Kmin
        assert s["cut_interval_s"] > 1.05 * fluid["cut_interval_s"]
        assert s["cut_depth_bps"] < 0.9 * fluid["cut_depth_bps"]
        assert s["cut_interval_s"] > 8 * inputs["rtt_s"]
        # a sawtooth queue: p5 near empty, its p95-p5 over 100x the fixed point's
        assert s["queue_p5_bytes"] < 5000 < s["queue_mean_bytes"]
        assert s["queue_amplitude_bytes"] > 100 * fluid["queue_amplitude_bytes"]
        assert s["utilisation"] > 0.95 and s["dropped_bytes"] == 0
        # every CNP cut (no reduce period), and marks came at least once per CNP
        assert s["cuts"] == s["cnps"] <= s["marks"]
    got = dcqcn.predicted_discrete(runs)
    assert got["dcqcn_pred_discrete_runs"] == len(runs)
    assert got["dcqcn_pred_discrete_cut_interval_s"] == pytest.approx(
        np.mean([dcqcn_marks.summary(r)["cut_interval_s"] for r in runs])
    )
    # the discrete queue's mean is in wire bytes, as measured
    assert 5000 < got["dcqcn_pred_discrete_queue_mean_bytes"] < 200_000


def test_at_a_high_marking_rate_the_discrete_and_fluid_models_agree() -> None:
    """Kmin 0.5 KB, Kmax 3 KB, pmax 50 %: several marks per CNP interval N, so a CNP comes
    nearly every N and the fluid model's a/τ is what the packets do (the mean-field limit)."""
    params, inputs = one_flow()
    inputs["aqm"] = {"kind": "red", "kmin": 500, "kmax": 3000, "pmax": 0.5}
    fluid = dcqcn_model.summary(dcqcn.predict(params, **inputs))
    for res in dcqcn.predict_discrete(params, **inputs, seeds=(0, 1)):
        s = dcqcn_marks.summary(res)
        assert s["marks"] > 3 * s["cnps"]
        for name in ("cut_interval_s", "cut_depth_bps", "rate_mean_bps", "utilisation"):
            assert s[name] == pytest.approx(fluid[name], rel=0.2), name


def test_a_seed_gives_one_trajectory_and_dilation_changes_only_the_units() -> None:
    kw: dict[str, Any] = {
        "kmin_bytes": 5000.0, "kmax_bytes": 200_000.0, "pmax": 0.01, "packet_bytes": 1400,
        "duration_s": 0.05, "buffer_bytes": 1e6,
    }  # fmt: skip
    real = defaults("paper")

    def run(s: float, seed: int) -> dcqcn_marks.MarksResult:
        args: dict[str, Any] = kw | {"duration_s": 0.05 * s}
        return dcqcn_marks.simulate(
            dilate(real, s), line_rate_bps=80e9 / s, bottleneck_bps=40e9 / s,
            feedback_delay_s=85e-6 * s, seed=seed, **args,
        )  # fmt: skip

    a, b, other = run(1.0, 3), run(1.0, 3), run(1.0, 4)
    assert np.array_equal(a.cut_t_s, b.cut_t_s) and a.marks == b.marks
    assert np.array_equal(a.trajectory.queue_bytes, b.trajectory.queue_bytes)
    assert not np.array_equal(a.cut_t_s, other.cut_t_s)
    slow = run(400.0, 3)
    assert slow.packets == a.packets and slow.marks == a.marks
    assert slow.cut_t_s.size == a.cut_t_s.size
    # the same cuts: a time rounded differently x 400 may tip one tie by a packet (8 x 1400 B
    # at 40 Gbit/s, 0.28 µs real), never more
    packet = 8 * 1400 / 40e9
    assert np.max(np.abs(slow.cut_t_s / 400 - a.cut_t_s)) <= 1.01 * packet
    assert slow.cut_alpha == pytest.approx(a.cut_alpha, rel=1e-6)


def test_the_rp_follows_the_papers_rules_between_marks() -> None:
    """No marks (Kmin above any queue): the flow starts at the line rate, which the bottleneck
    cannot carry, so the buffer overflows and no cut ever comes; with marks every packet (p = 1
    above a tiny Kmax) α stays near 1 and each cut halves RC, at most once per N, until the
    queue is gone."""
    p = dataclasses.replace(defaults("paper"), byte_counter=None)
    kw: dict[str, Any] = {
        "line_rate_bps": 80e9, "bottleneck_bps": 40e9, "feedback_delay_s": 85e-6,
        "packet_bytes": 1000, "duration_s": 0.002, "buffer_bytes": 200_000.0,
    }  # fmt: skip
    quiet = dcqcn_marks.simulate(p, kmin_bytes=1e9, kmax_bytes=2e9, pmax=0.01, **kw)
    assert quiet.cut_t_s.size == 0 and quiet.marks == 0
    assert quiet.trajectory.dropped_bytes > 0
    assert np.all(quiet.trajectory.rc_bps == 80e9)
    loud = dcqcn_marks.simulate(p, kmin_bytes=0.0, kmax_bytes=1.0, pmax=0.01, **kw)
    assert loud.cut_t_s.size >= 5
    assert np.all(np.diff(loud.cut_t_s) >= p.cnp_interval * (1 - 1e-9))
    # the first cut uses α0 = 1 (decayed over the first feedback delay): RC halves, nearly
    first = loud.cut_after_bps[0] / loud.cut_before_bps[0]
    assert first == pytest.approx(1 - loud.cut_alpha[0] / 2)
    assert 0.5 < first < 0.51
    # α after a run of CNPs one N apart stays near 1: every cut takes close to half
    assert np.all(loud.cut_alpha > 0.9)
    assert math.isnan(dcqcn_marks.cut_readings(quiet)[0])


def test_the_discrete_prediction_has_its_own_names_ratios_and_columns() -> None:
    out = {
        "dcqcn_flows": 1.0, "dcqcn_cut_interval_s": 0.36, "dcqcn_pred_cut_interval_s": 0.25,
        "dcqcn_pred_discrete_cut_interval_s": 0.3, "dcqcn_cut_depth_bps": 3e6,
        "dcqcn_pred_cut_depth_bps": 4e6, "dcqcn_pred_discrete_cut_depth_bps": 2.5e6,
    }  # fmt: skip
    got = dcqcn.ratios(out)
    assert got["dcqcn_cut_interval_over_predicted"] == pytest.approx(1.44)
    assert got["dcqcn_cut_interval_over_predicted_discrete"] == pytest.approx(1.2)
    assert got["dcqcn_cut_depth_over_predicted"] == pytest.approx(0.75)
    assert got["dcqcn_cut_depth_over_predicted_discrete"] == pytest.approx(1.2)
    assert "dcqcn_queue_mean_over_predicted_discrete" not in got
    shown = display.dcqcn_display([out], [])
    assert list(shown.columns) == [
        "flows", "rate", "Jain", "util", "model", "queue mean", "model", "discrete", "cut every",
        "model", "discrete", "cut by", "model", "discrete", "converge", "model", "lost",
    ]  # fmt: skip
    cuts = ["360 ms", "250 ms", "300 ms", "3 Mbit/s", "4 Mbit/s", "2.5 Mbit/s"]
    assert shown.iloc[0].tolist()[8:14] == cuts


def test_a_cuts_depth_reads_the_cnp_logged_at_its_instant_not_the_alpha_after_it() -> None:
    """The RP logs a CNP (RC before), the cut and the α update (RC after) at one time: the
    depth is the RC the cut took, on every cut (a sort that reorders ties read some as 0)."""
    ev = [{"flow": 0, "t": 0.0, "kind": "start", "rc": 1e8}]
    for i in range(1, 400):
        t = i * 0.3
        ev += [
            {"flow": 0, "t": t - 0.1, "kind": "increase_timer", "rc": 1e8},
            {"flow": 0, "t": t, "kind": "cnp", "rc": 1e8},
            {"flow": 0, "t": t, "kind": "cut", "rc": 9.7e7},
            {"flow": 0, "t": t, "kind": "alpha", "rc": 9.7e7},
        ]
    # the NP's rows (no RC) and one late-written row, as a run's file has them: out of time order
    ev += [{"flow": 0, "t": i * 0.3 - 0.01, "kind": "cnp_sent"} for i in range(1, 400)]
    ev.append({"flow": 0, "t": 100.05, "kind": "increase_bytes", "rc": 1e8})
    frame = pd.DataFrame(ev)
    cuts = frame[frame["kind"] == "cut"].index
    assert dcqcn.cut_depth(frame, cuts) == pytest.approx(3e6)
