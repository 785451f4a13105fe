"""Emulated-compute training's pure parts: the model layouts at real byte counts, DDP's buckets
(held equal to torch's own assignment), Streaming DiLoCo's layer fragments, scale, the
schedule's payloads, the paper's wall-clock model, settled compute utilisation and the needed
bandwidth of a sweep."""

from __future__ import annotations

import random
import typing

import pandas as pd
import pytest
import torch
import torch.distributed as dist

from analysis.compute_util import (
    compute_utilisation,
    needed_bandwidth,
    needed_table,
    real_rate,
    settled_steps,
)
from analysis.model.diloco_wallclock import (
    allreduce_time,
    diloco_comm,
    dp_comm,
    predicted_cu,
    streaming_exposed,
)
from testbed.config.workloads import NamedShape, TrainingWorkload
from traffic.training.schedule import bytes_per_step, schedule_from_config, syncs
from traffic.training.synthetic import (
    NAMED_SHAPES,
    ddp_buckets,
    layer_fragments,
    layout_of,
    parse_scale,
    payload_bytes,
)

SYNTH_1B = {"synthetic": {"params": 1e9, "dtype": "bf16", "layers": 24}}


def workload(**kw) -> TrainingWorkload:
    base = {"kind": "training", "model": SYNTH_1B, "compute": {"step": "0.1s"}}
    return TrainingWorkload.model_validate({**base, **kw})


# -- layouts ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "params"),
    # the published parameter counts (Llama 3.2 1B with tied embeddings, Llama 3.1 8B and 70B)
    [("llama-3-1b", 1_235_814_400), ("llama-3-8b", 8_030_261_248), ("llama-3-70b", 70_553_706_496)],
)
def test_named_shapes_hold_the_published_parameter_counts(name: str, params: int) -> None:
    layout = layout_of(name)
    assert layout.numel == params
    assert layout.nbytes() == 2 * params  # bf16
    per_layer = 9  # two norms, q, k, v, o, gate, up, down
    extra = 2 if NAMED_SHAPES[name].tied else 3  # embedding, final norm (, head)
    assert len(layout.tensors) == NAMED_SHAPES[name].layers * per_layer + extra


def test_the_schema_names_every_shape() -> None:
    from testbed.config.workloads import NAMED_LAYERS_PARAMS

    assert set(typing.get_args(NamedShape)) == set(NAMED_SHAPES)
    for name, (layers, params) in NAMED_LAYERS_PARAMS.items():
        assert (layers, params) == (NAMED_SHAPES[name].layers, layout_of(name).numel)


def test_synthetic_model_holds_exactly_its_parameters_in_its_layers() -> None:
    layout = layout_of({"synthetic": {"params": 1_000_000_007, "layers": 24}})
    assert layout.numel == 1_000_000_007
    assert {t.layer for t in layout.tensors} == set(range(24))
    attn, mlp = layout.tensors[0].numel, layout.tensors[1].numel
    assert attn == 1_000_000_007 // 24 // 3 and mlp == 1_000_000_007 // 24 - attn


def test_scale_shrinks_every_tensor_by_one_factor() -> None:
    full, small = layout_of(SYNTH_1B), layout_of(SYNTH_1B, 1e-3)
    # each tensor rounded to whole elements: at most half an element off per tensor
    assert abs(small.numel - full.numel * 1e-3) <= len(full.tensors) / 2
    assert [t.layer for t in small.tensors] == [t.layer for t in full.tensors]
    assert parse_scale("1/1000") == 1e-3 and parse_scale(0.01) == 0.01
    assert real_rate(222e6, 1e-3) == pytest.approx(222e9)


def test_fp4_counts_four_bits_an_element() -> None:
    assert payload_bytes(1000, "fp4") == 500
    assert payload_bytes(1001, "fp4") == 501
    assert payload_bytes(1000, "bf16") == 2000


# -- DDP buckets: the reducer's own assignment ----------------------------------------------------
@pytest.mark.parametrize("seed", range(6))
def test_ddp_buckets_are_torchs(seed: int) -> None:
    rng = random.Random(seed)
    numels = [rng.choice([7, 300, 70_000, 400_000, 3_000_000, 9_000_000]) for _ in range(30)]
    tensors = [torch.empty(n, dtype=torch.bfloat16) for n in numels]
    cap = rng.choice([1 << 20, 4 << 20, 25 << 20])
    first = min(1 << 20, cap)
    limits = [first, cap] if first < cap else [cap]
    # the reducer is handed the parameters in reverse order, as gradients become ready
    got, _ = dist._compute_bucket_assignment_by_size(  # pyright: ignore[reportPrivateImportUsage]
        list(reversed(tensors)), limits, [False] * len(tensors)
    )
    want = [[len(numels) - 1 - i for i in b] for b in ddp_buckets(numels, 2, cap, first)]
    assert got == want


def test_a_1b_model_fills_real_buckets() -> None:
    layout = layout_of("llama-3-1b")
    buckets = ddp_buckets([t.numel for t in layout.tensors], 2)
    sizes = [sum(layout.tensors[i].numel for i in b) * 2 for b in buckets]
    assert sum(sizes) == layout.nbytes()
    assert sizes[0] >= 1 << 20
    # the bf16 embedding (525 MB) is ready last: it closes the last bucket
    assert buckets[-1][-1] == 0 and len(buckets) == 49


# -- fragments and the schedule -------------------------------------------------------------------
def test_fragments_are_whole_layers_strided() -> None:
    layout = layout_of(SYNTH_1B)
    frags = layer_fragments(layout, 8)
    for t, f in zip(layout.tensors, frags, strict=True):
        assert f == t.layer % 8
    with pytest.raises(ValueError):
        layer_fragments(layout, 25)


def test_the_schedule_of_an_emulated_model_moves_its_scaled_bytes() -> None:
    w = workload(scale="1/1000", algorithm="ddp")
    s = schedule_from_config(w.model_dump(mode="json"))
    assert bytes_per_step(s) == pytest.approx(2e9 * 1e-3, abs=48)  # bf16, 48 tensors rounded

    w = workload(
        scale="1/1000",
        algorithm="streaming-diloco",
        diloco={"inner_steps": 96, "dtype": "fp4"},
        streaming={"fragments": 8, "overlap_steps": 5},
    )
    s = schedule_from_config(w.model_dump(mode="json"), None)
    out = syncs(s)
    assert [x.fragment for x in out[:8]] == list(range(8))
    assert {x.collective for x in out} == {"all_gather"}
    # one fragment: 3 layers of 2 tensors, 4 bits an element plus one fp32 scale per tensor
    assert out[0].payload == pytest.approx(1e6 / 8 / 2 + 4 * 6, abs=6)
    # issued tau steps before it is applied, every H/F steps
    assert [(x.step, x.apply_step) for x in out[:2]] == [(6, 11), (18, 23)]


# -- the schema ----------------------------------------------------------------------------------
def test_the_schema_keeps_emulated_and_real_compute_apart() -> None:
    w = workload(scale="1/1000")
    assert w.scale == 1e-3 and w.compute is not None and w.data is None
    with pytest.raises(ValueError, match="needs compute"):
        TrainingWorkload.model_validate({"kind": "training", "model": "llama-3-1b"})
    with pytest.raises(ValueError, match="emulated models"):
        TrainingWorkload.model_validate({"kind": "training", "scale": 0.5})
    with pytest.raises(ValueError, match="fp4"):
        TrainingWorkload.model_validate({"kind": "training", "diloco": {"dtype": "fp4"}})
    with pytest.raises(ValueError, match="not emulated"):
        workload(algorithm="parameter-server")
    with pytest.raises(ValueError, match="fragments"):
        workload(algorithm="streaming-diloco", streaming={"fragments": 32})
    # a 70B model at full scale would be 141 GB of bf16 gradients per rank
    with pytest.raises(ValueError, match="lower the scale"):
        workload(model="llama-3-70b")
    assert workload(model="llama-3-70b", scale="1/1000").scale == 1e-3


# -- the paper's wall-clock model --------------------------------------------------------------
def test_the_dp_term_is_the_papers() -> None:
    bits = 2e9 * 8  # a 1B bf16 gradient
    # [(2N/W)(1 - 1/R) + eps] * T with N = 16 Gbit, W = 100 Gbit/s, R = 2, eps = 1 ms, T = 10
    assert dp_comm(bits, 100e9, 2, 1e-3, 10) == pytest.approx((0.32 * 0.5 + 1e-3) * 10)
    assert allreduce_time(bits, 100e9, 1) == 0.0


def test_the_diloco_terms_are_the_papers() -> None:
    bits, w0, w1 = 16e9, 400e9, 10e9
    # M = 2 replicas of 4 chips: inner (2N/W0)(1 - 2/8) every step, outer (2N/W1)(1 - 1/8) / H
    got = diloco_comm(bits, w0, w1, 8, 2, 100, 1000, 1e-4, 1e-2)
    inner = (2 * bits / w0 * 0.75 + 1e-4) * 1000
    outer = (2 * bits / w1 * (7 / 8) + 1e-2) * 1000 / 100
    assert got == pytest.approx(inner + outer)
    # one rank per replica: no inner term
    assert diloco_comm(bits, w0, w1, 2, 2, 100, 100) == pytest.approx(2 * bits / w1 * 0.5)
    # M = 1: the paper's T(1 + 1/H)
    one = allreduce_time(bits, w1, 8)
    assert diloco_comm(bits, w0, w1, 8, 1, 100, 100) == pytest.approx(one * 100 * 1.01)


def test_predicted_cu_orders_the_methods() -> None:
    bits, step = 16e9, 0.1  # a 1B bf16 payload, 0.1 s per step, two datacenters
    # DP reaches CU 50% where one all-reduce takes one step: N/W = 0.1 s, W = 160 Gbit/s
    assert predicted_cu("ddp", bits, 160e9, 2, step) == pytest.approx(0.5)
    w = 1e9  # a fragment's exchange (2 s) is longer than tau steps (0.5 s); in fp4 it is not
    dp = predicted_cu("ddp", bits, w, 2, step)
    diloco = predicted_cu("diloco", bits, w, 2, step, inner_steps=96)
    streaming = predicted_cu(
        "streaming-diloco", bits, w, 2, step, inner_steps=96, fragments=8, overlap_steps=0
    )
    overlap = predicted_cu(
        "streaming-diloco", bits, w, 2, step, inner_steps=96, fragments=8, overlap_steps=5
    )
    fp4 = predicted_cu(
        "streaming-diloco", bits / 4, w, 2, step, inner_steps=96, fragments=8, overlap_steps=5
    )
    # streaming without overlap amortises to DiLoCo's cost per step (the paper's words)
    assert diloco == pytest.approx(streaming)
    assert dp < diloco < overlap < fp4 <= 1.0
    # tau steps hide tau * step of each 2 s fragment exchange (2 Gbit, 1 Gbit/s, 2 ranks)
    assert streaming_exposed(2e9, 1e9, 2, 0.0, 8, 96, 5, 0.1) == pytest.approx((2.0 - 0.5) * 8 / 96)


# -- compute utilisation and needed bandwidth ------------------------------------------------------
def test_cu_counts_whole_periods_after_the_warmup() -> None:
    assert settled_steps(list(range(25)), 10) == list(range(5, 25))
    assert settled_steps(list(range(25)), 10, warmup=10) == list(range(10, 20))
    assert settled_steps(list(range(5)), 10) == [1, 2, 3, 4]
    # H = 4: three steps of 0.1 s, then one with a 0.3 s sync; the first 5 steps are slower
    rows = [
        {"step": i, "compute": 0.1, "wall": 0.1 + 0.3 * (i % 4 == 3) + 0.5 * (i < 5)}
        for i in range(16)
    ]
    cu = compute_utilisation(pd.DataFrame(rows), 4)  # steps 5..12: two syncs
    assert cu == pytest.approx(0.8 / 1.4)


def test_needed_bandwidth_interpolates_between_the_bracketing_points() -> None:
    pts = [(1e9, 0.3), (2e9, 0.6), (4e9, 0.8), (8e9, 0.95)]
    n = needed_bandwidth(pts, 0.7)
    assert n.below == (2e9, 0.6) and n.above == (4e9, 0.8)
    assert n.bandwidth == pytest.approx(2e9 * 2**0.5)  # halfway in log bandwidth
    assert needed_bandwidth(pts, 0.99).bandwidth is None
    low = needed_bandwidth(pts, 0.2)
    assert low.bandwidth == 1e9 and low.below is None
    # a dip after a point that reached the target: the answer is above the dip
    assert needed_bandwidth([(1e9, 0.9), (2e9, 0.85), (4e9, 0.95)], 0.9).below == (2e9, 0.85)
    table = needed_table(
        pd.DataFrame([{"method": "dp", "bandwidth": b, "compute_utilisation": c} for b, c in pts]),
        targets=(0.5, 0.9),
    )
    assert list(table["target"]) == [0.5, 0.9]
    assert table["above_bw"].tolist() == [2e9, 8e9]


def test_an_emulated_summary_keeps_both_units_and_the_paper_model() -> None:
    from analysis.compute_util import emulated_summary
    from analysis.model.topology import Link, Topology

    topo = Topology(
        clusters=(("east", 1), ("west", 1)),
        links=(Link("east", "west", 153e6, 1e-3), Link("west", "east", 153e6, 1e-3)),
        fabric_goodput_bps={},
        fabric_delay_s={},
    )
    # DDP, 2 MB of bf16 gradients a step at scale 1/1000: every step 0.1 s compute, 0.2 s wall
    rows = pd.DataFrame(
        [
            {
                "rank": r,
                "step": i,
                "start": i * 0.2,
                "end": i * 0.2 + 0.2,
                "wall_s": 0.2,
                "compute_s": 0.1,
                "comm_s": 0.1,
                "wait_s": 0.0,
                "late_s": 1e-4,
                "loss": float("nan"),
                "payload_bytes": 2_000_000,
            }
            for r in range(2)
            for i in range(10)
        ]
    )
    w = workload(scale="1/1000", algorithm="ddp").model_dump(mode="json")
    out = emulated_summary(rows, w, topo)
    assert out["compute"] == "emulated" and out["scale"] == 1e-3
    assert out["compute_utilisation_settled"] == pytest.approx(0.5)
    assert out["wan_goodput_real_bps"] == pytest.approx(153e9)
    # one 2-rank ring all-reduce of 16 Mbit at 153 Mbit/s plus two one-way delays
    assert out["cu_paper_model"] == pytest.approx(0.1 / (0.1 + 16e6 / 153e6 + 2e-3))


def test_table4_points_name_the_methods_in_real_gbits() -> None:
    from analysis.compute_util import PAPER_TABLE4_1B, table4_points

    base = {"compute": "emulated", "compute_utilisation_settled": 0.9, "scale": 0.01}
    rows = [
        {**base, "algorithm": "ddp", "wan_goodput_real_bps": 95e9, "scale": 0.001},
        {**base, "algorithm": "diloco", "wan_goodput_real_bps": 9.5e9},
        {**base, "algorithm": "streaming-diloco", "wan_goodput_real_bps": 9.5e9},
        {
            **base,
            "algorithm": "streaming-diloco",
            "workload.streaming.overlap_steps": 2,
            "wan_goodput_real_bps": 9.5e9,
        },
        {
            **base,
            "algorithm": "streaming-diloco",
            "workload.streaming.overlap_steps": 2,
            "workload.diloco.dtype": "fp4",
            "wan_goodput_real_bps": 0.95e9,
        },
        {"compute": "real", "algorithm": "ddp"},
    ]
    pts = table4_points(rows, 0.95)
    assert pts["method"].tolist() == list(PAPER_TABLE4_1B)
    assert pts["bandwidth"].tolist() == pytest.approx([100, 10, 10, 10, 1])


def test_the_cu_figure_draws_every_method_and_the_papers_points() -> None:
    from analysis.compute_util_plots import cu_vs_bandwidth

    pts = pd.DataFrame(
        [
            {"method": m, "bandwidth": b, "compute_utilisation": c, "cu_paper_model": c + 0.01}
            for m in ("DP", "DiLoCo")
            for b, c in ((10.0, 0.4), (100.0, 0.9))
        ]
    )
    fig = cu_vs_bandwidth(pts)
    assert fig is not None
    ax = fig.axes[0]
    # per method: measured, paper model, the paper's five needed-bandwidth points
    assert len(ax.lines) == 6
    assert list(ax.lines[2].get_xdata()) == [86.8, 152.6, 184.2, 222.3, 569.0]
    assert cu_vs_bandwidth(pts.iloc[0:0]) is None
