"""Live tests of WAN propagation through the testbed (delay, jitter, loss, reordering, failure).

They run on whichever backend ``auto`` picks (the userspace delay line on kernels without netem);
the supervision tests force ``backend: userspace``. Probes are UDP with microsecond timestamps
(``traffic.udpping``); all namespaces share CLOCK_MONOTONIC, so one-way delays are measurable.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import statistics
import subprocess
import time
from collections.abc import Iterator

import pytest
from helpers import scenario, unique_name

from testbed.config.loading import parse_scenario
from testbed.live import calibrate
from testbed.live.network import Network
from testbed.live.selfcheck import check_direction, probe_rtt
from testbed.net import netns, registry
from testbed.plan.compensation import FloorError

pytestmark = pytest.mark.live


def wan(**link) -> dict:
    return scenario(wan=[{"between": ["east", "west"], "rate": "1gbit", **link}])


@pytest.fixture(scope="module")
def asymmetric() -> Iterator[Network]:
    """10 ms east->west, 30 ms back: one bring-up for the module's tests of it (the compensation
    test sets the emulators' delays back to the compensated ones it found)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: network namespaces and qdiscs")
    data = wan(delay="10ms", reverse={"delay": "30ms"})
    tb = Network(parse_scenario(data, "test"), name=unique_name()).up()
    try:
        yield tb
    finally:
        tb.down()


@pytest.mark.parametrize("delay_ms", [10, 50])
@pytest.mark.timing
def test_rtt_median_within_1ms_of_configured(make_testbed, delay_ms):
    tb = make_testbed(wan(delay=f"{delay_ms}ms"))
    r = probe_rtt(tb, "east-h0", "west-h0", count=100, interval=0.01)
    assert r["lost"] == 0
    median = statistics.median(r["rtts"])
    # 1 ms is the self-check's own absolute RTT rule (rtt_within_tolerance: max(SELFCHECK_TOLERANCE
    # x RTT, 1 ms)). Resolution: kernel receive stamps (ns), the echo's hold subtracted, median of
    # 100. Spread: RESULTS.md "Link fidelity", Idle RTT, compensated median -0.15..+0.12 ms, p99 -
    # configured <= +0.31 ms; the floor drifts up to 0.3 ms after bring-up on a busy host.
    assert median == pytest.approx(2 * delay_ms / 1e3, abs=1e-3), r["rtts"][:10]


@pytest.mark.timing
def test_rtt_compensation_is_applied_and_recorded(asymmetric):
    """After `up` each direction's emulator runs configured - floor (checked exactly), the floor
    is recorded, and the data path carries the compensation once: the idle RTT median rises by
    the summed compensation, within 0.25 ms, when the emulators are set back to the configured
    delays (measured compensated, uncompensated, compensated again, so that the machine's load
    drift cancels). Missing or doubled compensation is off by the whole sum (0.4-0.7 ms here).
    The absolute RTT against the configured one is not asserted: the goal (+-0.10 ms) is a
    benchmark's, on a quiet machine (benchmarks/link_fidelity.py); on a busy machine the floor
    measured at bring-up and the one seconds later differ by up to 0.3 ms (a CI run measured
    39.713 ms for 40 ms)."""
    tb = asymmetric
    comps = {c.direction: c for c in tb.compensation}
    assert set(comps) == {"east->west", "west->east"}
    for name, conf in (("east->west", 0.010), ("west->east", 0.030)):
        c = comps[name]
        assert c.configured_s == conf and c.samples == calibrate.PROBES - 1
        # floor range: RESULTS.md "Link fidelity" measured 0.086-0.246 ms one way; 20 us is below
        # any veth + bridge crossing, 2 ms above any line pass (the probes' stamps are ns)
        assert 0.00002 < c.floor_s < 0.002, c  # veths and bridges (and the line): not nothing
        assert c.compensation_s == pytest.approx(c.floor_s)
        assert c.emulated_s == pytest.approx(conf - c.floor_s)
    # recorded where an attached process (and the self-check) finds it
    rec = registry.find(tb.name)
    assert [r["direction"] for r in rec.extra["rtt_compensation"]] == ["east->west", "west->east"]
    # the emulator runs the compensated delay (the line reports its queues' delays)
    for row in tb.link_stats():
        assert row["delay"] == pytest.approx(comps[row["direction"]].emulated_s, abs=1e-9)

    def median_rtt() -> float:
        r = probe_rtt(tb, "east-h0", "west-h0", count=100, interval=0.01)
        assert r["lost"] == 0
        return statistics.median(r["rtts"])

    def set_delays(attr: str) -> None:
        tb.backend.set_impairments(
            {
                d.name: dataclasses.replace(d.impairment, delay=getattr(comps[d.name], attr))
                for d in tb.plan.wan
            }
        )

    before = median_rtt()
    set_delays("configured_s")
    try:
        uncompensated = median_rtt()
    finally:  # the network is the module's: the next test (or a rerun) finds it as built
        set_delays("emulated_s")
    compensated = (before + median_rtt()) / 2
    total = sum(c.compensation_s for c in comps.values())
    # 0.25 ms: about half the effect a missing or doubled compensation has (the sum, 0.4-0.7 ms).
    # Each median is of 100 ns-stamped probes; RESULTS.md "Link fidelity" (raw - on at the same
    # delay vs the summed floors) read errors of -0.24..+0.06 ms: the bound is at that spread.
    assert uncompensated - compensated == pytest.approx(total, abs=0.25e-3), (
        before,
        uncompensated,
        compensated,
        comps,
    )
    # the self-check's absolute RTT rule (rtt_within_tolerance's 1 ms); a CI run read -0.29 ms
    assert compensated == pytest.approx(0.040, abs=1e-3)


def test_delay_below_the_floor_is_refused(make_testbed):
    with pytest.raises(FloorError) as exc:
        make_testbed(wan(delay="0.01ms"))
    msg = str(exc.value)
    assert exc.value.exit_code == 2
    assert "east->west" in msg and "0.010 ms" in msg and "floor" in msg


@pytest.mark.timing
def test_asymmetric_delays_are_honoured_per_direction(asymmetric):
    tb = asymmetric
    r = probe_rtt(tb, "east-h0", "west-h0", count=60, interval=0.01)
    # 1 ms as the RTT test above (rtt_within_tolerance's floor), per direction: one-way stamps on
    # one shared clock (ns), median of 60; the compensated floor's residual is <= 0.3 ms one way.
    assert statistics.median(r["forward"]) == pytest.approx(0.010, abs=1e-3)
    assert statistics.median(r["reverse"]) == pytest.approx(0.030, abs=1e-3)
    back = probe_rtt(tb, "west-h0", "east-h0", count=60, interval=0.01)
    assert statistics.median(back["forward"]) == pytest.approx(0.030, abs=1e-3)


@pytest.mark.timing
def test_bulk_goodput_at_100mbit_25ms_is_at_least_85_percent(make_testbed):
    tb = make_testbed(
        scenario(wan=[{"between": ["east", "west"], "rate": "100mbit", "delay": "25ms"}])
    )
    d = next(d for d in tb.plan.wan if d.name == "east->west")
    c = check_direction(tb, d, duration=5.0, pings=5)
    # 85 Mbit/s is 88.9% of the HTB ceiling (rate x 1448/1514 = 95.6 Mbit/s), just below the
    # self-check's own 1 - SELFCHECK_TOLERANCE (86.1 Mbit/s). Resolution: bytes over a 5 s
    # window, one 64 KiB GSO packet = 0.1 Mbit/s. Spread: RESULTS.md "Link fidelity", Bulk TCP:
    # 92-96 Mbit/s.
    assert c.goodput_bps >= 0.85 * 100e6, c
    assert not tb.problems()


def test_one_percent_loss_is_per_wire_packet(make_testbed):
    tb = make_testbed(wan(delay="5ms", loss="1%", reverse={"loss": "0%"}))
    # UDP probes: one packet each way, loss only on the forward direction.
    r = probe_rtt(tb, "east-h0", "west-h0", count=4000, interval=0.0015)
    assert 0.005 <= r["lost"] / r["sent"] <= 0.015, r["lost"]
    # Bulk TCP: senders emit wire-sized packets when loss > 0, so the line's drops are
    # per wire packet, not per 64 KiB GSO packet.
    d = next(d for d in tb.plan.wan if d.name == "east->west")
    check_direction(tb, d, duration=2.0, pings=2)
    stats = {row["direction"]: row for row in tb.link_stats()}["east->west"]
    assert stats["bytes"] / stats["packets"] <= 1514, stats
    assert 0.005 <= stats["dropped_loss"] / stats["packets"] <= 0.015, stats


@pytest.mark.timing
def test_jitter_std_matches_the_model_and_keeps_order(make_testbed):
    tb = make_testbed(wan(delay="20ms", jitter="5ms", reverse={"jitter": "0ms"}))
    # 50 ms apart, far more than the jitter: order preservation never binds, so the one-way
    # delay's standard deviation should be the configured jitter.
    r = probe_rtt(tb, "east-h0", "west-h0", count=100, interval=0.05)
    std = statistics.pstdev(r["forward"])
    # jitter is N(0, jitter) per packet (delayline.model.decide); the std of n = 100 draws has a
    # relative standard error 1/sqrt(2(n-1)) = 7.1%, so 30% is 4.2 of them; the path's own spread
    # (p99 - median ~0.2 ms, RESULTS.md "Link fidelity") adds < 0.1% in quadrature.
    assert std == pytest.approx(0.005, rel=0.30), std
    assert r["reordered"] == 0
    # Closely spaced probes under the same jitter still arrive in order (order-preserving).
    dense = probe_rtt(tb, "east-h0", "west-h0", count=500, interval=0.001)
    assert dense["reordered"] == 0


def test_reordering_only_when_asked(make_testbed):
    tb = make_testbed(wan(delay="20ms", reorder="20%", reverse={"reorder": "0%"}))
    r = probe_rtt(tb, "east-h0", "west-h0", count=300, interval=0.002)
    assert r["reordered"] > 0
    assert r["lost"] == 0


def _delay_line_pids(tb) -> list[int]:
    return [pid for pid, _, what in tb.record.processes if what.startswith("delay line")]


def test_killed_delay_line_fails_the_link_loudly_and_nothing_passes_undelayed(make_testbed):
    tb = make_testbed({**wan(delay="10ms"), "backend": "userspace"})
    assert not tb.problems()
    (pid,) = _delay_line_pids(tb)
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.3)
    problems = tb.problems()
    assert problems and "died" in problems[0] and "east->west" in problems[0], problems
    # No silent pass-through: with its listener gone the kernel drops the queued packets.
    r = probe_rtt(tb, "east-h0", "west-h0", count=20, interval=0.01)
    assert r["lost"] == 20
    wire = tb.plan.wan[0].impairment.ns
    tb.down()
    assert not (netns.NETNS_DIR / wire).exists()
    assert subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode != 0


def test_teardown_removes_rules_and_processes(make_testbed):
    tb = make_testbed({**wan(delay="10ms"), "backend": "userspace"})
    wire = tb.plan.wan[0].impairment.ns
    rules = subprocess.run(
        ["ip", "netns", "exec", wire, "iptables-save", "-t", "mangle"],
        capture_output=True,
        text=True,
    ).stdout
    assert rules.count("NFQUEUE") == 2  # one rule per direction
    pids = _delay_line_pids(tb)
    tb.down()
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or _is_zombie_of_others(pid)
    assert not (netns.NETNS_DIR / wire).exists()


def _is_zombie_of_others(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_link_stats_have_counters(make_testbed):
    tb = make_testbed({**wan(delay="5ms"), "backend": "userspace"})
    probe_rtt(tb, "east-h0", "west-h0", count=50, interval=0.005)
    time.sleep(0.6)  # the line writes its counters twice a second
    rows = {r["direction"]: r for r in tb.link_stats()}
    assert set(rows) == {"east->west", "west->east"}
    fwd = rows["east->west"]
    for key in (
        "packets",
        "bytes",
        "dropped_loss",
        "queue_dropped",
        "user_dropped",
        "max_held",
        "lateness_us_p50",
        "lateness_us_p99",
        "process_cpu_seconds",
    ):
        assert key in fwd, key
    assert fwd["packets"] >= 50
    assert fwd["queue_dropped"] == 0 and fwd["user_dropped"] == 0
    assert fwd["errors"] == ""


def _process_ns(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


@pytest.mark.timing
def test_three_wires_get_one_line_each_from_one_launcher_and_down_stops_all(make_testbed):
    data = scenario(
        clusters={c: {"hosts": 1} for c in ("east", "west", "north")},
        wan=[
            {"between": [a, b], "rate": "1gbit", "delay": "5ms"}
            for a, b in (("east", "west"), ("east", "north"), ("west", "north"))
        ],
        backend="userspace",
    )
    tb = make_testbed(data)
    wires = {d.impairment.ns for d in tb.plan.wan}
    pids = _delay_line_pids(tb)
    assert len(wires) == 3 and len(set(pids)) == 3, (wires, pids)
    # Each line lives in its own wire namespace (entered with setns), has said READY (its rules
    # are in: packets are delayed).
    in_ns = {_process_ns(pid) for pid in pids}
    assert in_ns == {f"net:[{netns.netns_inode(ns)}]" for ns in wires}
    assert not tb.problems()
    for dst in ("west-h0", "north-h0"):
        r = probe_rtt(tb, "east-h0", dst, count=10, interval=0.01)
        # 9.5 ms: configured 10 ms less 0.5 ms, above the compensated median's worst reading
        # (-0.29 ms, a CI run; RESULTS.md "Link fidelity" -0.15 ms) and far above an undelayed
        # path (0.14 ms, same table): it says each line delays. Median of 10, ns stamps.
        assert r["lost"] == 0 and statistics.median(r["rtts"]) >= 0.0095, r["rtts"]
    tb.down()
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or _is_zombie_of_others(pid)
    assert not any((netns.NETNS_DIR / ns).exists() for ns in wires)
    stats = {row["direction"]: row for row in tb.link_stats()}
    assert len(stats) == 6 and all(row["process_final"] is True for row in stats.values())


def test_a_line_that_fails_before_ready_names_its_namespace_and_nothing_is_left(
    make_testbed, monkeypatch
):
    """A bad config (exit 2 before READY) fails `up` with the wire namespace and the line's own
    reason; the testbed is torn down, its other line included."""
    from testbed.core.errors import NetError
    from testbed.link.userspace import DelayLineSupervisor

    good = DelayLineSupervisor._config
    bad_ns = []
    supervisors = []

    def config(self, line):
        cfg = good(self, line)
        if self not in supervisors:
            supervisors.append(self)
        if not bad_ns:  # the first wire gets an invalid loss
            bad_ns.append(line.ns)
            cfg["queues"][0]["loss"] = 2.0
        return cfg

    monkeypatch.setattr(DelayLineSupervisor, "_config", config)
    data = scenario(
        clusters={c: {"hosts": 1} for c in ("east", "west", "north")},
        wan=[
            {"between": ["east", "west"], "rate": "1gbit", "delay": "5ms"},
            {"between": ["east", "north"], "rate": "1gbit", "delay": "5ms"},
        ],
        backend="userspace",
    )
    with pytest.raises(NetError) as err:
        make_testbed(data)
    text = str(err.value)
    assert f"delay line in {bad_ns[0]} did not start: exit code 2" in text, text
    assert "config error" in text and "loss" in text, text
    prefix = bad_ns[0].split("-")[0]
    left = [ns for ns in os.listdir(netns.NETNS_DIR) if ns.startswith(prefix + "-")]
    assert left == []  # down ran: none of its namespaces is left
    # ...nor its other line, which had got READY and was stopped by pid.
    (sup,) = supervisors
    (ready,) = [line for line in sup.lines if line.pid is not None]
    assert ready.ns != bad_ns[0] and not ready.alive()
