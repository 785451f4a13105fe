"""The one rank launcher (testbed.experiment.ranks) with real processes: a stand-in network starts
them on this machine (no namespaces, no root), a tiny rank module plays each rank's part. Which
deadline ended a launch is asserted by what the launch recorded (``fired``), never by wall time:
when each deadline falls due is test_rank_deadlines' business, on explicit times."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from testbed.core import errors
from testbed.core.clock import ManualClock
from testbed.experiment.ranks import STACK_HEAD, RankLaunch, RankSpec, Stop
from testbed.experiment.session import SETUP_DEADLINE, rank_problems, setup_deadline
from testbed.live.processes import rank_env
from testbed.plan.ranks import RankSlot

# Each rank does what spec["parts"][rank] says: "ok", "fail" (exit 3 = wrong result),
# "hang", "join" (report joined, then hang), "slow-join" (never report joined), "chatty" (a
# jsonl line every 0.2 s for 2 s, then exit 0), "state-join" / "state-setup" (its state file
# says it joined / is still joining, then hang), "rows-join" (no state file, a jsonl file, hang).
RANK_MODULE = """
import argparse, faulthandler, json, signal, sys, time
from pathlib import Path
p = argparse.ArgumentParser()
p.add_argument("--spec"); p.add_argument("--rank", type=int)
a = p.parse_args()
faulthandler.register(signal.SIGUSR1, all_threads=True)
spec = json.loads(Path(a.spec).read_text())
part = spec["parts"][a.rank]
out = Path(spec["out_dir"])
print(f"rank {a.rank} of {spec['world_size']} at {spec['master_addr']}:{spec['master_port']}")
if part == "ok":
    sys.exit(0)
if part == "fail":
    time.sleep(0.2)
    sys.exit(3)  # traffic.exit_codes.EXIT_WRONG
if part == "join":
    (out / f"rank-{a.rank}.joined").write_text("1")
if part.startswith("state-"):
    from traffic.entry import write_state
    write_state(out, a.rank, "running" if part == "state-join" else "setup", 7)
if part == "rows-join":
    (out / f"rank-{a.rank}.jsonl").write_text("")
if part == "chatty":
    with open(out / f"rank-{a.rank}.jsonl", "w") as f:
        for i in range(10):
            f.write("{}\\n"); f.flush(); time.sleep(0.2)
    sys.exit(0)
def hang_here():
    time.sleep(60)
hang_here()
"""


class LocalNetwork:
    """Starts the ranks on this machine; ``problems`` can be set to play a failed link."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.started: list[str] = []
        self.link_problems: list[str] = []

    def popen(self, host: str, argv: list[str], what: str = "", **kwargs: Any) -> subprocess.Popen:
        self.started.append(what)
        return subprocess.Popen(argv, cwd=self.cwd, **kwargs)

    def namespace(self, host: str) -> str:
        raise AssertionError("not used: the spec is built by hand here")

    def problems(self) -> list[str]:
        return list(self.link_problems)


def launch(tmp_path: Path, parts: list[str], **kwargs: Any) -> tuple[RankLaunch, LocalNetwork]:
    (tmp_path / "fake_rank.py").write_text(RANK_MODULE)
    ranks = [RankSlot(r, f"h{r}", "east", r) for r in range(len(parts))]
    spec = RankSpec(
        master_addr="127.0.0.1",
        master_port=12345,
        world_size=len(ranks),
        timeout_s=60,
        ranks=[r.as_dict() for r in ranks],
        out_dir=str(tmp_path),
        workload={"parts": parts},
    )
    tb = LocalNetwork(tmp_path)
    network: Any = tb  # the part of testbed.live.protocol.LiveNetwork a launch uses
    return RankLaunch(network, ranks, spec, tmp_path, "fake_rank", **kwargs), tb


def test_all_ranks_finish(tmp_path):
    run, tb = launch(tmp_path, ["ok", "ok", "ok"])
    assert run.run(timeout=30) == []
    assert run.codes == {0: 0, 1: 0, 2: 0} and run.stopped == {} and run.fired is None
    assert tb.started == ["rank 0", "rank 1", "rank 2"]
    spec = json.loads((tmp_path / "spec.json").read_text())
    assert spec["parts"] == ["ok", "ok", "ok"] and spec["world_size"] == 3
    assert "workload" not in spec  # the workload's keys sit beside the common ones
    assert run.log(1).startswith("rank 1 of 3 at 127.0.0.1:12345")


def test_a_failed_rank_stops_the_others_after_the_grace(tmp_path):
    run, _ = launch(tmp_path, ["hang", "fail", "hang"])
    assert run.run(timeout=60, failure_grace=0.5) == []
    # the grace, not the deadline, from rank 1's failure
    assert run.fired is not None and run.fired.deadline == "failure_grace"
    assert run.fired.ranks == (1,) and run.fired.since == run.times[1].failed
    assert run.codes[1] == 3
    assert run.stopped == {0: "stopped", 2: "stopped"}
    # the stopped ranks were asked for their stacks before they were killed
    assert STACK_HEAD.search(run.log(0)) and "hang_here" in run.log(0)
    assert run.codes[0] is not None and run.codes[0] < 0
    assert rank_problems(run, 60) == [
        "rank 1 (h1) produced a wrong result",
        "rank 0 (h0) stopped after another rank failed",
        "rank 2 (h2) stopped after another rank failed",
    ]


def test_deadline(tmp_path):
    run, _ = launch(tmp_path, ["ok", "hang"])
    run.run(timeout=1.0)
    # the run deadline, 1 s from the start (no setup deadline), about the rank still running
    assert run.started is not None
    assert run.fired == Stop("timeout", "run", run.started, run.started + 1.0, (1,))
    assert run.stopped == {1: "timeout"} and run.codes[0] == 0
    assert rank_problems(run, 1.0) == ["rank 1 (h1) did not finish within 1s"]


def test_setup_deadline_then_the_iterations_deadline(tmp_path):
    def joined(rank: int) -> bool:
        return (tmp_path / f"rank-{rank}.joined").exists()

    run, _ = launch(tmp_path, ["join", "slow-join"], joined=joined)
    run.run(timeout=30, setup_timeout=1.0)
    assert run.stopped == {0: "setup-timeout", 1: "setup-timeout"}
    assert run.fired is not None and run.fired.deadline == "setup" and 1 in run.fired.ranks

    run, _ = launch(tmp_path, ["join", "join"], joined=joined, state=lambda r: {"at": r})
    run.run(timeout=1.0, setup_timeout=30)
    # both joined: the iterations' deadline, from the later join, ended it
    assert run.fired is not None and run.fired.deadline == "run"
    joins = [t.joined for t in run.times.values()]
    assert run.fired.since == max(j for j in joins if j is not None) and None not in joins
    assert run.stopped == {0: "timeout", 1: "timeout"}
    assert run.stopped_state == {0: {"at": 0}, 1: {"at": 1}}


def test_stall_deadline_follows_progress(tmp_path):
    # no overall deadline: a rank that keeps writing runs past the stall time, a silent one is
    # stopped once the stall time passed without anyone writing
    run, _ = launch(tmp_path, ["chatty", "join"])
    run.run(None, stall=1.0)
    # the chatty rank wrote for 2 s (past the stall time) and finished; the stall clock then
    # ran from its last write, and stopped the silent rank
    assert run.codes[0] == 0 and run.stopped == {1: "stalled"}
    assert run.fired is not None and run.fired.deadline == "stall" and run.fired.ranks == (1,)
    assert run.fired.since == run.times[0].progress
    problems = rank_problems(run, 1.0)
    assert len(problems) == 1 and "rank 1 (h1) made no progress" in problems[0]


def run_once_written(run: RankLaunch, clock: ManualClock, files: list[Path], **kw: Any) -> None:
    """``run.run(**kw)`` on ``clock``, whose time stands still until every one of ``files``
    exists (the ranks got that far, however slowly this machine starts them), then jumps from
    wait to wait: the deadlines are decided on the clock, never on how busy the host is."""
    worker = threading.Thread(target=run.run, kwargs=kw)
    worker.start()
    give_up = time.monotonic() + 60  # real seconds for three Python processes to start
    while not all(f.exists() for f in files):
        assert time.monotonic() < give_up, [f.name for f in files if not f.exists()]
        time.sleep(0.02)
    clock.autojump = True
    clock.advance(1.0)  # ends the wait in progress; the following ones jump
    worker.join(60)
    assert not worker.is_alive()


def test_by_default_the_state_files_say_who_joined_and_where_a_rank_was(tmp_path):
    # traffic.entry's rank-status protocol: joined once the state is past "setup"; a program
    # without a state file counts as joined once its rows file exists
    clock = ManualClock()
    run, _ = launch(tmp_path, ["state-join", "rows-join", "state-setup"], clock=clock)
    files = [tmp_path / "rank-0.state", tmp_path / "rank-1.jsonl", tmp_path / "rank-2.state"]
    run_once_written(run, clock, files, timeout=30, setup_timeout=1.0)
    assert run.stopped == {0: "setup-timeout", 1: "setup-timeout", 2: "setup-timeout"}
    assert run.fired is not None and run.fired.deadline == "setup" and 2 in run.fired.ranks
    assert run.stopped_state[0]["state"] == "running" and run.stopped_state[0]["iteration"] == 7
    assert run.stopped_state[1] == {"state": None, "iteration": None}

    for f in files:
        f.unlink()
    clock = ManualClock()
    run, _ = launch(tmp_path, ["state-join", "rows-join"], clock=clock)
    run_once_written(run, clock, files[:2], timeout=1.0, setup_timeout=30)
    # both joined: the iterations' deadline ended it, not the setup deadline
    assert run.fired is not None and run.fired.deadline == "run"
    assert run.stopped == {0: "timeout", 1: "timeout"}


def test_the_state_file_protocol(tmp_path):
    from traffic.entry import has_joined, read_state, rows_path, state_path, write_state

    assert read_state(tmp_path, 0) == {"state": None, "iteration": None}
    assert not has_joined(tmp_path, 0)
    rows_path(tmp_path, 0).write_text("")
    assert has_joined(tmp_path, 0)  # no state file: its rows file stands for it
    write_state(tmp_path, 0, "setup")
    assert not has_joined(tmp_path, 0)  # a state file decides
    write_state(tmp_path, 0, "barrier", 3)  # a finer state of traffic.user_rank: joined
    assert has_joined(tmp_path, 0)
    doc = json.loads(state_path(tmp_path, 0).read_text())
    assert doc["state"] == "barrier" and doc["iteration"] == 3 and doc["since"] > 0
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp left


def test_a_failed_link_ends_the_launch(tmp_path):
    run, tb = launch(tmp_path, ["hang", "hang"])
    tb.link_problems = ["delay line in ns-x exited (code 1)"]
    assert run.run(timeout=30) == ["delay line in ns-x exited (code 1)"]
    assert run.stopped == {0: "link", 1: "link"} and run.fired is None  # no deadline
    assert rank_problems(run, 30) == []  # the link explains it; the ranks add nothing


def test_the_rank_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "3")
    env = rank_env()
    assert "LOCAL_RANK" not in env and env["GLOO_SOCKET_IFNAME"] == "eth0"
    assert env["PYTHONUNBUFFERED"] == "1" and env["PATH"] == os.environ["PATH"]
    run, _ = launch(tmp_path, ["ok"])
    assert run.argv(0)[:3] == [sys.executable, "-m", "fake_rank"]  # this very interpreter


def test_without_torch_no_rank_starts_and_the_error_says_how_to_install_it(tmp_path, monkeypatch):
    # The `ranks` extra is optional (report/compare need no torch): hide torch from the check.
    import importlib.util

    from testbed.experiment.ranks import require_torch

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
    )
    with pytest.raises(errors.TestbedError, match=r"ranks need the `ranks` extra \(pip install"):
        require_torch()


def test_the_setup_deadline_is_180_s_unless_the_environment_says(monkeypatch) -> None:
    monkeypatch.delenv("TESTBED_SETUP_DEADLINE", raising=False)
    assert setup_deadline() == SETUP_DEADLINE == 180.0
    monkeypatch.setenv("TESTBED_SETUP_DEADLINE", "900")  # a TCG guest's ranks (docs/vm.md)
    assert setup_deadline() == 900.0
    monkeypatch.setenv("TESTBED_SETUP_DEADLINE", "soon")
    with pytest.raises(errors.TestbedError, match="TESTBED_SETUP_DEADLINE='soon'"):
        setup_deadline()
