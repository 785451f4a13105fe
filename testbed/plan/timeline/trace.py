"""A link's trace replayed: its file read and binned (testbed.config.linktrace), each bin one
settings change, a looping trace repeated up to the horizon. PURE but for reading the file.

A bin of rate 0 holds the bottleneck's queue for that bin (nothing leaves, arrivals wait up to
the buffer), as Mahimahi does; a trace that does not loop ends on its last bin's settings, held.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.config.linktrace import TraceBins, read_trace
from testbed.core.syntax import duration_text, percent_text, rate_text
from testbed.core.units import format_duration
from testbed.plan.directions import link_directions
from testbed.plan.timeline.model import MAX_TRACE_EVENTS, SETS, Builder, Interval, Op, State

if TYPE_CHECKING:
    from testbed.config.wan import WanLink


def read_link_trace(link: WanLink, i: int, base_dir: Path, source: str = "<scenario>") -> TraceBins:
    """Link ``i``'s (or its path's) trace file read and binned (errors name
    ``wan[i].trace.file`` or ``wan[i].paths[j].trace.file``)."""
    assert link.trace is not None
    path = Path(base_dir) / link.trace.file
    return read_trace(
        path,
        link.trace.format,
        link.trace.bin,
        link.trace.scale,
        source=source,
        field=f"{link.where(i)}.trace.file",
    )


def trace_ops(b: Builder, i: int, link: WanLink, seq0: int) -> list[Op]:
    """One op per bin (per period when it loops, up to the horizon)."""
    trace = link.trace
    assert trace is not None
    bins = read_link_trace(link, i, b.base_dir, b.source)
    dirs = link_directions(link.between, trace.direction, link.path)
    where = f"{link.where(i)}.trace"
    period = bins.period
    expanded: list[tuple[float, Any]] = []
    if trace.loop:
        b.loops = True
        if b.horizon / trace.bin > MAX_TRACE_EVENTS:
            raise b.error(
                f"{where}.bin",
                f"looping {format_duration(trace.bin)} bins up to {b.horizon:g} s would be "
                f"{b.horizon / trace.bin:.0f} shaper changes (at most {MAX_TRACE_EVENTS}); use "
                "a larger bin",
            )
        k = 0
        while k * period < b.horizon:
            for x in bins.bins:
                at = round(k * period + x.t, 9)
                if at >= b.horizon:
                    break
                expanded.append((at, x))
            k += 1
    else:
        expanded = [(x.t, x) for x in bins.bins]
        final = bins.last
        held = bins.bins[-1]
        if (final.rate, final.delay, final.loss) != (held.rate, held.delay, held.loss):
            expanded.append((period, final))
    ops: list[Op] = []
    for at, x in expanded:
        label = f"trace bin {round(x.t / bins.width)}" if x is not bins.last else "trace end, held"
        ops.append(Op(at, SETS, seq0 + len(ops), _trace_op(where, dirs, x, label)))
    if bins.bins[0].loss is not None:
        end = b.horizon if trace.loop else period
        for d in dirs:
            b.intervals.append(
                Interval(("loss", d), 0.0, end, None, where, f"sets loss from 0 to {end:g} s")
            )
    return ops


def _trace_op(where: str, dirs: tuple[str, ...], x: Any, label: str) -> Any:
    """A bin's settings; a zero-rate bin holds the queue (Mahimahi: packets wait for the next
    delivery opportunity) and keeps the buffer of the rate before it."""

    def apply(states: dict[str, State]) -> tuple[Any, ...]:
        for d in dirs:
            states[d].held = x.rate == 0
            if x.rate:
                states[d].rate = x.rate
            if x.delay is not None:
                states[d].delay = x.delay
            if x.loss is not None:
                states[d].loss = x.loss
        what = f"{label}: " + (
            f"rate {rate_text(x.rate)}" if x.rate else "rate 0, held (nothing leaves)"
        )
        if x.delay is not None:
            what += f", delay {duration_text(x.delay)}"
        if x.loss is not None:
            what += f", loss {percent_text(x.loss)}"
        return dirs, what, "trace", None, where

    return apply
