"""A sweep's points on a Ray cluster (docs/scale-out.md): each point x repeat is a Ray task on a
machine that offers the custom resource ``testbed`` (``{"testbed": 1}``, no CPU: one point at a
time per machine, which runs nothing else of the sweep).

The driver (``testbed run FILE --ray auto|ADDRESS``) writes the same results directory as a local
run, recording each run with ``Experiment.record`` as it comes back (``--resume`` works the same).
A task runs :func:`testbed.experiment.execute.execute` into a temporary directory and returns the
``RunResult``, the run directory as a tar archive (files over ``LEAVE_ON_NODE`` bytes stay on the
node, their path in the manifest) and the node's identity. A run that fails the ordinary way is
recorded, not retried; a task whose worker or node dies is retried on another node
(``max_retries``), every attempt registered with the driver's ``Attempts`` actor first (the
manifest's ``attempts``). The ranks' ``OMP_NUM_THREADS`` comes from the project
(``testbed.live.processes.rank_env``), not from Ray.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.config.sweep import RunSpec
from testbed.experiment.execute import execute
from testbed.experiment.results import RunResult
from testbed.experiment.sweep import Experiment
from testbed.live.ray_common import NODE_DIR, RESOURCE, connect_ray, node_identity

MAX_RETRIES = 3  # attempts after the first when a worker or node dies (Ray's default)
LEAVE_ON_NODE = 32 * 1024 * 1024  # bytes: larger files stay on the node (path in the manifest)
HEAD = "node:__internal_head__"  # the resource Ray gives its head node


def pack(run_dir: Path, keep: Path) -> tuple[bytes, dict[str, str]]:
    """The run directory as a gzipped tar, without its files larger than LEAVE_ON_NODE; those
    are moved under ``keep`` (name -> their path there)."""
    left: dict[str, str] = {}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path in sorted(run_dir.rglob("*")):
            if not path.is_file():
                continue
            name = str(path.relative_to(run_dir))
            if path.stat().st_size > LEAVE_ON_NODE:
                target = keep / name
                target.parent.mkdir(parents=True, exist_ok=True)
                path.replace(target)
                left[name] = str(target)
                continue
            tar.add(path, arcname=name)
    return buf.getvalue(), left


def unpack(blob: bytes, run_dir: Path) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        tar.extractall(run_dir, filter="data")


def run_point(
    spec: RunSpec, selfcheck: float, source: str | None, results_name: str, attempts: Any
) -> tuple[RunResult, bytes, dict[str, Any]]:
    """One run on this node (the body of the Ray task)."""
    import ray
    import ray.exceptions

    node = node_identity() | {"ray_node": ray.get_runtime_context().get_node_id()}
    # the log says which nodes tried; the run itself does not depend on it
    with contextlib.suppress(ray.exceptions.RayError, TimeoutError):
        ray.get(attempts.start.remote(spec.run_id, node["host"], node["ray_node"]), timeout=30)
    keep = NODE_DIR / results_name / spec.run_id
    with tempfile.TemporaryDirectory(prefix="testbed-ray-") as tmp:
        run_dir = Path(tmp) / spec.run_id
        result = execute(spec, run_dir, selfcheck, source=Path(source) if source else None)
        blob, left = pack(run_dir, keep) if run_dir.exists() else (b"", {})
    if left:
        result.info["left_on_node"] = {name: f"{node['host']}:{p}" for name, p in left.items()}
    return result, blob, node


class _Attempts:
    """Which node each attempt of each run started on (a Ray actor owned by the driver)."""

    def __init__(self) -> None:
        self.log: dict[str, list[dict[str, str]]] = {}

    def start(self, run_id: str, host: str, node: str) -> None:
        self.log.setdefault(run_id, []).append({"host": host, "ray_node": node})

    def of(self, run_id: str) -> list[dict[str, str]]:
        return self.log.get(run_id, [])


def run_on_ray(
    exp: Experiment,
    address: str,
    selfcheck_seconds: float = 1.0,
    on_start: Callable[[RunSpec], None] | None = None,
    on_done: Callable[[RunSpec, RunResult], None] | None = None,
) -> bool:
    """Every pending run of ``exp`` as a Ray task; True when all finished ok (or skipped)."""
    ray = connect_ray(address)
    try:
        # the attempts log lives on the head (Ray's own resource marks it): a node that dies
        # must not take it along, and without the head there is no cluster anyway
        attempts = ray.remote(num_cpus=0, resources={HEAD: 0.001})(_Attempts).remote()
        task = ray.remote(num_cpus=0, resources={RESOURCE: 1}, max_retries=MAX_RETRIES)(run_point)
        pending = {}
        for spec in exp.runs:
            if exp.done(spec):
                continue
            ref = task.remote(spec, selfcheck_seconds, exp.source, exp.results.path.name, attempts)
            pending[ref] = spec
            if on_start:
                on_start(spec)
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                spec = pending.pop(done[0])
                result = _collect(ray, done[0], spec, exp)
                try:
                    tried = ray.get(attempts.of.remote(spec.run_id), timeout=30)
                except (ray.exceptions.RayError, TimeoutError):
                    tried = []
                if len(tried) > 1:
                    result.info["attempts"] = tried
                exp.record(spec, result)
                if on_done:
                    on_done(spec, result)
        except KeyboardInterrupt:
            for ref in pending:  # a running point gets KeyboardInterrupt: its testbed goes down
                ray.cancel(ref)
            raise
    finally:
        ray.shutdown()
    return exp.manifest["status"] == "ok"


def _collect(ray: Any, ref: Any, spec: RunSpec, exp: Experiment) -> RunResult:
    """A finished task's result, its run directory unpacked; a task Ray gave up on (its node
    died on every attempt) becomes a failed run saying so."""
    try:
        result, blob, node = ray.get(ref)
    except ray.exceptions.RayError as exc:
        result = RunResult(spec.run_id, "failed")
        result.reason = f"Ray gave up on this run: {type(exc).__name__}: {str(exc)[:300]}"
        return result
    if blob:
        unpack(blob, exp.results.path / "runs" / spec.run_id)
    result.info["node"] = node
    return result
