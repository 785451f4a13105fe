"""Scale-out, pure: the SLURM job-array script and the `ray start` line of
`testbed ray-node`; the --point / --emit-slurm-array options of `testbed run`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from testbed.cli.run import ray_start_argv
from testbed.core.errors import ScenarioError
from testbed.distributed.slurm import slurm_array

ROOT = Path(__file__).resolve().parents[2]


def test_the_slurm_script_runs_one_run_per_array_task():
    text = slurm_array(
        "scenarios/x.yaml", ["p000-r0", "p000-r1", "p001-r0"], "/shared/out", "/opt/testbed",
        ("wan[0].rate=1gbit",), parallel=2,
    )  # fmt: skip
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    assert "#SBATCH --array=0-2%2" in lines and "#SBATCH --exclusive" in lines
    assert "#SBATCH --job-name=testbed-x" in lines
    assert lines[-1] == (
        f"${{TESTBED_SUDO-sudo}} /opt/testbed run {Path('scenarios/x.yaml').resolve()} "
        "--set 'wan[0].rate=1gbit' --point \"$SLURM_ARRAY_TASK_ID\" "
        '--out /shared/out/task-"$SLURM_ARRAY_TASK_ID"'
    )
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


def test_ray_node_starts_ray_without_cpus_and_with_one_testbed():
    head = ray_start_argv("ray", True, None, 6379, True)
    assert head == [
        "ray", "start", "--num-cpus", "0", "--disable-usage-stats", "--head", "--port", "6379",
        "--include-dashboard", "false", "--resources", '{"testbed": 1}',
    ]  # fmt: skip
    join = ray_start_argv("ray", False, "10.1.2.3:6379", 6379, False)
    assert join == ["ray", "start", "--num-cpus", "0", "--disable-usage-stats",
                    "--address", "10.1.2.3:6379"]  # fmt: skip


def test_ray_node_labels_the_machine_with_its_name_and_underlay():
    argv = ray_start_argv("ray", False, "h:6379", 6379, True, "node-a", "192.0.2.7")
    assert argv[-2:] == ["--labels", "testbed-machine=node-a,testbed-underlay=192.0.2.7"]
    with pytest.raises(ScenarioError, match=r"--underlay 'eth0': not an IPv4 address"):
        ray_start_argv("ray", False, "h:6379", 6379, True, None, "eth0")
    with pytest.raises(ScenarioError, match=r"--machine 'a b'"):
        ray_start_argv("ray", False, "h:6379", 6379, True, "a b")


def test_a_placed_scenario_needs_the_ray_cluster_of_its_machines(tmp_path):
    placed = tmp_path / "placed.yaml"
    placed.write_text(
        "name: placed\nclusters: {east: {hosts: 1}, west: {hosts: 1}}\n"
        "wan: [{between: [east, west], rate: 100mbit}]\n"
        "placement: {machines: {east: a, west: b}}\n"
    )
    r = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "run", str(placed)], capture_output=True,
        text=True, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 2 and "run it with --ray ADDRESS" in r.stderr, r.stderr


def test_run_emits_the_script_and_refuses_a_point_out_of_range():
    cmd = [sys.executable, "-m", "testbed.cli", "run", "scenarios/multipath-failover.yaml"]
    r = subprocess.run([*cmd, "--emit-slurm-array"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and "#SBATCH --array=0-4" in r.stdout, r.stderr
    r = subprocess.run([*cmd, "--point", "7"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2
    assert "--point 7: scenarios/multipath-failover.yaml has 5 run(s): 0 to 4" in r.stderr
