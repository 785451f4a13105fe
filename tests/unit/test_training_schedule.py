"""The training schedules (traffic.training.schedule): which step syncs what, and its bytes."""

from __future__ import annotations

import pytest

from traffic.training.schedule import (
    ScheduleError,
    TrainingSchedule,
    bytes_per_step,
    fragment_of,
    powersgd_payload,
    syncs,
)

SHAPES = ((64, 16), (64,), (32, 64), (32,), (10, 32), (10,))  # 3 layers, weights then biases
NUMEL = 64 * 16 + 64 + 32 * 64 + 32 + 10 * 32 + 10


def sched(algorithm: str, **kw) -> TrainingSchedule:
    return TrainingSchedule(algorithm, kw.pop("steps", 12), SHAPES, **kw)


def test_ddp_syncs_all_gradients_every_step() -> None:
    out = syncs(sched("ddp"))
    assert [x.step for x in out] == list(range(12))
    assert {(x.what, x.group, x.payload) for x in out} == {("gradients", "world", NUMEL * 4)}


def test_ddp_hooks_shrink_the_payload() -> None:
    assert bytes_per_step(sched("ddp", hook="fp16")) == NUMEL * 2
    assert bytes_per_step(sched("ddp", hook="bf16")) == NUMEL * 2
    psgd = syncs(sched("ddp", hook="powersgd", powersgd_rank=1, powersgd_start=2))
    assert [x.payload for x in psgd[:2]] == [NUMEL * 4] * 2  # plain all-reduce before the start
    # then three sequential all-reduces per step: the uncompressed tensors, P, Q
    third = [x.payload for x in psgd if x.step == 2]
    assert third == [(64 + 32 + 10) * 4, (64 + 32 + 10) * 4, (16 + 64 + 32) * 4]
    assert sum(third) == powersgd_payload(SHAPES, 1) < NUMEL * 4


def test_powersgd_payload_follows_torch_compression_rule() -> None:
    # 64x16 at rank 1: (64 + 16) = 80 floats instead of 1024; a 1-D tensor goes whole
    assert powersgd_payload(((64, 16),), 1) == 80 * 4
    assert powersgd_payload(((64,),), 1) == 64 * 4
    # 4x4 at rank 2: (4 + 4) * 2 = 16 is not 2x smaller than 16: sent whole
    assert powersgd_payload(((4, 4),), 2) == 16 * 4
    # conv-like shapes are flattened to (rows, rest)
    assert powersgd_payload(((8, 3, 3, 3),), 1) == (8 + 27) * 4


@pytest.mark.parametrize("h", [1, 3, 4])
def test_diloco_syncs_every_h_steps_and_sends_one_over_h_of_ddp(h: int) -> None:
    s = sched("diloco", inner_steps=h)
    out = syncs(s)
    assert [x.step for x in out] == [k for k in range(12) if (k + 1) % h == 0]
    assert bytes_per_step(s) == pytest.approx(bytes_per_step(sched("ddp")) / h)
    assert bytes_per_step(sched("diloco", inner_steps=h, dtype="fp16")) == pytest.approx(
        bytes_per_step(s) / 2
    )


def test_int8_pseudo_gradients_are_gathered_with_one_scale_per_tensor() -> None:
    (x, *_) = syncs(sched("diloco", inner_steps=12, dtype="int8"))
    assert x.collective == "all_gather"
    assert x.payload == NUMEL + 4 * len(SHAPES)


def test_localsgd_averages_parameters() -> None:
    out = syncs(sched("localsgd", inner_steps=4))
    assert [(x.step, x.what) for x in out] == [
        (3, "parameters"),
        (7, "parameters"),
        (11, "parameters"),
    ]


def test_hierarchical_runs_ddp_in_cluster_and_diloco_among_leaders() -> None:
    out = syncs(sched("hierarchical", inner_steps=6))
    inner = [x for x in out if x.group == "cluster"]
    outer = [x for x in out if x.group == "leaders"]
    assert len(inner) == 12 and {x.what for x in inner} == {"gradients"}
    assert [x.step for x in outer] == [5, 11]
    assert {x.what for x in outer} == {"pseudo-gradients"}


def test_streaming_fragments_are_strided_and_staggered() -> None:
    assert [fragment_of(i, 2) for i in range(6)] == [0, 1, 0, 1, 0, 1]
    s = sched("streaming-diloco", inner_steps=4, fragments=2, overlap_steps=1, steps=12)
    out = syncs(s)
    # one fragment every H/F = 2 steps, applied at steps 1, 3, 5, ..., issued one step earlier
    assert [(x.step, x.apply_step, x.fragment) for x in out] == [
        (0, 1, 0),
        (2, 3, 1),
        (4, 5, 0),
        (6, 7, 1),
        (8, 9, 0),
        (10, 11, 1),
    ]
    # the same mean bytes as DiLoCo, in syncs of about 1/F the size
    assert sum(x.payload for x in out) == pytest.approx(
        sum(x.payload for x in syncs(sched("diloco", inner_steps=4))), rel=1e-9
    )
    assert {x.payload for x in out} == {s.fragment_numel(0) * 4, s.fragment_numel(1) * 4}


def test_streaming_without_overlap_applies_where_it_issues() -> None:
    out = syncs(sched("streaming-diloco", inner_steps=6, fragments=3))
    assert [(x.step, x.apply_step, x.fragment) for x in out] == [
        (1, 1, 0),
        (3, 3, 1),
        (5, 5, 2),
        (7, 7, 0),
        (9, 9, 1),
        (11, 11, 2),
    ]


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"algorithm": "fedsgd"}, "allowed: ddp"),
        ({"algorithm": "streaming-diloco", "inner_steps": 5, "fragments": 2}, "divisible"),
        (
            {"algorithm": "streaming-diloco", "inner_steps": 4, "fragments": 2, "overlap_steps": 2},
            "below",
        ),
        ({"algorithm": "streaming-diloco", "inner_steps": 8, "fragments": 8}, "only 6"),
        ({"algorithm": "diloco", "dtype": "fp8"}, "allowed: fp32"),
    ],
)
def test_unschedulable_configurations_say_why(kw: dict, needle: str) -> None:
    algorithm = kw.pop("algorithm")
    with pytest.raises(ScheduleError, match=needle):
        sched(algorithm, **kw)
