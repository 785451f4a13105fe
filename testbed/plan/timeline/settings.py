"""A link's ``set`` events: its schedule steps, its trace's bins (testbed.plan.timeline.trace)
and its burst losses at a time, applied in time order to the link's configured state so each
``set`` carries the complete new state of every direction it changes. PURE.

Only what a step names changes; ``restore`` returns to the configured settings (a burst loss in
progress stays on); a ``buffer: Nbdp`` is re-evaluated at every rate or delay change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from testbed.core.syntax import duration_text, percent_text, rate_text, size_text
from testbed.plan.directions import link_directions
from testbed.plan.timeline.model import (
    ENDS,
    SETS,
    STARTS,
    Builder,
    Change,
    Event,
    Interval,
    Op,
    State,
    configured_states,
    full_changes,
)
from testbed.plan.timeline.trace import trace_ops

if TYPE_CHECKING:
    from testbed.config.wan import WanLink


def link_settings(b: Builder, i: int, link: WanLink) -> None:
    """The ``set`` events of link ``i`` (schedule, trace, absolute burst losses), each with the
    full state of the directions it changes (rate 0: held)."""
    configured = configured_states(b.plan, link)
    ops: list[Op] = []
    for k, step in enumerate(link.schedule):
        ops.append(Op(step.at, SETS, len(ops), _schedule_op(link, i, k, configured)))
        if step.loss is not None:
            for d in link_directions(link.between, step.direction, link.path):
                b.intervals.append(
                    Interval(
                        ("loss", d),
                        step.at,
                        step.at,
                        None,
                        f"{link.where(i)}.schedule[{k}]",
                        f"sets loss at {step.at:g} s",
                    )
                )
    if link.trace is not None:
        ops += trace_ops(b, i, link, len(ops))
    for j, f in enumerate(b.scenario.faults):
        if f.kind == "burst_loss" and link.name in {p.name for p in b.scenario.links_named(f.link)}:
            if f.at is None:
                continue  # anchored: the fault expansion builds it from the configured state
            dirs = link_directions(link.between, f.direction, link.path)
            ops.append(Op(f.at, STARTS, len(ops), _burst_op(j, dirs, f.p, f.r, f.duration)))
            ops.append(Op(f.at + f.duration, ENDS, len(ops), _burst_op(j, dirs, 0.0, 0.0)))
    ops.sort(key=lambda o: (o.at, o.prio, o.seq))
    states = {k: v.copy() for k, v in configured.items()}
    before = full_changes(states)
    for op in ops:
        result = op.apply(states)
        if result is None:
            continue
        named, what, source, fault, where = result
        after = full_changes(states)
        dirs = [d for d in after if d in named or after[d] != before[d]]
        _check_aqm(b, link, after, dirs, where, op.at)
        b.add(
            op.at,
            None,
            op.prio,
            Event(
                op.at,
                None,
                "set",
                source,
                fault,
                link.name,
                None,
                tuple(dirs),
                tuple(after[d] for d in dirs),
                what,
            ),
        )
        before = after


def _check_aqm(
    b: Builder, link: WanLink, after: dict[str, Change], dirs: list[str], where: str, at: float
) -> None:
    for name in dirs:
        aqm = next(w.aqm for w in b.plan.wan if w.name == name)
        if aqm is not None and aqm.threshold >= after[name].buffer:
            raise b.error(
                where,
                f"at {at:g} s the buffer of {name} becomes {after[name].buffer} B, not above its "
                f"aqm threshold ({aqm.threshold} B); use a larger `buffer` or lower thresholds",
            )


def _settings_text(step: Any) -> str:
    parts = []
    if step.rate is not None:
        parts.append(f"rate {rate_text(step.rate)}")
    for f in ("delay", "jitter"):
        if getattr(step, f) is not None:
            parts.append(f"{f} {duration_text(getattr(step, f))}")
    for f in ("loss", "reorder"):
        if getattr(step, f) is not None:
            parts.append(f"{f} {percent_text(getattr(step, f))}")
    if step.buffer is not None:
        kind, amount = step.buffer
        parts.append(f"buffer {amount:g}bdp" if kind == "bdp" else f"buffer {size_text(amount)}")
    return ", ".join(parts)


def _schedule_op(link: WanLink, i: int, k: int, configured: dict[str, State]) -> Any:
    step = link.schedule[k]
    dirs = link_directions(link.between, step.direction, link.path)

    def apply(states: dict[str, State]) -> tuple[Any, ...]:
        for d in dirs:
            s = states[d]
            if step.restore:
                # faults are not configuration: a burst loss in progress stays on
                states[d] = State(**{**configured[d].__dict__, "ge_p": s.ge_p, "ge_r": s.ge_r})
                continue
            for f in ("rate", "delay", "jitter", "loss", "reorder", "buffer"):
                if getattr(step, f) is not None:
                    setattr(s, f, getattr(step, f))
        what = "restore the configured settings" if step.restore else _settings_text(step)
        if step.direction != "both":
            what += f" ({dirs[0]})"
        return dirs, what, "schedule", None, f"{link.where(i)}.schedule[{k}]"

    return apply


def _burst_op(j: int, dirs: tuple[str, ...], p: float, r: float, duration: float = 0.0) -> Any:
    def apply(states: dict[str, State]) -> tuple[Any, ...]:
        for d in dirs:
            states[d].ge_p, states[d].ge_r = p, r
        if p or r:
            what = (
                f"burst loss on: p {percent_text(p)}, r {percent_text(r)} "
                f"({duration_text(duration)})"
            )
        else:
            what = "burst loss off"
        return dirs, what, "fault", j, f"faults[{j}]"

    return apply
