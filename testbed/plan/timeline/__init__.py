"""The timeline of a changing WAN: every change of every WAN direction and every fault action,
at its time (``build_timeline``), for the event runner (testbed.experiment.events) to apply.
PURE but for reading the link traces the scenario names.

An ``Event`` is one thing the runner does: a ``set`` carries the complete new state of each
direction it changes (``Change``), the other actions (testbed.core.events) name the link,
directions or cluster they act on. Times are seconds after the clock origin (the first measured
iteration, or the run's start with ``clock: wall``); an event with ``after_iteration`` counts
from the start of that iteration instead. docs/faults.md, "## Scenario keys", says what each
schedule, trace and fault key becomes.
"""

from testbed.plan.timeline.build import build_timeline, default_horizon
from testbed.plan.timeline.model import Change, Event, Timeline
from testbed.plan.timeline.trace import read_link_trace

__all__ = [
    "Change",
    "Event",
    "Timeline",
    "build_timeline",
    "default_horizon",
    "read_link_trace",
]
