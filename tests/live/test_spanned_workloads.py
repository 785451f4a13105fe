"""Live tests of the training and command workloads over two stand-in machines (namespaces on a
veth underlay and a real Ray cluster: testbed.testing.machines), through the runner as
`testbed run FILE --ray ADDRESS` runs them: their processes start through each machine's agent,
their logs and result files come back to the run directory, and nothing is left on either
machine afterwards."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml

from testbed.net import registry

pytestmark = pytest.mark.live
ray = pytest.importorskip("ray", reason="the [ray] extra is not installed")

ROOT = Path(__file__).resolve().parents[2]
PLACEMENT = {"machines": {"east": "node-a", "west": "node-b"}}
WAN = {"between": ["east", "west"], "rate": "100mbit", "delay": "5ms"}
# a process of the service's group that outlives nothing: found by its command line after
SERVICE_CHILD = "sleep 3171"


@pytest.fixture
def machines(root):
    from testbed.testing.machines import stand_in_machines

    with stand_in_machines(["node-a", "node-b"]) as (address, spaces):
        yield address, spaces


def run_scenario(doc: dict, path: Path, out: Path, address: str | None) -> dict:
    """`testbed run` of ``doc`` (written to ``path``); its one run's manifest entry and the
    results directory."""
    from testbed.config.sweep import load_runs
    from testbed.experiment.sweep import Experiment

    path.write_text(yaml.safe_dump(doc))
    exp = Experiment(load_runs(str(path), []), str(path), out, resume=False)
    exp.ray_address = address
    exp.run(selfcheck_seconds=0.3)
    (run,) = exp.manifest["runs"].values()
    return {**run, "_results": exp.results.path, "_summary": exp.summaries}


def leftovers(spaces: list[str], prefix: str) -> list[str]:
    """What a run left: namespaces, records, stand-in devices beyond the underlay, processes."""
    found = [f"netns {ns}" for ns in registry.namespaces_with_prefix(prefix)]
    found += [f"record {r.prefix}@{r.machine}" for r in registry.records() if r.prefix == prefix]
    for ns in spaces:
        links = subprocess.run(["ip", "-n", ns, "-o", "link"], capture_output=True, text=True)
        extra = [x for x in links.stdout.splitlines() if ": lo:" not in x and ": u" not in x]
        found += [f"{ns}: {x}" for x in extra]
    ps = subprocess.run(["pgrep", "-af", SERVICE_CHILD], capture_output=True, text=True)
    found += [f"process {x}" for x in ps.stdout.splitlines() if "pgrep" not in x]
    return found


def test_a_diloco_run_across_machines_sends_the_wan_bytes_of_one_machine(machines, tmp_path):
    address, spaces = machines
    """A DiLoCo char-mlp run across the machines and the same scenario on one machine: the
    ranks' rows and logs come back, and the WAN bytes per step agree."""
    training = {
        "name": "span-diloco",
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": [WAN],
        "workload": {"kind": "training", "model": "char-mlp", "algorithm": "diloco",
                     "diloco": {"inner_steps": 5}, "steps": 10, "batch": 8, "eval_every": 5,
                     "timeout": "60s"},
    }  # fmt: skip
    spanned = run_scenario(
        {**training, "placement": PLACEMENT}, tmp_path / "t.yaml", tmp_path / "ts", address
    )
    assert spanned["status"] == "ok", spanned.get("reason")
    assert sorted(spanned["machines"]) == ["node-a", "node-b"]
    assert not leftovers(spaces, spanned["prefix"])
    rows = pd.read_parquet(spanned["_results"] / "training.parquet")
    assert sorted(set(rows["rank"])) == [0, 1] and rows["step"].max() == 9, rows
    logs = sorted(p.name for p in (spanned["_results"] / "runs").rglob("rank-*.log"))
    assert logs == ["rank-0.log", "rank-1.log"], logs

    alone = run_scenario(training, tmp_path / "t1.yaml", tmp_path / "t1", None)
    assert alone["status"] == "ok", alone.get("reason")
    (across,), (one,) = spanned["_summary"], alone["_summary"]
    # DiLoCo's bytes per step are its parameters' every H steps: the same on one machine and
    # across two; 10%: the goal's bound (the counters see the same payload plus TCP's acks)
    wan = across["wan_bytes_per_step"], one["wan_bytes_per_step"]
    assert wan[1] > 0 and abs(wan[0] - wan[1]) <= 0.10 * wan[1], wan


def test_a_command_workload_and_its_service_run_across_machines(machines, tmp_path):
    """The comms benchmark, one process per rank on both machines, its metric lines read on
    their machines; a service on the far machine whose process group holds a child; every
    host's name in each process's hosts file; nothing left after."""
    address, spaces = machines
    example = ROOT / "examples" / "comms-benchmark"
    doc = yaml.safe_load((example / "scenario.yaml").read_text())
    doc["placement"] = PLACEMENT
    doc["wan"] = [WAN]
    argv = doc["workload"]["argv"]
    argv[argv.index("--sizes") + 1] = "4K,64K"
    argv[argv.index("--iters") + 1] = "2"
    doc["workload"]["cwd"] = str(example)
    doc["workload"]["services"] = [
        {
            "name": "names",
            "host": "west-h1",
            "argv": ["sh", "-c", f"{SERVICE_CHILD} & hostname; getent hosts east-h0 west-h1; "
                     "exec python3 -m http.server 18080 --bind {host_addr}"],
            "ready": {"port": 18080},
            "timeout": "20s",
        }
    ]  # fmt: skip
    run = run_scenario(doc, tmp_path / "c.yaml", tmp_path / "c", address)
    assert run["status"] == "ok", run.get("reason")
    assert [p["exit_code"] for p in run["processes"]] == [0, 0, 0, 0], run["processes"]
    (service,) = run["services"]
    assert service["stopped"] and service["ready_s"] is not None, service
    run_dir = next((run["_results"] / "runs").iterdir())
    log = (run_dir / "service-names.log").read_text()
    assert log.splitlines()[0] == "west-h1", log  # its own hostname on the far machine
    assert "east-h0" in log and "west-h1" in log, log  # the hosts file names both machines'
    metrics = pd.read_parquet(run["_results"] / "metrics.parquet")
    assert set(metrics["rank"]) == {0, 1, 2, 3} and len(metrics) >= 4, metrics
    for r in range(4):
        assert (run_dir / f"rank-{r}.log").stat().st_size > 0
    assert json.loads(metrics["fields"].iloc[0]) is not None
    assert not leftovers(spaces, run["prefix"])
