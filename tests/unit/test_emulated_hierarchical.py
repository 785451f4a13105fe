"""Emulated hierarchical training's pure parts: the schema admits it, the schedule's bytes (the
cluster's gradients every step, the leaders' pseudo-gradients every H steps), the paper's
DiLoCo model with M = the clusters, and the CU an emulated summary reports for it beside the
α-β model's."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.compute_util import emulated_summary, hierarchical_paper_cu
from analysis.model.diloco_wallclock import allreduce_time, diloco_comm, hierarchical_comm
from analysis.model.topology import Link, Topology
from testbed.config.workloads import TrainingWorkload
from traffic.training.schedule import schedule_from_config, syncs_at

SYNTH_1B = {"synthetic": {"params": 1e9, "dtype": "bf16", "layers": 24}}


def workload(**kw) -> dict:
    base = {
        "kind": "training",
        "model": SYNTH_1B,
        "compute": {"step": "0.1s"},
        "scale": "1/1000",
        "algorithm": "hierarchical",
        "diloco": {"inner_steps": 10, "dtype": "bf16"},
    }
    return TrainingWorkload.model_validate({**base, **kw}).model_dump(mode="json")


def two_by_two(goodput: float = 15e6, fabric: float | None = None) -> Topology:
    return Topology(
        clusters=(("east", 2), ("west", 2)),
        links=(Link("east", "west", goodput, 1e-3), Link("west", "east", goodput, 1e-3)),
        fabric_goodput_bps={"east": fabric, "west": fabric},
        fabric_delay_s={},
        host_bw_bps=2e9,
    )


def test_the_schema_admits_emulated_hierarchical_and_sizes_its_largest_buffer() -> None:
    w = workload()
    assert w["algorithm"] == "hierarchical"
    with pytest.raises(ValueError, match="none, fp16 or bf16"):
        workload(ddp={"hook": "powersgd"})
    # 3B at 1/2: bf16 gradients 3 GB pass (at most 4 GiB), fp32 pseudo-gradients 6 GB do not
    big = {"synthetic": {"params": 3e9, "dtype": "bf16", "layers": 24}}
    assert workload(model=big, scale="1/2")["scale"] == 0.5
    with pytest.raises(ValueError, match="lower the scale"):
        workload(model=big, scale="1/2", diloco={"inner_steps": 10, "dtype": "fp32"})


def test_the_schedule_reduces_gradients_in_the_cluster_and_pseudo_gradients_among_leaders() -> None:
    s = schedule_from_config(workload(diloco={"inner_steps": 10, "dtype": "fp4"}))
    inner = syncs_at(s, 0)
    assert [(x.group, x.what, x.collective) for x in inner] == [
        ("cluster", "gradients", "all_reduce")
    ]
    assert inner[0].payload == pytest.approx(2e6, abs=48)  # bf16 gradients at 1/1000
    synced = syncs_at(s, 9)
    assert [(x.group, x.collective) for x in synced] == [
        ("cluster", "all_reduce"),
        ("leaders", "all_gather"),
    ]
    # fp4 codes (4 bits an element) and one fp32 scale per tensor (48)
    assert synced[1].payload == pytest.approx(1e6 / 2 + 4 * 48, abs=24)


def test_the_hierarchical_terms_are_diloco_with_m_the_clusters() -> None:
    bits, w0, w1 = 16e9, 400e9, 10e9
    # R = 8 ranks in M = 2 clusters; the same payload in and out: the paper's inner term exactly
    got = hierarchical_comm(bits, bits, w0, w1, 8, 2, 100, 1e-4, 1e-2)
    paper = diloco_comm(bits, w0, w1, 8, 2, 100, 1, 1e-4, 1e-2)
    outer_paper = allreduce_time(bits, w1, 8, 1e-2) / 100
    outer_leaders = allreduce_time(bits, w1, 2, 1e-2) / 100
    # the outer ring is the 2 leaders' (1 - 1/M), not every rank's (1 - 1/R)
    assert got == pytest.approx(paper - outer_paper + outer_leaders)
    assert outer_leaders == pytest.approx((2 * bits / w1 * 0.5 + 1e-2) / 100)
    # one rank per cluster: no inner term, DiLoCo's outer term among the clusters
    assert hierarchical_comm(bits, bits, w0, w1, 2, 2, 10) == pytest.approx(bits / w1 / 10)
    with pytest.raises(ValueError, match="clusters"):
        hierarchical_comm(bits, bits, w0, w1, 5, 2, 10)


def test_the_paper_cu_of_a_two_by_two_run() -> None:
    w = workload()
    topo = two_by_two()
    n = 2e6 * 8  # bf16 1B at 1/1000, in bits (48 tensors rounded: within 400 bits)
    # inner: 2-rank ring over the unshaped fabric (host_bw) every step; outer: 2 leaders over
    # 15 Mbit/s every 10 steps plus the 2 ms of a 2-rank ring's one-way delays
    comm = n / 2e9 + (n / 15e6 + 2e-3) / 10
    assert hierarchical_paper_cu(w, topo, 15e6, 0.1) == pytest.approx(0.1 / (0.1 + comm), rel=1e-4)
    # a shaped fabric is the inner bandwidth
    slow = hierarchical_paper_cu(w, two_by_two(fabric=100e6), 15e6, 0.1)
    comm = n / 100e6 + (n / 15e6 + 2e-3) / 10
    assert slow == pytest.approx(0.1 / (0.1 + comm), rel=1e-4)


def test_an_emulated_hierarchical_summary_counts_whole_outer_periods() -> None:
    # H = 10: nine steps of 0.1 s, the tenth 1.2 s (its outer sync); the warm-up steps slower
    rows = pd.DataFrame(
        [
            {
                "rank": r,
                "step": i,
                "start": float(i),
                "end": float(i) + 0.1,
                "wall_s": 0.1 + 1.1 * (i % 10 == 9) + 0.5 * (i < 5),
                "compute_s": 0.1,
                "comm_s": 0.0,
                "wait_s": 0.0,
                "late_s": 1e-4,
                "loss": float("nan"),
                "payload_bytes": 2_000_000,
            }
            for r in range(4)
            for i in range(25)
        ]
    )
    out = emulated_summary(rows, workload(), two_by_two(), alpha_beta_comm=0.05)
    assert out["compute_utilisation_settled"] == pytest.approx(2.0 / 4.2)  # steps 5..24
    assert out["wan_goodput_real_bps"] == pytest.approx(15e9)
    assert out["cu_paper_model"] == pytest.approx(
        hierarchical_paper_cu(workload(), two_by_two(), 15e6, 0.1)
    )
    assert out["cu_alpha_beta"] == pytest.approx(0.1 / 0.15)
