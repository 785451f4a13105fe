"""The parameter shapes of the built-in models, without torch: the runner predicts a training
run's communication (traffic.training.schedule) from them before any rank starts. A unit test
holds them equal to the torch models' (traffic.training.models)."""

from __future__ import annotations

import itertools

PYDOC_VOCAB = 103  # distinct characters of pydoc_data.topics (traffic.training.data)


def _mlp(widths: list[int]) -> list[tuple[int, ...]]:
    shapes: list[tuple[int, ...]] = []
    for a, b in itertools.pairwise(widths):
        shapes += [(b, a), (b,)]
    return shapes


def model_shapes(name: str, vocab: int = PYDOC_VOCAB) -> tuple[tuple[int, ...], ...]:
    if name == "char-mlp":
        return ((vocab, 16), *_mlp([16 * 16, 256, vocab]))
    if name == "char-mlp-large":
        return ((vocab, 32), *_mlp([32 * 32, 1024, 1024, vocab]))
    if name == "teacher-mlp":
        return tuple(_mlp([32, 64, 1]))
    raise ValueError(f"model {name!r} is unknown")
