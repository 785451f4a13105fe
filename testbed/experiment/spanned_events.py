"""The WAN's changes and faults across machines (:class:`SpannedTarget`): the event runner stays
on the driver, on the run's clock (testbed.experiment.events); each event's part goes to the
agent of the machine that holds what it acts on (testbed.live.spanned.changes): a rate and
buffer to the sending gateway's machine, an impairment to the wire's, a fault to every machine
(each does what is in its namespaces: a blackhole in the wire, a link or gateway down in the
gateways and their peers).

An event is handed over ``LEAD`` s before its time with its due time on each machine's clock
(the driver's plus that machine's offset, testbed.live.spanned.clocks): the agent waits for it
and applies it, so Ray's call time is not in its lateness. Its application time is the last
machine's, put on the driver's timeline; the bound is that machine's clock-offset bound.

Rank 0's iteration announcements (the run's origin with ``clock: workload``, anchored faults)
are sent on its own machine: :class:`AnnouncementRelay` brings them to the driver's clock.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from testbed.experiment.clock import Instant, OriginClock
from testbed.experiment.events import Applied, EventTarget
from testbed.live.spanned import SpannedNetwork
from testbed.live.spanned.changes import Action
from testbed.live.spanned.clocks import EVENTS_GROUP
from testbed.plan.model import Impairment
from traffic.announce import parse

LEAD = 0.05  # s: an event goes to its machines this long before it is due (Ray's call time)
RELAY_POLL = 0.02  # s between two looks at rank 0's announcements on its machine


class SpannedTarget(EventTarget):
    """:class:`EventTarget` of a :class:`SpannedNetwork`: each action to its machines' agents,
    at its due time on their clocks; :meth:`take_applied` says when the last one applied it."""

    lead_s = LEAD

    def __init__(self, tb: SpannedNetwork) -> None:
        super().__init__(tb)
        self.spanned = tb
        self.applied: list[Applied] = []
        self._remote_faults = SpannedFaults(self)

    def send(self, rates: dict[str, tuple[int, int]], imps: dict[str, Impairment]) -> None:
        plan = self.plan
        per: dict[str, list[Action]] = {}
        by_shaper: dict[str, dict[str, tuple[int, int]]] = {}
        for name, r in rates.items():
            by_shaper.setdefault(plan.machine_of(self.directions[name].shaper.ns), {})[name] = r
        by_wire: dict[str, dict[str, Impairment]] = {}
        for name, i in imps.items():
            by_wire.setdefault(plan.machine_of(self.directions[name].impairment.ns), {})[name] = i
        for machine, r in by_shaper.items():
            per.setdefault(machine, []).append(("set_rate", (r,)))
        for machine, i in by_wire.items():
            per.setdefault(machine, []).append(("set_impairments", (i,)))
        self.call(per)

    def call(self, per: dict[str, list[Action]], prepare: bool = False) -> str:
        """Each machine's actions at the due time (now for ``prepare``), side by side; their
        operations as text. The latest application goes to ``applied``, its ``apply_s`` from
        the earliest machine's start (a part applied on time on one machine acts from then,
        while another machine's is late)."""
        tb = self.spanned
        clock = tb.clock
        assert clock is not None and tb.ray is not None, "the testbed is not up"
        due = None if prepare else self.due_unix
        refs = [
            tb.agents[m]
            .apply_wan.options(concurrency_group=EVENTS_GROUP)
            .remote(actions, None if due is None else clock.from_driver(m, due))
            for m, actions in per.items()
        ]
        got = tb.ray.get(refs)
        parts = []
        texts = []
        for m, (text, t0, t1) in zip(per, got, strict=True):
            unix, bound = clock.to_driver(m, t1)
            parts.append(Applied(unix, bound, unix - clock.to_driver(m, t0)[0]))
            if text:
                texts.append(f"{m}: {text}")
        if parts and not prepare:
            self.applied.append(spanning(parts))
        return "; ".join(texts)

    def take_applied(self) -> Applied | None:
        got, self.applied = self.applied, []
        return spanning(got) if got else None

    def faults(self) -> SpannedFaults:
        return self._remote_faults

    def fault_drops(self) -> list[dict[str, Any]]:
        tb = self.spanned
        if not self._remote_faults.used:
            return []
        got = tb.ray.get([a.wan_fault_drops.remote() for a in tb.agents.values()])
        return [row for part in got for row in part]


def spanning(parts: Sequence[Applied]) -> Applied:
    """One action of several parts (machines, calls) as a whole: applied when the last part
    was (within that part's bound), and taking from the earliest part's start."""
    last = max(parts, key=lambda a: a.unix)
    start = min(a.unix - a.apply_s for a in parts)
    return Applied(last.unix, last.bound_s, last.unix - start)


class SpannedFaults:
    """The fault actions of a spanned testbed: each to every machine (see the module doc)."""

    def __init__(self, target: SpannedTarget) -> None:
        self.target = target
        self.used = False

    def _all(self, action: Action, prepare: bool = False) -> str:
        self.used = True
        t = self.target
        return t.call({m: [action] for m in t.spanned.agents}, prepare=prepare)

    def prepare(self) -> str:
        return self._all(("prepare", ()), prepare=True)

    def blackhole(self, directions: Sequence[str], on: bool) -> str:
        return self._all(("blackhole", (list(directions), on)))

    def reset(self, link: str, on: bool) -> str:
        return self._all(("reset", (link, on)))

    # A port coming back: every machine's ports up first, then the pinned entries of their
    # peers deleted (a peer on one machine whose entry goes while the port on another is still
    # down asks for its address into the dead port, and asks again only a second later).
    def link(self, link: str, up: bool) -> str:
        return self._ports("link", link, up)

    def gateway(self, cluster: str, up: bool) -> str:
        return self._ports("gateway", cluster, up)

    def _ports(self, action: str, name: str, up: bool) -> str:
        done = [self._all((action, (name, up)))]
        if up:
            done.append(self._all((f"unpin_{action}", (name,))))
        return "; ".join(d for d in done if d)


class AnnouncementRelay:
    """Rank 0's announcements from its machine into the driver's origin clock: the agent there
    keeps them (testbed.live.spanned.announce); a thread takes them every ``RELAY_POLL`` s and
    puts their unix times on the driver's timeline with that machine's clock offset (their
    monotonic times are that machine's: replaced by the driver's for the same instant)."""

    def __init__(self, tb: SpannedNetwork, host: str, clock: OriginClock) -> None:
        self.tb, self.host, self.clock = tb, host, clock
        self.machine = tb.machine_of(host)
        self.path = tb.relay_start(host)
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="announce-relay", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(RELAY_POLL):
            if not self.take():
                return

    def take(self) -> bool:
        """Bring what arrived into the clock; False when the agent could not be asked."""
        try:
            got = self.tb.relay_take(self.host)
        except Exception as exc:  # the agent is gone: said, the run's events skip
            self.errors.append(f"announcement relay: {type(exc).__name__}: {exc}")
            return False
        sync = self.tb.clock
        assert sync is not None, "the testbed is not up"
        source = self.clock.source
        for _, data in got:
            a = parse(data)
            if a is None:
                continue
            unix, _ = sync.to_driver(self.machine, a.unix)
            mono = unix - (source.wall() - source.now())
            self.clock.announce(a, Instant(unix, mono))
        return True

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.take()
