"""analysis.load / tables / report / compare and the `testbed report` / `testbed compare` verbs, on
result sets the project made itself (tests/fixtures/results, see tests/fixtures/README.md).

Pure: no root, no network; the three reports are rendered once per module (matplotlib is the
slow part).
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

import analysis
from analysis.compare import compare
from analysis.loader import RUN_COLUMNS, ResultsError, load
from analysis.report import write_report
from analysis.tables import (
    COLLECTIVE_COLUMNS,
    CONGESTION_COLUMNS,
    congestion_table,
    model_terms_table,
    speedup_table,
    warnings_table,
)
from testbed.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "results"
COLLECTIVES, CONGESTION, FAILURE = (FIXTURES / n for n in ("collectives", "congestion", "failure"))
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# What each committed fixture's report must contain.
EXPECTED = {
    "collectives": {
        "sections": {"overview", "warnings", "runs", "links", "collectives", "speedup"},
        "plots": {"time_vs_size", "busbw_vs_rate", "speedup"},
        "csvs": {"runs", "warnings", "links", "summary", "speedup"},
    },
    "congestion": {
        "sections": {"overview", "warnings", "runs", "links", "collectives", "congestion"},
        "plots": {"congestion", "throughput_delay", "queues", "tcp"},
        "csvs": {"runs", "warnings", "links", "summary", "congestion"},
    },
    "failure": {
        "sections": {"overview", "warnings", "runs", "links", "collectives"},
        "plots": set(),
        "csvs": {"runs", "warnings", "links", "summary"},
    },
}


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    out = tmp_path_factory.mktemp("reports")
    return {name: write_report(FIXTURES / name, out / name) for name in EXPECTED}


# -- loading -----------------------------------------------------------------------------------
def test_analysis_imports_only_the_pure_leaf_of_testbed():
    code = (
        "import sys, analysis, analysis.loader, analysis.tables, analysis.plots, "
        "analysis.report, analysis.compare; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'testbed'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    imported = eval(out.stdout)
    assert [m for m in imported if m != "testbed" and not m.startswith("testbed.core")] == []


def test_load_gives_the_documented_columns_for_a_sweep():
    res = analysis.load(COLLECTIVES)
    assert res.params == ["wan[0].rate"]
    assert res.param_order == {"wan[0].rate": ["50mbit", "100mbit"]}  # by bit/s, not as text
    assert set(RUN_COLUMNS) <= set(res.runs.columns)
    assert list(res.runs["status"]) == ["ok", "ok"]
    assert sorted(res.runs["wan_rate_bps"]) == [50e6, 100e6]
    assert res.runs["rtt_s"].tolist() == pytest.approx([0.01, 0.01])
    summary_cols = {"results", "run_id", "wan[0].rate", "status", *COLLECTIVE_COLUMNS}
    assert summary_cols <= set(res.summary.columns)
    assert len(res.summary) == 2 * 2 * 2 * 2  # rates x collectives x algorithms x sizes
    # iterations: the slowest rank's time of each timed iteration
    it = res.iterations
    assert len(it) == len(res.summary) * 3
    slowest = res.collectives.groupby(["run_id", "collective", "algorithm", "size", "iteration"])[
        "seconds"
    ].max()
    assert sorted(it["seconds"]) == sorted(slowest)
    for name in ("collectives", "links", "delayline"):
        table = getattr(res, name)
        assert {"results", "run_id", "wan[0].rate"} <= set(table.columns), name
    assert not res.has("tcp") and not res.has("queues") and not res.has("flows")


def test_load_gives_trace_tables_with_sweep_columns():
    res = load(CONGESTION)
    assert res.params == ["tcp.congestion", "wan[0].loss", "wan[0].aqm"]
    params = set(res.params) | {"results", "run_id"}
    tcp_cols = {"time", "host", "peer_host", "algorithm", "cwnd", "srtt_ms", "delivery_rate_bps"}
    assert params | tcp_cols <= set(res.tcp.columns)
    queue_cols = {"time", "direction", "source", "backlog_bytes", "dropped", "marked"}
    assert params | queue_cols <= set(res.queues.columns)
    flow_cols = {"capture", "flow", "time", "payload_bytes", "throughput_bps", "ce_share"}
    assert params | flow_cols <= set(res.flows.columns)
    assert res.runs["status"].value_counts().to_dict() == {"ok": 8, "skipped": 4}
    assert set(res.runs["aqm_profile"]) == {"droptail", "red 20-200KB p1%"}
    assert set(res.runs["congestion"]) == {"reno", "bbr", "dctcp"}


def test_load_several_results_directories_at_once():
    res = load(FIXTURES)  # a directory of results directories
    names = {"collectives", "congestion", "failure", "training", "faults"}
    assert set(res.runs["results"]) == names
    assert set(res.params) == {
        "faults[0].duration",
        "wan[0].rate",
        "tcp.congestion",
        "wan[0].loss",
        "wan[0].aqm",
        "workload.algorithms",
        "workload.algorithm",
    }
    same = load([COLLECTIVES, FAILURE])
    assert len(same.runs) == 2 + 4
    assert list(same.manifests) == ["collectives", "failure"]


def test_load_refuses_what_is_not_results(tmp_path):
    with pytest.raises(ResultsError, match="no such file or directory"):
        load(tmp_path / "missing")
    with pytest.raises(ResultsError, match="not a results directory"):
        load(tmp_path)
    (tmp_path / "manifest.json").write_text("[1, 2]")
    with pytest.raises(ResultsError, match="not a testbed manifest"):
        load(tmp_path)


# -- tables ------------------------------------------------------------------------------------
def test_speedup_is_flat_time_over_hierarchical_time():
    res = load(COLLECTIVES)
    sp = speedup_table(res)
    assert len(sp) == 2 * 2 * 2  # rates x collectives x sizes
    s = res.summary.set_index(["wan[0].rate", "collective", "algorithm", "size"])["time_p50"]
    for r in sp.to_dict("records"):
        point = (r["wan[0].rate"], r["collective"])
        flat = s[(*point, "flat", r["size"])]
        hier = s[(*point, "hierarchical", r["size"])]
        assert r["speedup"] == pytest.approx(flat / hier)


def test_model_terms_table_needs_recorded_terms_and_keeps_them(tmp_path):
    assert model_terms_table(load(COLLECTIVES)).empty  # recorded before the terms existed
    dst = shutil.copytree(COLLECTIVES, tmp_path / "terms")
    manifest = json.loads((dst / "manifest.json").read_text())
    for s in manifest["summary"]:
        s.update(model_alpha_beta=0.5, model_segments_and_notify=0.25, model_cwnd=0.0)
    (dst / "manifest.json").write_text(json.dumps(manifest))
    table = model_terms_table(load(dst))
    assert len(table) == len(manifest["summary"])
    assert (table["model_alpha_beta"] == 0.5).all() and (table["model_cwnd"] == 0.0).all()
    assert {"time_p50", "predicted", "measured_over_predicted"} <= set(table.columns)


def test_congestion_table_joins_traces_per_run():
    res = load(CONGESTION)
    cong = congestion_table(res)
    assert set(CONGESTION_COLUMNS) <= set(cong.columns)
    assert len(cong) == 8  # the ok runs; the skipped dctcp points have no measurement
    assert cong["srtt_p95_ms"].notna().all() and cong["backlog_max_bytes"].notna().all()
    assert (cong["goodput_bps"] == cong["goodput_bps"].clip(lower=0)).all()
    red = cong[cong["aqm_profile"] != "droptail"]
    assert red["marked"].sum() > 0  # ECN senders behind a RED profile get CE marks
    assert cong[cong["aqm_profile"] == "droptail"]["marked"].fillna(0).sum() == 0
    # reno under 1% random loss is much slower than without loss
    reno = cong[cong["congestion"] == "reno"].groupby("wan_loss")["time_p50"].median()
    assert reno[0.01] > 2 * reno[0.0]


def test_warnings_name_failed_skipped_and_not_run():
    w = warnings_table(load(FAILURE))
    kinds = w.groupby("kind")["run_id"].apply(sorted).to_dict()
    assert kinds["failed"] == ["p001-r0"]
    assert kinds["skipped"] == ["p002-r0", "p003-r0"]
    assert kinds["not run"] == ["p001-r0"]
    assert kinds["wrong result"] == ["p001-r0"]
    assert w[w["kind"] == "skipped"]["message"].str.contains("unsupported on this kernel").all()
    assert "produced a wrong result" in w[w["kind"] == "failed"]["message"].iloc[0]


# -- reports -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(EXPECTED))
def test_report_has_the_expected_sections_plots_and_tables(reports, name):
    rep, want = reports[name], EXPECTED[name]
    assert set(rep.sections) == want["sections"]
    assert {p.stem for p in rep.pngs} == want["plots"]
    assert {p.stem for p in rep.csvs} == want["csvs"]
    html = rep.html.read_text()
    md = rep.markdown.read_text()
    for key in want["sections"]:
        assert f'<section id="{key}">' in html
    for png in rep.pngs:
        data = png.read_bytes()
        assert data.startswith(PNG_SIGNATURE)
        with Image.open(png) as img:
            img.verify()
        with Image.open(png) as img:
            assert img.format == "PNG" and img.size[0] > 300 and img.size[1] > 200
        # embedded (self-contained) and named in the HTML; linked from the Markdown
        assert base64.b64encode(data).decode() in html
        assert f'data-file="plots/{png.name}"' in html
        assert f"](plots/{png.name})" in md
    assert 'src="plots/' not in html  # nothing the HTML needs lives beside it
    for csv in rep.csvs:
        pd.read_csv(csv)
    summary = pd.read_csv(rep.out / "summary.csv")
    assert {"time_p50", "time_p95", "algbw", "busbw", "predicted"} <= set(summary.columns)
    assert {"measured_over_predicted", "cpu_saturated"} <= set(summary.columns)
    # header: scenario, backend, kernel, versions
    for key in ("scenario", "backend", "kernel", "versions", "torch"):
        assert key in html


def test_report_of_a_failed_run_and_skipped_points_lists_both(reports):
    rep = reports["failure"]
    html, md = rep.html.read_text(), rep.markdown.read_text()
    for text in (
        "produced a wrong result",
        "unsupported on this kernel: dctcp",
        "no hierarchical all_to_all",
        "WRONG",
    ):
        assert text in html and text in md, text
    runs = pd.read_csv(rep.out / "runs.csv")
    assert runs.set_index("run_id")["status"].to_dict() == {
        "p000-r0": "ok",
        "p001-r0": "failed",
        "p002-r0": "skipped",
        "p003-r0": "skipped",
    }


def test_report_renders_without_some_tables(tmp_path):
    src = tmp_path / "congestion-untraced"
    shutil.copytree(CONGESTION, src)
    for name in ("tcp", "flows", "queues", "links"):
        (src / f"{name}.parquet").unlink()
    rep = write_report(src)  # default: RESULTS/report
    assert rep.out == src / "report"
    assert {p.stem for p in rep.pngs} == {"congestion"}  # no trace figures without traces
    assert "links" not in rep.sections and "congestion" in rep.sections
    cong = pd.read_csv(rep.out / "congestion.csv")
    assert cong["srtt_p95_ms"].isna().all() and cong["backlog_max_bytes"].isna().all()
    assert cong["goodput_bps"].notna().all()


# -- compare -----------------------------------------------------------------------------------
def _slowed(src: Path, dst: Path, factor: float) -> Path:
    """A copy of ``src`` whose collectives all took ``factor`` times as long."""
    shutil.copytree(src, dst)
    manifest = json.loads((dst / "manifest.json").read_text())
    for s in manifest["summary"]:
        for key in ("time_p50", "time_p95"):
            s[key] *= factor
        for key in ("algbw", "busbw"):
            s[key] /= factor
        if s.get("predicted"):
            s["measured_over_predicted"] = s["time_p50"] / s["predicted"]
    (dst / "manifest.json").write_text(json.dumps(manifest))
    table = pd.read_parquet(dst / "collectives.parquet")
    table["seconds"] *= factor
    table.to_parquet(dst / "collectives.parquet", index=False)
    return dst


def test_compare_identical_inputs_passes(tmp_path, capsys):
    cmp = compare(load(COLLECTIVES), load(COLLECTIVES), 0.10)
    assert set(cmp.table["verdict"]) == {"same"} and not cmp.regressed
    assert len(cmp.table) == 16 and cmp.only_base.empty and cmp.only_new.empty
    # the verb refuses a set compared with itself: a later run with the same numbers
    again = _slowed(COLLECTIVES, tmp_path / "again", 1.0)
    manifest = json.loads((again / "manifest.json").read_text())
    manifest["started"] += 3600
    (again / "manifest.json").write_text(json.dumps(manifest))
    assert main(["compare", str(COLLECTIVES), str(again)]) == 0
    assert "OK: 16 matched (16 same)" in capsys.readouterr().out


def test_compare_flags_a_20_percent_slowdown(tmp_path, capsys):
    slow = _slowed(COLLECTIVES, tmp_path / "slow", 1.2)
    cmp = compare(load(COLLECTIVES), load(slow), 0.10)
    assert set(cmp.table["verdict"]) == {"regressed"}
    assert cmp.table["ratio"].tolist() == pytest.approx([1.2] * 16)
    assert main(["compare", str(COLLECTIVES), str(slow), "--tolerance", "10%"]) == 1
    out = capsys.readouterr().out
    assert "REGRESSED: 16 matched (16 regressed)" in out and "+20.0%" in out
    assert main(["compare", str(COLLECTIVES), str(slow), "--tolerance", "25%"]) == 0
    # the other way round it is an improvement, not a regression
    verdict = str(tmp_path / "verdict.txt")  # not into the committed fixture
    assert main(["compare", str(slow), str(COLLECTIVES), "--verdict", verdict]) == 0
    assert "16 improved" in capsys.readouterr().out


def test_compare_matches_by_parameters_and_lists_the_unmatched(tmp_path):
    part = tmp_path / "part"
    shutil.copytree(COLLECTIVES, part)
    manifest = json.loads((part / "manifest.json").read_text())
    manifest["summary"] = [s for s in manifest["summary"] if s["wan[0].rate"] == "50mbit"]
    (part / "manifest.json").write_text(json.dumps(manifest))
    cmp = compare(load(COLLECTIVES), load(part))
    assert len(cmp.table) == 8 and set(cmp.table["wan[0].rate"]) == {"50mbit"}
    assert len(cmp.only_base) == 8 and set(cmp.only_base["wan[0].rate"]) == {"100mbit"}
    assert not cmp.regressed


def test_compare_a_run_that_now_fails_is_a_regression(tmp_path):
    fixed = tmp_path / "fixed"
    shutil.copytree(FAILURE, fixed)
    manifest = json.loads((fixed / "manifest.json").read_text())
    manifest["runs"]["p001-r0"].update(status="ok", reason="")
    for s in manifest["summary"]:
        s["correct"] = True
    (fixed / "manifest.json").write_text(json.dumps(manifest))
    worse = compare(load(fixed), load(FAILURE))
    verdicts = worse.table.set_index("algorithm")["verdict"]
    assert verdicts["hierarchical"] == "regressed" and worse.regressed
    better = compare(load(FAILURE), load(fixed))
    assert better.table.set_index("algorithm")["verdict"]["hierarchical"] == "fixed"
    assert not better.regressed
    assert not compare(load(FAILURE), load(FAILURE)).regressed  # still failing: not a change


# -- CLI ---------------------------------------------------------------------------------------
def test_report_verb_prints_where_it_wrote(tmp_path, capsys):
    assert main(["report", str(FAILURE), "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path / "r" / "report.html") in out and "report.md" in out
    assert "1 failed" in out and "2 skipped" in out
    assert (tmp_path / "r" / "report.html").is_file()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["report", "/nonexistent/results"], "no such file or directory"),
        (["report", "{tmp}"], "not a results directory"),
        (["compare", "{tmp}", str(COLLECTIVES)], "not a results directory"),
        (["compare", str(COLLECTIVES), str(FAILURE)], "no matching runs"),
        (["compare", str(COLLECTIVES), str(COLLECTIVES), "--tolerance", "10"], "% sign missing"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_report_of_skipped_only_and_of_an_older_manifest(tmp_path):
    manifest = json.loads((FAILURE / "manifest.json").read_text())
    skipped = tmp_path / "skipped"
    skipped.mkdir()
    runs = {k: v for k, v in manifest["runs"].items() if v["status"] == "skipped"}
    (skipped / "manifest.json").write_text(json.dumps({**manifest, "runs": runs, "summary": []}))
    rep = write_report(skipped)
    assert rep.sections == ["overview", "warnings", "runs"] and not rep.pngs
    assert "unsupported on this kernel" in rep.html.read_text()
    # no summary and no resolved scenarios (older manifests): computed from collectives.parquet
    older = tmp_path / "older"
    older.mkdir()
    shutil.copy(FAILURE / "collectives.parquet", older)
    runs = {k: {f: v for f, v in r.items() if f != "resolved"} for k, r in manifest["runs"].items()}
    (older / "manifest.json").write_text(json.dumps({"runs": runs}))
    res = load(older)
    assert len(res.summary) == 3 and res.summary["predicted"].isna().all()
    assert "collectives" in write_report(res, tmp_path / "out").sections


def test_report_shows_the_scenarios_expectations(tmp_path):
    src = tmp_path / "expected"
    shutil.copytree(FAILURE, src)
    manifest = json.loads((src / "manifest.json").read_text())
    manifest["expectations"] = [
        {"expectation": 0, "description": "hierarchical time <= 0.5 x flat", "status": "failed",
         "row": "p000-r0 all_reduce 65536", "lhs": 0.0229, "rhs": 0.0121, "detail": ""},
        {"expectation": 1, "description": "busbw >= 1 MB/s", "status": "passed",
         "row": "p000-r0 all_reduce 65536", "lhs": 2.7e6, "rhs": 1e6, "detail": ""},
    ]  # fmt: skip
    (src / "manifest.json").write_text(json.dumps(manifest))
    rep = write_report(src)
    assert "expectations" in rep.sections
    failed = rep.warnings[rep.warnings["kind"] == "expectation failed"]
    want = "expect[0] hierarchical time <= 0.5 x flat: 0.0229 vs 0.0121"
    assert failed["message"].tolist() == [want]
    assert "busbw &gt;= 1 MB/s" in rep.html.read_text()
