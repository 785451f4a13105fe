"""Live tests of the training and command workloads over two stand-in machines (namespaces on a
veth underlay and a real Ray cluster: testbed.testing.machines), through the runner as
`testbed run FILE --ray ADDRESS` runs them: their processes start through each machine's agent,
their logs and result files come back to the run directory, and nothing is left on either
machine afterwards."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from helpers import ctrl_c_default

from testbed.net import registry

pytestmark = pytest.mark.live
ray = pytest.importorskip("ray", reason="the [ray] extra is not installed")

ROOT = Path(__file__).resolve().parents[2]
PLACEMENT = {"machines": {"east": "node-a", "west": "node-b"}}
WAN = {"between": ["east", "west"], "rate": "100mbit", "delay": "5ms"}
# children in the process groups of a service and of the ranks: found by their command lines
SERVICE_CHILD = "sleep 3171"
RANK_CHILD = "sleep 3172"


def run_experiment(doc: dict, path: Path, out: Path, address: str | None) -> Any:
    """`testbed run` of ``doc`` (written to ``path``): the finished experiment."""
    from testbed.config.sweep import load_runs
    from testbed.experiment.sweep import Experiment

    path.write_text(yaml.safe_dump(doc))
    exp = Experiment(load_runs(str(path), []), str(path), out, resume=False)
    exp.ray_address = address
    exp.run(selfcheck_seconds=0.3)
    return exp


def run_scenario(doc: dict, path: Path, out: Path, address: str | None) -> dict:
    """`testbed run` of ``doc``: its one run's manifest entry, results directory, summary."""
    exp = run_experiment(doc, path, out, address)
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
    found += [f"process {x}" for x in children(SERVICE_CHILD)]
    return found


def children(command: str) -> list[str]:
    """The processes running ``command`` (pid and command line) on this kernel: both stand-in
    machines'."""
    ps = subprocess.run(["pgrep", "-afx", command], capture_output=True, text=True)
    return ps.stdout.splitlines()


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
    # across the machines, a second point: an emulated model (a named shape at 1/1000, its
    # compute a timed wait)
    emulated = {"workload.model": "llama-3-1b", "workload.compute": {"step": "0.02s"},
                "workload.scale": "1/1000"}  # fmt: skip
    sweep = {"sweep": {"cases": [{"workload.model": "char-mlp"}, emulated]}}
    # the one-machine reference runs while the machines run theirs: what is compared is bytes
    # per step, not times (in a thread: a testbed's SIGTERM handler is the main thread's)
    reference: list[dict] = []
    alone_run = threading.Thread(
        target=lambda: reference.append(
            run_scenario(training, tmp_path / "t1.yaml", tmp_path / "t1", None)
        )
    )
    alone_run.start()
    try:
        exp = run_experiment(
            {**training, "placement": PLACEMENT, **sweep}, tmp_path / "t.yaml", tmp_path / "ts",
            address,
        )  # fmt: skip
    finally:
        alone_run.join(timeout=180)
    runs = list(exp.manifest["runs"].values())
    assert [r["status"] for r in runs] == ["ok", "ok"], [r.get("reason") for r in runs]
    for run in runs:
        assert sorted(run["machines"]) == ["node-a", "node-b"]
        assert not leftovers(spaces, run["prefix"])
    rows = pd.read_parquet(exp.results.path / "training.parquet")
    assert sorted(set(rows["rank"])) == [0, 1] and rows["step"].max() == 9, rows
    for run_dir in (exp.results.path / "runs").iterdir():  # each rank's log came back
        assert sorted(p.name for p in run_dir.glob("rank-*.log")) == ["rank-0.log", "rank-1.log"]

    assert not alone_run.is_alive() and len(reference) == 1, "the one-machine run did not end"
    (alone,) = reference
    assert alone["status"] == "ok", alone.get("reason")
    (one,) = alone["_summary"]
    across, emulated_run = sorted(exp.summaries, key=lambda row: row["compute"] != "real")
    assert emulated_run["compute"] == "emulated", emulated_run
    # the emulated model's bytes: its payload (its scaled parameters every H steps) each way
    # plus headers and acks: 15%, as on one machine (tests/live/test_live_emulated_training.py)
    payload = emulated_run["payload_bytes_per_step"]
    assert emulated_run["wan_bytes_per_step"] == pytest.approx(2 * payload, rel=0.15)
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
    doc["clusters"] = {"east": {"hosts": 1}, "west": {"hosts": 1}}  # 2 ranks: less CPU
    argv = doc["workload"]["argv"]
    argv[argv.index("--sizes") + 1] = "4K,64K"
    argv[argv.index("--iters") + 1] = "2"
    doc["workload"]["cwd"] = str(example)
    doc["workload"]["services"] = [
        {
            "name": "names",
            "host": "west-h0",
            "argv": ["sh", "-c", f"{SERVICE_CHILD} & hostname; getent hosts east-h0 west-h0; "
                     "exec python3 -m http.server 18080 --bind {host_addr}"],
            "ready": {"port": 18080},
            "timeout": "20s",
        }
    ]  # fmt: skip
    run = run_scenario(doc, tmp_path / "c.yaml", tmp_path / "c", address)
    assert run["status"] == "ok", run.get("reason")
    assert [p["exit_code"] for p in run["processes"]] == [0, 0], run["processes"]
    (service,) = run["services"]
    assert service["stopped"] and service["ready_s"] is not None, service
    run_dir = next((run["_results"] / "runs").iterdir())
    log = (run_dir / "service-names.log").read_text()
    assert log.splitlines()[0] == "west-h0", log  # its own hostname on the far machine
    assert "east-h0" in log.splitlines()[1], log  # the hosts file names the other machine's
    metrics = pd.read_parquet(run["_results"] / "metrics.parquet")
    assert set(metrics["rank"]) == {0, 1} and len(metrics) >= 2, metrics
    for r in range(2):
        assert (run_dir / f"rank-{r}.log").stat().st_size > 0
    assert json.loads(metrics["fields"].iloc[0]) is not None
    assert not leftovers(spaces, run["prefix"])

    # -- Ctrl-C of `testbed run` while every rank's group holds a child: nothing is left
    doc["name"] = "span-ctrl-c"
    doc["workload"]["argv"] = ["sh", "-c", f"{RANK_CHILD} & echo running; wait"]
    doc["workload"]["timeout"] = "120s"
    doc.pop("expect", None)
    path = tmp_path / "i.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = tmp_path / "i"
    cli = [sys.executable, "-m", "testbed.cli", "run", str(path), "--out", str(out),
           "--ray", address, "--selfcheck", "0.3"]  # fmt: skip
    proc = subprocess.Popen(
        cli, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"}, preexec_fn=ctrl_c_default,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while len(list(out.glob("*/runs/*/rank-*.log"))) < 2 or not all(
            "running" in p.read_text() for p in out.glob("*/runs/*/rank-*.log")
        ):
            assert time.monotonic() < deadline and proc.poll() is None, "the ranks did not start"
            time.sleep(0.2)
        assert len(children(RANK_CHILD)) == 2
        proc.send_signal(signal.SIGINT)
        printed, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, printed
    (manifest,) = out.glob("*/manifest.json")
    (entry,) = json.loads(manifest.read_text())["runs"].values()
    assert entry["status"] == "interrupted", entry
    assert not leftovers(spaces, entry["prefix"]) and not children(RANK_CHILD)
