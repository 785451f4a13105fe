"""The collectives' table: one entry per collective stating its byte-count semantics, how to
fill its inputs, the exact expected result and its function per algorithm (as nccl-tests).

Sizes follow nccl-tests. ``count`` is the number of elements of the buffer a size refers to:

==============  ===================  ====================  =================================
collective      input per rank       output per rank       ``size`` means
==============  ===================  ====================  =================================
all_reduce      count (in place)     count                 the buffer
all_gather      count / n            count                 the gathered output
reduce_scatter  count                count / n             each rank's input
broadcast       count (in place)     count                 the buffer (root: rank 0)
all_to_all      count                count                 each rank's send buffer
==============  ===================  ====================  =================================
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from traffic.collectives.algorithms import (
    Algorithm,
    _cluster_sizes,
    flat_all_gather,
    flat_all_reduce,
    flat_all_to_all,
    flat_broadcast,
    flat_reduce_scatter,
    hier2d_all_reduce,
    hier_all_gather,
    hier_all_reduce,
    hier_broadcast,
    hier_reduce_scatter,
)
from traffic.collectives.inputs import Params, pattern, reduced_pattern
from traffic.context import RankContext


@dataclass(frozen=True)
class Collective:
    """One table entry: byte semantics, inputs, expected output and the algorithms.

    ``in_count``/``out_count`` map the size's element count to the per-rank buffer lengths;
    ``align(ctx, algorithm)`` is what the count must divide by; ``fill`` and ``expected`` give
    this rank's input and the exact output it must end with.
    """

    name: str
    in_place: bool
    in_count: Callable[[int, int], int]
    out_count: Callable[[int, int], int]
    align: Callable[[RankContext, str], int]
    fill: Callable[[RankContext, int, Params, torch.dtype], torch.Tensor]
    expected: Callable[[RankContext, int, Params, torch.dtype], torch.Tensor]
    algorithms: dict[str, Algorithm]
    notes: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


_ONLY_ALL_REDUCE = "hierarchical-2d is defined for all_reduce only"


def _n(ctx: RankContext, algorithm: str) -> int:
    return ctx.world_size


def _all_reduce_align(ctx: RankContext, algorithm: str) -> int:
    return len(ctx.cluster_ranks) if algorithm == "hierarchical-2d" else 1


def _fill_own(ctx: RankContext, count: int, params: Params, dtype: torch.dtype) -> torch.Tensor:
    return pattern(ctx.rank, count, 0, params, dtype)


def _fill_all_gather(
    ctx: RankContext, count: int, params: Params, dtype: torch.dtype
) -> torch.Tensor:
    c = count // ctx.world_size
    return pattern(ctx.rank, c, ctx.rank * c, params, dtype)


def _fill_broadcast(
    ctx: RankContext, count: int, params: Params, dtype: torch.dtype
) -> torch.Tensor:
    if ctx.rank == 0:
        return pattern(0, count, 0, params, dtype)
    return torch.zeros(count, dtype=dtype)


def _expect_sum(ctx: RankContext, count: int, params: Params, dtype: torch.dtype) -> torch.Tensor:
    return reduced_pattern(ctx.world_size, count, 0, params, dtype)


def _expect_all_gather(
    ctx: RankContext, count: int, params: Params, dtype: torch.dtype
) -> torch.Tensor:
    c = count // ctx.world_size
    return torch.cat([pattern(r, c, r * c, params, dtype) for r in range(ctx.world_size)])


def _expect_reduce_scatter(
    ctx: RankContext, count: int, params: Params, dtype: torch.dtype
) -> torch.Tensor:
    c = count // ctx.world_size
    return reduced_pattern(ctx.world_size, c, ctx.rank * c, params, dtype)


def _expect_broadcast(
    ctx: RankContext, count: int, params: Params, dtype: torch.dtype
) -> torch.Tensor:
    return pattern(0, count, 0, params, dtype)


def _expect_all_to_all(
    ctx: RankContext, count: int, params: Params, dtype: torch.dtype
) -> torch.Tensor:
    c = count // ctx.world_size
    return torch.cat([pattern(r, c, ctx.rank * c, params, dtype) for r in range(ctx.world_size)])


COLLECTIVES: dict[str, Collective] = {
    "all_reduce": Collective(
        name="all_reduce",
        in_place=True,
        in_count=lambda count, n: count,
        out_count=lambda count, n: count,
        align=_all_reduce_align,
        fill=_fill_own,
        expected=_expect_sum,
        algorithms={
            "flat": flat_all_reduce,
            "hierarchical": hier_all_reduce,
            "hierarchical-2d": hier2d_all_reduce,
        },
        notes={
            "hierarchical-2d": "intra-cluster reduce-scatter built from all_to_all_single + sum",
        },
    ),
    "all_gather": Collective(
        name="all_gather",
        in_place=False,
        in_count=lambda count, n: count // n,
        out_count=lambda count, n: count,
        align=_n,
        fill=_fill_all_gather,
        expected=_expect_all_gather,
        algorithms={"flat": flat_all_gather, "hierarchical": hier_all_gather},
        skipped={"hierarchical-2d": _ONLY_ALL_REDUCE},
    ),
    "reduce_scatter": Collective(
        name="reduce_scatter",
        in_place=False,
        in_count=lambda count, n: count,
        out_count=lambda count, n: count // n,
        align=_n,
        fill=_fill_own,
        expected=_expect_reduce_scatter,
        algorithms={"flat": flat_reduce_scatter, "hierarchical": hier_reduce_scatter},
        notes={
            "flat": "gloo reduce_scatter is an all_reduce of the whole input + local slice "
            "(all_reduce bytes on the wire)",
            "hierarchical": "leaders' reduce-scatter built from all_to_all_single + sum",
        },
        skipped={"hierarchical-2d": _ONLY_ALL_REDUCE},
    ),
    "broadcast": Collective(
        name="broadcast",
        in_place=True,
        in_count=lambda count, n: count,
        out_count=lambda count, n: count,
        align=lambda ctx, algorithm: 1,
        fill=_fill_broadcast,
        expected=_expect_broadcast,
        algorithms={"flat": flat_broadcast, "hierarchical": hier_broadcast},
        skipped={"hierarchical-2d": _ONLY_ALL_REDUCE},
    ),
    "all_to_all": Collective(
        name="all_to_all",
        in_place=False,
        in_count=lambda count, n: count,
        out_count=lambda count, n: count,
        align=_n,
        fill=_fill_own,
        expected=_expect_all_to_all,
        algorithms={"flat": flat_all_to_all},
        skipped={
            "hierarchical": "no hierarchical all_to_all",
            "hierarchical-2d": _ONLY_ALL_REDUCE,
        },
    ),
}


def skip_reason(ctx: RankContext, collective: str, algorithm: str) -> str | None:
    """Why this combination does not exist on this topology, or None when it runs."""
    coll = COLLECTIVES[collective]
    if algorithm in coll.skipped:
        return coll.skipped[algorithm]
    if algorithm == "hierarchical-2d" and ctx.column_group is None:
        sizes = "+".join(str(s) for s in _cluster_sizes(ctx))
        return f"hierarchical-2d needs the same number of ranks in every cluster (sizes {sizes})"
    if algorithm not in coll.algorithms:
        return f"no {algorithm} {collective}"
    return None


def note_for(ctx: RankContext, collective: str, algorithm: str) -> str | None:
    """What a reader of the results must know about how this combination was done."""
    note = COLLECTIVES[collective].notes.get(algorithm)
    if (collective, algorithm) == ("all_gather", "hierarchical") and len(
        set(_cluster_sizes(ctx))
    ) > 1:
        note = "unequal clusters: leaders exchange blocks with all_to_all_single (all-gather-v)"
    return note


def element_count(size: int, dtype: torch.dtype, align: int) -> int:
    """Largest count <= size / element size that divides by ``align`` (nccl-tests rounding)."""
    esz = torch.empty((), dtype=dtype).element_size()
    return (size // esz) // align * align


def count_for(
    ctx: RankContext, collective: str, algorithms: list[str], size: int, dtype: torch.dtype
) -> int:
    """One element count shared by every algorithm run for this collective and size, so
    algorithms are compared on identical bytes."""
    coll = COLLECTIVES[collective]
    align = 1
    for algorithm in algorithms:
        if skip_reason(ctx, collective, algorithm) is None:
            align = math.lcm(align, coll.align(ctx, algorithm))
    return element_count(size, dtype, align)
