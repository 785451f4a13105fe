"""The LinkBackend objects without a kernel: what each refuses, which queues it owns, and that the
chooser hands out objects (the tc lines each renders are in test_plan and test_aqm)."""

from __future__ import annotations

from typing import Any

import pytest

from testbed.config.loading import parse_scenario
from testbed.core.errors import UnsupportedError
from testbed.link.base import LinkBackend
from testbed.link.choose import choose_backend
from testbed.link.kernel import KernelBackend, ShapingOnlyBackend
from testbed.link.userspace import UserspaceBackend
from testbed.net.probe import KernelFeatures
from testbed.plan.model import NetworkPlan
from testbed.plan.topology import build_plan


def plan(fabric_delay: str | None = None, aqm: dict | None = None, **wan: Any) -> NetworkPlan:
    link = {"between": ["east", "west"], "rate": "100mbit", **wan}
    if aqm:
        link["aqm"] = aqm
    data: dict[str, Any] = {
        "name": "backends",
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": [link],
    }
    if fabric_delay:
        data["clusters"]["east"]["fabric"] = {"delay": fabric_delay}
    return build_plan(parse_scenario(data, "backends.yaml"), "mctb0001", 64)


STEP = {"kind": "step", "k": "65KB"}


def test_userspace_refuses_fabric_delay_and_reorder_with_a_profile() -> None:
    with pytest.raises(UnsupportedError, match=r"fabric\.delay needs netem"):
        UserspaceBackend().check(plan(fabric_delay="1ms", delay="10ms"))
    with pytest.raises(UnsupportedError, match=r"east->west: reorder with an aqm profile"):
        UserspaceBackend().check(plan(aqm=STEP, delay="10ms", reorder="1%"))
    UserspaceBackend().check(plan(aqm=STEP, delay="10ms"))
    KernelBackend().check(plan(fabric_delay="1ms", aqm=STEP, delay="10ms", reorder="1%"))


def test_shaping_only_refuses_anything_to_delay() -> None:
    ShapingOnlyBackend().check(plan())
    for p in (plan(delay="10ms"), plan(loss="1%"), plan(fabric_delay="1ms")):
        with pytest.raises(UnsupportedError, match="unsupported on this kernel: netem"):
            ShapingOnlyBackend().check(p)


def test_only_the_delay_line_owns_queues_and_only_of_profiled_directions() -> None:
    profiled, plain = plan(aqm=STEP, delay="10ms").wan[0], plan(delay="10ms").wan[0]
    assert UserspaceBackend().owns_queue(profiled) and not UserspaceBackend().owns_queue(plain)
    assert not KernelBackend().owns_queue(profiled)
    assert not ShapingOnlyBackend().owns_queue(profiled)


def test_a_backend_that_never_started_reports_nothing() -> None:
    for backend in (KernelBackend(), ShapingOnlyBackend(), UserspaceBackend()):
        backend.stop()
        assert (backend.problems(), backend.link_stats(), backend.queue_trace()) == ([], [], [])


def test_the_chooser_returns_backend_objects_with_their_reason() -> None:
    feats = KernelFeatures(release="6.x", root=True, netns=True, qdiscs={"netem": False})
    chosen = choose_backend("auto", True, feats)
    assert isinstance(chosen, UserspaceBackend) and isinstance(chosen, LinkBackend)
    assert chosen.reason == "auto: this kernel has no sch_netem; using the userspace delay line"
    assert isinstance(choose_backend("auto", False, feats), ShapingOnlyBackend)
    feats.qdiscs["netem"] = True
    assert isinstance(choose_backend("auto", True, feats), KernelBackend)
