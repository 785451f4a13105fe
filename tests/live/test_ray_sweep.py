"""Live tests of sharded sweeps on Ray: a real Ray cluster of a head and two nodes
on this machine (``ray.cluster_utils.Cluster``: separate raylets, one ``testbed`` resource
each), a sweep whose points run as tasks on them; a node that dies mid-point has its point
retried on the other node. The sweep runs on the stand-in machines the live tests share
(tests/live/conftest.py); the node that dies is of a cluster of its own."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from testbed.config.sweep import expand
from testbed.experiment.sweep import Experiment
from testbed.net import build, registry

pytestmark = pytest.mark.live
ray = pytest.importorskip("ray", reason="the [ray] extra is not installed")


def bulk(name: str, seconds: str = "1s", rates: tuple[str, ...] = ("50mbit", "100mbit")) -> dict:
    return {
        "name": name,
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": [{"between": ["east", "west"], "rate": rates[0], "delay": "5ms"}],
        "traffic": [{"kind": "bulk", "from": "east-h0", "to": "west-h0", "duration": seconds}],
        **({"sweep": {"wan[0].rate": list(rates)}} if len(rates) > 1 else {}),
    }


@pytest.fixture
def cluster(root):
    """A cluster of its own, whose node the test may take down (the shared stand-in machines,
    tests/live/conftest.py, must outlive the test)."""
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        nodes = [c.add_node(num_cpus=0, resources={"testbed": 1}) for _ in range(2)]
        c.wait_for_nodes()
        yield c, nodes
    finally:
        c.shutdown()


RATES = ("50mbit", "100mbit", "150mbit", "200mbit")


def summary_rows(exp: Experiment) -> list[tuple]:
    """What a run's summary says, without its measured numbers: parameters, status, flows."""
    runs = exp.manifest["runs"]
    return sorted(
        (s["run_id"], s["wan[0].rate"], runs[s["run_id"]]["status"], s.get("bulk_flows"))
        for s in exp.summaries
    )


# measured 34 s in the Ray phase at load 5-10 on 2 cores, 55-61 s at load 23-25 (42-43 s with
# the local reference after the sweep, on a quiet host): 4x and more for a busy host
@pytest.mark.timeout(240)
def test_a_sweep_on_two_nodes_gives_the_summary_of_a_local_run(tmp_path, machines):
    from testbed.distributed.ray_sweep import run_on_ray

    address, _ = machines  # the shared stand-ins: two nodes of one `testbed` resource each
    data = bulk("raysweep", rates=RATES)
    exp = Experiment(expand(data, "test"), "test", tmp_path / "ray", resume=False)
    local = Experiment(expand(data, "test"), "test", tmp_path / "local", resume=False)
    # the local reference runs while the sweep does (nothing here is a timing: the summary
    # without its measured numbers, the files); the sweep's driver in a thread, the local run
    # in this one (a testbed's SIGTERM handler is the main thread's)
    on_ray: list[bool] = []
    driver = threading.Thread(
        target=lambda: on_ray.append(run_on_ray(exp, address, selfcheck_seconds=0.5))
    )
    driver.start()
    try:
        assert local.run(selfcheck_seconds=0.5)
    finally:
        driver.join(timeout=180)
    assert not driver.is_alive() and on_ray == [True], exp.manifest["runs"]
    assert summary_rows(exp) == summary_rows(local)
    assert len(summary_rows(exp)) == 4 and {r[2] for r in summary_rows(exp)} == {"ok"}
    runs = json.loads(exp.results.manifest_path.read_text())["runs"]
    nodes = {r["node"]["ray_node"] for r in runs.values()}
    assert len(nodes) == 2  # one point at a time per node: both nodes took points
    for r in runs.values():
        assert r["node"]["host"] and r["node"]["kernel"] == os.uname().release
        assert r["node"]["cpu"] and "attempts" not in r
    # the same files as a local run: tables and each run's directory
    ray_files = {p.name for p in exp.results.path.iterdir()}
    assert {p.name for p in local.results.path.iterdir()} <= ray_files
    assert all((exp.results.path / "runs" / rid).is_dir() for rid in runs)
    assert sorted(p.name for p in (exp.results.path / "runs" / "p000-r0").iterdir()) == sorted(
        p.name for p in (local.results.path / "runs" / "p000-r0").iterdir()
    )
    again = Experiment(expand(data, "test"), "test", exp.results.path, resume=True)
    assert run_on_ray(again, address)  # nothing left to do


def parent_pid(pid: int) -> int | None:
    """``pid``'s parent, None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


@pytest.fixture
def before():
    """The testbeds before the test; after it, new ones without a live owner are removed (a
    dead attempt's leftovers, also when the test fails before its own `clean`)."""
    prefixes = {r.prefix for r in registry.records()}
    yield prefixes
    for rec in registry.records():
        if rec.prefix not in prefixes and not rec.live():
            build.destroy(rec)


def test_a_point_whose_node_dies_is_retried_on_another(tmp_path, cluster, before):
    from testbed.distributed.ray_sweep import run_on_ray

    c, nodes = cluster
    # the node dies while its point runs: the test kills it within a poll (0.2 s) of the point's
    # testbed being up, and the point still has its self-check and 4 s of traffic to go; the
    # attempt on the other node runs the point whole, so each second here counts twice
    data = bulk("raydie", seconds="4s", rates=("50mbit",))
    exp = Experiment(expand(data, "test"), "test", tmp_path, resume=False)
    outcome: list[bool] = []
    first = None
    driver = threading.Thread(
        target=lambda: outcome.append(run_on_ray(exp, c.address, selfcheck_seconds=0.5))
    )
    driver.start()
    try:
        # the first attempt's testbed appears; its owner is a worker of one of the nodes (a
        # testbed another test makes meanwhile, e.g. on another pytest-xdist worker, is not)
        raylets = {n: n.all_processes["raylet"][0].process.pid for n in nodes}
        deadline = time.monotonic() + 120
        victim = None
        while first is None:
            assert time.monotonic() < deadline, "the point did not start"
            for rec in registry.records():
                node = next(
                    (n for n, pid in raylets.items() if pid == parent_pid(rec.owner_pid)), None
                )
                if rec.prefix not in before and rec.phase == "up" and node is not None:
                    first, victim = rec, node
            time.sleep(0.2)
        assert victim is not None
        c.remove_node(victim, allow_graceful=False)
        driver.join(timeout=240)
        assert not driver.is_alive()
    finally:
        driver.join(timeout=60)
    assert outcome == [True]
    run = json.loads(exp.results.manifest_path.read_text())["runs"]["p000-r0"]
    assert run["status"] == "ok", run
    assert len(run["attempts"]) == 2, run["attempts"]
    assert run["attempts"][1]["ray_node"] == run["node"]["ray_node"]
    assert run["attempts"][0]["ray_node"] != run["node"]["ray_node"]
    # the dead attempt's testbed is a leftover: `testbed clean` removes it
    assert not registry.process_alive(first.owner_pid, first.owner_start)
    build.clean()
    assert registry.namespaces_with_prefix(first.prefix) == []
