"""Live test of a `workload: kind: dcqcn` run end to end: one DCQCN flow through a
marking bottleneck at dilation 400, recorded into dcqcn.parquet and dcqcn_rx.parquet, measured
and predicted (analysis.dcqcn) in the run's summary, and drawn by `testbed report`.

Short (12 s = 30 ms real): it checks the mechanism and the records, not the fluid model's
agreement (scenarios/dcqcn-*.yaml and benchmarks/dcqcn.py do that at length)."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers import RUN_TAG

from analysis.report import write_report
from testbed.config.sweep import expand
from testbed.experiment.sweep import Experiment

pytestmark = pytest.mark.live


@pytest.mark.timing
def test_a_dcqcn_workload_runs_records_and_reports(root, tmp_path) -> None:
    data = {
        "name": f"{RUN_TAG}-dcqcn"[:32],
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "dilation": 400,
        "wan": [
            {
                "between": ["east", "west"], "rate": "100mbit", "delay": "17ms", "buffer": "1MB",
                "aqm": {"kind": "red", "kmin": "5KB", "kmax": "200KB", "pmax": "1%"},
            }
        ],
        "workload": {
            "kind": "dcqcn", "flows": [{"from": "east-h0", "to": "west-h0"}], "duration": "12s",
        },
        "backend": "userspace",
    }  # fmt: skip
    exp = Experiment(expand(data, "test"), "test", tmp_path / "out", resume=False)
    assert exp.run(selfcheck_seconds=0.5), exp.manifest["runs"]["p000-r0"]["reason"]
    path = exp.results.path
    ev = pd.read_parquet(path / "dcqcn.parquet")
    rx = pd.read_parquet(path / "dcqcn_rx.parquet")
    kinds = ev["kind"].value_counts()
    print(kinds.to_dict())
    # the sender started at twice the bottleneck, so the queue built: marks, CNPs, cuts
    assert kinds["start"] == 1 and kinds["end"] == 1
    assert kinds["cut"] > 0 and kinds["cnp_sent"] > 0
    end = ev[ev["kind"] == "end"].iloc[0]
    assert end["cnps_received"] == kinds["cnp"]  # every CNP taken by the RP is in its log
    assert kinds["cnp"] <= kinds["cnp_sent"]  # none appear from nowhere (the path is lossless)
    # a presence check: the NP's rate samples reach a tenth of the 100 Mbit/s link (the RP
    # starts at 200e6 and settles near the link: RESULTS.md "DCQCN against its fluid model",
    # dcqcn-one-flow, 85.2 Mbit/s); not a rate tolerance
    assert rx["ce"].sum() > 0 and rx["rate_bps"].max() > 10e6
    info = exp.manifest["runs"]["p000-r0"]["dcqcn"]["0"]
    assert info["line_rate_bps"] == 200e6 and info["params"]["rate_timer"] == pytest.approx(0.022)
    (row,) = exp.manifest["summary"]
    print({k: v for k, v in row.items() if k.startswith("dcqcn")})
    assert row["dcqcn_flows"] == 1 and row["dcqcn_cuts"] == kinds["cut"]
    assert row["dcqcn_pred_rate_mean_bps"] > 0 and "dcqcn_queue_mean_bytes" in row
    report = write_report(path, tmp_path / "report")
    assert "dcqcn" in report.sections
    assert any(p.name == "dcqcn_rates.png" for p in report.pngs)


@pytest.mark.timing
def test_a_dcqcn_tenant_beside_an_all_reduce_is_recorded_when_the_workload_stops_it(
    root, tmp_path
) -> None:
    """``traffic: [{kind: dcqcn}]`` beside collectives (a RoCE tenant and a TCP tenant on one
    DCI): the flow is planned far beyond the workload, so the run stops it when the all-reduce
    is done; asked to end (SIGTERM), the sender still takes its last CNPs and writes its log."""
    data = {
        "name": f"{RUN_TAG}-dcqcn-x"[:32],
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "tcp": {"congestion": "cubic", "ecn": True},
        "wan": [
            {
                "between": ["east", "west"], "rate": "100mbit", "delay": "5ms", "buffer": "2MB",
                "aqm": {"kind": "red", "kmin": "5KB", "kmax": "200KB", "pmax": "1%"},
            }
        ],
        "workload": {
            "kind": "collectives", "collectives": ["all_reduce"], "algorithms": ["flat"],
            "sizes": ["64KiB"], "warmup": 1, "iterations": 3, "timeout": "120s",
        },
        "traffic": [
            {"kind": "dcqcn", "variant": "mellanox", "from": "east-h0", "to": "west-h0",
             "start": "0s", "duration": "600s"},
        ],
        "backend": "userspace",
    }  # fmt: skip
    exp = Experiment(expand(data, "test"), "test", tmp_path / "out", resume=False)
    assert exp.run(selfcheck_seconds=0.5), exp.manifest["runs"]["p000-r0"]["reason"]
    path = exp.results.path
    assert exp.manifest["runs"]["p000-r0"]["traffic_cut"] == [0]
    ops = pd.read_parquet(path / "collectives.parquet")
    assert (ops["outcome"] == "ok").all() and len(ops) == 3 * 2  # 3 timed iterations x 2 ranks
    ev = pd.read_parquet(path / "dcqcn.parquet")
    kinds = ev["kind"].value_counts()
    print(kinds.to_dict(), ops.groupby("op")["seconds"].max().to_dict())
    assert kinds["start"] == 1 and kinds["end"] == 1 and kinds["cut"] > 0
    end = ev[ev["kind"] == "end"].iloc[0]
    assert end["cnps_received"] == kinds["cnp"] <= kinds["cnp_sent"]
    # it sent until the workload ended, not for its planned 600 s: 120 s is the workload's own
    # op timeout (three 64 KiB all-reduces take well under a second each, RESULTS.md "DCQCN
    # beside an all-reduce" up to 36 s with a NIC-default tenant); a liveness bound, 5x < 600
    assert end["t"] - ev[ev["kind"] == "start"].iloc[0]["t"] < 120
    (row,) = exp.manifest["summary"]
    assert row["dcqcn_flows"] == 1 and row["time_p50"] > 0
