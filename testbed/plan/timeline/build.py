"""``build_timeline``: a scenario and its plan -> every change of every WAN direction and every
fault action, at its time. PURE but for reading the link traces the scenario names.

Each link's schedule steps, trace bins and timed burst losses become ``set``s
(testbed.plan.timeline.settings), each fault its start and end actions
(testbed.plan.timeline.faults); then the spans they hold are checked for overlaps
(testbed.plan.timeline.overlaps) and the events sorted: absolute ones by time, then the ones
anchored to an iteration, by iteration and offset.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from testbed.plan.timeline.faults import expand_fault, fault_length
from testbed.plan.timeline.model import DEFAULT_HORIZON, Builder, Timeline
from testbed.plan.timeline.overlaps import check_overlaps
from testbed.plan.timeline.settings import link_settings

if TYPE_CHECKING:
    from testbed.config.scenario import Scenario
    from testbed.plan.model import NetworkPlan


def build_timeline(
    scenario: Scenario,
    plan: NetworkPlan,
    base_dir: Path,
    horizon: float,
    *,
    source: str = "<scenario>",
) -> Timeline:
    """Every event of ``scenario``'s schedules, traces and faults, in order. Trace files are
    relative to ``base_dir`` (the scenario file's directory); looping traces are expanded up to
    ``horizon`` s. ``source`` (the scenario file) names the file in errors."""
    b = Builder(scenario, plan, Path(base_dir), horizon, source)
    for i, link in enumerate(scenario.wan):
        for path in link.paths_of():
            link_settings(b, i, path)
    for j, fault in enumerate(scenario.faults):
        expand_fault(b, j, fault)
    check_overlaps(b)
    ordered = tuple(e for _, e in sorted(b.events, key=lambda ke: ke[0]))
    return Timeline(ordered, scenario.clock, horizon if b.loops else None)


def default_horizon(scenario: Scenario) -> float:
    """How far `testbed plan` expands looping traces: the last time the scenario names (a flow's
    end, a fault's end, a schedule step), at least ``DEFAULT_HORIZON``. A run passes its own."""
    times = [DEFAULT_HORIZON]
    times += [flow.start + flow.duration for flow in scenario.flows]
    times += [step.at for link in scenario.wan_paths for step in link.schedule]
    for f in scenario.faults:
        if f.at is not None:
            times.append(f.at + fault_length(f))
    return max(t for t in times if math.isfinite(t))
