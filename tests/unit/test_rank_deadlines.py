"""The rank launcher's deadlines (testbed.experiment.ranks.deadline_decision) on explicit times:
each fires at exactly its time with the reason and the ranks it is about, whatever the machine's
speed; and the real wait loop driven by a ManualClock."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from testbed.core.clock import ManualClock
from testbed.experiment.ranks import (
    Deadlines,
    RankLaunch,
    RankSpec,
    RankTimes,
    Stop,
    Wait,
    deadline_decision,
)
from testbed.plan.ranks import RankSlot

T0 = 1000.0  # the launch's start on the clock the loop reads
EARLY = 1e-6  # s before a deadline: not yet due


def fresh(n: int) -> dict[int, RankTimes]:
    return {r: RankTimes() for r in range(n)}


def test_the_run_deadline_fires_at_exactly_its_time_from_the_start() -> None:
    ranks = fresh(3)
    ranks[0].exited = T0 + 3.0  # finished well: not among the ranks the deadline is about
    deadlines = Deadlines(run=10.0)
    assert deadline_decision(T0, T0, ranks, deadlines) == Wait(T0 + 10.0)
    assert deadline_decision(T0 + 10.0 - EARLY, T0, ranks, deadlines) == Wait(T0 + 10.0)
    assert deadline_decision(T0 + 10.0, T0, ranks, deadlines) == Stop(
        "timeout", "run", T0, T0 + 10.0, (1, 2)
    )


def test_no_deadline_no_stop() -> None:
    ranks = fresh(2)
    assert deadline_decision(T0 + 1e6, T0, ranks, Deadlines(run=None)) == Wait(float("inf"))


def test_the_setup_deadline_names_the_ranks_that_neither_joined_nor_exited() -> None:
    ranks = fresh(3)
    ranks[0].joined = T0 + 2.0
    ranks[2].exited = T0 + 5.0  # an exited rank is past its setup too
    deadlines = Deadlines(run=5.0, setup=30.0)
    # not ready: only the setup deadline runs (the run clock has not started)
    assert deadline_decision(T0 + 30.0 - EARLY, T0, ranks, deadlines) == Wait(T0 + 30.0)
    assert deadline_decision(T0 + 30.0, T0, ranks, deadlines) == Stop(
        "setup-timeout", "setup", T0, T0 + 30.0, (1,)
    )


def test_the_run_deadline_starts_when_the_last_rank_joined() -> None:
    ranks = fresh(2)
    ranks[0].joined = T0 + 2.0
    ranks[1].joined = T0 + 20.0
    deadlines = Deadlines(run=5.0, setup=30.0)
    assert deadline_decision(T0 + 25.0 - EARLY, T0, ranks, deadlines) == Wait(T0 + 25.0)
    assert deadline_decision(T0 + 25.0, T0, ranks, deadlines) == Stop(
        "timeout", "run", T0 + 20.0, T0 + 25.0, (0, 1)
    )
    # once every rank joined the setup deadline is over, past its time too
    assert deadline_decision(T0 + 40.0, T0, ranks, Deadlines(None, setup=30.0)) == Wait(
        float("inf")
    )


def test_progress_resets_the_stall_clock() -> None:
    deadlines = Deadlines(run=None, stall=1.0)
    ranks = fresh(2)
    ranks[1].progress = T0 + 0.1
    ranks[0].progress = T0 + 0.5
    assert deadline_decision(T0 + 1.5, T0, ranks, deadlines) == Stop(
        "stalled", "stall", T0 + 0.5, T0 + 1.5, (0, 1)
    )
    ranks[0].progress = T0 + 1.2  # rank 0 wrote again before the stall time passed
    assert deadline_decision(T0 + 1.5, T0, ranks, deadlines) == Wait(T0 + 2.2)
    assert deadline_decision(T0 + 2.2 - EARLY, T0, ranks, deadlines) == Wait(T0 + 2.2)
    ranks[0].exited = T0 + 2.0  # finished: the silent rank 1 is the one left to stop
    assert deadline_decision(T0 + 2.2, T0, ranks, deadlines) == Stop(
        "stalled", "stall", T0 + 1.2, T0 + 2.2, (1,)
    )


def test_the_stall_clock_starts_when_the_ranks_are_ready() -> None:
    deadlines = Deadlines(run=None, setup=30.0, stall=1.0)
    ranks = fresh(2)
    ranks[0].progress = T0 + 0.5
    ranks[0].joined = T0 + 2.0
    # before every rank joined, silence is the setup deadline's business
    assert deadline_decision(T0 + 10.0, T0, ranks, deadlines) == Wait(T0 + 30.0)
    ranks[1].joined = T0 + 12.0
    assert deadline_decision(T0 + 13.0 - EARLY, T0, ranks, deadlines) == Wait(T0 + 13.0)
    assert deadline_decision(T0 + 13.0, T0, ranks, deadlines) == Stop(
        "stalled", "stall", T0 + 12.0, T0 + 13.0, (0, 1)
    )


def test_a_failed_rank_gives_the_others_exactly_the_grace() -> None:
    deadlines = Deadlines(run=60.0, failure_grace=0.5)
    ranks = fresh(3)
    ranks[1].exited = ranks[1].failed = T0 + 4.0
    ranks[2].exited = ranks[2].failed = T0 + 4.2  # a later failure does not extend the grace
    assert deadline_decision(T0 + 4.5 - EARLY, T0, ranks, deadlines) == Wait(T0 + 4.5)
    assert deadline_decision(T0 + 4.5, T0, ranks, deadlines) == Stop(
        "stopped", "failure_grace", T0 + 4.0, T0 + 4.5, (1,)
    )
    # a rank that exited with 0 is no failure
    ok = fresh(2)
    ok[1].exited = T0 + 4.0
    assert deadline_decision(T0 + 4.5, T0, ok, deadlines) == Wait(T0 + 60.0)


def test_a_late_look_names_the_deadline_that_fell_due_first() -> None:
    ranks = fresh(2)
    ranks[1].exited = ranks[1].failed = T0 + 0.9
    # the grace ends at T0 + 1.4, the run deadline at T0 + 1.0: both passed at T0 + 2
    stop = deadline_decision(T0 + 2.0, T0, ranks, Deadlines(run=1.0, failure_grace=0.5))
    assert isinstance(stop, Stop) and stop.deadline == "run" and stop.ranks == (0,)
    # on a tie the failure names it
    stop = deadline_decision(T0 + 2.0, T0, ranks, Deadlines(run=1.4, failure_grace=0.5))
    assert isinstance(stop, Stop) and stop.deadline == "failure_grace" and stop.ranks == (1,)


# -- the real wait loop on a ManualClock: real processes, time only the test's -----------------
HANG = "import time\ntime.sleep(60)\n"


class LocalNetwork:
    """Starts the ranks on this machine; no link fails."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd

    def popen(self, host: str, argv: list[str], what: str = "", **kwargs: Any) -> subprocess.Popen:
        return subprocess.Popen(argv, cwd=self.cwd, **kwargs)

    def problems(self) -> list[str]:
        return []


def hanging_launch(tmp_path: Path, clock: ManualClock) -> RankLaunch:
    (tmp_path / "hang_rank.py").write_text(HANG)
    ranks = [RankSlot(r, f"h{r}", "east", r) for r in range(2)]
    spec = RankSpec("127.0.0.1", 12345, 2, 60, [r.as_dict() for r in ranks], str(tmp_path))
    tb: Any = LocalNetwork(tmp_path)
    return RankLaunch(tb, ranks, spec, tmp_path, "hang_rank", clock=clock)


def test_the_wait_loop_stops_at_the_deadline_on_its_clock(tmp_path: Path) -> None:
    clock = ManualClock(T0, autojump=True)  # every wait of the loop jumps to its end at once
    run = hanging_launch(tmp_path, clock)
    assert run.run(timeout=10.0) == []
    assert run.started == T0 and run.fired == Stop("timeout", "run", T0, T0 + 10.0, (0, 1))
    assert run.stopped == {0: "timeout", 1: "timeout"}

    clock = ManualClock(T0, autojump=True)
    run = hanging_launch(tmp_path, clock)
    assert run.run(timeout=10.0, setup_timeout=30.0) == []  # the ranks never join
    assert run.fired == Stop("setup-timeout", "setup", T0, T0 + 30.0, (0, 1))
    assert run.stopped == {0: "setup-timeout", 1: "setup-timeout"}
