"""The inputs a collective starts from and the exact result it must end with, and its buffers.

Inputs are small integers, so every sum is exact in float32, float16 and bfloat16 whatever the
order of additions, and a result is checked for equality with the exact expected tensor (like
``nccl-tests -c``). Values are ``1 + (rank % A) + ((index + offset) % B)``, with A and B chosen
from the dtype and world size (:func:`pattern_params`); every expected value is >= 1, so outputs
are cleared to 0 before each run and an element nobody wrote is caught.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
}

# Largest N such that every integer 0..N is exact in the dtype (2 ** (mantissa bits + 1)).
EXACT_LIMIT = {
    torch.float32: 2**24,
    torch.float16: 2**11,
    torch.bfloat16: 2**8,
    torch.float64: 2**53,
}


Params = tuple[int, int]


class CollectiveError(Exception):
    """A spec asks for something the collectives cannot do (unknown name, impossible check)."""


def pattern_params(world_size: int, dtype: torch.dtype) -> tuple[int, int]:
    """(A, B) for the fill ``1 + (rank % A) + (i % B)`` so that n * max value stays exact."""
    per_rank = EXACT_LIMIT[dtype] // world_size  # largest value a rank may contribute
    if per_rank < 2:
        raise CollectiveError(
            f"{world_size} ranks: sums of {dtype} inputs cannot be checked exactly "
            f"(limit {EXACT_LIMIT[dtype]}); use float32"
        )
    a = min(world_size, max(1, per_rank // 2))
    b = min(251, per_rank - a + 1)
    return a, b


def pattern(
    rank: int, numel: int, offset: int, params: tuple[int, int], dtype: torch.dtype
) -> torch.Tensor:
    """The input rank ``rank`` contributes at global indices ``offset .. offset + numel``."""
    a, b = params
    return _periodic(numel, offset, b, dtype).add_(1 + rank % a)


def _periodic(numel: int, offset: int, period: int, dtype: torch.dtype) -> torch.Tensor:
    """``(offset + i) % period`` for i < numel, built from one period (no int64 index array)."""
    tile = (torch.arange(period, dtype=torch.int64) + offset) % period
    reps = -(-numel // period) if numel else 0
    return tile.to(dtype).repeat(reps)[:numel].contiguous()


def reduced_pattern(
    world_size: int, numel: int, offset: int, params: tuple[int, int], dtype: torch.dtype
) -> torch.Tensor:
    """The exact elementwise sum of :func:`pattern` over all ranks."""
    a, _ = params
    base = sum(1 + r % a for r in range(world_size))
    return _periodic(numel, offset, params[1], dtype).mul_(world_size).add_(base)


def first_mismatch(out: torch.Tensor, expected: torch.Tensor) -> int | None:
    """Index of the first element that differs, or None when equal."""
    if torch.equal(out, expected):
        return None
    return int(torch.nonzero(out != expected)[0].item())


@dataclass
class Buffers:
    """The tensors of one (collective, algorithm, size): ``input``, ``output`` and scratch.

    In-place collectives (all_reduce, broadcast) use one tensor for both. Algorithms may use
    ``input`` as scratch (it is refilled before every run) and get reusable temporaries from
    :meth:`scratch`, so the warm-up run allocates them and timed runs do not.
    """

    input: torch.Tensor
    output: torch.Tensor
    _scratch: dict[tuple[str, int], torch.Tensor] = field(default_factory=dict, repr=False)

    def scratch(self, name: str, numel: int) -> torch.Tensor:
        key = (name, numel)
        if key not in self._scratch:
            self._scratch[key] = torch.empty(numel, dtype=self.output.dtype)
        return self._scratch[key]
