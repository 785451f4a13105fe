"""RTT compensation, the pure part (testbed.plan.compensation): the configured one-way delay of a
path, the calibration plan, the floor, the compensation and the refusal of a delay below its
floor; and the kernel backend's netem change line."""

from __future__ import annotations

from typing import Any

import pytest

from testbed.config.loading import parse_scenario
from testbed.link.kernel import KernelBackend
from testbed.live.selfcheck import configured_rtt
from testbed.plan.compensation import (
    STALL_SLACK,
    FloorError,
    calibration_plan,
    compensate,
    configured_one_way,
)
from testbed.plan.model import NetworkPlan
from testbed.plan.render import netem_lines
from testbed.plan.topology import build_plan

MS = 1e-3


def plan(wan: dict[str, Any], fabric: dict[str, Any] | None = None) -> NetworkPlan:
    clusters = {c: {"hosts": 2, **({"fabric": fabric} if fabric else {})} for c in ("a", "b")}
    sc = parse_scenario(
        {"name": "t", "clusters": clusters, "wan": [{"between": ["a", "b"], **wan}]}
    )
    return build_plan(sc, "mctb0000", 77)


def samples(centre: float) -> list[float]:
    """Ten one-way samples whose median is ``centre``, with an outlier on each side."""
    return [centre + dx * 1e-6 for dx in (-30, -2, -1, -1, 0, 0, 1, 1, 2, 900)]


def test_floor_and_compensation_per_direction() -> None:
    p = plan({"delay": "10ms", "reverse": {"delay": "30ms"}})
    comps = compensate(p, {"a->b": samples(10.16 * MS), "b->a": samples(30.12 * MS)})
    ab, ba = comps
    assert ab.direction == "a->b" and ba.direction == "b->a"
    assert ab.floor_s == pytest.approx(0.16 * MS) and ba.floor_s == pytest.approx(0.12 * MS)
    assert ab.compensation_s == pytest.approx(0.16 * MS)
    assert ab.emulated_s == pytest.approx(9.84 * MS) and ba.emulated_s == pytest.approx(29.88 * MS)
    assert ab.configured_s == 10 * MS and ab.samples == 10
    # what the user then gets host to host: the floor plus the emulated delay
    assert ab.floor_s + ab.emulated_s == pytest.approx(ab.configured_s)


def test_stalled_probes_are_capped_by_the_fastest() -> None:
    """Most probes stalled (a starved guest): the floor is at most 2 x the fastest probe's
    excess + STALL_SLACK, not the stalled median."""
    p = plan({"delay": "50ms"})
    stalled = [50.6 * MS, 63.0 * MS, 63.1 * MS, 63.2 * MS, 62.9 * MS, 63.0 * MS, 50.7 * MS]
    comp = compensate(p, {"a->b": stalled, "b->a": samples(50.1 * MS)})[0]
    assert comp.measured_s == pytest.approx(63.0 * MS) and comp.fastest_s == 50.6 * MS
    assert comp.floor_s == pytest.approx(2 * 0.6 * MS + STALL_SLACK)
    assert comp.emulated_s == pytest.approx(50 * MS - comp.floor_s)
    # a healthy spread (median a few hundredths above the fastest): the cap does not bind
    healthy = compensate(p, {"a->b": [50.08 * MS, 50.1 * MS, 50.13 * MS], "b->a": []})[0]
    assert healthy.floor_s == pytest.approx(0.1 * MS)


def test_floor_subtracts_the_fabric_delays_on_the_path() -> None:
    p = plan({"delay": "10ms"}, fabric={"delay": "1ms"})
    ab = p.wan[0]
    # the source host's port and the destination gateway's port, one each way
    assert configured_one_way(p, ab) == pytest.approx(12 * MS)
    assert configured_rtt(p, ab) == pytest.approx(24 * MS)
    comp = compensate(p, {"a->b": samples(12.1 * MS), "b->a": samples(12.1 * MS)})[0]
    assert comp.path_configured_s == pytest.approx(12 * MS)
    assert comp.floor_s == pytest.approx(0.1 * MS)
    assert comp.emulated_s == pytest.approx(9.9 * MS)  # only the WAN delay is compensated


def test_delay_below_floor_is_refused_naming_link_delay_and_floor() -> None:
    p = plan({"delay": "0.1ms"})
    with pytest.raises(FloorError) as exc:
        compensate(p, {"a->b": samples(0.26 * MS), "b->a": samples(0.25 * MS)})
    msg = str(exc.value)
    assert exc.value.exit_code == 2
    assert "a->b" in msg and "b->a" in msg
    assert "0.100 ms" in msg and "0.160 ms" in msg and "0.150 ms" in msg


def test_no_delay_records_the_floor_and_compensates_nothing() -> None:
    p = plan({"loss": "1%"})
    comp = compensate(p, {"a->b": samples(0.2 * MS)})[0]
    assert comp.floor_s == pytest.approx(0.2 * MS)
    assert comp.compensation_s == 0 and comp.emulated_s == 0


def test_negative_floor_never_adds_delay() -> None:
    p = plan({"delay": "10ms"})
    comp = compensate(p, {"a->b": samples(9.99 * MS), "b->a": samples(10.1 * MS)})[0]
    assert comp.floor_s == pytest.approx(-0.01 * MS)
    assert comp.compensation_s == 0 and comp.emulated_s == 10 * MS


def test_direction_without_samples_is_left_alone() -> None:
    p = plan({"delay": "10ms"})
    _, ba = compensate(p, {"a->b": samples(10.1 * MS)})
    assert ba.samples == 0 and ba.floor_s is None and ba.emulated_s == 10 * MS


def test_calibration_plan_keeps_delays_strips_the_rest() -> None:
    p = plan(
        {
            "delay": "10ms",
            "jitter": "2ms",
            "loss": "1%",
            "reorder": "10%",
            "reverse": {"delay": "0ms"},
        }
    )
    c = calibration_plan(p)
    ab, ba = c.wan
    assert (ab.delay, ab.jitter, ab.loss, ab.reorder) == (10 * MS, 0, 0, 0)
    imp = ab.impairment
    assert (imp.delay, imp.jitter, imp.loss, imp.reorder) == (10 * MS, 0, 0, 0)
    assert imp.netem_limit == p.wan[0].impairment.netem_limit
    # no delay: left as it is (a loss-only direction keeps its emulator)
    assert ba == p.wan[1] and ba.impairment.active
    # the emulators exist for the same directions
    k = KernelBackend()
    assert set(k.tc_batches(c)) == set(k.tc_batches(p))
    assert c.wan[0].shaper == p.wan[0].shaper and c.fabric == p.fabric


def test_netem_replace_line_changes_in_place() -> None:
    p = plan({"delay": "10ms", "jitter": "1ms"})
    imp = p.wan[0].impairment
    (add,) = netem_lines(imp)
    (rep,) = netem_lines(imp, verb="replace")
    assert add.startswith(f"qdisc add dev {imp.egress_if} root handle 1: netem ")
    assert rep == add.replace("qdisc add", "qdisc replace", 1)
    assert "delay 10000us 1000us distribution normal" in rep
