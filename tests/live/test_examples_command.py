"""The examples of users' own programs in examples/, run unchanged by ``testbed run`` of their
own scenario.yaml: a plain DDP script under torchrun across a WAN blackhole (its step times show
the stall), and a published-style comms benchmark with its own argparse (its numbers agree with
the link). Each asserts on the exit status, the program's own metrics and the WAN's bytes."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import RUN_TAG

import analysis
from testbed.cli import main

pytestmark = pytest.mark.live

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


# Seconds of the self-check's bulk TCP per WAN direction (the CLI's default is 1.0): nothing here
# asserts on the self-check, so the shortest the torchft test also uses.
SELFCHECK = "0.3"


def run_example(name: str, tmp_path: Path, capsys: Any) -> tuple[analysis.Results, Path, str]:
    """``testbed run`` of the example's own scenario file (only its name made the test's): the
    results, the run's directory (its logs) and what the CLI printed."""
    scenario = EXAMPLES / name / "scenario.yaml"
    run_name = f"{RUN_TAG}-{name}"[:32]
    out = tmp_path / "results"
    args = ["run", str(scenario), "--set", f"name={run_name}", "--out", str(out)]
    code = main([*args, "--selfcheck", SELFCHECK])
    printed = capsys.readouterr().out
    assert code == 0, printed
    (results,) = out.iterdir()
    (run_dir,) = (results / "runs").iterdir()
    return analysis.load(results), run_dir, printed


def wan_moved(res: analysis.Results, direction: str) -> float:
    """Bytes the WAN's bottleneck sent in one direction while the workload ran."""
    counter = res.queues[res.queues["direction"] == direction]["bytes"].dropna()
    assert not counter.empty, direction
    return float(counter.max() - counter.min())


def workload_args(name: str) -> dict[str, str]:
    """The example's program arguments after the script (``--steps 220`` -> {"steps": "220"})."""
    argv = yaml.safe_load((EXAMPLES / name / "scenario.yaml").read_text())["workload"]["argv"]
    script = next(i for i, a in enumerate(argv) if a.endswith(".py"))
    rest = argv[script + 1 :]
    return {rest[i].removeprefix("--"): rest[i + 1] for i in range(0, len(rest) - 1, 2)}


@pytest.mark.timeout(300)
def test_torchrun_ddp_example_stalls_the_step_across_the_blackhole(
    root, tmp_path: Path, capsys
) -> None:
    res, run_dir, printed = run_example("torchrun-ddp", tmp_path, capsys)
    assert "expectations: 3 passed, 0 failed" in printed, printed
    summary = res.kind_summaries["command"]
    processes = summary[summary["process"].notna()]
    assert sorted(processes["process"]) == ["host east-h0", "host west-h0"]
    assert (processes["exit_code"] == 0).all()

    events = res.events
    assert set(events["status"]) == {"applied"}, events
    applied = dict(zip(events["action"], events["applied_unix"], strict=True))
    begin, end = float(applied["blackhole"]), float(applied["unblackhole"])
    steps = int(workload_args("torchrun-ddp")["steps"])
    scenario = yaml.safe_load((EXAMPLES / "torchrun-ddp" / "scenario.yaml").read_text())
    anchor = int(scenario["faults"][0]["after"]["iteration"])
    metrics = res.metrics[res.metrics["metric"] == "step_time"]
    fields = [json.loads(f) for f in metrics["fields"]]
    metrics = metrics.assign(rank=[f["rank"] for f in fields], step=[f["step"] for f in fields])
    assert sorted(metrics["rank"].unique()) == [0, 1]
    for rank, rows in metrics.groupby("rank"):
        rows = rows.sort_values("step")
        assert list(rows["step"]) == list(range(steps)), rank
        # a line is read when the step ends: its start is that time less its duration
        ends = rows["time"].to_numpy()
        starts = ends - rows["value"].to_numpy()
        # the blackhole began when node 0's line of step K was read (after: {iteration: K}): after
        # every rank's step K-1 (a step's all-reduce waits for all), before its step K+2
        assert ends[anchor - 1] < begin < ends[anchor + 2], (rank, ends[anchor - 2 :] - begin)
        assert ends[-1] > end + 1.0, f"rank {rank}: training ended before the WAN came back"
        # The step in progress when the WAN comes back: every step all-reduces its gradients
        # across the WAN, so a step that starts during the blackhole cannot end before it is
        # lifted, and the one in progress at its start either stalls itself or ends within its
        # usual time, the next one stalling. So the stalled step began at most one step (the one
        # before it, `before`) after the blackhole began and ends after it was lifted: it lasts
        # at least 2 s - before; less the median step, at least 2 s - before - median (one
        # ordinary step each, ~0.08 s: about 1.8 s longer than the median).
        (at,) = [i for i in range(len(ends)) if starts[i] <= end <= ends[i]]
        stalled, before = float(rows["value"].iloc[at]), float(rows["value"].iloc[at - 1])
        median = statistics.median(rows["value"])
        assert stalled - median >= 2.0 - before - median, (rank, stalled, before, median)
        assert stalled == rows["value"].max(), rank  # the one stall of the run

    # The WAN bytes: the two ranks' gradient all-reduce (gloo's ring, 2 ranks) sends the whole
    # gradient each way each step. Above it: the headers and the other direction's ACKs (under
    # 10%, as for the collectives), the parameters' broadcast from rank 0 when DDP wraps the
    # model, the segments the blackhole dropped (sent again), and 1 MiB for the rendezvous,
    # c10d's store and gloo's set-up.
    gradient = 4 * parameters(run_dir)
    payload = gradient * steps
    ((manifest),) = res.manifests.values()
    (run,) = manifest["runs"].values()
    dropped = {d["direction"]: d["fault_dropped_bytes"] for d in run.get("fault_drops", [])}
    for direction in ("east->west", "west->east"):
        moved = wan_moved(res, direction)
        ceiling = (payload + dropped.get(direction, 0)) * 1.10 + gradient + (1 << 20)
        assert payload <= moved <= ceiling, (direction, moved, payload)


def parameters(run_dir: Path) -> int:
    """The model's parameter count, as train.py's rank 0 prints it."""
    for log in run_dir.glob("host-*.log"):
        for line in log.read_text().splitlines():
            if line.startswith("training ") and " parameters on " in line:
                return int(line.split()[1])
    raise AssertionError("no 'training N parameters' line in the logs")


def test_comms_benchmark_example_runs_unchanged_and_agrees_with_the_link(
    root, tmp_path: Path, capsys
) -> None:
    res, run_dir, printed = run_example("comms-benchmark", tmp_path, capsys)
    assert "expectations: 1 passed, 0 failed" in printed, printed
    summary = res.kind_summaries["command"]
    processes = summary[summary["process"].notna()]
    assert sorted(processes["process"]) == [f"rank {r}" for r in range(4)]
    assert (processes["exit_code"] == 0).all()
    args = workload_args("comms-benchmark")
    sizes = [1 << 12, 1 << 16, 1 << 20, 1 << 22]
    assert args["sizes"] == "4K,64K,1M,4M"
    runs = int(args["warmup"]) + int(args["iters"])

    # its own table, on rank 0's stdout (the log), a row per size
    table = [
        line.split() for line in (run_dir / "rank-0.log").read_text().splitlines()
        if line.startswith("  all_reduce ")
    ]  # fmt: skip
    assert [row[1] for row in table] == ["4K", "64K", "1M", "4M"]

    joined = res.metrics[res.metrics["metric"] == "init_time"]
    assert sorted(joined["rank"]) == list(range(4)) and (joined["value"] > 0).all()
    metrics = res.metrics[res.metrics["metric"] != "init_time"]
    assert set(metrics["metric"]) == {"all_reduce_time"} and len(metrics) == 4 * len(sizes)
    fields = [json.loads(f) for f in metrics["fields"]]
    assert sorted(f["bytes"] for f in fields) == sorted(sizes * 4)
    assert sorted(metrics["rank"]) == sorted(list(range(4)) * len(sizes))
    # Each all-reduce sends 2(n-1)/n of the tensor over every ring hop, two of which cross the
    # WAN, one each way: the bus bandwidth it reports is what one WAN direction carried per
    # second, which the link's 100 Mbit/s (12.5 MB/s) bounds from above.
    assert all(f["busbw_MBps"] <= 100e6 / 8 / 1e6 for f in fields), fields

    # The WAN bytes: gloo's ring (ranks 0, 1 east, 2, 3 west) crosses the WAN once each way,
    # each hop carrying 2(n-1)/n of the tensor per all-reduce, warm-up included. Above it: the
    # headers and the other direction's ACKs (under 10%) and 1 MiB for the store, gloo's set-up
    # and the barriers.
    payload = 2 * 3 / 4 * sum(sizes) * runs
    for direction in ("east->west", "west->east"):
        moved = wan_moved(res, direction)
        assert payload <= moved <= payload * 1.10 + (1 << 20), (direction, moved, payload)


# torchft on CPU: two replica groups (a torchrun each, east and west), the lighthouse a service;
# the partition cuts west off at east's step 60 (clock: workload: east's metric lines' steps).
# The groups must have started training together by then, after two torch imports per host,
# which a saturated host stretches: hence the timing marker.
@pytest.mark.timing
@pytest.mark.timeout(300)
def test_torchft_diloco_example_keeps_the_healthy_group_training_through_a_partition(
    root, tmp_path: Path, capsys
) -> None:
    pytest.importorskip("torchft", reason="the `examples` extra (scripts/setup.sh installs it)")
    import pandas as pd

    name = "torchft-diloco"
    scenario = EXAMPLES / name / "scenario.yaml"
    env = yaml.safe_load(scenario.read_text())["workload"]["env"]
    outer_steps, sync_every = int(env["OUTER_STEPS"]), 10  # train_diloco.py's SYNC_EVERY
    out = tmp_path / "results"
    run_name = f"{RUN_TAG}-{name}"[:32]
    args = ["run", str(scenario), "--set", f"name={run_name}", "--out", str(out)]
    code = main([*args, "--selfcheck", SELFCHECK])
    printed = capsys.readouterr().out
    # the partitioned group's worker gives up (torchft's quorum timeout) and torchrun, without
    # restarts, with it: the run fails naming it; the healthy group finishes
    assert code == 1, printed
    (results,) = out.iterdir()
    manifest = json.loads((results / "manifest.json").read_text())
    ((run_id, run),) = manifest["runs"].items()
    assert run["reason"].startswith("host west-h0 exited with code 1: "), run["reason"]
    codes = {p["process"]: p["exit_code"] for p in run["processes"]}
    assert codes == {"host east-h0": 0, "host west-h0": 1}
    (lighthouse,) = run["services"]
    assert lighthouse["service"] == "lighthouse" and lighthouse["stopped"]
    run_dir = results / "runs" / run_id
    west_log = (run_dir / "host-west-h0.log").read_text()
    assert 'TimeoutError: status: Cancelled, message: "Timeout expired"' in west_log

    res = analysis.load(results)
    events = res.events
    assert set(events["status"]) == {"applied"}, events
    applied = dict(zip(events["action"], events["applied_unix"], strict=True))
    begin, end = float(applied["blackhole"]), float(applied["unblackhole"])
    lines = res.metrics[res.metrics["metric"] == "inner_step_s"]
    fields = pd.DataFrame([json.loads(f) for f in lines["fields"]], index=lines.index)
    lines = pd.concat([lines[["time"]], fields], axis=1).sort_values("time")
    east, west = (lines[lines["replica_group"] == g] for g in (0, 1))
    # both trained together before the partition (each outer step synced between the two)
    assert (east[east["time"] < begin]["participants"] == 2).any()
    assert (west[west["time"] < begin]["participants"] == 2).any()
    # east kept training through it, alone: every inner step, one sync every sync_every steps,
    # and outer steps while west was cut off. A sync may raise the outer step by more than one:
    # a group that joins the quorum behind the other heals from it and takes its step (torchft's
    # Manager sets its step to the quorum's max_step), so east need not run all
    # outer_steps x sync_every inner steps (a run on a loaded host: 110 of 120, west ahead)
    steps = list(east["step"])
    assert steps == list(range(1, len(steps) + 1))
    rose = east["outer_step"].diff().fillna(east["outer_step"].iloc[0]) > 0
    assert list(east[rose]["step"]) == list(range(sync_every, len(steps) + 1, sync_every))
    during = east[(east["time"] >= begin) & (east["time"] <= end)]
    assert not during.empty and (during["participants"] == 1).any()
    assert east["outer_step"].iloc[-1] == outer_steps
    assert (east[east["time"] > end]["participants"] == 1).all()
    # East's longest pause after the partition began: it waits for west at most torchft's own
    # timeout (the Manager's and the quorum's, 5 s in train_diloco.py), not for the partition.
    after = east[east["time"] >= begin]["time"]
    assert after.diff().max() < 5.0, after.diff().max()
    # west trained no more once cut off (its quorum timed out)
    assert (west["time"] <= end).all()
