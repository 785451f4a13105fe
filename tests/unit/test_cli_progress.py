"""testbed run's progress: the phase read from what a run leaves behind (registry phase,
rank-0.state, rank-0.jsonl), the ETA from the plan's estimate, and off a terminal one plain line
per phase change (never a long silence)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from testbed.cli.progress import HEARTBEAT_S, Counting, Eta, Phase, PhaseWatch, counting, phase_of
from testbed.config.loading import load_scenario
from testbed.config.workloads import Workload

COLL = Counting("iteration", 20, warmup=True)


def _state(run_dir: Path, state: str, iteration: int | None = None) -> None:
    doc = {"state": state, "iteration": iteration, "since": 0}
    (run_dir / "rank-0.state").write_text(json.dumps(doc))


def test_phases_of_a_collectives_run(tmp_path: Path) -> None:
    assert phase_of(tmp_path, None, COLL) == Phase("build")
    assert phase_of(tmp_path, "building", COLL) == Phase("build")
    assert phase_of(tmp_path, "up", COLL) == Phase("self-check")
    (tmp_path / "rank-0.log").write_text("")
    assert phase_of(tmp_path, "up", COLL) == Phase("ranks start")
    _state(tmp_path, "setup")
    assert phase_of(tmp_path, "up", COLL) == Phase("ranks start")
    _state(tmp_path, "running")
    assert phase_of(tmp_path, "up", COLL) == Phase("warm-up")
    (tmp_path / "rank-0.jsonl").write_text('{"i": 0}\n' * 7)
    assert phase_of(tmp_path, "up", COLL).text() == "iteration 7/20"
    _state(tmp_path, "done")
    assert phase_of(tmp_path, "up", COLL) == Phase("teardown")


def test_phases_of_training_and_traffic(tmp_path: Path) -> None:
    steps = Counting("step", 50)
    (tmp_path / "rank-0.log").write_text("")
    _state(tmp_path, "running", 9)
    assert phase_of(tmp_path, "up", steps).text() == "step 10/50"
    assert phase_of(tmp_path, None, steps) == Phase("teardown")  # its network removed
    flows = tmp_path / "flows"
    flows.mkdir()
    traffic = Counting(None, None, traffic_only=True)
    assert phase_of(flows, "up", traffic) == Phase("self-check, then traffic")
    assert phase_of(flows, None, traffic, seen_up=True) == Phase("teardown")


def test_counting_from_the_scenario() -> None:
    sc = load_scenario("scenarios/quickstart.yaml")
    w = sc.rank_workload
    assert isinstance(w, Workload)
    got = counting(w)
    assert got.unit == "iteration"
    assert got.n == len(w.collectives) * len(w.algorithms) * len(w.sizes) * w.iterations


def test_eta_from_the_estimate_scaled_by_finished_runs() -> None:
    eta = Eta({"r0": 10.0, "r1": 10.0, "r2": None})
    assert eta.remaining("r0", 4.0, ["r1"]) == 16.0
    assert eta.remaining("r0", 4.0, ["r1", "r2"]) is None  # no estimate, nothing finished
    eta.finished("r0", 20.0)  # took twice its estimate
    assert eta.remaining("r1", 5.0, ["r2"]) == 15.0 + 20.0


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_off_a_terminal_one_line_per_phase_change_and_a_heartbeat(tmp_path: Path) -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=10_000, force_terminal=False)
    clock = Clock()
    net: dict[str, str | None] = {"phase": None}
    watch = PhaseWatch(console, Eta({"r000": 100.0, "r001": 100.0}), ["r000", "r001"], False,
                       clock=clock)  # fmt: skip
    watch.network = lambda sc, run_id: net["phase"]
    watch.start_run("r000", "delay=10ms", tmp_path, COLL, "demo")
    clock.t = 1.0
    watch.poll()  # still building: no second line
    net["phase"] = "up"
    clock.t = 3.0
    watch.poll()
    (tmp_path / "rank-0.log").write_text("")
    _state(tmp_path, "running")
    (tmp_path / "rank-0.jsonl").write_text("{}\n" * 5)
    clock.t = 10.0
    watch.poll()
    (tmp_path / "rank-0.jsonl").write_text("{}\n" * 6)
    clock.t = 11.0
    watch.poll()  # the same phase: quiet
    clock.t = 10.0 + HEARTBEAT_S
    watch.poll()  # but never silent for long
    lines = buf.getvalue().splitlines()
    assert lines == [
        "r000 delay=10ms: build (0 s; ETA 3 min 20 s)",
        "r000 delay=10ms: self-check (3 s; ETA 3 min 17 s)",
        "r000 delay=10ms: iteration 5/20 (10 s; ETA 3 min 10 s)",
        "r000 delay=10ms: iteration 6/20 (25 s; ETA 2 min 55 s)",
    ], lines
    watch.end_run("r000")
    assert watch.durations == {"r000": 25.0}
