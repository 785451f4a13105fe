"""Collectives run inside rank processes: flat and hierarchical algorithms, inputs and checks.

Shaped like nccl-tests: one shared harness (:func:`measure`) and one small table entry per
collective (:data:`COLLECTIVES`) that states its byte-count semantics, how to fill its inputs,
the exact expected result and one function per algorithm.

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

Algorithms (every one is a real sequence of torch.distributed calls; nothing is simulated):

* ``flat``: the library's own collective over the world group. Note: gloo (torch 2.13) implements
  ``reduce_scatter`` as an all-reduce of the whole input followed by a local slice, so its bytes on
  the wire are those of an all-reduce (``2(n-1)/n * S`` per rank, not ``(n-1)/n * S``); every
  record of it carries a ``note`` saying so.
* ``hierarchical``: inside each cluster, then between cluster leaders (lowest rank of each
  cluster), then inside each cluster again. Only the leaders cross the WAN.
* ``hierarchical-2d`` (all-reduce only, equal ranks per cluster): reduce-scatter inside the
  cluster, all-reduce of shard j among the j-th ranks of all clusters ("column" groups), all-gather
  inside the cluster. All m ranks of a cluster cross the WAN, each with 1/m of the data.

Reduce-scatter steps inside the hierarchical algorithms do not use gloo's reduce_scatter (see
above): they are direct reduce-scatters built from ``all_to_all_single`` (each rank sends every
peer the part that peer owns, then sums what it received), which moves exactly ``(n-1)/n * S``.

Inputs are small integers, so every sum is exact in float32, float16 and bfloat16 whatever the
order of additions, and a result is checked for equality with the exact expected tensor (like
``nccl-tests -c``). Values are ``1 + (rank % A) + ((index + offset) % B)``, with A and B chosen
from the dtype and world size (:func:`pattern_params`); every expected value is >= 1, so outputs
are cleared to 0 before each run and an element nobody wrote is caught.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from traffic.context import RankContext
from traffic.entry import failure_fields

ALGORITHMS = ("flat", "hierarchical", "hierarchical-2d")

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

# torch 2.13 renamed the single-tensor variants; keep working with older torch.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

INJECT_ENV = "TESTBED_INJECT_FAULT"


class CollectiveError(Exception):
    """A spec asks for something the collectives cannot do (unknown name, impossible check)."""


# --------------------------------------------------------------------------- inputs and checks


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


# --------------------------------------------------------------------------- buffers


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


Algorithm = Callable[["RankContext", Buffers], None]
Params = tuple[int, int]


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


# --------------------------------------------------------------------------- helpers


def _cluster_order(ctx: RankContext) -> list[int]:
    """All ranks, cluster by cluster in leader order (the layout of leader-level buffers)."""
    return [r for ranks in ctx.clusters.values() for r in ranks]


def _in_rank_order(ctx: RankContext) -> bool:
    return _cluster_order(ctx) == list(range(ctx.world_size))


def _cluster_sizes(ctx: RankContext) -> list[int]:
    return [len(ranks) for ranks in ctx.clusters.values()]


def _direct_reduce_scatter(
    out: torch.Tensor,
    inp: torch.Tensor,
    splits: list[int],
    me: int,
    group: Any,
    recv: torch.Tensor,
) -> None:
    """Reduce-scatter with blocks of (possibly) unequal sizes, from all_to_all_single.

    ``inp`` holds ``len(splits)`` consecutive blocks, block j (``splits[j]`` elements) belonging
    to group member j; member ``me`` ends with the sum of everyone's block ``me`` in ``out``.
    ``recv`` must hold ``len(splits) * splits[me]`` elements. Moves ``(k-1)/k`` of the data,
    unlike gloo's reduce_scatter (an all-reduce).
    """
    k = len(splits)
    dist.all_to_all_single(
        recv, inp, output_split_sizes=[splits[me]] * k, input_split_sizes=splits, group=group
    )
    torch.sum(recv.view(k, splits[me]), dim=0, out=out)


# --------------------------------------------------------------------------- flat


def flat_all_reduce(ctx: RankContext, b: Buffers) -> None:
    dist.all_reduce(b.output)


def flat_all_gather(ctx: RankContext, b: Buffers) -> None:
    _all_gather_single(b.output, b.input)


def flat_reduce_scatter(ctx: RankContext, b: Buffers) -> None:
    _reduce_scatter_single(b.output, b.input)


def flat_broadcast(ctx: RankContext, b: Buffers) -> None:
    dist.broadcast(b.output, src=0)


def flat_all_to_all(ctx: RankContext, b: Buffers) -> None:
    dist.all_to_all_single(b.output, b.input)


# --------------------------------------------------------------------------- hierarchical


def hier_all_reduce(ctx: RankContext, b: Buffers) -> None:
    """Reduce to the leader in the cluster, all-reduce among leaders, broadcast in the cluster."""
    buf = b.output
    local = len(ctx.cluster_ranks) > 1
    if local:
        with ctx.timer("cluster_reduce"):
            dist.reduce(buf, dst=ctx.leader, group=ctx.cluster_group)
    if ctx.is_leader and len(ctx.leader_ranks) > 1:
        with ctx.timer("leaders_all_reduce"):
            dist.all_reduce(buf, group=ctx.leaders_group)
    if local:
        with ctx.timer("cluster_broadcast"):
            dist.broadcast(buf, src=ctx.leader, group=ctx.cluster_group)


def hier_all_gather(ctx: RankContext, b: Buffers) -> None:
    """Gather to the leader in the cluster, all-gather of cluster blocks among leaders,
    re-order the blocks to rank order (when clusters are not contiguous rank ranges), broadcast
    in the cluster. Unequal clusters exchange their blocks with all_to_all_single (an
    all-gather-v; each leader sends its block once to every other leader)."""
    inp, out = b.input, b.output
    c = inp.numel()
    m = len(ctx.cluster_ranks)
    if ctx.is_leader:
        mine = b.scratch("cluster_block", m * c)
        if m > 1:
            with ctx.timer("cluster_gather"):
                dist.gather(inp, list(mine.split(c)), dst=ctx.leader, group=ctx.cluster_group)
        else:
            mine.copy_(inp)
        identity = _in_rank_order(ctx)
        stage = out if identity else b.scratch("stage", out.numel())
        sizes = [s * c for s in _cluster_sizes(ctx)]
        k = len(sizes)
        if k == 1:
            stage.copy_(mine)
        else:
            with ctx.timer("leaders_all_gather"):
                if len(set(sizes)) == 1:
                    _all_gather_single(stage, mine, group=ctx.leaders_group)
                else:
                    send = b.scratch("send", k * m * c)
                    send.view(k, m * c).copy_(mine.view(1, m * c).expand(k, m * c))
                    dist.all_to_all_single(
                        stage,
                        send,
                        output_split_sizes=sizes,
                        input_split_sizes=[m * c] * k,
                        group=ctx.leaders_group,
                    )
        if not identity:
            order = torch.tensor(_cluster_order(ctx), dtype=torch.int64)
            out.view(ctx.world_size, c).index_copy_(0, order, stage.view(ctx.world_size, c))
    elif m > 1:
        with ctx.timer("cluster_gather"):
            dist.gather(inp, None, dst=ctx.leader, group=ctx.cluster_group)
    if m > 1:
        with ctx.timer("cluster_broadcast"):
            dist.broadcast(out, src=ctx.leader, group=ctx.cluster_group)


def hier_reduce_scatter(ctx: RankContext, b: Buffers) -> None:
    """Reduce to the leader in the cluster, direct reduce-scatter of cluster blocks among the
    leaders (all_to_all_single + local sum; not gloo's reduce_scatter, which is an all-reduce),
    scatter in the cluster. The input is used as scratch."""
    inp, out = b.input, b.output
    c = out.numel()
    m = len(ctx.cluster_ranks)
    if m > 1:
        with ctx.timer("cluster_reduce"):
            dist.reduce(inp, dst=ctx.leader, group=ctx.cluster_group)
    block = None
    if ctx.is_leader:
        # this cluster's sum, blocks re-ordered to cluster order when clusters interleave
        if _in_rank_order(ctx):
            staged = inp
        else:
            staged = b.scratch("stage", inp.numel())
            order = torch.tensor(_cluster_order(ctx), dtype=torch.int64)
            torch.index_select(inp.view(ctx.world_size, c), 0, order, out=staged.view(-1, c))
        sizes = [s * c for s in _cluster_sizes(ctx)]
        me = ctx.leader_ranks.index(ctx.rank)
        if len(sizes) == 1:
            block = staged
        else:
            block = b.scratch("block", m * c)
            with ctx.timer("leaders_reduce_scatter"):
                _direct_reduce_scatter(
                    block,
                    staged,
                    sizes,
                    me,
                    ctx.leaders_group,
                    b.scratch("recv", len(sizes) * m * c),
                )
    if m > 1:
        with ctx.timer("cluster_scatter"):
            scatter_list = list(block.split(c)) if block is not None else None
            dist.scatter(out, scatter_list, src=ctx.leader, group=ctx.cluster_group)
    else:
        assert block is not None
        out.copy_(block)


def hier_broadcast(ctx: RankContext, b: Buffers) -> None:
    """Broadcast from rank 0 among leaders (rank 0 always leads its cluster), then in clusters."""
    buf = b.output
    if ctx.is_leader and len(ctx.leader_ranks) > 1:
        with ctx.timer("leaders_broadcast"):
            dist.broadcast(buf, src=0, group=ctx.leaders_group)
    if len(ctx.cluster_ranks) > 1:
        with ctx.timer("cluster_broadcast"):
            dist.broadcast(buf, src=ctx.leader, group=ctx.cluster_group)


def hier2d_all_reduce(ctx: RankContext, b: Buffers) -> None:
    """Reduce-scatter in the cluster (rank j of the cluster owns shard j; direct, from
    all_to_all_single), all-reduce of shard j among the j-th ranks of every cluster, all-gather
    in the cluster."""
    buf = b.output
    m = len(ctx.cluster_ranks)
    shard = buf.numel() // m
    if m > 1:
        part = b.scratch("shard", shard)
        with ctx.timer("cluster_reduce_scatter"):
            _direct_reduce_scatter(
                part,
                buf,
                [shard] * m,
                ctx.index_in_cluster,
                ctx.cluster_group,
                b.scratch("recv", buf.numel()),
            )
    else:
        part = buf
    if ctx.column_group is not None and len(ctx.column_ranks) > 1:
        with ctx.timer("column_all_reduce"):
            dist.all_reduce(part, group=ctx.column_group)
    if m > 1:
        with ctx.timer("cluster_all_gather"):
            _all_gather_single(buf, part, group=ctx.cluster_group)


# --------------------------------------------------------------------------- the table

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


# --------------------------------------------------------------------------- the harness


def validate(collectives: list[str], algorithms: list[str], dtype: str) -> torch.dtype:
    """Check names from a spec; returns the torch dtype."""
    bad = [c for c in collectives if c not in COLLECTIVES]
    if bad:
        raise CollectiveError(f"unknown collective(s) {bad}; known: {sorted(COLLECTIVES)}")
    bad = [a for a in algorithms if a not in ALGORITHMS]
    if bad:
        raise CollectiveError(f"unknown algorithm(s) {bad}; known: {list(ALGORITHMS)}")
    if dtype not in DTYPES:
        raise CollectiveError(f"unknown dtype {dtype!r}; known: {sorted(DTYPES)}")
    return DTYPES[dtype]


def injected_fault(rank: int, collective: str, algorithm: str) -> bool:
    """Tests only: ``TESTBED_INJECT_FAULT=rank:R[:collective[:algorithm]]`` corrupts rank R's
    output after the operation (so the check must catch it)."""
    spec = os.environ.get(INJECT_ENV)
    if not spec:
        return False
    parts = spec.split(":")
    if parts[0] != "rank" or len(parts) < 2 or int(parts[1]) != rank:
        return False
    wanted = [*parts[2:4]]
    return (not wanted or wanted[0] == collective) and (len(wanted) < 2 or wanted[1] == algorithm)


@dataclass
class Result:
    """One timed run of one rank."""

    iteration: int
    seconds: float
    correct: bool
    phases: dict[str, float]
    start: float = 0.0  # unix time (time.time()) when the timed operation began
    outcome: str = "ok"  # ok | error | timeout (traffic.entry.failure_fields)
    error_type: str | None = None
    error: str | None = None
    bad_index: int | None = None
    got: float | None = None
    want: float | None = None


@dataclass
class Prepared:
    """Inputs and expected result for one (collective, count), shared by its algorithms."""

    source: torch.Tensor  # this rank's input, copied into the buffer before every run
    expected: torch.Tensor


def prepare(ctx: RankContext, collective: str, count: int, dtype: torch.dtype) -> Prepared:
    coll = COLLECTIVES[collective]
    params = pattern_params(ctx.world_size, dtype)
    return Prepared(coll.fill(ctx, count, params, dtype), coll.expected(ctx, count, params, dtype))


def measure(
    ctx: RankContext,
    collective: str,
    algorithm: str,
    count: int,
    prepared: Prepared,
    warmup: int,
    iterations: int,
    announce: Callable[[int], None] | None = None,
) -> Iterator[Result]:
    """Run ``warmup`` untimed then ``iterations`` timed operations, yielding each timed result.

    Each run: refill the input and clear the output (untimed), world barrier, time the
    operation alone with ``perf_counter``, then check the output against the exact result.
    Every rank must call this with the same arguments in the same order. ``announce(i)`` is called
    right before timed operation ``i`` starts (rank 0 tells the runner: traffic.announce).

    An operation that raises (a gloo timeout or a closed pair: the process group is dead after
    either, see docs/faults.md) yields its Result with ``outcome`` error|timeout, the
    exception's type and text (a warm-up one with its negative ``iteration``), then the
    exception propagates: the rank records the failed operation and exits with it.
    """
    coll = COLLECTIVES[collective]
    algo = coll.algorithms[algorithm]
    n = ctx.world_size
    dtype = prepared.source.dtype
    inp = torch.empty(coll.in_count(count, n), dtype=dtype)
    out = inp if coll.in_place else torch.zeros(coll.out_count(count, n), dtype=dtype)
    bufs = Buffers(inp, out)
    inject = injected_fault(ctx.rank, collective, algorithm)
    for i in range(-warmup, iterations):
        inp.copy_(prepared.source)
        if not coll.in_place:
            out.zero_()
        ctx.take_phases()
        wall, t0 = time.time(), time.perf_counter()
        try:
            dist.barrier()
            if i >= 0 and announce is not None:
                announce(i)
            wall = time.time()  # the traces' clock, to line iterations up with tcp/queue samples
            t0 = time.perf_counter()
            algo(ctx, bufs)
        except Exception as exc:
            failed = Result(i, time.perf_counter() - t0, False, ctx.take_phases(), start=wall)
            for key, value in failure_fields(exc).items():
                setattr(failed, key, value)
            yield failed
            raise
        t1 = time.perf_counter()
        phases = ctx.take_phases()
        if i < 0:
            continue
        if inject:
            out[out.numel() // 2] = -1
        bad = first_mismatch(out, prepared.expected)
        res = Result(i, t1 - t0, bad is None, phases, start=wall)
        if bad is not None:
            res.bad_index = bad
            res.got = float(out[bad])
            res.want = float(prepared.expected[bad])
        yield res
