"""analysis.dcqcn on made-up rows: what a run's DCQCN flows measured, and the fluid model's
prediction beside it."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis import dcqcn
from testbed.core.dcqcn import defaults, dilate

T0 = 1_700_000_000.0


def rows(late_start: float = 5.0, fair_after: float = 2.0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Flow 0 from 0 s, flow 1 from ``late_start``, 20 s: 100 Mbit/s alone, then flow 1 takes
    its half ``fair_after`` s after it starts; a cut every 0.25 s on each flow, from 50 to
    40 Mbit/s (an increase to 50 Mbit/s 0.1 s before each)."""
    ev = [
        {"flow": 0, "t": T0, "kind": "start", "rc": 2e8},
        {"flow": 1, "t": T0 + late_start, "kind": "start", "rc": 2e8},
        {"flow": 0, "t": T0 + 20, "kind": "end", "sent": 1000},
        {"flow": 1, "t": T0 + 20, "kind": "end", "sent": 500},
    ]
    for f, start in ((0, 0.0), (1, late_start)):
        cut_at = np.arange(start + 0.25, 20, 0.25)
        ev += [{"flow": f, "t": T0 + t, "kind": "cut", "rc": 4e7} for t in cut_at]
        ev += [{"flow": f, "t": T0 + t - 0.1, "kind": "increase_timer", "rc": 5e7} for t in cut_at]
        ev += [
            {"flow": f, "t": T0 + t, "kind": "cnp_sent"} for t in np.arange(start + 0.2, 20, 0.25)
        ]
    rx = []
    for k in range(1, 201):
        t = k * 0.1
        if t <= late_start:
            r0, r1 = 1e8, None
        elif t <= late_start + fair_after:
            r0, r1 = 8e7, 2e7
        else:
            r0, r1 = 5e7, 5e7
        rx.append({"flow": 0, "t": T0 + t, "seconds": 0.1, "rate_bps": r0, "datagrams": 5})
        if r1 is not None:  # its own receiver: its windows end 37 ms later than flow 0's
            rx.append(
                {"flow": 1, "t": T0 + t + 0.037, "seconds": 0.1, "rate_bps": r1, "datagrams": 2}
            )
    return pd.DataFrame(ev), pd.DataFrame(rx)


def test_measure_reads_fairness_convergence_cuts_queue_and_loss() -> None:
    ev, rx = rows()
    q = pd.DataFrame(
        {"time": T0 + np.arange(0, 20, 0.02), "direction": "east->west", "dropped": 0}
    ).assign(backlog_bytes=lambda d: 50_000 + 10_000 * np.sin(d["time"]))
    got = dcqcn.measure(ev, rx, q, "east->west", 1e8, {0: 1000, 1: 500})
    assert got["dcqcn_flows"] == 2
    assert got["dcqcn_jain"] == pytest.approx(1.0)
    assert got["dcqcn_utilisation"] == pytest.approx(1.0)
    # fair from 7 s on; over a 0.5 s smoothing window it reads fair 0.4 s later
    assert got["dcqcn_convergence_s"] == pytest.approx(2.4, abs=0.11)
    assert got["dcqcn_cut_interval_s"] == pytest.approx(0.25)
    assert got["dcqcn_cut_depth_bps"] == pytest.approx(1e7)
    assert 40_000 < got["dcqcn_queue_mean_bytes"] < 60_000
    assert got["dcqcn_queue_amplitude_bytes"] > 15_000
    # 200 + 150 windows of 5 and 2 datagrams arrived: 0 and 200 lost
    assert (got["dcqcn_lost"], got["dcqcn_lossy"]) == (200, 1.0)


def test_convergence_is_nan_when_the_flows_never_share_fairly() -> None:
    ev, rx = rows(fair_after=100.0)
    got = dcqcn.measure(ev, rx, pd.DataFrame(), "east->west", 1e8)
    assert math.isnan(got["dcqcn_convergence_s"]) and got["dcqcn_jain"] < 0.8
    assert "dcqcn_queue_mean_bytes" not in got and got["dcqcn_lossy"] == 0.0


def test_the_prediction_uses_the_same_names_and_gives_ratios() -> None:
    params = dilate(defaults("paper"), 400)
    res = dcqcn.predict(
        params, line_rate_bps=2e8, bottleneck_bps=1e8, rtt_s=0.034,
        aqm={"kind": "red", "kmin": 5000, "kmax": 200_000, "pmax": 0.01}, size=1400,
        starts_s=[0.0], duration_s=60.0, buffer_bytes=1_000_000,
    )  # fmt: skip
    # 60 s = 150 ms real: the first cut from the line rate (twice the bottleneck) has settled
    pred = dcqcn.predicted(res)
    assert 5000 <= pred["dcqcn_pred_queue_mean_bytes"] <= 200_000
    assert pred["dcqcn_pred_utilisation"] > 0.9
    out = {"dcqcn_queue_mean_bytes": pred["dcqcn_pred_queue_mean_bytes"] * 1.5, **pred}
    assert dcqcn.ratios(out)["dcqcn_queue_mean_over_predicted"] == pytest.approx(1.5)


def test_bulk_flows_get_the_same_flow_metrics() -> None:
    """Two TCP flows' goodput samples (flows_goodput rows), the second from 5 s: fair from 7 s."""
    _, rx = rows()
    goodput = rx.rename(columns={"rate_bps": "goodput_bps"}).assign(
        bytes=lambda d: d["goodput_bps"] * d["seconds"] / 8
    )
    q = pd.DataFrame(
        {"time": T0 + np.arange(0, 20, 0.02), "direction": "east->west", "backlog_bytes": 1e4}
    ).assign(dropped=lambda d: (d["time"] - T0 > 10) * 3)
    got = dcqcn.measure_bulk(goodput, q, "east->west", 1e8)
    assert got["bulk_flows"] == 2 and got["bulk_jain"] == pytest.approx(1.0)
    assert got["bulk_utilisation"] == pytest.approx(1.0)
    assert got["bulk_convergence_s"] == pytest.approx(2.4, abs=0.11)
    assert got["bulk_queue_mean_bytes"] == pytest.approx(1e4)
    assert got["bulk_dropped"] == 3
    assert dcqcn.tcp_capacity(1e8) == pytest.approx(1e8 * 1448 / 1514)
