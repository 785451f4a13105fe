"""The one summary (analysis.summary): the runner's manifest rows and the loader's fallback are
the same numbers, and the quantile is testbed.core.stats.quantile (= pandas' default)."""

from __future__ import annotations

import itertools
import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from analysis.loader import load
from analysis.model import TERMS, Link, Topology
from analysis.run_summary import collectives_summary as run_summarize
from analysis.summary import SUMMARY_COLUMNS, iteration_times, summarize, summary_rows
from testbed.core.stats import quantile

FIXTURE = Path(__file__).parent.parent / "fixtures" / "results" / "collectives"
NUMBERS = ["ranks", "iterations", "time_p50", "time_p95", "algbw", "busbw"]


def _rows(run_id: str) -> list[dict]:
    table = pd.read_parquet(FIXTURE / "collectives.parquet")
    return table[table["run_id"] == run_id].to_dict("records")


def _manifest() -> dict:
    return json.loads((FIXTURE / "manifest.json").read_text())


def test_runner_summary_reproduces_the_manifest_it_wrote():
    manifest = _manifest()
    for run_id, run in manifest["runs"].items():
        info = {"world_size": run["world_size"], "cpu_saturated": run["cpu_saturated"]}
        got = run_summarize(_rows(run_id), info, run["params"])
        want = [s for s in manifest["summary"] if s["run_id"] == run_id]
        key = lambda s: (s["collective"], s["algorithm"], s["size"])  # noqa: E731
        assert sorted(map(key, got)) == sorted(map(key, want))
        by_key = {key(s): s for s in want}
        for row in got:
            ref = by_key[key(row)]
            for col in NUMBERS:
                assert row[col] == pytest.approx(ref[col], rel=1e-12), (key(row), col)
            assert row["correct"] == ref["correct"]
            assert row["cpu_saturated"] == ref["cpu_saturated"]
            assert row["wan[0].rate"] == run["params"]["wan[0].rate"]
            assert row["predicted"] is None  # no topology given: no prediction


def test_runner_summary_records_the_prediction_and_its_terms():
    run_id, run = next(iter(_manifest()["runs"].items()))
    rows = _rows(run_id)
    clusters = pd.DataFrame(rows).groupby("cluster")["rank"].nunique()
    g = 1e8 * 1448 / 1514
    topo = Topology(
        clusters=tuple((c, int(m)) for c, m in clusters.items()),
        links=tuple(Link(a, b, g, 0.01) for a, b in itertools.permutations(clusters.index, 2)),
        fabric_goodput_bps={},
        fabric_delay_s={},
    )
    got = run_summarize(rows, {"world_size": run["world_size"], "topology": topo}, run["params"])
    assert got
    for row in got:
        terms = [row[f"model_{t}"] for t in TERMS]
        if row["predicted"] is None:  # a combination the model says does not exist
            assert terms == [None] * len(TERMS)
            continue
        assert row["predicted"] == pytest.approx(sum(terms))
        assert row["model_alpha_beta"] > 0


def test_loader_fallback_equals_runner_summary(tmp_path):
    """A results directory whose manifest lost its summary: the loader recomputes it, with the
    same numbers as the runner (which computed the manifest's) for every row."""
    copy = tmp_path / "collectives"
    shutil.copytree(FIXTURE, copy)
    manifest = _manifest()
    (copy / "manifest.json").write_text(json.dumps({**manifest, "summary": []}))
    fallback = load(copy).summary.set_index(["run_id", "collective", "algorithm", "size"])
    for row in manifest["summary"]:
        got = fallback.loc[(row["run_id"], row["collective"], row["algorithm"], row["size"])]
        for col in NUMBERS:
            assert got[col] == pytest.approx(row[col], rel=1e-12), col
        assert bool(got["correct"]) == row["correct"]
    assert len(fallback) == len(manifest["summary"])


def test_slowest_rank_per_iteration_and_linear_quantiles():
    times = {0: [1.0, 2.0, 3.0, 4.0, 10.0], 1: [1.5, 1.0, 3.5, 4.0, 9.0]}
    rows = [
        {"rank": r, "collective": "all_reduce", "algorithm": "flat", "size": 1000,
         "iteration": i, "seconds": s, "correct": not (r == 1 and i == 3)}
        for r, ts in times.items() for i, s in enumerate(ts)
    ]  # fmt: skip
    per = iteration_times(pd.DataFrame(rows))
    assert per["seconds"].tolist() == [1.5, 2.0, 3.5, 4.0, 10.0]
    assert per["ranks"].tolist() == [2] * 5
    (row,) = summary_rows(rows)
    slowest = [1.5, 2.0, 3.5, 4.0, 10.0]
    assert row["time_p50"] == quantile(slowest, 0.5) == 3.5
    assert row["time_p95"] == quantile(slowest, 0.95) == pytest.approx(8.8)
    assert row["time_p95"] == pd.Series(slowest).quantile(0.95)  # the same definition
    assert row["algbw"] == 1000 / 3.5
    assert row["busbw"] == pytest.approx(1000 / 3.5 * 2 * (2 - 1) / 2)
    assert row["correct"] is False and row["iterations"] == 5
    assert list(row) == SUMMARY_COLUMNS
    json.dumps(row)  # plain Python values: the runner writes them into manifest.json


def test_world_size_and_prediction():
    rows = [
        {"rank": 0, "collective": c, "algorithm": "flat", "size": 100, "iteration": 0,
         "seconds": 0.5, "correct": True}
        for c in ("all_reduce", "unknown_collective")
    ]  # fmt: skip

    def model(coll: str, algo: str, size: int, ranks: int) -> float:
        if coll != "all_reduce":
            raise ValueError("no formula")
        return 0.25 * ranks

    out = {r["collective"]: r for r in summary_rows(rows, ranks=4, predict=model)}
    assert out["all_reduce"]["ranks"] == 4
    assert out["all_reduce"]["busbw"] == pytest.approx(200 * 2 * 3 / 4)
    assert out["all_reduce"]["predicted"] == 1.0
    assert out["all_reduce"]["measured_over_predicted"] == 0.5
    assert math.isnan(out["unknown_collective"]["busbw"])
    assert out["unknown_collective"]["predicted"] is None
    assert out["unknown_collective"]["measured_over_predicted"] is None


def test_empty():
    assert summary_rows([]) == []
    empty = summarize(pd.DataFrame(), by=["run_id"])
    assert empty.empty and list(empty.columns) == ["run_id", *SUMMARY_COLUMNS]
