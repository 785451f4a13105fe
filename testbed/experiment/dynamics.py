"""Around one run's workload: the WAN's changes and faults and the scenario's traffic
(:class:`RunDynamics`: the clock origin, the event runner, the flows) and the run's timeline
(:func:`timeline_for`); what they did goes into the run's result (``events``, ``flows_goodput``
and the DCQCN tables; counts and errors in its info).
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Any

from testbed.config.scenario import Scenario
from testbed.core.errors import NetError
from testbed.experiment.clock import OriginClock
from testbed.experiment.events import EventRunner
from testbed.experiment.flows import Flows
from testbed.experiment.results import RunResult
from testbed.experiment.spanned_events import AnnouncementRelay, SpannedTarget
from testbed.live.protocol import LiveNetwork
from testbed.live.spanned import SpannedNetwork
from testbed.plan.model import NetworkPlan
from testbed.plan.timeline import Timeline, build_timeline

# s of a looping trace the timeline expands when the run's length is not known beforehand
HORIZON = 3600.0


def timeline_for(sc: Scenario, plan: NetworkPlan, source: Path | None) -> Timeline:
    """The run's timeline of WAN changes and faults: traces (relative to the scenario file
    ``source``) looped up to the traffic's end, or up to HORIZON beside a workload (whose
    length is not known in advance)."""
    horizon = max((f.start + f.duration for f in sc.flows), default=0.0)
    return build_timeline(
        sc,
        plan,
        source.parent if source else Path.cwd(),
        horizon if sc.rank_workload is None else HORIZON,
        source=str(source) if source else "<scenario>",
    )


class RunDynamics:
    """Around one run's workload: the clock origin, the event runner and the bulk flows.

    ``clock`` is None when the run has no timeline and no traffic (nothing is started then).
    The origin: the first measured iteration (``clock: workload`` with a workload), else the
    moment the block is entered (``clock: wall``: the run's start, right before the ranks;
    traffic alone: the traffic's start). On leaving (also on an error or Ctrl-C): the events
    still to come are recorded as skipped, the faults still in force undone, the flows
    stopped; ``result.dynamics`` gets the rows."""

    def __init__(
        self, tb: LiveNetwork, sc: Scenario, run_dir: Path, source: Path | None, result: RunResult
    ) -> None:
        assert tb.plan is not None
        self.result = result
        self.tb = tb
        self.relay: AnnouncementRelay | None = None  # across machines: rank 0's announcements
        self.timeline = timeline_for(sc, tb.plan, source)
        self.clock: OriginClock | None = None
        self.runner: EventRunner | None = None
        self.flows: Flows | None = None
        self.errors: list[str] = []
        if not self.timeline.events and not sc.flows:
            return
        ranks = sc.rank_workload is not None
        self.clock = OriginClock(from_iterations=sc.clock == "workload" and ranks)
        # across machines each event goes to the agents of the machines it acts on
        target = SpannedTarget(tb) if isinstance(tb, SpannedNetwork) else None
        self.runner = EventRunner(self.timeline, tb, self.clock, target=target)
        self.flows = Flows(tb, sc.flows, self.clock, run_dir, sc.dilation)
        self.wall = sc.clock == "wall" or not ranks

    def __enter__(self) -> RunDynamics:
        if self.clock is None:
            return self
        assert self.runner is not None and self.flows is not None
        try:
            self.flows.start()
            self.runner.start()
            if self.wall:
                self.clock.set_origin()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def spec_keys(self, first_host: str | None = None) -> dict[str, Any]:
        """What the ranks' spec gets: the socket they announce their iterations on (across
        machines: one on the machine of rank 0, ``first_host``, relayed to the clock)."""
        if self.clock is None:
            return {}
        if isinstance(self.tb, SpannedNetwork) and first_host is not None:
            self.relay = AnnouncementRelay(self.tb, first_host, self.clock)
            return {"events_socket": self.relay.path}
        return {"events_socket": self.clock.path}

    def wait_traffic(self) -> None:
        """Until the flows are over (a run with traffic and no workload)."""
        if self.flows is not None:
            self.flows.wait()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.clock is None:
            return
        assert self.runner is not None and self.flows is not None
        run_id = self.result.run_id
        try:
            if self.relay is not None:
                self.relay.stop()
            self.clock.end()
            self.runner.stop()
            self.flows.stop()
        finally:
            self.clock.close()
            events = self.runner.rows
            self.result.dynamics = {
                "events": [{"run_id": run_id, **r} for r in events],
                "flows_goodput": [{"run_id": run_id, **r} for r in self.flows.rows()],
            }
            for name, rows in self.flows.dcqcn_rows().items():
                self.result.dynamics[name] = [{"run_id": run_id, **r} for r in rows]
            if self.flows.dcqcn:
                self.result.info["dcqcn"] = {str(i): v for i, v in self.flows.dcqcn.items()}
            if self.flows.bulk:
                self.result.info["bulk"] = self.flows.bulk
            self.errors = list(self.flows.errors)
            if self.relay is not None:
                self.errors += self.relay.errors
            try:  # apart from the shapers' queue-overflow drops (queues.parquet)
                if drops := self.runner.fault_drops():
                    self.result.info["fault_drops"] = drops
            except NetError as e:  # the run's numbers stand without them: said, not fatal
                self.result.info["fault_drops_error"] = str(e)
            if self.flows.cut:  # the workload ended first: their goodput rows end there
                self.result.info["traffic_cut"] = self.flows.cut
            if self.runner.crashed is not None:
                self.errors.append(f"event runner: {self.runner.crashed!r}")
            # counts per event (a set has a row per direction; an undo shares its start's index)
            events = list({(r["event"], r["status"]): r for r in events}.values())
            failed = [
                f"event {r['event']} ({r['what']}): {r['error']}" for r in events if r["error"]
            ]
            self.result.info["events"] = {
                "applied": sum(r["status"] == "applied" for r in events),
                "failed": len(failed),
                "late": sum(bool(r["late"]) for r in events),
                "skipped": sum(r["status"] == "skipped" for r in events),
                "skipped_trace_bins": self.runner.skipped_trace,
                "undone": sum(r["status"] == "undone" for r in events),
                "clock": self.timeline.clock,
            }
            # an event that failed does not fail the run (the rest of the timeline went on);
            # the run says so
            self.result.info["event_errors"] = failed
