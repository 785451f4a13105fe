"""Training results (tests/fixtures/results/training): loaded, reported, compared, no root."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from analysis.compare import compare
from analysis.loader import load
from analysis.report import write_report
from testbed.cli import main

TRAINING = Path(__file__).resolve().parents[1] / "fixtures" / "results" / "training"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_load_splits_training_summaries_from_collectives() -> None:
    res = load(TRAINING)
    assert res.summary.empty
    s = res.training_summary
    assert len(s) == 4
    assert {"algorithm", "final_loss", "time_to_loss", "wan_bytes_per_step", "status"} <= set(s)
    assert set(s["algorithm"]) == {"ddp", "diloco"}
    assert {"wan[0].rate", "workload.algorithm"} <= set(s)
    assert set(res.training["rank"]) == {0, 1} and res.training["step"].max() == 19


def test_report_has_a_training_section_with_its_figures(tmp_path: Path) -> None:
    rep = write_report(TRAINING, tmp_path / "report")
    assert "training" in rep.sections and "collectives" not in rep.sections
    names = {p.stem for p in rep.pngs}
    assert {"training_loss", "training_time_to_loss", "training_wan_bytes"} <= names
    for png in rep.pngs:
        assert png.read_bytes().startswith(PNG_SIGNATURE)
    assert (tmp_path / "report" / "training.csv").exists()
    assert "Training" in rep.markdown.read_text()


def test_compare_training_runs_on_step_time_and_time_to_loss(tmp_path: Path) -> None:
    same = compare(load(TRAINING), load(TRAINING))
    assert same.kind == "training" and not same.regressed
    assert set(same.table["verdict"]) == {"same"}
    assert len(same.table) == 4
    # a copy whose DDP steps took twice as long at 50 Mbit/s
    slower = tmp_path / "slower"
    shutil.copytree(TRAINING, slower)
    manifest = json.loads((slower / "manifest.json").read_text())
    for row in manifest["summary"]:
        if row["algorithm"] == "ddp" and row["wan[0].rate"] == "50mbit":
            row["step_time_p50"] *= 2
    (slower / "manifest.json").write_text(json.dumps(manifest))
    cmp = compare(load(TRAINING), load(slower), tolerance=0.1)
    assert cmp.regressed
    bad = cmp.table[cmp.table["verdict"] == "regressed"]
    assert list(bad["algorithm"]) == ["ddp"] and list(bad["ratio"]) == [pytest.approx(2.0)]


def test_compare_verb_prints_a_training_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    again = tmp_path / "again"  # a later run with the same numbers (a set with itself is refused)
    shutil.copytree(TRAINING, again)
    manifest = json.loads((again / "manifest.json").read_text())
    manifest["started"] += 3600
    (again / "manifest.json").write_text(json.dumps(manifest))
    code = main(["compare", str(TRAINING), str(again)])
    out = capsys.readouterr().out
    assert code == 0
    assert "training step time p50" in out and "time to loss" in out
    assert "OK: 4 matched (4 same)" in out
