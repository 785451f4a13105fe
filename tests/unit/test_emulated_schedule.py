"""The emulated schedule's α-β model (analysis.model.emulated_schedule) and its inputs from a
workload (analysis.schedule_cu): DDP's bucket pipeline, the gathered exchange, Streaming's
exposure, which term explains a miss. Pure functions, exact arithmetic."""

from __future__ import annotations

import pytest

from analysis.model.diloco_wallclock import predicted_cu
from analysis.model.emulated_schedule import (
    MachineTerms,
    ddp_comm_end,
    ddp_cu,
    diloco_cu,
    streaming_cu,
    sync_time,
)
from analysis.model.topology import Link, Topology
from analysis.schedule_cu import TERMS, ddp_bucket_plan, explaining_term, schedule_model_cu
from testbed.config.workloads import TrainingWorkload

SYNTH_1B = {"synthetic": {"params": 1e9, "dtype": "bf16", "layers": 24}}


def workload(**kw) -> dict:
    base = {"kind": "training", "model": SYNTH_1B, "compute": {"step": "0.1s"}}
    return TrainingWorkload.model_validate({**base, **kw}).model_dump(mode="json")


def two_dcs(bps: float, delay: float = 1e-3) -> Topology:
    return Topology(
        clusters=(("east", 1), ("west", 1)),
        links=(Link("east", "west", bps, delay), Link("west", "east", bps, delay)),
        fabric_goodput_bps={},
        fabric_delay_s={},
    )


def test_buckets_ready_at_once_pay_the_fixed_costs_or_the_bytes_whichever_is_longer() -> None:
    # 10 buckets of 1 Mbit ready at t=0 on 2 ranks (each bucket 1 Mbit per direction)
    ready, bits = [0.0] * 10, [1e6] * 10
    # latency-bound: 10 x 5 ms of fixed cost outlast 10 x 1 ms of bytes at 1 Gbit/s
    assert ddp_comm_end(ready, bits, 1e9, 2, 5e-3) == pytest.approx(0.050)
    # bandwidth-bound: 10 x 10 ms of bytes at 100 Mbit/s (the last starts at 9 x 1 ms of calls)
    assert ddp_comm_end(ready, bits, 100e6, 2, 1e-3) == pytest.approx(0.100)


def test_a_bucket_starts_no_earlier_than_the_backward_makes_it_ready() -> None:
    # buckets ready every 20 ms, each costing 5 ms: the last ends 5 ms after it is ready
    ready = [0.02 * i for i in range(5)]
    assert ddp_comm_end(ready, [1e5] * 5, 1e9, 2, 5e-3) == pytest.approx(0.085)
    with pytest.raises(ValueError, match="2 ready times for 3 buckets"):
        ddp_comm_end([0.0, 0.0], [1.0] * 3, 1e9, 2, 0.0)


def test_dp_cu_plateaus_once_the_bucket_calls_outlast_the_bytes() -> None:
    w = workload(scale="1/1000", algorithm="ddp")
    ready, bits = ddp_bucket_plan(w)
    fixed = MachineTerms(call_s=2.5e-3, call_rtts=0.0).fixed(2e-3)
    # 48 buckets x 2.5 ms after the first is ready: the same CU at 300 and 600 Mbit/s
    cus = [ddp_cu(ready, bits, bw, 2, 0.1, fixed) for bw in (300e6, 600e6, 6e9)]
    assert cus[0] == pytest.approx(cus[1]) == pytest.approx(cus[2])
    assert cus[0] == pytest.approx(0.1 / (ready[0] + 48 * 2.5e-3))
    # with no fixed cost the bytes overlap the backward: only the last bucket's show
    assert ddp_cu(ready, bits, 6e9, 2, 0.1, 0.0) == pytest.approx(0.1 / (0.1 + bits[-1] / 6e9))


def test_the_bucket_plan_is_the_emulated_ranks_one() -> None:
    ready, bits = ddp_bucket_plan(workload(scale="1/1000", algorithm="ddp"))
    # 24 layers x (attention, MLP), each over the 25 MiB cap: a bucket each
    assert len(ready) == len(bits) == 48
    assert sum(bits) == pytest.approx(8 * 2e6, rel=1e-5)  # 1e9 bf16 at 1/1000
    assert ready == sorted(ready) and ready[-1] == pytest.approx(0.1)
    assert ready[0] == pytest.approx(0.1 / 3 + 0.2 / 3 * bits[0] / sum(bits), rel=1e-4)
    no_overlap = workload(scale="1/1000", algorithm="ddp", ddp={"overlap": False})
    assert ddp_bucket_plan(no_overlap)[0] == [pytest.approx(0.1)] * 48


def test_gathered_codes_take_the_gather_factor_of_the_bytes() -> None:
    assert sync_time(8e6, 8e6, 2, 0.0) == pytest.approx(1.0)
    assert sync_time(8e6, 8e6, 2, 0.01, gathered=True, gather_factor=1.5) == pytest.approx(1.51)


def test_diloco_and_streaming_match_the_paper_model_with_its_epsilon() -> None:
    bits, bw, eps = 160e6, 60e6, 2e-3
    ours = diloco_cu(sync_time(bits, bw, 2, eps), 100, 0.1)
    assert ours == pytest.approx(predicted_cu("diloco", bits, bw, 2, 0.1, eps, inner_steps=100))
    frag = sync_time(bits / 8, bw, 2, eps)
    ours = streaming_cu(frag, 8, 96, 2, 0.1)
    paper = predicted_cu(
        "streaming-diloco", bits, bw, 2, 0.1, eps, inner_steps=96, fragments=8, overlap_steps=2
    )
    assert ours == pytest.approx(paper)
    # a fragment shorter than its τ steps of compute is hidden
    assert streaming_cu(0.15, 8, 96, 2, 0.1) == 1.0


def test_a_run_on_a_topology_gets_the_schedule_model() -> None:
    terms = MachineTerms(call_s=1e-3, call_rtts=0.5, gather_factor=1.5)
    fixed = terms.fixed(2e-3)  # 2 ms
    w = workload(scale="1/100", algorithm="diloco", diloco={"inner_steps": 100, "dtype": "bf16"})
    got = schedule_model_cu(w, two_dcs(60e6), terms)
    assert got == pytest.approx(10 / (10 + 8 * 20e6 / 60e6 + fixed), rel=1e-5)
    fp4 = workload(
        scale="1/100",
        algorithm="streaming-diloco",
        diloco={"inner_steps": 96, "dtype": "fp4"},
        streaming={"fragments": 8, "overlap_steps": 2},
    )
    frag = fixed + 1.5 * 8 * (625_000 + 4 * 6) / 3e6  # codes and one fp32 scale per tensor
    assert schedule_model_cu(fp4, two_dcs(3e6), terms) == pytest.approx(
        9.6 / (9.6 + 8 * (frag - 0.2)), rel=1e-5
    )
    assert schedule_model_cu(w, None, terms) is None


def test_the_report_names_the_term_that_explains_a_miss() -> None:
    assert explaining_term("DP", 0.63, 0.77, 0.644, 0.1) == TERMS["DP"]
    assert explaining_term("DP", 0.49, 0.37, 0.494, 0.1) == TERMS["DP overlap"]
    assert explaining_term("+ overlap FP4", 0.31, 0.44, 0.34, 0.1) == TERMS["+ overlap FP4"]
    assert explaining_term("DiLoCo", 0.89, 0.90, 0.90, 0.1) == "-"
    assert explaining_term("DiLoCo", 0.5, 0.9, 0.9, 0.1) == "unexplained"
    assert explaining_term("DiLoCo", 0.5, 0.9, None, 0.1) == "unexplained"


def test_the_cu_figure_draws_the_schedule_model_dotted() -> None:
    import numpy as np
    import pandas as pd

    from analysis.compute_util_plots import cu_vs_bandwidth

    pts = pd.DataFrame(
        [
            {
                "method": m,
                "bandwidth": b,
                "compute_utilisation": c,
                "cu_paper_model": c + 0.01,
                "cu_schedule_model": c - 0.01,
            }
            for m in ("DP", "DiLoCo")
            for b, c in ((10.0, 0.4), (100.0, 0.9))
        ]
    )
    fig = cu_vs_bandwidth(pts)
    assert fig is not None
    # per method: measured, paper model, schedule model, the paper's needed-bandwidth points
    lines = fig.axes[0].lines
    assert len(lines) == 8
    assert lines[2].get_linestyle() == ":"
    assert np.asarray(lines[2].get_ydata()).tolist() == pytest.approx([0.39, 0.89])
