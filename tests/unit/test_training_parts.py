"""The torch parts of training that need no communication: data, models, DiLoCo's outer step."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from traffic.training import data, models  # noqa: E402
from traffic.training.outer import OuterOptimizer, dequantize_int8, quantize_int8  # noqa: E402


def test_outer_step_matches_a_hand_computed_nesterov_update() -> None:
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    outer = OuterOptimizer([p], lr=0.7, momentum=0.9, nesterov=True)
    with torch.no_grad():
        p.copy_(torch.tensor([0.8, -1.5]))  # after the inner steps
    (delta,) = outer.pseudo_gradients()
    assert delta.tolist() == pytest.approx([0.2, -0.5])
    outer.step([delta])
    # buf = d; update = d + 0.9 * buf = 1.9 d; global = 1 - 0.7 * 1.9 * d
    expected = [1.0 - 0.7 * 1.9 * 0.2, -2.0 + 0.7 * 1.9 * 0.5]
    assert p.tolist() == pytest.approx(expected)
    assert outer.glob[0].tolist() == pytest.approx(expected)
    # second round: buf = 0.9 * buf + d2
    with torch.no_grad():
        p.sub_(torch.tensor([0.1, 0.1]))
    (d2,) = outer.pseudo_gradients()
    before = outer.glob[0].clone()
    outer.step([d2])
    buf = 0.9 * delta + d2
    assert p.tolist() == pytest.approx((before - 0.7 * (d2 + 0.9 * buf)).tolist())


def test_plain_averaging_is_outer_lr_one_without_momentum() -> None:
    p = torch.nn.Parameter(torch.tensor([3.0]))
    outer = OuterOptimizer([p], lr=1.0, momentum=0.0)
    with torch.no_grad():
        p.fill_(2.0)
    outer.step([torch.tensor([0.25])])  # the mean over workers of global - local
    assert p.item() == pytest.approx(2.75)


def test_streaming_merge_weights_local_by_alpha() -> None:
    p = torch.nn.Parameter(torch.tensor([1.0]))
    outer = OuterOptimizer([p], lr=1.0, momentum=0.0)
    with torch.no_grad():
        p.fill_(0.0)
    outer.step([torch.tensor([0.5])], alpha=0.5)  # global 0.5, local 0.0
    assert p.item() == pytest.approx(0.25)


def test_int8_codes_round_trip_within_half_a_step() -> None:
    x = torch.randn(1000, generator=torch.Generator().manual_seed(1)) * 3
    codes, scale = quantize_int8(x)
    assert codes.dtype == torch.int8 and int(codes.abs().max()) == 127
    assert (dequantize_int8(codes, scale) - x).abs().max() <= scale.item() / 2 + 1e-6
    zeros, s0 = quantize_int8(torch.zeros(4))
    assert zeros.tolist() == [0, 0, 0, 0] and s0.item() == 1.0


def test_batches_depend_only_on_seed_rank_and_step() -> None:
    d = data.CharData(context=4, text="abcdefghij" * 200)
    a, b = d.batch(0, 1, 7, 8), d.batch(0, 1, 7, 8)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(d.batch(0, 2, 7, 8)[0], a[0])  # another rank, other data
    x, y = a
    assert x.shape == (8, 4) and y.shape == (8,)
    # the target is the character after the context
    for row, nxt in zip(x.tolist(), y.tolist(), strict=True):
        assert (row[-1] + 1) % 10 == nxt


def test_char_mlp_has_the_documented_size() -> None:
    d = data.load("pydoc-topics")
    assert len(d.vocab) == 103
    assert sum(p.numel() for p in models.build("char-mlp", len(d.vocab)).parameters()) == 93_911


def test_teacher_student_floor_is_the_noise() -> None:
    ts = data.TeacherStudent(noise=0.1)
    x, y = ts.validation_set(20000)
    clean = torch.tanh(x @ ts.w1) @ ts.w2
    assert torch.mean((y - clean) ** 2).item() == pytest.approx(0.01, rel=0.05)


@pytest.mark.parametrize("name", ["char-mlp", "char-mlp-large", "teacher-mlp"])
def test_declared_shapes_are_the_models(name: str) -> None:
    from traffic.training.shapes import PYDOC_VOCAB, model_shapes

    model = models.build(name, PYDOC_VOCAB)
    assert model_shapes(name) == tuple(tuple(p.shape) for p in model.parameters())


def test_the_schema_names_what_the_ranks_implement() -> None:
    from typing import get_args

    from testbed.config.workloads import TRAINING_MODELS, TrainingWorkload
    from traffic.training.schedule import ALGORITHMS

    assert get_args(TrainingWorkload.model_fields["algorithm"].annotation) == ALGORITHMS
    assert TRAINING_MODELS == models.MODELS
