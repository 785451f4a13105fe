"""The fault expansion's registry (testbed.plan.timeline.faults) and the action vocabulary
(testbed.core.events): every fault kind the schema knows has one expansion, every action a
timeline holds is in the vocabulary, and each start's undo is an action. Pure."""

from __future__ import annotations

from pathlib import Path

from testbed.config.dynamics import FAULT_KINDS
from testbed.config.loading import load_scenario
from testbed.core.events import ACTIONS, ENDS, UNDO
from testbed.plan.timeline import build_timeline, default_horizon
from testbed.plan.timeline.faults import KINDS
from testbed.plan.topology import build_plan

REPO = Path(__file__).resolve().parents[2]


def test_every_fault_kind_has_one_expansion() -> None:
    assert set(KINDS) == set(FAULT_KINDS)


def test_the_action_vocabulary() -> None:
    assert ACTIONS == (
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
    assert set(UNDO) | set(UNDO.values()) == set(ACTIONS) - {"set"}
    assert {ENDS[end]: end for end in ENDS} == UNDO


def test_timelines_speak_the_vocabulary() -> None:
    seen: set[str] = set()
    for f in sorted(REPO.glob("scenarios/*.yaml")):
        sc = load_scenario(f)
        plan = build_plan(sc, "x", 64)
        timeline = build_timeline(sc, plan, f.parent, default_horizon(sc), source=str(f))
        seen |= {e.action for e in timeline.events}
    assert seen <= set(ACTIONS)
    assert {"set", "blackhole", "unblackhole"} <= seen


def test_every_fault_action_has_one_mechanism_in_the_event_runner() -> None:
    """The runner applies and undoes each fault action of the vocabulary through its one entry."""
    from testbed.core.events import FAULT_ACTIONS
    from testbed.experiment.events import FAULT_MECHANISMS

    assert set(FAULT_MECHANISMS) == {a.start for a in FAULT_ACTIONS}
