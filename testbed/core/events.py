"""The timeline's action vocabulary: what an event does, and which action undoes which. PURE,
standard library only.

The plan writes these names into a timeline, the event runner applies them (and undoes a fault
still in force when a run ends), the analysis pairs a fault's start with its end: one copy, so
an action added here is known to every layer.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FaultAction:
    """A fault's start action, the action that ends it, and what the analysis makes of the
    interval between: ``dark`` (an outage: nothing gets through) and ``icmp`` (the sender hears
    of it: ICMP unreachable often enough to stop TCP's backoff)."""

    start: str
    end: str
    dark: bool
    icmp: bool = False


FAULT_ACTIONS = (
    FaultAction("blackhole", "unblackhole", dark=True),
    FaultAction("reset", "unreset", dark=False),  # connections reset; the link stays up
    # the gateway answers ICMP net unreachable, rate-limited to about one per second per host:
    # too rarely to revert the backoff, so a link down backs off as a silent outage
    FaultAction("link_down", "link_up", dark=True),
    FaultAction("gateway_down", "gateway_up", dark=True),
)
# a fault's start -> the action that ends (undoes) it
UNDO = {a.start: a.end for a in FAULT_ACTIONS}
# a fault's end -> the action it ends
ENDS = {v: k for k, v in UNDO.items()}
# every action of a timeline's events: ``set`` (new link settings), then each start and its end
ACTIONS = ("set", *(a for pair in UNDO.items() for a in pair))
# the actions that end a fault
CLOSING = tuple(a.end for a in FAULT_ACTIONS)
# a dark interval's (start -> (end, icmp))
OUTAGES = {a.start: (a.end, a.icmp) for a in FAULT_ACTIONS if a.dark}
