"""Offline replay of a DCQCN sender: logged sends and CNP arrivals through a fresh RP.

This module owns the proof that a live run's rate trace follows from its logged sends and CNP
arrivals alone: fed offline into a fresh :class:`~traffic.dcqcn.rp.ReactionPoint`, they
reproduce it exactly. :func:`replay_calls` makes the live RP's ``calls`` again through
:meth:`ReactionPoint.apply`; :func:`replay` merges sends and CNPs by time, a CNP before a send at
the same instant (the sender drains its CNP socket before it sends in a tick).

For the replay to be exact the live sender passes the RP the very times it logs (one monotonic
clock, never earlier than its previous call), calls ``on_sent`` once per datagram and, at equal
times, drains CNPs first (or keeps ``rp.calls`` for :func:`replay_calls`).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from testbed.core.dcqcn import DcqcnParams
from traffic.dcqcn.rp import ReactionPoint, RpCall, RpEvent


def replay_calls(
    params: DcqcnParams,
    line_rate: float,
    calls: Iterable[RpCall | tuple],
    *,
    t0: float = 0.0,
    log_alpha_decay: bool = False,
) -> ReactionPoint:
    """A fresh RP that made ``calls`` (a live RP's ``calls``, or rows read back from a file)."""
    rp = ReactionPoint(params, line_rate, t0=t0, log_alpha_decay=log_alpha_decay)
    for call in calls:
        rp.apply(RpCall._make(call))
    return rp


def replay(
    params: DcqcnParams,
    line_rate: float,
    sends: Iterable[tuple[float, int]],
    cnps: Iterable[float],
    *,
    until: float | None = None,
    t0: float = 0.0,
    log_alpha_decay: bool = False,
) -> list[RpEvent]:
    """The RP's events for ``sends`` ((t, nbytes), time-ordered) and CNP arrival times
    (time-ordered), advanced to ``until`` at the end if given."""
    # rank 0 sorts a CNP before a send at the same t; heapq.merge keeps each input's order
    merged = heapq.merge(
        ((t, 0, RpCall(t, "cnp")) for t in cnps),
        ((t, 1, RpCall(t, "sent", n)) for t, n in sends),
        key=lambda x: (x[0], x[1]),
    )
    calls = [c for _, _, c in merged]
    if until is not None:
        calls.append(RpCall(until, "advance"))
    return replay_calls(params, line_rate, calls, t0=t0, log_alpha_decay=log_alpha_decay).events


def rate_trace(events: Iterable[RpEvent]) -> list[tuple[float, float]]:
    """(t, RC) at every change of RC: the step function the pacer followed."""
    out: list[tuple[float, float]] = []
    for e in events:
        if not out or e.rc != out[-1][1]:
            out.append((e.t, e.rc))
    return out
