"""A command workload's results: ``testbed compare`` on its metric lines (metrics.parquet), and
its WAN bytes as summary rows that ``expect:`` tests.

The fixture (tests/fixtures/command_results) is a real ``testbed run`` of two points
(wan[0].delay 5ms, 20ms) where rank 1 sends 1 MiB to rank 0 over TCP and both print
``transfer_s`` and ``received`` lines.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from analysis.compare import compare, comparison_json
from analysis.loader import load
from testbed.cli import main
from testbed.config.expect import Expectation, check
from testbed.experiment.workloads import KINDS, RunRows
from testbed.experiment.workloads.command import wan_bytes_by_direction

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "command_results"
MIB = 1 << 20


def _new(tmp_path: Path, scale: dict[str, float], failed: str | None = None) -> Path:
    """A later run of the fixture's scenario whose metrics are ``scale``d (per metric)."""
    new = tmp_path / "new"
    shutil.copytree(FIXTURE, new)
    manifest = json.loads((new / "manifest.json").read_text())
    manifest["started"] += 3600
    if failed is not None:
        manifest["runs"][failed]["status"] = "failed"
    (new / "manifest.json").write_text(json.dumps(manifest))
    m = pd.read_parquet(new / "metrics.parquet")
    for name, factor in scale.items():
        m.loc[m["metric"] == name, "value"] *= factor
    m.to_parquet(new / "metrics.parquet")
    return new


def test_compare_matches_each_metric_of_each_point(tmp_path: Path) -> None:
    cmp = compare(load(FIXTURE), load(_new(tmp_path, {"transfer_s": 1.5, "received": 1.0})))
    assert cmp.kind == "command" and cmp.keys == ["metric"] and cmp.params == ["wan[0].delay"]
    rows = {(r["wan[0].delay"], r["metric"]): r for r in cmp.table.to_dict("records")}
    assert set(rows) == {(d, m) for d in ("5ms", "20ms") for m in ("transfer_s", "received")}
    for delay in ("5ms", "20ms"):
        slower = rows[(delay, "transfer_s")]
        assert slower["ratio"] == pytest.approx(1.5) and slower["verdict"] == "regressed"
        assert slower["base_samples"] == slower["new_samples"] == 2  # one line per rank
        same = rows[(delay, "received")]
        assert same["base_p50"] == same["new_p50"] == MIB and same["verdict"] == "same"
    assert cmp.regressed
    doc = comparison_json(cmp)
    assert doc["kind"] == "command" and doc["counts"]["regressed"] == 2
    assert {"metric", "base_p50", "new_p50", "ratio", "verdict"} <= set(doc["rows"][0])


def test_compare_within_the_tolerance_and_a_failed_run(tmp_path: Path) -> None:
    faster = compare(load(FIXTURE), load(_new(tmp_path / "a", {"transfer_s": 0.95})))
    assert set(faster.table["verdict"]) == {"same"} and not faster.regressed
    improved = compare(load(FIXTURE), load(_new(tmp_path / "b", {"transfer_s": 0.5})))
    assert improved.counts() == {"same": 2, "improved": 2}
    # a run that failed (a process exited non-zero) regresses its metrics, whatever they say
    failed = compare(load(FIXTURE), load(_new(tmp_path / "c", {}, failed="p001-r0")))
    verdicts = {(r["wan[0].delay"], r["verdict"]) for r in failed.table.to_dict("records")}
    assert verdicts == {("5ms", "same"), ("20ms", "regressed")}


def test_the_compare_verb_prints_the_metrics(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    new = _new(tmp_path, {"transfer_s": 2.0})
    assert main(["compare", str(FIXTURE), str(new)]) == 1
    out = capsys.readouterr().out
    assert "command metric p50" in out and "transfer_s" in out and "+100.0%" in out
    assert "REGRESSED: 4 matched (2 regressed, 2 same)" in out
    assert (new / "compare.txt").read_text().startswith("REGRESSED: 4 matched")
    assert main(["compare", str(FIXTURE), str(new), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["kind"] == "command"


# -- WAN bytes ---------------------------------------------------------------------------------
def _queues(run_id: str = "r") -> list[dict]:
    """Cumulative byte counters of two directions, sampled while a workload ran."""
    rows = []
    for t, east, west in [(10.0, 1000, 50), (10.5, 400_000, 2_000), (11.0, 1_049_576, 9_050)]:
        rows.append({"run_id": run_id, "time": t, "direction": "east->west", "bytes": east})
        rows.append({"run_id": run_id, "time": t, "direction": "west->east", "bytes": west})
    return rows


def test_wan_bytes_per_direction_are_the_counters_last_minus_first() -> None:
    shuffled = list(reversed(_queues()))
    assert wan_bytes_by_direction(shuffled) == {"west->east": 9000.0, "east->west": MIB}
    assert wan_bytes_by_direction([]) == {}


def test_the_summary_has_a_wan_row_per_direction_and_their_sum() -> None:
    kind = KINDS["command"]
    run = RunRows([], {"processes": []}, {"p": 1}, None, traces={"queues": _queues()})
    summary = kind.summarize(run)
    assert summary == [
        {"p": 1, "wan_direction": "east->west", "wan_bytes": MIB},
        {"p": 1, "wan_direction": "west->east", "wan_bytes": 9000.0},
        {"p": 1, "wan_direction": "all", "wan_bytes": MIB + 9000.0},
    ]
    shown = kind.table([{**s, "kind": "command"} for s in summary], ["p"])
    assert shown is not None
    assert list(shown[1]["process / metric"]) == ["WAN east->west", "WAN west->east", "WAN all"]
    assert list(shown[1]["value"]) == ["1 MiB", "8.789 KiB", "1.009 MiB"]
    assert kind.summarize(RunRows([], {}, {}, None)) == []  # no counters: no WAN row


def test_expectations_on_a_command_workloads_wan_bytes() -> None:
    summary = KINDS["command"].summarize(
        RunRows([], {}, {}, None, traces={"queues": _queues("p000-r0")})
    )
    summary = [{**s, "run_id": "p000-r0"} for s in summary]
    at_least = Expectation(
        where={"wan_direction": "all"}, metric="wan_bytes", relation=">=", value=MIB
    )
    at_most = at_least.model_copy(update={"relation": "<=", "value": 1.0 * MIB})
    one_way = Expectation(
        where={"wan_direction": "west->east"}, metric="wan_bytes", relation="<", value=16 << 10
    )
    checks = check([at_least, at_most, one_way], summary, {}, [])
    assert [(c.expectation, c.status) for c in checks] == [
        (0, "passed"),
        (1, "failed"),
        (2, "passed"),
    ]
    assert checks[1].lhs == MIB + 9000 and checks[1].rhs == MIB
    assert checks[0].row == "p000-r0 WAN all" and checks[2].row == "p000-r0 WAN west->east"


def test_a_real_runs_wan_rows_and_the_scenario_that_tests_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = load(FIXTURE).kind_summaries["command"]
    total = rows[rows["wan_direction"] == "all"]
    assert len(total) == 2  # one per point
    # 1 MiB of payload plus TCP/IP headers (3.6%) and the ACKs back (2.3%), handshake: < 10%
    assert ((total["wan_bytes"] >= MIB) & (total["wan_bytes"] <= 1.1 * MIB)).all()
    scenario = {
        "name": "wan-bytes",
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": [{"between": ["east", "west"], "rate": "100mbit", "delay": "5ms"}],
        "workload": {"kind": "command", "argv": ["true"]},
        "expect": [
            {"where": {"wan_direction": "all"}, "metric": "wan_bytes", "relation": "<",
             "value": MIB},
        ],
    }  # fmt: skip
    path = tmp_path / "wan-bytes.yaml"
    path.write_text(yaml.safe_dump(scenario))
    assert main(["validate", str(path)]) == 0, capsys.readouterr().err
