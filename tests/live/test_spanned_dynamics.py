"""Live test of the WAN's dynamics across machines, on one kernel: two stand-in machines
(testbed.testing.machines), east on node-a and west on node-b, the WAN wire on node-a and
west's gateway (the west->east shaper) on node-b. The event runner stays on the driver; each
event is applied by the agents of the machines that hold what it acts on, at its time on their
clocks (each machine's clock offset to the driver measured at bring-up and during the run)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from testbed.config.sweep import expand
from testbed.net import registry

pytestmark = pytest.mark.live
ray = pytest.importorskip("ray", reason="the [ray] extra is not installed")

STEP_AT, FAULT_AT, FAULT_S = 1.5, 3.5, 1.0
ONE_WAY_S = 0.020  # s: the WAN's one-way delay after the schedule's step
DOWN_AT = 5.5  # a link down for 0.5 s: both gateways' WAN ports, one on each machine


def scenario() -> dict:
    return {
        "name": "span-dynamics",
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": [
            {
                "between": ["east", "west"], "rate": "100mbit", "delay": "5ms",
                # both directions: the east->west shaper is on node-a, west->east's on node-b
                "schedule": [{"at": f"{STEP_AT}s", "rate": "20mbit", "delay": "20ms"}],
            }
        ],
        "faults": [{"kind": "blackhole", "link": "east-west", "at": f"{FAULT_AT}s",
                    "duration": f"{FAULT_S}s"},
                   {"kind": "link_down", "link": "east-west", "at": f"{DOWN_AT}s",
                    "duration": "0.5s"}],
        "placement": {"machines": {"east": "node-a", "west": "node-b"}},
        "workload": {"kind": "collectives", "collectives": ["all_reduce"], "algorithms": ["flat"],
                     "sizes": ["1MiB"], "warmup": 1, "iterations": 22, "timeout": "30s"},
    }  # fmt: skip


SOON_S = 0.2  # s: an event applied this late is not "at its time" on any host


@pytest.mark.timing
def test_a_schedule_step_and_a_blackhole_act_across_machines_on_the_drivers_clock(
    machines, tmp_path
):
    from testbed.experiment.sweep import Experiment

    address, _ = machines
    exp = Experiment(expand(scenario(), "test"), "test", tmp_path / "out", resume=False)
    exp.ray_address = address
    exp.run(selfcheck_seconds=0.3)
    (run,) = exp.manifest["runs"].values()
    assert run["status"] == "ok", run.get("reason")
    assert not [r for r in registry.records() if r.prefix == run["prefix"]]
    assert_dynamics_across(run, exp.results.path, exp.manifest["summary"])


def assert_dynamics_across(run: dict, out: Path, summary: list[dict]) -> None:
    """What the run recorded: one clock, the events' lateness, their effect on the all-reduce."""

    # one clock: the stand-ins share one, so each offset is 0 within its bound (the agent read
    # its clock inside the driver's [t0, t3]: exact, whatever the machine's load)
    assert sorted(run["clock_offset"]) == ["node-a", "node-b"]
    for machine, o in run["clock_offset"].items():
        assert abs(o["offset_s"]) <= o["bound_s"], (machine, o)
    clock = pd.read_parquet(out / "clock_offsets.parquet")
    during = clock[clock["phase"] == "run"]
    assert set(during["machine"]) == {"node-a", "node-b"}, clock  # every 2 s of a ~6 s run
    assert (clock["offset_s"].abs() <= clock["bound_s"]).all(), clock
    # one-way delays on that clock beside the round-trip split: on one kernel the two agree
    # within the offsets' bound plus 1 ms (the probes' send stamp is taken in user space
    # before the send call: the forward leg carries the sender's syscall, the reverse not)
    for direction, d in run["one_way_delay"].items():
        assert abs(d["one_way_s"] - d["round_trip_split_s"]) <= d["bound_s"] + 1e-3, (direction, d)
        # at least the configured 5 ms, as far as the bound tells
        assert d["one_way_s"] >= 0.005 - d["bound_s"], (direction, d)

    # every event applied by the agents, its lateness on the driver's timeline with a bound
    events = pd.read_parquet(out / "events.parquet")
    assert set(events["status"]) == {"applied"}, events[["action", "status", "error"]]
    actions = ["blackhole", "link_down", "link_up", "set", "unblackhole"]
    assert sorted(set(events["action"])) == actions, events[["action", "status"]]
    # a blackhole is the wire's (node-a); a link down takes a gateway port on each machine
    (down,) = events.loc[events["action"] == "link_down", "operation"]
    assert "node-a: ip -n" in down and "node-b: ip -n" in down, down
    assert events["clock_bound_s"].notna().all() and events["late_s"].notna().all()
    # applied soon, never early. The 20 ms goal (LATE_S) is the lateness benchmark's
    # (benchmarks/scale_out.py --part events: across machines p99 14.1 ms, max 16.9 ms, and on
    # one machine max 114 ms, at load 15); a test beside the suite's other worker read 26 ms.
    # 0.2 s as for one machine (test_events_runner: 4x the measured 49 ms tail)
    assert (events["late_s"] < SOON_S).all(), events[["action", "late_s", "clock_bound_s"]]
    assert (events["late_s"] >= -events["clock_bound_s"]).all(), events[["late_s", "clock_bound_s"]]
    # the blackhole's drops are counted (on the wire's machine, node-a, for both directions).
    # Which direction had packets to drop depends on where the loop stood: a run's blackhole fell
    # 28 ms after an iteration ended, inside the world barrier; west's barrier message and its
    # retransmissions were dropped (5 packets) while east, waiting for it, sent nothing east->west
    assert sorted(d["direction"] for d in run["fault_drops"]) == ["east->west", "west->east"]
    assert sum(d["fault_dropped_packets"] for d in run["fault_drops"]) > 0, run["fault_drops"]

    # the change and the fault, as the all-reduce saw them (iteration start, unix; seconds)
    rows = pd.read_parquet(out / "collectives.parquet")
    rows = rows.assign(end=rows["start"] + rows["seconds"]).sort_values(["rank", "start"])
    rank0 = rows[rows["rank"] == 0]
    origin = events.loc[events["action"] == "set", "scheduled_unix"].min() - STEP_AT
    t = rank0["start"] - origin
    before = rank0[(t > 0.3) & (t < STEP_AT)]["seconds"].median()
    after = rank0[(t > STEP_AT + 0.3) & (t < FAULT_AT - 0.5)]["seconds"].median()
    # 1 MiB each way at 100 then 20 Mbit/s (and 10 -> 40 ms RTT): ~0.1 s, then ~0.5 s; 2.5 x is
    # half the rate ratio, what the RTT terms and MTU 1450 leave of it at the least
    assert after > 2.5 * before, (before, after, rank0[["start", "seconds"]])
    # the blackhole as it was applied (up to SOON_S after its scheduled time) stalls the
    # all-reduce until it is lifted: no iteration ends inside it, nor begins inside it. It drops
    # at the wire's ingress, so what passed there before it still lands, one way (ONE_WAY_S)
    # later: an iteration whose last bytes crossed just before may end up to that after it, and
    # one whose barrier's last message did may begin so (each timed run follows a world barrier,
    # which crosses the WAN too); then the rank wakes and stamps. What a rank adds to an exchange
    # is measured in this run, on this host's load: the barrier between two settled iterations
    # crosses the RTT once, the rest of that gap is the ranks' (8 runs on a quiet host: 1.6 to
    # 10.7 ms). The blackhole may fall in the loop's gap: a run read it 15 ms after an
    # iteration ended, the barrier's retransmissions backed off past it and past the link_down
    # after it, and the next iteration began 2.5 s after the link_up; so no iteration need span it
    following = rows.groupby("rank")["start"].shift(-1)
    settled = (rows["start"] - origin > STEP_AT + 0.3) & (following - origin < FAULT_AT)
    wake = ((following - rows["end"])[settled] - 2 * ONE_WAY_S).max()
    assert wake >= 0, rows[settled]  # a barrier crosses the RTT at least once
    on = events.loc[events["action"] == "blackhole", "applied_unix"].max()
    off = events.loc[events["action"] == "unblackhole", "applied_unix"].min()
    landed = on + ONE_WAY_S + wake  # whatever crossed before the blackhole has landed by then
    inside = rank0[
        ((rank0["end"] > landed) & (rank0["end"] < off))
        | ((rank0["start"] > landed) & (rank0["start"] < off))
    ]
    spans = [
        (round(s - on, 4), round(e - on, 4))
        for s, e in zip(rank0["start"], rank0["end"], strict=True)
    ]
    assert inside.empty, (
        f"blackhole lifted +{off - on:.3f} s after applied; in flight until +{landed - on:.4f} s "
        f"(one way {ONE_WAY_S} s, ranks' wake {wake:.4f} s); (start, end) from it: {spans}"
    )
    assert rows["correct"].all()
    faults = pd.DataFrame(summary)
    assert (faults["fault_survived"] == 1).all(), faults.filter(like="fault")
