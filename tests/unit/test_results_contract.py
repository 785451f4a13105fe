"""The results directory is the one contract between running and analysing: what the runner
summarised from a run and what the report computes from the directory it wrote are the same
numbers, also where the network's facts are not the link-level fields (a multipath link)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

import analysis
from analysis.faults import analyse
from testbed.config.sweep import load_runs
from testbed.experiment.results import RunResult
from testbed.experiment.sweep import Experiment
from testbed.plan.resolved import network_rows
from testbed.plan.topology import build_plan

ROOT = Path(__file__).resolve().parents[2]


def _fixture_runs():
    """The hand-built faults fixture's generator: a blackhole under a 16 MiB all-reduce."""
    path = ROOT / "tests" / "fixtures" / "make_faults_results.py"
    spec = importlib.util.spec_from_file_location("make_faults_results", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_multipath_runs_fault_prediction_is_one_number_in_the_run_and_the_report(
    tmp_path: Path,
) -> None:
    """scenarios/multipath-failover.yaml: two 100 Mbit/s, 10 ms paths; the link-level fields are
    defaults (delay 0, 1 Gbit/s) that no packet sees. The stall the runner predicted (its summary,
    which `expect` tests and `testbed run` prints) must be the report's."""
    fx = _fixture_runs()
    data = fx.run(0, "2s", 2.0)
    spec = load_runs(str(ROOT / "scenarios" / "multipath-failover.yaml"))[0]
    exp = Experiment([spec], str(ROOT / "scenarios" / "multipath-failover.yaml"), tmp_path, False)
    rows = [{k: v for k, v in r.items() if k not in ("run_id", "repeat")} for r in data["ops"]]
    events = [{**e, "run_id": spec.run_id} for e in data["events"]]
    result = RunResult(spec.run_id, "ok", rows=rows, dynamics={"events": events})
    # what the runner records once the network is up: the WAN as built
    plan = build_plan(spec.scenario, "t", 1)
    result.network = [{"run_id": spec.run_id, **r} for r in network_rows(plan, spec.scenario)]
    result.info.update(world_size=2, backend="userspace")
    summary = exp.record(spec, result)
    run_side = summary[0]["fault_stall_over_predicted"]
    assert run_side == run_side and run_side is not None  # a number, not NaN

    res = analysis.load(exp.results.path)
    faults = analyse(res).faults
    report_side = faults["stall_over_predicted"].dropna()
    assert len(report_side) == 1
    assert run_side == pytest.approx(float(report_side.iloc[0]), rel=1e-9)
    # and the report's run columns are the first path's, 20 ms RTT, 100 Mbit/s
    run = res.runs.iloc[0]
    assert run["rtt_s"] == pytest.approx(0.020)
    assert run["wan_rate_bps"] == pytest.approx(100e6)
    assert isinstance(pd.DataFrame(summary), pd.DataFrame)


def test_docs_results_documents_every_table_and_declared_column() -> None:
    """docs/results.md lists every table of testbed.core.results and each declared column."""
    from testbed.core.results import TABLES

    text = (ROOT / "docs" / "results.md").read_text()
    listing = text.split("```", 2)[1]  # the directory listing at the top
    for table in TABLES:
        assert f"{table.name}.parquet" in listing, table.name
        for column in table.columns:
            assert f"`{column}`" in text, f"{table.name}.{column}"


def test_every_committed_fixture_loads_as_the_current_format() -> None:
    """The fixtures are version 1: they upgrade (summary kinds, network rows from the resolved
    scenario) and their run columns are what version 1's reader gave."""
    from testbed.core.results import FORMAT_VERSION

    fixtures = ROOT / "tests" / "fixtures" / "results"
    for d in sorted(p for p in fixtures.iterdir() if (p / "manifest.json").exists()):
        res = analysis.load(d)
        manifest = next(iter(res.manifests.values()))
        assert manifest["format_version"] == FORMAT_VERSION
        assert all(s.get("kind") for s in manifest.get("summary") or []), d.name
        assert not res.network.empty, d.name
        assert res.runs["rtt_s"].notna().all(), d.name


def test_every_scenarios_network_rows_are_written_and_read_back() -> None:
    """network.parquet's rows of every scenario's every point: plain values (Parquet takes them),
    and the reference direction's columns the loader shows (a marking profile as its label)."""
    from analysis.network import reference

    files = sorted((ROOT / "scenarios").glob("*.yaml"))
    assert files
    seen_aqm = False
    for path in files:
        for spec in load_runs(str(path)):
            if spec.scenario.placement is not None:
                continue  # each machine builds its part; the rows are the whole plan's too
            rows = network_rows(build_plan(spec.scenario, "t", 1), spec.scenario)
            frame = pd.DataFrame(rows)
            assert frame["direction"].is_unique, path.name
            net = reference(frame)
            assert net["rtt_s"] is not None and net["wan_rate_bps"] > 0, path.name
            seen_aqm |= net["aqm"] != "droptail"
    assert seen_aqm  # some scenario has a marking profile: its JSON round-trips


def test_a_collectives_runs_summary_and_prediction_are_reproduced_from_its_directory(
    tmp_path: Path,
) -> None:
    """What the runner summarised (times, bandwidths, the α-β prediction and its terms) comes
    back from the directory alone: its rows and its manifest entry (the model's topology kept)."""
    from analysis.run_summary import recompute
    from testbed.experiment.execute import model_topology
    from testbed.plan.ranks import place_ranks

    fixture = ROOT / "tests" / "fixtures" / "results" / "collectives"
    spec = load_runs(str(ROOT / "tests" / "fixtures" / "scenarios" / "collectives.yaml"))[0]
    measured = pd.read_parquet(fixture / "collectives.parquet")
    measured = measured[measured["run_id"] == spec.run_id]
    drop = ["run_id", "repeat", *spec.params]
    rows = [
        {k: v for k, v in r.items() if k not in drop and v == v and v is not None}
        for r in measured.to_dict("records")
    ]
    workload = spec.scenario.rank_workload
    assert workload is not None and rows
    plan = build_plan(spec.scenario, "t", 1)
    slots = place_ranks(plan, workload.ranks_per_host, workload.placement)
    topology = model_topology(plan, slots, workload.placement, workload.ranks_per_host)
    result = RunResult(spec.run_id, "ok", rows=rows)
    result.info.update(world_size=len(slots), topology=topology, cpu_saturated=False)
    exp = Experiment([spec], str(fixture), tmp_path, False)
    by_runner = exp.record(spec, result)
    assert by_runner and all(s["predicted"] for s in by_runner)

    res = analysis.load(exp.results.path)
    manifest_run = next(iter(res.manifests.values()))["runs"][spec.run_id]
    again = recompute(manifest_run, res.collectives[res.collectives["run_id"] == spec.run_id])
    assert len(again) == len(by_runner)
    for ran, loaded in zip(by_runner, again, strict=True):
        for key, value in loaded.items():
            if isinstance(value, float):
                assert ran[key] == pytest.approx(value, rel=1e-12, nan_ok=True), key
            else:
                assert ran[key] == value, key


def test_the_training_fixtures_summaries_come_back_from_their_directory() -> None:
    """Each training run's summary (loss, step times, WAN bytes, comm against the model of its
    algorithm's schedule) as the runner wrote it, recomputed from the directory: its rows, its
    WAN counters, its resolved workload and the topology its plan gives."""
    from analysis.run_summary import fill_targets, training_summary
    from testbed.experiment.execute import model_topology
    from testbed.plan.ranks import place_ranks

    fixture = ROOT / "tests" / "fixtures" / "results" / "training"
    res = analysis.load(fixture)
    manifest = next(iter(res.manifests.values()))
    specs = {s.run_id: s for s in load_runs(str(ROOT / "tests/fixtures/scenarios/training.yaml"))}
    again = []
    for run_id, run in manifest["runs"].items():
        workload = specs[run_id].scenario.rank_workload
        assert workload is not None
        plan = build_plan(specs[run_id].scenario, "t", 1)
        slots = place_ranks(plan, workload.ranks_per_host, workload.placement)
        info = {**run, "topology": model_topology(plan, slots, workload.placement, 1)}
        rows = res.training[res.training["run_id"] == run_id]
        if "outcome" in rows:
            rows = rows[rows["outcome"].fillna("ok") == "ok"]
        queues = res.queues[res.queues["run_id"] == run_id]
        records = [
            {k: v for k, v in r.items() if k != "results" and v == v and v is not None}
            for r in rows.to_dict("records")
        ]
        again += [
            {**s, "run_id": run_id}
            for s in training_summary(
                records,
                queues.drop(columns=["results"]).to_dict("records"),
                run["resolved"]["workload"],
                info,
                run["params"],
            )
        ]
    fill_targets(again, res.training.drop(columns=["results"]).to_dict("records"), res.params)
    written = {s["run_id"]: s for s in manifest["summary"]}
    assert len(again) == len(written)
    # the fixture predates the current α-β model: its predictions are an older model's; every
    # measured column comes back exactly
    model = ("predicted_comm_per_step", "comm_measured_over_predicted")
    for s in again:
        assert s["predicted_comm_per_step"] > 0
        for key, value in written[s["run_id"]].items():
            if key in ("run_id", "repeat", "kind", *model):
                continue
            if isinstance(value, float):
                assert s[key] == pytest.approx(value, rel=1e-9), (s["run_id"], key)
            else:
                assert s[key] == value, (s["run_id"], key)
