"""Live tests of collectives across the emulated clusters: real namespaces, real torch ranks."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from helpers import RUN_TAG, ctrl_c_default, scenario

from testbed.config.sweep import expand
from testbed.experiment.sweep import Experiment
from testbed.net import registry

pytestmark = pytest.mark.live
CLI = [sys.executable, "-m", "testbed.cli"]
ALL_COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"]
ALL_ALGORITHMS = ["flat", "hierarchical", "hierarchical-2d"]


def workload_scenario(name: str, east: int = 2, west: int = 2, **workload) -> dict:
    """Clusters of ``east`` and ``west`` hosts (a rank each: a test that names no rank of the
    second host of a cluster runs without it, a torch import less), a 1 Gbit/s 2 ms WAN."""
    data = scenario(wan=[{"between": ["east", "west"], "rate": "1gbit", "delay": "2ms"}])
    data["clusters"] = {"east": {"hosts": east}, "west": {"hosts": west}}
    data["name"] = f"{RUN_TAG}-{name}"[:32]
    data["workload"] = {
        "sizes": ["64KiB"],
        "warmup": 1,
        "iterations": 2,
        "timeout": "60s",
        **workload,
    }
    return data


def has_a_row(out: Path, run_id: str, rank: int) -> bool:
    """Whether the rank has written a whole row (a line) into its run's rank-N.jsonl under
    ``out``."""
    for path in out.glob(f"**/runs/{run_id}/rank-{rank}.jsonl"):
        with contextlib.suppress(OSError):
            if b"\n" in path.read_bytes():
                return True
    return False


def test_every_collective_and_algorithm_runs_correctly(root, tmp_path):
    data = workload_scenario("all", collectives=ALL_COLLECTIVES, algorithms=ALL_ALGORITHMS)
    exp = Experiment(expand(data, "test"), "test", tmp_path, resume=False)
    assert exp.run(selfcheck_seconds=0.5)
    run = exp.manifest["runs"]["p000-r0"]
    assert run["status"] == "ok", run["reason"]
    df = pd.read_parquet(exp.results.path / "collectives.parquet")
    for column in (
        "run_id",
        "rank",
        "host",
        "cluster",
        "collective",
        "algorithm",
        "size",
        "iteration",
        "seconds",
        "correct",
    ):
        assert column in df.columns, column
    assert df["correct"].all()
    ran = set(zip(df["collective"], df["algorithm"], strict=True))
    skipped = {(s["collective"], s["algorithm"]) for s in run["skipped_combinations"]}
    # Every combination either ran on all 4 ranks x 2 iterations or says why it did not.
    for c in ALL_COLLECTIVES:
        for a in ALL_ALGORITHMS:
            assert ((c, a) in ran) != ((c, a) in skipped), (c, a)
            if (c, a) in ran:
                rows = df[(df.collective == c) & (df.algorithm == a)]
                assert len(rows) == 4 * 2
    assert ("all_to_all", "hierarchical") in skipped
    assert all(s["skipped"] for s in run["skipped_combinations"])
    summary = {(s["collective"], s["algorithm"]): s for s in exp.summaries}
    flat = summary[("all_reduce", "flat")]
    assert flat["predicted"] > 0 and flat["measured_over_predicted"] > 0
    assert flat["busbw"] == pytest.approx(flat["algbw"] * 2 * 3 / 4)
    links = pd.read_parquet(exp.results.path / "links.parquet")
    assert set(links["direction"]) == {"east->west", "west->east"}
    manifest = json.loads((exp.results.path / "manifest.json").read_text())
    assert manifest["status"] == "ok" and manifest["runs"]["p000-r0"]["backend"]


def test_wrong_result_fails_the_run_with_the_rank(root, tmp_path, monkeypatch):
    monkeypatch.setenv("TESTBED_INJECT_FAULT", "rank:2:all_reduce:flat")
    data = workload_scenario("wrong", west=1)  # rank 2: west's first host, as with four ranks
    exp = Experiment(expand(data, "test"), "test", tmp_path, resume=False)
    assert not exp.run(selfcheck_seconds=0.5)
    run = exp.manifest["runs"]["p000-r0"]
    assert run["status"] == "failed"
    assert "rank 2 (west-h0) produced a wrong result" in run["reason"]
    assert "WRONG all_reduce/flat" in run["reason"]


@pytest.mark.timing
def test_killed_rank_fails_its_run_and_the_sweep_goes_on(root, tmp_path):
    # rank 1 is east's second host; one host in west is enough to cross the WAN
    data = workload_scenario("kill", west=1, sizes=["1MiB"], iterations=400, timeout="30s")
    data["sweep"] = {"workload.iterations": [400, 2]}
    exp = Experiment(expand(data, "test"), "test", tmp_path, resume=False)
    killed: list[int] = []

    def killer() -> None:
        deadline = time.monotonic() + 120  # bring-up, self-check, the ranks' start on a busy host
        while time.monotonic() < deadline and not killed:
            for rec in registry.records():
                if rec.name.startswith(data["name"][:30]):
                    ranks = [p for p, _, what in rec.processes if what == "rank 1"]
                    # the ranks are going once rank 1 has timed an operation (a row written):
                    # the kill falls mid-run, not during their start-up
                    if ranks and has_a_row(tmp_path, "p000-r0", 1):
                        os.kill(ranks[0], signal.SIGKILL)
                        killed.append(ranks[0])
                        return
            time.sleep(0.1)

    t = threading.Thread(target=killer)
    t.start()
    started = time.monotonic()
    try:
        assert not exp.run(selfcheck_seconds=0.5)
    finally:
        t.join()
    assert killed, "no rank process was found to kill"
    first, second = exp.manifest["runs"]["p000-r0"], exp.manifest["runs"]["p001-r0"]
    assert first["status"] == "failed"
    assert "rank 1 (east-h1) exited with code" in first["reason"], first["reason"]
    # the op timeout (30 s) + 60 s for both points' bring-up, self-check and the second run;
    # the whole test took 15.9 s (RESULTS.md "Test suite duration"): a no-hang bound, ~6x
    assert time.monotonic() - started < 30 + 60  # within the timeout, not a hang
    assert second["status"] == "ok", second["reason"]


# measured 27-32 s in full-suite runs on 2 cores: 4x and more for a busy host
@pytest.mark.timeout(180)
def test_cli_run_prints_summary_and_resume_skips_finished_runs(root, tmp_path):
    data = workload_scenario("cli", east=1, west=1)  # two ranks, across the WAN
    data["sweep"] = {"workload.sizes": [["64KiB"], ["128KiB"]]}
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(data))
    env = dict(os.environ)
    r = subprocess.run(
        [*CLI, "run", str(path), "--out", str(tmp_path / "out"), "--selfcheck", "0.5"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "all_reduce" in r.stdout and "meas/pred" in r.stdout
    (results,) = (tmp_path / "out").iterdir()
    for name in ("manifest.json", "collectives.parquet", "links.parquet"):
        assert (results / name).exists(), name
    # Pretend the second point never finished, then resume: only it runs again.
    manifest = json.loads((results / "manifest.json").read_text())
    manifest["runs"]["p001-r0"]["status"] = "interrupted"
    (results / "manifest.json").write_text(json.dumps(manifest))
    r = subprocess.run(
        [*CLI, "run", str(path), "--resume", str(results), "--selfcheck", "0.5"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 run(s), 1 to do" in r.stdout
    df = pd.read_parquet(results / "collectives.parquet")
    assert sorted(df["run_id"].unique()) == ["p000-r0", "p001-r0"]
    assert len(df[df.run_id == "p001-r0"]) == 2 * 2  # every rank's every iteration, once


def test_cli_run_checks_expectations_and_fails_with_the_numbers(root, tmp_path):
    data = workload_scenario("exp", algorithms=["flat", "hierarchical"])
    data["expect"] = [
        {"metric": "time_p50", "relation": "<", "value": 60},
        {"where": {"algorithm": "flat"}, "metric": "time_p50", "relation": "<", "value": 1e-9},
    ]
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(data))
    r = subprocess.run(
        [*CLI, "run", str(path), "--out", str(tmp_path / "out"), "--selfcheck", "0.3"],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=300,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "expect[0] passed" in r.stdout
    assert "expect[1] failed: algorithm=flat: time_p50 < 1e-09" in r.stdout
    assert "expectations: 2 passed, 1 failed, 0 unchecked" in r.stdout
    (results,) = (tmp_path / "out").iterdir()
    manifest = json.loads((results / "manifest.json").read_text())
    assert manifest["status"] == "ok"  # the runs themselves were fine
    assert [c["status"] for c in manifest["expectations"]] == ["passed", "passed", "failed"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_stops_cleanly_and_keeps_what_was_measured(root, tmp_path, sig):
    # one host per cluster: two ranks cross the WAN as four do, at half the torch imports
    data = workload_scenario("int", 1, 1, sizes=["1MiB"], iterations=1000, timeout="120s")
    data["sweep"] = {"workload.warmup": [1, 2]}  # a second run that must not start
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(data))
    proc = subprocess.Popen(
        [*CLI, "run", str(path), "--out", str(tmp_path / "out"), "--selfcheck", "0.5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ctrl_c_default,
    )
    try:
        # a give-up time, not a bound: bring-up, self-check and the ranks' torch imports took
        # over 90 s at load 25 on 2 cores
        deadline = time.monotonic() + 300
        measured = False
        while time.monotonic() < deadline and not measured:
            # the signal comes once rank 0 has written a row: something measured to keep
            measured = has_a_row(tmp_path / "out", "p000-r0", 0)
            time.sleep(0.2)
        assert measured, "the ranks never started"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err
    assert "interrupted" in err
    (results,) = (tmp_path / "out").iterdir()
    manifest = json.loads((results / "manifest.json").read_text())
    assert manifest["runs"]["p000-r0"]["status"] == "interrupted"
    assert "p001-r0" not in manifest["runs"]
    assert len(pd.read_parquet(results / "collectives.parquet")) > 0
    assert not [r for r in registry.records() if r.name.startswith(data["name"][:30])]
