"""Live training across the emulated clusters: real namespaces, real torch ranks training the
built-in char model, WAN bytes from the link's own counters."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers import RUN_TAG

from testbed.config.sweep import expand
from testbed.experiment.sweep import Experiment

pytestmark = pytest.mark.live
UNIFORM_LOSS = 4.635  # ln(103): a model that learned nothing


def training_scenario(name: str, **workload) -> dict:
    return {
        "name": f"{RUN_TAG}-{name}"[:32],
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": [{"between": ["east", "west"], "rate": "1gbit", "delay": "5ms"}],
        "workload": {
            "kind": "training",
            "ranks_per_host": 2,
            "steps": 30,
            "eval_every": 10,
            "lr": 0.003,
            "diloco": {"inner_steps": 10},
            "streaming": {"fragments": 2, "overlap_steps": 1},
            "localsgd": {"period": 10},
            "timeout": "120s",
            **workload,
        },
    }


# measured 99-130 s in full-suite runs on 2 cores: 4x and more for a busy host
@pytest.mark.timeout(480)
@pytest.mark.timing
def test_every_algorithm_trains_and_diloco_sends_one_hth_of_ddp(root, tmp_path):
    data = training_scenario("train")
    data["sweep"] = {
        "workload.algorithm": [
            "ddp",
            "diloco",
            "localsgd",
            "streaming-diloco",
            "hierarchical",
            "parameter-server",
        ]
    }
    exp = Experiment(expand(data, "test"), "test", tmp_path, resume=False)
    ok = exp.run(selfcheck_seconds=0.3)
    runs = exp.manifest["runs"]
    assert ok, {k: r["reason"] for k, r in runs.items() if r["status"] != "ok"}
    summary = {s["algorithm"]: s for s in exp.manifest["summary"]}
    for algorithm, s in summary.items():
        assert s["steps"] == 30
        assert s["final_loss"] < UNIFORM_LOSS - 1.0, (algorithm, s["final_loss"])
        assert s["wan_bytes_per_step"] > 0
    df = pd.read_parquet(exp.results.path / "training.parquet")
    assert set(df["rank"]) == {0, 1, 2, 3}
    assert {"loss", "val_loss", "wall_s", "compute_s", "comm_s", "wait_s"} <= set(df.columns)
    # every rank of every run wrote every step
    assert (df.groupby("run_id")["step"].count() == 4 * 30).all()
    ratio = summary["diloco"]["wan_bytes_per_step"] / summary["ddp"]["wan_bytes_per_step"]
    # bytes, not times: the WAN counters add headers and ACKs (and DiLoCo's outer step moves
    # the model, not gradients); RESULTS.md "Training across the WAN", expect[0]: -9.2% at H=10
    assert ratio == pytest.approx(1 / 10, rel=0.15)
    # a synchronous parameter server averages the same gradients for the same AdamW: DDP's loss
    assert summary["parameter-server"]["final_loss"] == pytest.approx(
        summary["ddp"]["final_loss"], abs=0.01
    )
    # servers in the east: both west workers push and pull the whole model across the WAN
    # (2 S each way) where DDP's 4-rank ring sends 1.5 S each way
    ps_ratio = (
        summary["parameter-server"]["wan_bytes_per_step"] / summary["ddp"]["wan_bytes_per_step"]
    )
    assert ps_ratio == pytest.approx(4 / 3, rel=0.1)
    # DDP's own timers came back from its logger, and its exposed comm is a positive time
    own = summary["ddp"]["ddp_exposed_comm_per_step"]
    # exposed comm is part of a step; DDP's logger times it on its own stamps, which read up to
    # 1.003x the trainer's step p50 (RESULTS.md "Training across the WAN": 324.7 vs 323.6 ms):
    # 2 x the step's p95 is far above that, a sign check more than a tolerance
    assert own is not None and 0 < own < summary["ddp"]["step_time_p95"] * 2
    assert summary["diloco"]["ddp_exposed_comm_per_step"] is None
    # the streaming variant sends the same bytes in fragments
    streaming = summary["streaming-diloco"]["wan_bytes_per_step"]
    assert streaming == pytest.approx(summary["diloco"]["wan_bytes_per_step"], rel=0.15)


def test_identical_seeds_give_identical_losses(root, tmp_path):
    data = training_scenario("seeds", algorithm="diloco", steps=12, eval_every=6, ranks_per_host=1)
    data["repeat"] = 2
    exp = Experiment(expand(data, "test"), "test", tmp_path, resume=False)
    assert exp.run(selfcheck_seconds=0.3)
    df = pd.read_parquet(exp.results.path / "training.parquet")
    a, b = (g.sort_values(["rank", "step"]) for _, g in df.groupby("run_id"))
    assert a["loss"].tolist() == b["loss"].tolist()
    assert a["val_loss"].dropna().tolist() == b["val_loss"].dropna().tolist()


def test_a_rank_that_dies_fails_the_run_and_keeps_the_steps_so_far(root, tmp_path, monkeypatch):
    monkeypatch.setenv("TESTBED_INJECT_FAULT", "train:rank:1:step:5")
    data = training_scenario("dies", algorithm="ddp", steps=20, ranks_per_host=1, timeout="60s")
    exp = Experiment(expand(data, "test"), "test", tmp_path, resume=False)
    assert not exp.run(selfcheck_seconds=0.3)
    run = exp.manifest["runs"]["p000-r0"]
    assert run["status"] == "failed"
    assert "rank 1" in run["reason"] and "injected failure at step 5" in run["reason"]
    df = pd.read_parquet(exp.results.path / "training.parquet")
    ok = df[df["outcome"] == "ok"]
    assert sorted(ok[ok["rank"] == 1]["step"]) == [0, 1, 2, 3, 4]
    assert ok[ok["rank"] == 0]["step"].max() >= 4  # rank 0 measured its steps until it failed
    # the failed step is a row: rank 1's own error, then its peers' (the pair closed under them)
    failed = df[df["outcome"] != "ok"]
    (mine,) = failed[failed["rank"] == 1].to_dict("records")
    assert mine["step"] == 5 and mine["error_type"] == "RuntimeError"
    assert "injected failure at step 5" in mine["error"] and mine["outcome"] == "error"
    assert failed["error"].str.len().min() > 0
