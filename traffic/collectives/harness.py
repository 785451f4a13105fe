"""The timing harness shared by every collective (shaped like nccl-tests): check a spec's names,
prepare the inputs once per (collective, count), then time warm-up and measured runs of one
algorithm, checking every output against the exact result.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist

from testbed.core.vocab import ALGORITHMS
from traffic.collectives.inputs import (
    DTYPES,
    Buffers,
    CollectiveError,
    first_mismatch,
    pattern_params,
)
from traffic.collectives.table import COLLECTIVES
from traffic.context import RankContext
from traffic.entry import failure_fields

INJECT_ENV = "TESTBED_INJECT_FAULT"


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
