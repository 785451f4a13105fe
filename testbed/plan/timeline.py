"""The timeline of a changing WAN: a PURE function from a scenario and its plan to every change of
every WAN direction and every fault action, at its time (``build_timeline``).

An ``Event`` is one thing the event runner (testbed.run.events) does: a ``set`` carries the
complete new state of each direction it changes (``Change``), the other actions name the link,
directions or cluster they act on. Times are seconds after the clock origin (the first measured
iteration, or the run's start with ``clock: wall``); an event with ``after_iteration`` counts
from the start of that iteration instead.
"""

from __future__ import annotations

from dataclasses import dataclass

ACTIONS = (
    "set",
    "blackhole",
    "unblackhole",
    "reset",
    "unreset",
    "link_down",
    "link_up",
    "gateway_down",
    "gateway_up",
)


@dataclass(frozen=True)
class Change:
    """The complete new state of one WAN direction's emulation after an event."""

    direction: str  # "east->west"
    rate: int  # bit/s
    buffer: int  # bytes (a `buffer: Nbdp` re-evaluated at the new rate and delay)
    delay: float
    jitter: float
    loss: float
    reorder: float
    ge_p: float = 0.0  # Gilbert-Elliott burst loss: good -> bad per packet (0, 0 = off)
    ge_r: float = 0.0  # bad -> good


@dataclass(frozen=True)
class Event:
    at: float  # s after the clock origin; with after_iteration, after that iteration starts
    after_iteration: int | None
    action: str  # one of ACTIONS
    source: str  # "schedule" | "trace" | "fault"
    fault: int | None  # index in scenario.faults (a fault's start and end events share it)
    link: str | None  # "east-west", for actions on a link
    cluster: str | None  # gateway_* actions
    directions: tuple[str, ...]  # WAN directions affected
    changes: tuple[Change, ...]  # for "set": the new state of each changed direction
    what: str  # for tables and plots: "rate 300 Mbit/s", "blackhole on (2 s)"


@dataclass(frozen=True)
class Timeline:
    events: tuple[Event, ...]  # absolute ones sorted by `at`, then anchored ones in order
    clock: str  # "workload" | "wall"
    horizon: float | None  # how far a looping trace was expanded (s); None if nothing loops
