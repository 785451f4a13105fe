"""Emulated-compute training ranks as local processes on 127.0.0.1 (no namespaces, no root):
``traffic.train_rank`` with a synthetic model, its compute a timed wait and its buffers real
gloo collectives. Every process started is killed by its pid whatever the test's outcome."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.config.workloads import TrainingWorkload
from testbed.experiment.workloads.training import rank_keys

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def train(tmp_path: Path) -> Iterator[Any]:
    started: list[subprocess.Popen] = []

    def run(workload: dict[str, Any], ranks: int = 2, clusters: int = 0) -> list[dict[str, Any]]:
        """``clusters``: that many clusters of consecutive ranks (0: one rank per cluster)."""
        per = ranks // clusters if clusters else 1
        w = TrainingWorkload.model_validate({"kind": "training", **workload})
        out = tmp_path / "out"
        spec = {
            "master_addr": "127.0.0.1",
            "master_port": free_port(),
            "world_size": ranks,
            "timeout_s": 30,
            "ranks": [
                {"rank": r, "host": f"c{r}-h0", "cluster": f"c{r // per}", "local_rank": 0}
                for r in range(ranks)
            ],
            "out_dir": str(out),
            **rank_keys(w),
        }
        path = tmp_path / "spec.json"
        path.write_text(json.dumps(spec))
        env = {
            **os.environ,
            "GLOO_SOCKET_IFNAME": "lo",
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(REPO),
        }
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "traffic.train_rank", "--spec", str(path), "--rank", str(r)],
                env=env,
                cwd=REPO,
                stderr=subprocess.PIPE,
                text=True,
            )
            for r in range(ranks)
        ]
        started.extend(procs)
        for p in procs:
            _, err = p.communicate(timeout=90)
            assert p.returncode == 0, err[-2000:]
        rows = []
        for r in range(ranks):
            rows += [json.loads(x) for x in (out / f"rank-{r}.jsonl").read_text().splitlines()]
        return rows

    yield run
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait()


SYNTH = {"synthetic": {"params": 3e6, "dtype": "bf16", "layers": 8}}


def test_emulated_ddp_waits_its_compute_and_all_reduces_every_bucket(train: Any) -> None:
    rows = train(
        {
            "model": SYNTH,
            "compute": {"step": "0.05s"},
            "algorithm": "ddp",
            "steps": 6,
            "ddp": {"bucket": "1MiB"},
        }
    )
    assert len(rows) == 12 and {r["compute_kind"] for r in rows} == {"emulated"}
    for r in rows:
        assert r["compute_s"] == 0.05
        # the step is at least its compute (a timed wait) and its last bucket's exchange
        assert r["wall_s"] >= 0.05
        assert r["payload_bytes"] == 6_000_000  # 3e6 bf16 gradients, every step
        assert "val_loss" not in r  # never evaluated: no real math


def test_emulated_streaming_fp4_issues_its_fragments_and_waits_for_them(train: Any) -> None:
    rows = train(
        {
            "model": SYNTH,
            "compute": {"step": "0.02s"},
            "scale": "1/10",
            "algorithm": "streaming-diloco",
            "steps": 16,
            "diloco": {"inner_steps": 8, "dtype": "fp4"},
            "streaming": {"fragments": 4, "overlap_steps": 1},
        }
    )
    rank0 = sorted((r for r in rows if r["rank"] == 0), key=lambda r: r["step"])
    issued = [r["step"] for r in rank0 if r["payload_bytes"]]
    # one fragment every 2 steps, issued one step before it is applied (the last is not issued:
    # it would apply after the run)
    assert issued == [0, 2, 4, 6, 8, 10, 12, 14]
    # 2 layers per fragment (of 8), 3e5 elements at scale 1/10: 4 bits each plus 4 fp32 scales
    assert rank0[0]["payload_bytes"] == pytest.approx(3e5 / 4 / 2 + 4 * 4, abs=4)
    assert all(r["compute_s"] == 0.02 for r in rank0)


def test_emulated_hierarchical_reduces_in_the_cluster_and_syncs_the_leaders(train: Any) -> None:
    # 2 clusters of 2 ranks; int8 pseudo-gradients are gathered among the 2 leaders only (a
    # receive list sized for the world would fail the all-gather)
    rows = train(
        {
            "model": SYNTH,
            "compute": {"step": "0.02s"},
            "scale": "1/10",
            "algorithm": "hierarchical",
            "steps": 8,
            "diloco": {"inner_steps": 4, "dtype": "int8"},
        },
        ranks=4,
        clusters=2,
    )
    assert len(rows) == 32
    by_step = {r["step"]: r["payload_bytes"] for r in rows if r["rank"] == 3}
    # the cluster's bf16 gradients (3e5 elements at 1/10) every step; every 4 steps the
    # leaders' int8 codes and one fp32 scale per tensor (16 tensors) on top
    inner, outer = 600_000, 300_000 + 4 * 16
    assert by_step == {s: inner + (outer if s % 4 == 3 else 0) for s in range(8)}
    assert all(r["compute_s"] == 0.02 and r["wall_s"] >= 0.02 for r in rows)
