"""The timeline's data (``Change``, ``Event``, ``Timeline``) and the working state its expansion
shares: a direction's settings (``State``), a held span (``Interval``, for the overlap checks)
and the ``Builder`` every expansion adds its events and spans to. PURE.

An event's ``action`` is one of ``testbed.core.events.ACTIONS``. Events at the same time are
ordered by priority: what ends first (a blackhole lifted at 12 s and another one starting at
12 s do not overlap), then the new settings, then what starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.core.errors import ScenarioError
from testbed.plan.directions import link_directions
from testbed.plan.sizing import bdp_bytes, resolve_buffer

if TYPE_CHECKING:
    from testbed.config.scenario import Scenario
    from testbed.config.wan import WanLink
    from testbed.plan.model import NetworkPlan

ENDS, SETS, STARTS = 0, 1, 2  # priorities of events at the same time
FOREVER = math.inf
DEFAULT_HORIZON = 60.0  # s: what `testbed plan` expands a looping trace to at least
MAX_TRACE_EVENTS = 2_000_000  # a looping trace's bins up to the horizon (55 h of 100 ms bins)


@dataclass(frozen=True)
class Change:
    """The complete new state of one WAN direction's emulation after an event."""

    direction: str  # "east->west"
    rate: int  # bit/s; 0: held (a trace's zero-rate bin: the bottleneck serves nothing)
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
    action: str  # one of testbed.core.events.ACTIONS
    source: str  # "schedule" | "trace" | "fault"
    fault: int | None  # index in scenario.faults (a fault's start and end events share it)
    link: str | None  # "east-west", for actions on a link
    cluster: str | None  # gateway_* actions
    directions: tuple[str, ...]  # WAN directions affected
    changes: tuple[Change, ...]  # for "set": the new state of each changed direction
    what: str  # for tables and plots: "rate 300mbit", "blackhole on (2s)": scenario syntax


@dataclass(frozen=True)
class Timeline:
    events: tuple[Event, ...]  # absolute ones sorted by `at`, then anchored ones in order
    clock: str  # "workload" | "wall"
    horizon: float | None  # how far a looping trace was expanded (s); None if nothing loops


@dataclass
class State:
    """One direction's settings at some moment (buffer still a setting: resolved per change)."""

    rate: int
    delay: float
    jitter: float
    loss: float
    reorder: float
    buffer: tuple[str, float]
    ge_p: float = 0.0
    ge_r: float = 0.0
    held: bool = False  # a trace's zero-rate bin: nothing leaves; ``rate`` is the one before

    def copy(self) -> State:
        return State(**self.__dict__)


@dataclass(frozen=True)
class Interval:
    """A span something holds (for the overlap checks); ``anchor``: the iteration it counts from."""

    scope: tuple[str, str]  # ("blackhole", direction) | ("port", link) | ...
    start: float
    end: float
    anchor: int | None
    field: str  # faults[2], wan[0].trace
    label: str  # "blackhole 12..14 s"


@dataclass
class Op:
    """A change of a link's settings, applied in time order to get each ``set``'s full state."""

    at: float
    prio: int
    seq: int
    apply: Any  # (states) -> (directions named, what, source, fault, field), or None


@dataclass
class Builder:
    scenario: Scenario
    plan: NetworkPlan
    base_dir: Path
    horizon: float
    source: str
    events: list[tuple[tuple[Any, ...], Event]] = field(default_factory=list)
    intervals: list[Interval] = field(default_factory=list)
    seq: int = 0
    loops: bool = False

    def error(self, where: str, message: str) -> ScenarioError:
        return ScenarioError(f"{self.source}: {where}: {message}")

    def add(self, at: float, anchor: int | None, prio: int, event: Event) -> None:
        self.seq += 1
        key = (0, 0, at, prio, self.seq) if anchor is None else (1, anchor, at, prio, self.seq)
        self.events.append((key, event))


def configured_states(plan: NetworkPlan, link: WanLink) -> dict[str, State]:
    """Each direction of ``link`` (or path) as the plan configures it at bring-up."""
    out = {}
    names = link_directions(link.between, "both", link.path)
    for name, reverse in zip(names, (False, True), strict=True):
        d = next(w for w in plan.wan if w.name == name)
        buffer = link.direction(reverse)["buffer"]
        out[name] = State(d.rate, d.delay, d.jitter, d.loss, d.reorder, buffer)
    return out


def full_changes(states: dict[str, State]) -> dict[str, Change]:
    """Each direction's complete state: the buffer resolved at its rate and the link's RTT."""
    rtt = sum(s.delay for s in states.values())
    out = {}
    for name, s in states.items():
        buffer = resolve_buffer(s.buffer, bdp_bytes(s.rate, rtt))
        rate = 0 if s.held else s.rate
        out[name] = Change(name, rate, buffer, s.delay, s.jitter, s.loss, s.reorder, s.ge_p, s.ge_r)
    return out
