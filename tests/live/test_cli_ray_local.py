"""testbed run --ray local: a throwaway Ray cluster of this machine runs the sweep's points and
is gone afterwards (no process of it left, no directory), without `ray stop`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import RUN_TAG

pytestmark = pytest.mark.live
pytest.importorskip("ray", reason="the [ray] extra is not installed")
CLI = [sys.executable, "-m", "testbed.cli"]


def _ray_local_processes() -> set[int]:
    """Processes whose command line names a --ray local cluster's directory."""
    out = set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if b"testbed-ray-" in (proc / "cmdline").read_bytes():
                    out.add(int(proc.name))
            except OSError:
                continue
    return out


# a cluster's start and stop plus two 1 s bulk runs: about 30 s on 2 cores, 4x for a busy host
@pytest.mark.timeout(240)
def test_ray_local_runs_the_points_and_leaves_nothing(root, tmp_path):
    data = {
        "name": f"{RUN_TAG}-h7rl"[:32],
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": [{"between": ["east", "west"], "rate": "50mbit", "delay": "5ms"}],
        "traffic": [{"kind": "bulk", "from": "east-h0", "to": "west-h0", "duration": "1s"}],
        "sweep": {"wan[0].rate": ["50mbit", "100mbit"]},
    }
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(data))
    before_dirs = set(Path("/tmp").glob("testbed-ray-*"))
    before = _ray_local_processes()
    r = subprocess.run(
        [*CLI, "run", str(path), "--out", str(tmp_path / "out"), "--ray", "local",
         "--selfcheck", "0.3"],
        capture_output=True, text=True, env=dict(os.environ), timeout=230,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    (results,) = (tmp_path / "out").iterdir()
    runs = json.loads((results / "manifest.json").read_text())["runs"]
    assert [v["status"] for v in runs.values()] == ["ok", "ok"]
    assert all(v["node"]["ray_node"] for v in runs.values())  # each ran as a Ray task
    assert _ray_local_processes() - before == set()
    assert set(Path("/tmp").glob("testbed-ray-*")) == before_dirs
