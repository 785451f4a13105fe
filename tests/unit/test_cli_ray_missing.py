"""``testbed run FILE --ray auto`` where no Ray cluster runs: one ``error:`` line saying so and how
to start one (``testbed ray-node --head``), exit 2, no traceback, and no results directory made.

Real Ray, no cluster: skipped where one runs on this machine (it is someone's, never stopped
here)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.core.errors import UsageError

pytest.importorskip("ray")

TESTBED = Path(sys.executable).with_name("testbed")
SCENARIO = {
    "name": "tiny",
    "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
    "wan": [{"between": ["east", "west"]}],
}
NO_CLUSTER = "Could not find any running Ray instance"


def _ray_cluster_here() -> str | None:
    """Why a Ray cluster may be running on this machine, or None."""
    if os.environ.get("RAY_ADDRESS"):
        return f"RAY_ADDRESS={os.environ['RAY_ADDRESS']}"
    if Path("/tmp/ray/ray_current_cluster").exists():
        return "/tmp/ray/ray_current_cluster exists"
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() in ("gcs_server", "raylet"):
                return f"a Ray process runs ({comm.parent.name})"
        except OSError:
            continue
    return None


@pytest.fixture
def no_ray_cluster() -> None:
    why = _ray_cluster_here()
    if why is not None:
        pytest.skip(f"a Ray cluster may be running on this machine ({why}); not stopping it")


def test_connect_ray_without_a_cluster_says_how_to_start_one(no_ray_cluster) -> None:
    from testbed.live.ray_common import connect_ray

    with pytest.raises(UsageError) as exc:
        connect_ray("auto")
    text = str(exc.value)
    assert NO_CLUSTER in text and "testbed ray-node --head" in text
    assert "\n" not in text
    assert exc.value.exit_code == 2


@pytest.mark.skipif(os.geteuid() != 0, reason="testbed run checks for root before --ray")
def test_run_with_ray_auto_and_no_cluster_exits_2_with_one_line(
    tmp_path: Path, no_ray_cluster
) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    out = tmp_path / "results"
    r = subprocess.run(
        [str(TESTBED), "run", str(path), "--ray", "auto", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "300"},
    )
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, r.stderr
    assert NO_CLUSTER in errors[0] and "testbed ray-node --head" in errors[0]
    assert not out.exists()  # checked before a results directory is made
