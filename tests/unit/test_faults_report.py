"""A changing WAN's results (tests/fixtures/results/faults, hand-built): loaded, analysed,
reported, no root. The fixture: a 2 s and a 40 s blackhole on an 80 ms RTT during a 16 MiB
all_reduce with a 30 s timeout, a trace on the forward direction, a schedule step."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from analysis.faults import analyse, fault_metrics
from analysis.loader import ResultsError, load
from analysis.report import write_report
from testbed.cli import main

FAULTS = Path(__file__).resolve().parents[1] / "fixtures" / "results" / "faults"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_load_reads_the_events_table() -> None:
    res = load(FAULTS)
    assert res.has("events") and res.has("flows_goodput")
    assert {"event", "source", "fault", "action", "late_s", "faults[0].duration"} <= set(res.events)


def test_fault_verdicts_of_the_fixture() -> None:
    fr = analyse(load(FAULTS))
    f = fr.faults.set_index("run_id")
    short, long = f.loc["p000-r0"], f.loc["p001-r0"]
    # 2 s: completes, stall within 20% of the TLP + RTO series (2.12 s on an 80 ms RTT)
    assert short["predicted_stall_s"] == pytest.approx(2.122)
    assert 0.8 <= short["stall_over_predicted"] <= 1.2
    assert short["survived"] and short["recover_s"] > 0
    # the bulk flow beside it: stalled as the series says, to two samples (100 ms each: the
    # resolution, and the fixture's slow start after the resume)
    assert short["flow_stall_s"] == pytest.approx(2.122, abs=0.2)
    assert short["flow_predicted_s"] == pytest.approx(2.122)
    # 40 s: longer than the 30 s timeout; the run ended before the blackhole's end event (a
    # skipped row), and the runner undid it then (an undone row with the start's event index)
    assert long["undone"] and not long["planned"]
    assert long["duration"] == pytest.approx(31.2, abs=0.1)
    assert long["op_outcome"] == "timeout" and "Timed out waiting" in long["error"]
    assert long["detect_s"] < 30.0 + 5.0
    assert long["predicted_outcome"].startswith("timeout")
    assert not long["survived"]
    trace = fr.traces.set_index("run_id").loc["p000-r0"]
    assert trace["correlation"] > 0.9
    assert (fr.lateness["late"] == 0).all()
    assert list(fr.lateness["skipped"]) == [0, 1]
    metrics = fault_metrics(fr.faults[fr.faults["run_id"] == "p000-r0"], fr.lateness)
    assert metrics["fault_survived"] == 1.0 and metrics["fault_detect"] is None


def test_report_has_a_faults_section_with_the_timeline(tmp_path: Path) -> None:
    rep = write_report(FAULTS, tmp_path / "report")
    assert "faults" in rep.sections
    names = {p.stem for p in rep.pngs}
    assert "wan_timeline" in names
    for png in rep.pngs:
        assert png.read_bytes().startswith(PNG_SIGNATURE)
    for name in ("faults", "trace_replay", "events_lateness"):
        assert (tmp_path / "report" / f"{name}.csv").exists()
    md = rep.markdown.read_text()
    assert "WAN dynamics and faults" in md and "Timed out waiting 30000ms" in md
    assert "survived: stalled" in md


def test_a_report_without_events_has_no_faults_section(tmp_path: Path) -> None:
    training = FAULTS.parent / "training"
    rep = write_report(training, tmp_path / "report")
    assert "faults" not in rep.sections


def test_a_traffic_only_run_reports_its_faults_without_operations(tmp_path: Path) -> None:
    # no workload: no collectives.parquet, no summary; times count from the first event
    copy = tmp_path / "traffic"
    shutil.copytree(FAULTS, copy)
    (copy / "collectives.parquet").unlink()
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["summary"] = []
    (copy / "manifest.json").write_text(json.dumps(manifest))
    fr = analyse(load(copy))
    assert (fr.faults["affected_ops"] == 0).all() and fr.faults["survived"].isna().all()
    assert fault_metrics(fr.faults)["fault_survived"] is None
    rep = write_report(copy, tmp_path / "report")
    assert "faults" in rep.sections and "collectives" not in rep.sections
    assert "no operation ran during or after the fault" in rep.markdown.read_text()


def test_an_events_table_without_its_columns_is_refused(tmp_path: Path) -> None:
    copy = tmp_path / "bad"
    shutil.copytree(FAULTS, copy)
    events = pd.read_parquet(copy / "events.parquet").drop(columns=["action"])
    events.to_parquet(copy / "events.parquet")
    with pytest.raises(ResultsError, match=r"events.parquet: missing column\(s\) action"):
        load(copy)
    assert main(["report", str(copy)]) == 2
