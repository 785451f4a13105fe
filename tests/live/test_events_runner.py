"""Live tests of the runner side of a changing WAN: real ranks announce their iterations, the
event runner applies a "set" through the link backend at its iteration, a blackhole longer than
the process group timeout fails the run with gloo's text per rank, and bulk traffic records its
goodput. Userspace backend (this kernel has no sch_netem).

The set test hands the runner its own timeline (``experiment.timeline_for``): a schedule step
cannot be anchored to an iteration; the blackhole comes from the scenario's ``faults``.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from composed import PRESET, PRESET_CAPACITY
from helpers import RUN_TAG, scenario

from testbed.config.sweep import expand
from testbed.core.frames import GOODPUT_FACTOR
from testbed.experiment import dynamics as experiment
from testbed.experiment.sweep import Experiment
from testbed.plan.model import NetworkPlan
from testbed.plan.timeline import Change, Event, Timeline

pytestmark = pytest.mark.live


def workload_scenario(name: str, delay: str, **workload) -> dict:
    data = scenario(
        wan=[{"between": ["east", "west"], "rate": "100mbit", "delay": delay}],
        backend="userspace",
    )
    data["name"] = f"{RUN_TAG}-{name}"[:32]
    data["workload"] = {
        "collectives": ["all_reduce"],
        "sizes": ["64KiB"],
        "warmup": 1,
        "timeout": "60s",
        **workload,
    }
    return data


def with_timeline(monkeypatch, make: Callable[[NetworkPlan], Timeline]) -> None:
    """The run gets ``make(plan)`` as its timeline (build_timeline's place)."""
    monkeypatch.setattr(
        experiment, "timeline_for", lambda sc, plan, source: make(plan), raising=True
    )


def set_delay(plan: NetworkPlan, at: float, delay: float, after: int | None) -> Event:
    changes = tuple(
        Change(d.name, d.rate, d.buffer, delay, d.jitter, d.loss, d.reorder) for d in plan.wan
    )
    return Event(
        at, after, "set", "schedule", None, "east-west", None,
        tuple(d.name for d in plan.wan), changes, f"delay {delay * 1e3:g} ms",
    )  # fmt: skip


def jsonl(run_dir: Path, rank: int) -> list[dict]:
    return [json.loads(line) for line in (run_dir / f"rank-{rank}.jsonl").read_text().splitlines()]


@pytest.mark.timing
def test_iterations_are_announced_and_a_set_moves_the_collective(root, tmp_path, monkeypatch):
    data = workload_scenario("ev-set", "10ms", iterations=6)
    with_timeline(
        monkeypatch,
        lambda plan: Timeline(
            (
                set_delay(plan, 0.0, 0.010, None),  # at the origin, changes nothing
                set_delay(plan, 0.0, 0.030, 2),  # 10 ms -> 30 ms when iteration 2 starts
            ),
            "workload",
            None,
        ),
    )
    exp = Experiment(expand(data, "test"), "test", tmp_path, resume=False)
    assert exp.run(selfcheck_seconds=0.5), exp.manifest["runs"]["p000-r0"]["reason"]
    path = exp.results.path
    ev = pd.read_parquet(path / "events.parquet").sort_values("event")
    # a set has one row per direction, with that direction's new state
    assert sorted(ev[ev["event"] == 1]["direction"]) == ["east->west", "west->east"]
    assert (ev[ev["event"] == 1]["delay_s"] == 0.030).all()
    ev = ev.drop_duplicates("event")
    assert list(ev["status"]) == ["applied", "applied"], ev.to_dict("records")
    rank0 = {r["op"]: r for r in jsonl(path / "runs" / "p000-r0", 0)}
    # the origin is the first timed operation's start, iteration 2's start anchors the set
    # (rank 0 announces right before it takes the row's start: within a few ms)
    # Both stamps are rank 0's own clock (the announcer sends its wall time), a few statements
    # apart (us); 5 ms covers a preemption between them on a busy host. No measured spread.
    assert ev.iloc[0]["scheduled_unix"] == pytest.approx(rank0[0]["start"], abs=0.005)
    assert ev.iloc[1]["scheduled_unix"] == pytest.approx(rank0[2]["start"], abs=0.005)
    assert ev.iloc[0]["operation"] == "nothing changed"
    assert ev.iloc[1]["operation"].startswith("set_impairments east->west delay")
    late = ev.iloc[1]["late_s"]
    # the SIGHUP reload, acknowledged: a few ms on a quiet machine; the 20 ms goal is a
    # benchmark's (its tail reached 49 ms with a QEMU guest beside), here only "soon".
    # LATE_S is 20 ms; RESULTS.md "WAN faults": p50 1.58, p99 8.1, max 9.9 ms; 0.2 s is 4x the
    # 49 ms tail. late_s is on the monotonic clock (ns), after the SPIN (2 ms) spin-wait.
    assert 0 <= late < 0.2, late
    assert ev.iloc[1]["backend"] == "userspace"
    # the collective slows down: every ring step crosses the WAN one way, now 20 ms longer
    df = pd.read_parquet(path / "collectives.parquet")
    slowest = df.groupby("op")["seconds"].max()
    before = statistics.median(slowest[[0, 1]])
    after = statistics.median(slowest[[3, 4, 5]])
    # at least one crossing is 20 ms longer one way; a ring of 4 waits on the WAN in each of
    # its 2(N-1) = 6 steps, so the expected rise is ~6x this. Rank timers: us.
    assert after - before > 0.020, (before, after)
    assert (df["outcome"] == "ok").all()
    assert exp.manifest["runs"]["p000-r0"]["events"]["applied"] == 2


@pytest.mark.timing
def test_a_blackhole_longer_than_the_timeout_fails_the_run_with_gloos_text(root, tmp_path):
    timeout = 3.0
    data = workload_scenario("ev-pg", "2ms", iterations=200, timeout=f"{timeout:g}s")
    # the link on a preset (its rate, queue and loss; the 2 ms written over its delay), and a
    # flap (twice 100 ms down, 100 ms up) in iteration 0 that the collective rides out: its
    # op 0 took 0.73 s where op 1 took 0.04 s (measured on 2 cores, load ~4), the flap's cost
    data["wan"] = [{"between": ["east", "west"], "preset": PRESET, "delay": "2ms"}]
    data["faults"] = [
        {"kind": "flap", "link": "east-west", "after": {"iteration": 0},
         "down": "100ms", "up": "100ms", "count": 2},
        {"kind": "blackhole", "link": "east-west", "after": {"iteration": 2}, "duration": "60s"},
    ]  # fmt: skip
    exp = Experiment(expand(data, "test"), "test", tmp_path, resume=False)
    assert not exp.run(selfcheck_seconds=0.5)
    run = exp.manifest["runs"]["p000-r0"]
    assert run["status"] == "failed"
    assert "Timed out waiting" in run["reason"], run["reason"]
    path = exp.results.path
    links = pd.read_parquet(path / "links.parquet")
    (row,) = links[links["direction"] == "east->west"].to_dict("records")
    assert abs(row["capacity_configured_bps"] - PRESET_CAPACITY) < 1, row
    assert abs(row["delay_configured_s"] - 0.002) < 1e-9, row
    ev = pd.read_parquet(path / "events.parquet")
    flap = ev[ev["fault"] == 0].drop_duplicates("event").sort_values("applied_unix")
    assert list(flap["action"]) == ["link_down", "link_up"] * 2, flap
    assert set(flap["status"]) == {"applied"}, flap[["action", "status", "error"]]
    # each down held 100 ms: the ups begin 100 ms after the downs were scheduled (the
    # scheduled times are exact; 1 ms is float rounding)
    gaps = [round(d, 3) for d in flap["scheduled_unix"].diff().iloc[1:]]
    assert gaps == [0.1, 0.1, 0.1], flap["scheduled_unix"]
    hole = ev[ev["fault"] == 1]
    on = hole[hole["status"] == "applied"].iloc[0]
    assert on["action"] == "blackhole" and on["error"] is None
    # undone at the end (nothing left in force for teardown)
    assert list(ev[ev["status"] == "undone"]["action"]) == ["unblackhole"]
    df = pd.read_parquet(path / "collectives.parquet")
    failed = df[df["outcome"] != "ok"]
    assert set(failed["rank"]) == {0, 1, 2, 3}, df.tail(8).to_dict("records")
    timed_out = failed[failed["outcome"] == "timeout"]
    assert len(timed_out) and timed_out["error"].str.contains("Timed out waiting").all()
    assert set(failed["error_type"]) and failed["error"].str.len().min() > 0
    # every rank failed within timeout + 5 s of the blackhole: gloo's timer runs from each
    # op's start (<= the blackhole + one 64 KiB op, tens of ms), so ~3 s is expected; the
    # 5 s is slack for a loaded host's teardown, ~50x the op's own spread
    ended = failed["start"] + failed["seconds"]
    assert (ended - on["applied_unix"]).max() < timeout + 5, ended - on["applied_unix"]
    # the operations before it are kept, ok
    assert (df[df["op"] < 2]["outcome"] == "ok").all() and len(df[df["op"] < 2]) == 8


@pytest.mark.timing
def test_tcp_user_timeout_fails_a_blackholed_rank_before_the_operation_timeout(root, tmp_path):
    """tcp.user_timeout (TCP_USER_TIMEOUT on the ranks' sockets): a rank with data unacknowledged
    through a blackhole gets ETIMEDOUT from its kernel after that long, long before gloo's
    operation timeout (60 s here); without it only the operation timeout would end the wait.

    Two ranks, so that the connection the kernel fails is the one the rank's operation waits on:
    gloo fails only the operations pending on the failed pair, and with four ranks a rank whose
    WAN connection failed may be waiting on a local pair and sit out the operation timeout
    (seen once in CI: every rank ended at 60 s; docs/faults.md)."""
    data = workload_scenario("ev-uto", "2ms", iterations=200, timeout="60s")
    data["clusters"] = {"east": {"hosts": 1}, "west": {"hosts": 1}}
    data["tcp"] = {"user_timeout": "1s"}
    # a flow planned far beyond the workload: stopped when the workload ends, and said so
    data["traffic"] = [{"kind": "bulk", "from": "east-h0", "to": "west-h0", "duration": "600s"}]
    data["faults"] = [
        {"kind": "blackhole", "link": "east-west", "after": {"iteration": 2}, "duration": "60s"}
    ]
    exp = Experiment(expand(data, "test"), "test", tmp_path, resume=False)
    assert not exp.run(selfcheck_seconds=0.5)
    path = exp.results.path
    ev = pd.read_parquet(path / "events.parquet")
    on = ev[ev["status"] == "applied"].iloc[0]
    df = pd.read_parquet(path / "collectives.parquet")
    failed = df[df["outcome"] != "ok"]
    assert len(failed), df.tail(8).to_dict("records")
    first = failed.assign(ended=failed["start"] + failed["seconds"]).sort_values("ended").iloc[0]
    # the kernel's timer: 1 s of unacknowledged data (+ the probe it times from, the loaded
    # machine); the operation timeout would be 60 s
    seen = failed.assign(after=failed["start"] + failed["seconds"] - on["applied_unix"])
    # the kernel clamps the RTO to TCP_USER_TIMEOUT: ETIMEDOUT ~1 s after the oldest unacked
    # send, which is <= one op (ms at 2 ms one way) after the blackhole; +4 s is loaded-host slack
    assert first["ended"] - on["applied_unix"] < 1.0 + 4.0, seen[["rank", "after", "error"]]
    assert "timed out" in first["error"].lower(), first["error"]
    assert "Timed out waiting" not in first["error"]  # not gloo's operation timeout
    assert exp.manifest["runs"]["p000-r0"]["traffic_cut"] == [0]


@pytest.mark.timing
def test_training_steps_are_announced_and_a_failed_step_is_recorded(root, tmp_path, monkeypatch):
    monkeypatch.setenv("TESTBED_INJECT_FAULT", "train:rank:1:step:4")
    data = {
        "name": f"{RUN_TAG}-ev-train"[:32],
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": [{"between": ["east", "west"], "rate": "1gbit", "delay": "5ms"}],
        "backend": "userspace",
        "workload": {"kind": "training", "algorithm": "ddp", "steps": 8, "timeout": "60s"},
    }
    with_timeline(
        monkeypatch,
        lambda plan: Timeline(
            tuple(set_delay(plan, 0.0, 0.005, after) for after in (None, 2, 6)),
            "workload",
            None,
        ),
    )
    exp = Experiment(expand(data, "test"), "test", tmp_path, resume=False)
    assert not exp.run(selfcheck_seconds=0.3)
    path = exp.results.path
    df = pd.read_parquet(path / "training.parquet")
    steps = {(r["rank"], r["step"]): r for r in df.to_dict("records")}
    ev = pd.read_parquet(path / "events.parquet").sort_values("event").drop_duplicates("event")
    # origin = step 0's start, the anchored event = step 2's start (rank 0 announces them);
    # 5 ms as in the collectives test: both stamps are rank 0's clock, statements apart
    assert ev.iloc[0]["scheduled_unix"] == pytest.approx(steps[(0, 0)]["start"], abs=0.005)
    assert ev.iloc[1]["scheduled_unix"] == pytest.approx(steps[(0, 2)]["start"], abs=0.005)
    # step 6 never started: its event was skipped
    assert list(ev["status"]) == ["applied", "applied", "skipped"]
    failed = df[df["outcome"] != "ok"]
    assert (1, 4) in set(zip(failed["rank"], failed["step"], strict=True))
    assert "injected failure at step 4" in steps[(1, 4)]["error"]


@pytest.mark.timing
def test_bulk_traffic_alone_records_its_goodput(root, tmp_path):
    data = scenario(wan=[{"between": ["east", "west"], "rate": "100mbit", "delay": "5ms"}])
    data["name"] = f"{RUN_TAG}-ev-bulk"[:32]
    data["backend"] = "userspace"
    data["traffic"] = [
        {"kind": "bulk", "from": "east-h0", "to": "west-h1", "congestion": "cubic",
         "start": "0.5s", "duration": "3s"},
    ]  # fmt: skip
    exp = Experiment(expand(data, "test"), "test", tmp_path, resume=False)
    assert exp.run(selfcheck_seconds=0.5), exp.manifest["runs"]["p000-r0"]["reason"]
    g = pd.read_parquet(exp.results.path / "flows_goodput.parquet")
    assert set(g["flow"]) == {0} and set(g["from"]) == {"east-h0"} and set(g["to"]) == {"west-h1"}
    assert set(g["congestion"]) == {"cubic"}
    assert 25 <= len(g) <= 40  # 3 s in 100 ms samples (+ start-up, + the last partial one)
    assert g["t"].is_monotonic_increasing
    # the sink samples on a 0.1 s monotonic grid (a late wake-up keeps the grid): the median
    # window is the period + a recv timeout's wake-up (~ms); 20 ms is a fifth of it
    assert g["seconds"].median() == pytest.approx(0.1, abs=0.02)
    steady = g["goodput_bps"].iloc[10:-2]  # after slow start, before the end
    ceiling = 100e6 * GOODPUT_FACTOR
    # one 64 KiB read is 5.2 Mbit/s of a 0.1 s sample (5.5% of the ceiling): single samples
    # can pass 1.05, the median of ~18 cannot unless most windows end alike. 0.6: cubic's
    # sawtooth in a 1-BDP buffer; no RESULTS.md table measures this flow's samples.
    assert 0.6 * ceiling < steady.median() < 1.05 * ceiling, steady.describe()
    # the mean over ~3 s resolves 64 KiB + HTB's 66 KB burst = 0.35 Mbit/s (0.4%): 1.05 admits
    # a 5% leak that SELFCHECK_LEAK (1.01) would flag
    assert g["bytes"].sum() * 8 / g["seconds"].sum() < 1.05 * ceiling
