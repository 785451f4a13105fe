"""benchmarks/faults.py's sweep: the backend and the chosen fault kinds reach every case."""

from __future__ import annotations

from benchmarks.faults import FAULTS, scenario
from testbed.config.sweep import expand


def test_the_backend_and_a_subset_of_faults_reach_every_case() -> None:
    subset = {n: f for n, f in FAULTS.items() if f["kind"] in ("blackhole", "reset")}
    runs = expand(scenario(["100mbit"], ["10ms"], "kernel", subset, "vk-faults"), "b")
    assert len(runs) == 2
    assert {r.scenario.backend for r in runs} == {"kernel"}
    assert {r.scenario.name for r in runs} == {"vk-faults"}
    assert sorted(r.scenario.faults[0].kind for r in runs) == ["blackhole", "reset"]
    # the default stays what it was: auto, every kind
    assert len(expand(scenario(["100mbit"], ["10ms"]), "b")) == len(FAULTS)
