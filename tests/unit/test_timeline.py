"""The timeline (testbed.plan.timeline.build_timeline): schedules, traces and faults expanded into
ordered events with each set's full state, the buffer re-evaluated at each change, and the
overlap errors naming file and both fields. Also WanDirection.changes_later (build_plan).
Pure: trace files are small synthetic ones written to tmp_path."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from testbed.config.loading import parse_scenario
from testbed.core.errors import ScenarioError
from testbed.plan.sizing import MIN_BUFFER
from testbed.plan.timeline import Change, Event, Timeline, build_timeline, default_horizon
from testbed.plan.topology import build_plan

EW, WE = "east->west", "west->east"


def scenario(link: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "t",
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}, "south": {"hosts": 1}},
        "wan": [
            {"between": ["east", "west"], "rate": "100mbit", "delay": "20ms", **(link or {})},
            {"between": ["west", "south"], "rate": "1gbit", "delay": "5ms"},
        ],
        "workload": {"timeout": "30s"},
    }
    data.update(copy.deepcopy(top))
    return data


def timeline(data: dict[str, Any], base: Path = Path("."), horizon: float = 10.0) -> Timeline:
    sc = parse_scenario(data, "s.yaml")
    return build_timeline(sc, build_plan(sc, "x", 64), base, horizon, source="s.yaml")


def error_of(data: dict[str, Any], base: Path = Path(".")) -> str:
    with pytest.raises(ScenarioError) as info:
        timeline(data, base)
    assert info.value.exit_code == 2
    return str(info.value)


def sets(tl: Timeline) -> list[Event]:
    return [e for e in tl.events if e.action == "set"]


def change(e: Event, direction: str) -> Change:
    return next(c for c in e.changes if c.direction == direction)


# -- schedules -----------------------------------------------------------------------------------


def test_a_step_changes_only_what_it_names_and_the_rest_carries_over() -> None:
    tl = timeline(
        scenario(
            {
                "loss": "0.1%",
                "schedule": [
                    {"at": "1s", "rate": "50mbit"},
                    {"at": "2s", "delay": "40ms", "direction": "forward"},
                    {"at": "3s", "restore": True},
                ],
            }
        )
    )
    first, second, third = sets(tl)
    assert (first.at, first.source, first.link, first.what) == (
        1.0,
        "schedule",
        "east-west",
        "rate 50mbit",
    )
    assert first.directions == (EW, WE)
    c = change(first, EW)
    assert (c.rate, c.delay, c.loss) == (50_000_000, 0.02, 0.001)
    # 1 BDP at 50 Mbit/s and 40 ms RTT = 250 kB
    assert c.buffer == 250_000
    assert second.what == "delay 40ms (east->west)"
    assert change(second, EW).delay == 0.04
    assert change(second, EW).rate == 50_000_000  # carried over
    # the reverse keeps its delay, but its 1-BDP buffer follows the link's RTT (60 ms now)
    assert change(second, WE).delay == 0.02
    assert change(second, WE).buffer == 375_000
    assert third.what == "restore the configured settings"
    assert change(third, EW) == Change(EW, 100_000_000, 500_000, 0.02, 0.0, 0.001, 0.0)


def test_a_byte_buffer_stays_and_a_bdp_buffer_has_the_floor() -> None:
    tl = timeline(
        scenario({"buffer": "1MB", "schedule": [{"at": "1s", "rate": "10mbit"}]}),
    )
    assert change(sets(tl)[0], EW).buffer == 1_000_000
    tl = timeline(scenario({"schedule": [{"at": "1s", "rate": "10mbit"}]}))
    assert change(sets(tl)[0], EW).buffer == MIN_BUFFER  # 50 kB raised to two GSO packets
    tl = timeline(scenario({"schedule": [{"at": "1s", "buffer": "2bdp"}]}))
    assert change(sets(tl)[0], EW).buffer == 1_000_000
    assert sets(tl)[0].what == "buffer 2bdp"


def test_aqm_threshold_must_stay_below_the_re_evaluated_buffer() -> None:
    data = scenario(
        {
            "aqm": {"kind": "step", "k": "200KB"},
            "schedule": [{"at": "1s", "rate": "20mbit"}],
        }
    )
    assert error_of(data) == (
        "s.yaml: wan[0].schedule[0]: at 1 s the buffer of east->west becomes 131072 B, not above "
        "its aqm threshold (200000 B); use a larger `buffer` or lower thresholds"
    )


# -- traces --------------------------------------------------------------------------------------


def write(tmp_path: Path, name: str, text: str) -> str:
    (tmp_path / name).write_text(text)
    return name


def test_trace_loops_to_the_horizon_relative_to_the_scenario_directory(tmp_path: Path) -> None:
    # 10 opportunities in the first 100 ms of a 200 ms trace (the line 200 is 0 ms of the next)
    name = write(tmp_path, "t.up", "\n".join(str(t) for t in range(10, 100, 10)) + "\n200\n")
    tl = timeline(
        scenario({"trace": {"file": name, "format": "mahimahi", "scale": 10}}),
        tmp_path,
        horizon=0.5,
    )
    assert tl.horizon == 0.5
    # a zero-rate bin holds the queue (Mahimahi): a set of rate 0 that keeps the buffer
    assert [(round(e.at, 3), e.action, change(e, EW).rate) for e in tl.events] == [
        (0.0, "set", 12_000_000),
        (0.1, "set", 0),
        (0.2, "set", 12_000_000),
        (0.3, "set", 0),
        (0.4, "set", 12_000_000),
    ]
    first = tl.events[0]
    assert (first.source, first.directions) == ("trace", (EW,))
    assert change(first, EW).rate == 10 * 10 * 12000 / 0.1
    assert first.what == "trace bin 0: rate 12mbit"
    dark = tl.events[1]
    assert dark.what == "trace bin 1: rate 0, held (nothing leaves)"
    assert dark.directions == (EW,)
    assert change(dark, EW).buffer == change(first, EW).buffer


def test_a_looping_trace_ending_dark_holds_until_its_next_period(tmp_path: Path) -> None:
    name = write(tmp_path, "t.csv", "t,rate\n0s,1mbit\n100ms,0\n200ms,0\n")
    tl = timeline(scenario({"trace": {"file": name, "format": "csv"}}), tmp_path, horizon=0.35)
    # the 200 ms row ends the period: it loops every 200 ms, dark in its second half
    got = [(round(e.at, 3), e.action, change(e, EW).rate) for e in tl.events]
    assert got == [(0.0, "set", 1e6), (0.1, "set", 0), (0.2, "set", 1e6), (0.3, "set", 0)]


def test_trace_without_loop_holds_its_last_row_and_csv_sets_delay_and_loss(
    tmp_path: Path,
) -> None:
    name = write(
        tmp_path,
        "t.csv",
        "t,rate,delay,loss\n0s,10mbit,30ms,0%\n0.1,20mbit,50ms,1%\n0.2,5mbit,0,0\n",
    )
    tl = timeline(
        scenario({"trace": {"file": name, "format": "csv", "loop": False, "direction": "both"}}),
        tmp_path,
    )
    assert tl.horizon is None
    got = [(round(e.at, 3), change(e, EW).rate, change(e, WE).delay) for e in sets(tl)]
    assert got == [
        (0.0, 10_000_000, pytest.approx(0.03)),
        (0.1, 20_000_000, pytest.approx(0.05)),
        (0.2, 5_000_000, 0.0),
    ]
    assert change(sets(tl)[1], EW).loss == pytest.approx(0.01)
    assert sets(tl)[1].what == "trace bin 1: rate 20mbit, delay 50ms, loss 1%"
    assert sets(tl)[2].what == "trace end, held: rate 5mbit, delay 0ms, loss 0%"


def test_trace_errors_name_the_scenario_the_field_and_the_file(tmp_path: Path) -> None:
    assert error_of(scenario({"trace": {"file": "gone.up", "format": "mahimahi"}}), tmp_path) == (
        f"s.yaml: wan[0].trace.file: {tmp_path / 'gone.up'}: no such trace file (a trace's file "
        "is relative to the scenario's directory)"
    )
    name = write(tmp_path, "bad.tsv", "0 1\n1 x\n")
    assert error_of(scenario({"trace": {"file": name, "format": "pensieve"}}), tmp_path) == (
        f"s.yaml: wan[0].trace.file: {tmp_path / name} line 2: '1 x': time (s) and rate (Mbit/s) "
        "must be numbers (format: pensieve)"
    )


def test_a_loop_too_long_for_its_bin_is_refused(tmp_path: Path) -> None:
    name = write(tmp_path, "t.up", "1\n")
    data = scenario({"trace": {"file": name, "format": "mahimahi", "bin": "10ms"}})
    with pytest.raises(ScenarioError) as info:
        timeline(data, tmp_path, horizon=1e5)
    assert str(info.value) == (
        "s.yaml: wan[0].trace.bin: looping 10 ms bins up to 100000 s would be 10000000 shaper "
        "changes (at most 2000000); use a larger bin"
    )


def test_real_att_trace_expands_with_its_outage_held() -> None:
    path = Path("/work/shared/traces/ATT-LTE-driving-2016.up")
    if not path.exists():
        pytest.skip(f"{path} is absent")
    tl = timeline(scenario({"trace": {"file": str(path), "format": "mahimahi"}}), horizon=240.0)
    dark = [e.at for e in sets(tl) if change(e, EW).rate == 0]
    assert any(abs(t - 3.1) < 1e-6 for t in dark)
    assert any(abs(t - 123.1) < 1e-6 for t in dark)  # the second time round
    assert len(sets(tl)) > 2000


# -- faults --------------------------------------------------------------------------------------


FAULTS = [
    {"kind": "blackhole", "link": "east-west", "at": "12s", "duration": "2s"},
    {"kind": "link_down", "link": "west-east", "at": "40s", "duration": "5s"},
    {"kind": "reset", "link": "east-west", "at": "50s"},
    {"kind": "flap", "link": "east-west", "at": "60s", "down": "500ms", "up": "3s", "count": 2},
    {"kind": "burst_loss", "link": "east-west", "at": "70s", "duration": "10s", "p": "1%",
     "r": "25%", "direction": "reverse"},
    {"kind": "partition", "at": "80s", "duration": "5s", "groups": [["east"], ["west", "south"]]},
    {"kind": "gateway_crash", "cluster": "south", "at": "90s", "restore_after": "10s"},
    {"kind": "blackhole", "link": "east-west", "after": {"iteration": 3, "offset": "50ms"},
     "duration": "2s", "direction": "forward"},
    {"kind": "gateway_crash", "cluster": "east", "at": "200s"},
]  # fmt: skip


def test_every_fault_kind_expands_to_its_actions_in_order() -> None:
    tl = timeline(scenario(faults=FAULTS))
    got = [
        (e.at, e.after_iteration, e.action, e.fault, e.link, e.cluster, e.directions)
        for e in tl.events
    ]
    both = (EW, WE)
    ws = ("west->south", "south->west")
    assert got == [
        (12.0, None, "blackhole", 0, "east-west", None, both),
        (14.0, None, "unblackhole", 0, "east-west", None, both),
        (40.0, None, "link_down", 1, "east-west", None, both),
        (45.0, None, "link_up", 1, "east-west", None, both),
        (50.0, None, "reset", 2, "east-west", None, both),
        (51.0, None, "unreset", 2, "east-west", None, both),
        (60.0, None, "link_down", 3, "east-west", None, both),
        (60.5, None, "link_up", 3, "east-west", None, both),
        (63.5, None, "link_down", 3, "east-west", None, both),
        (64.0, None, "link_up", 3, "east-west", None, both),
        (70.0, None, "set", 4, "east-west", None, (WE,)),
        (80.0, None, "set", 4, "east-west", None, (WE,)),
        (80.0, None, "blackhole", 5, "east-west", None, both),
        (85.0, None, "unblackhole", 5, "east-west", None, both),
        (90.0, None, "gateway_down", 6, None, "south", ws),
        (100.0, None, "gateway_up", 6, None, "south", ws),
        (200.0, None, "gateway_down", 8, None, "east", both),
        (0.05, 3, "blackhole", 7, "east-west", None, (EW,)),
        (2.05, 3, "unblackhole", 7, "east-west", None, (EW,)),
    ]
    assert all(e.source == "fault" for e in tl.events)
    burst_on, burst_off = (e for e in tl.events if e.fault == 4)
    assert change(burst_on, WE) == Change(WE, 100_000_000, 500_000, 0.02, 0, 0, 0, 0.01, 0.25)
    assert change(burst_off, WE).ge_p == change(burst_off, WE).ge_r == 0
    whats = [e.what for e in tl.events]
    assert whats[0] == "blackhole on (2s)"
    assert whats[6] == "flap 1/2: link down (500ms)"
    assert whats[10] == "burst loss on: p 1%, r 25% (10s)"
    assert whats[12] == "partition [east] | [west, south]: blackhole on (5s)"
    assert whats[16] == "gateway east down (never restored)"
    assert whats[17] == "blackhole on (2s) (east->west)"


def test_a_burst_loss_keeps_the_schedule_state_and_a_step_keeps_the_burst() -> None:
    tl = timeline(
        scenario(
            {"schedule": [{"at": "2s", "rate": "10mbit"}, {"at": "3s", "restore": True}]},
            faults=[{"kind": "burst_loss", "link": "east-west", "at": "1s", "duration": "3s",
                     "p": "1%", "r": "50%"}],
        )
    )  # fmt: skip
    on, step, restore, off = sets(tl)
    assert change(on, EW).ge_p == 0.01 and change(on, EW).rate == 100_000_000
    assert (change(step, EW).rate, change(step, EW).ge_p) == (10_000_000, 0.01)
    assert change(restore, EW).ge_r == 0.5  # faults are not configuration
    assert (change(off, EW).rate, change(off, EW).ge_p) == (100_000_000, 0)


def test_an_anchored_burst_loss_starts_from_the_configured_state() -> None:
    tl = timeline(
        scenario(faults=[{"kind": "burst_loss", "link": "east-west", "duration": "1s",
                          "after": {"iteration": 0}, "p": "2%", "r": "20%"}])
    )  # fmt: skip
    on, off = tl.events
    assert (on.after_iteration, on.at, off.at) == (0, 0.0, 1.0)
    assert change(on, EW).ge_p == 0.02 and change(off, WE).ge_p == 0


def test_ends_come_before_starts_at_the_same_time() -> None:
    tl = timeline(
        scenario(faults=[
            {"kind": "blackhole", "link": "east-west", "at": "2s", "duration": "1s"},
            {"kind": "blackhole", "link": "east-west", "at": "1s", "duration": "1s"},
        ])
    )  # fmt: skip
    assert [(e.at, e.action, e.fault) for e in tl.events] == [
        (1.0, "blackhole", 1),
        (2.0, "unblackhole", 1),
        (2.0, "blackhole", 0),
        (3.0, "unblackhole", 0),
    ]


# -- contradicting overlaps -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "link, faults, message",
    [
        (
            {},
            [
                {"kind": "blackhole", "link": "east-west", "at": "1s", "duration": "2s"},
                {"kind": "partition", "at": "2s", "duration": "2s", "groups": [["east"], ["west"]]},
            ],
            "s.yaml: faults[1]: partition 2 s .. 4 s overlaps faults[0] (blackhole 1 s .. 3 s) on "
            "east->west: the first to end would lift the other's blackhole early",
        ),
        (
            {},
            [
                {"kind": "link_down", "link": "east-west", "at": "1s", "duration": "5s"},
                {"kind": "flap", "link": "east-west", "at": "3s", "down": "1s", "up": "1s"},
            ],
            "s.yaml: faults[1]: flap 3 s .. 4 s overlaps faults[0] (link_down 1 s .. 6 s) on "
            "east-west: the first link_up would bring the link back inside the other's down time",
        ),
        (
            {},
            [
                {"kind": "reset", "link": "east-west", "at": "1s", "duration": "2s"},
                {"kind": "reset", "link": "west-east", "at": "2s"},
            ],
            "s.yaml: faults[1]: reset 2 s .. 3 s overlaps faults[0] (reset 1 s .. 3 s) on "
            "east-west: the first to end would stop the other's resets early",
        ),
        (
            {"schedule": [{"at": "5s", "loss": "1%", "direction": "reverse"}]},
            [{"kind": "burst_loss", "link": "east-west", "at": "4s", "duration": "2s", "p": "1%",
              "r": "10%"}],
            "s.yaml: wan[0].schedule[0]: sets loss at 5 s overlaps faults[0] (burst_loss 4 s .. "
            "6 s) on west->east: netem has one loss model at a time (burst or iid); move the step "
            "or the burst",
        ),
        (
            {},
            [
                {"kind": "burst_loss", "link": "east-west", "at": "1s", "duration": "2s",
                 "p": "1%", "r": "10%", "direction": "forward"},
                {"kind": "burst_loss", "link": "east-west", "at": "2s", "duration": "2s",
                 "p": "1%", "r": "10%"},
            ],
            "s.yaml: faults[1]: burst_loss 2 s .. 4 s overlaps faults[0] (burst_loss 1 s .. 3 s) "
            "on east->west: one Gilbert-Elliott loss model per direction at a time",
        ),
        (
            {},
            [
                {"kind": "gateway_crash", "cluster": "west", "at": "1s"},
                {"kind": "link_down", "link": "east-west", "at": "5s", "duration": "1s"},
            ],
            "s.yaml: faults[1]: link_down 5 s .. 6 s on east-west overlaps faults[0] "
            "(gateway_crash 1 s .. never) the link's gateway west is crashed: its ports are down "
            "already, and the link_up would bring one back",
        ),
        (
            {},
            [
                {"kind": "blackhole", "link": "east-west", "duration": "2s",
                 "after": {"iteration": 2}},
                {"kind": "blackhole", "link": "east-west", "duration": "2s",
                 "after": {"iteration": 2, "offset": "1s"}},
            ],
            "s.yaml: faults[1]: blackhole iteration 2 + 1 s .. 3 s overlaps faults[0] (blackhole "
            "iteration 2 + 0 s .. 2 s) on east->west",
        ),
        (
            {"schedule": [{"at": "1s", "rate": "10mbit"}]},
            [{"kind": "burst_loss", "link": "east-west", "duration": "1s", "p": "1%", "r": "9%",
              "after": {"iteration": 1}}],
            "s.yaml: faults[0].after: a burst_loss `after` an iteration cannot share link "
            "east-west with its schedule (wan[0]): which comes first is unknown until the run; "
            "give it an `at` time",
        ),
        (
            {},
            [{"kind": "partition", "at": "1s", "duration": "1s", "groups": [["east"], ["south"]]}],
            "s.yaml: faults[0].groups: no WAN link joins two of these groups: the partition would "
            "cut nothing; links are: east-west, west-south",
        ),
    ],
)  # fmt: skip
def test_contradicting_overlaps_name_both(
    link: dict[str, Any], faults: list[dict[str, Any]], message: str
) -> None:
    assert error_of(scenario(link, faults=faults)).startswith(message)


def test_a_fault_blackhole_may_overlap_a_held_trace_bin(tmp_path: Path) -> None:
    # a held bin is a rate (0), not a blackhole: the fault's drop and the hold do not contradict
    name = write(tmp_path, "t.csv", "t,rate\n0s,1mbit\n1s,0\n2s,1mbit\n3s,1mbit\n")
    data = scenario(
        {"trace": {"file": name, "format": "csv", "loop": False}},
        faults=[{"kind": "blackhole", "link": "east-west", "at": "1.5s", "duration": "1s"}],
    )
    tl = timeline(data, tmp_path)
    held = sorted({round(e.at, 3) for e in sets(tl) if change(e, EW).rate == 0})
    assert (held[0], held[-1]) == (1.0, 1.9)
    assert [(e.at, e.action) for e in tl.events if e.action != "set"] == [
        (1.5, "blackhole"), (2.5, "unblackhole"),
    ]  # fmt: skip


def test_what_does_not_contradict_is_accepted() -> None:
    tl = timeline(
        scenario(
            {"schedule": [{"at": "5s", "rate": "10mbit"}]},
            faults=[
                # touching, not overlapping
                {"kind": "blackhole", "link": "east-west", "at": "1s", "duration": "1s"},
                {"kind": "blackhole", "link": "east-west", "at": "2s", "duration": "1s"},
                # opposite directions
                {"kind": "blackhole", "link": "east-west", "at": "10s", "duration": "2s",
                 "direction": "forward"},
                {"kind": "blackhole", "link": "east-west", "at": "11s", "duration": "2s",
                 "direction": "reverse"},
                # a burst across a rate step; a reset during a blackhole
                {"kind": "burst_loss", "link": "east-west", "at": "4s", "duration": "2s",
                 "p": "1%", "r": "9%"},
                {"kind": "reset", "link": "east-west", "at": "1.5s"},
                # different iterations: their relation is known only at run time
                {"kind": "link_down", "link": "east-west", "duration": "5s",
                 "after": {"iteration": 1}},
                {"kind": "link_down", "link": "east-west", "duration": "5s",
                 "after": {"iteration": 2}},
            ],
        )
    )  # fmt: skip
    assert len(tl.events) == 17


# -- the plan's changes_later and the default horizon ---------------------------------------------


def test_changes_later_marks_directions_whose_propagation_changes() -> None:
    def later(data: dict[str, Any]) -> dict[str, bool]:
        plan = build_plan(parse_scenario(data), "x", 64)
        return {d.name: d.changes_later for d in plan.wan}

    assert not any(later(scenario()).values())
    rate_only = later(scenario({"schedule": [{"at": "1s", "rate": "10mbit"}]}))
    assert not any(rate_only.values())
    delay_fwd = later(
        scenario({"schedule": [{"at": "1s", "delay": "1ms", "direction": "forward"}]})
    )
    assert delay_fwd == {EW: True, WE: False, "west->south": False, "south->west": False}
    csv_trace = later(scenario({"trace": {"file": "x.csv", "format": "csv"}}))
    assert csv_trace[EW] and not csv_trace[WE]
    mm_trace = later(scenario({"trace": {"file": "x.up", "format": "mahimahi"}}))
    assert not any(mm_trace.values())
    burst = later(
        scenario(faults=[{"kind": "burst_loss", "link": "west-south", "at": "1s", "duration": "1s",
                          "p": "1%", "r": "9%", "direction": "reverse"}])
    )  # fmt: skip
    assert burst == {EW: False, WE: False, "west->south": False, "south->west": True}
    blackhole = later(
        scenario(faults=[{"kind": "blackhole", "link": "east-west", "at": "1s", "duration": "1s"}])
    )
    assert not any(blackhole.values())


def test_default_horizon_covers_what_the_scenario_times() -> None:
    sc = parse_scenario(
        scenario(
            faults=[{"kind": "blackhole", "link": "east-west", "at": "100s", "duration": "2s"}],
            traffic=[{"kind": "bulk", "from": "east-h0", "to": "west-h0", "duration": "90s",
                      "start": "5s"}],
        )
    )  # fmt: skip
    assert default_horizon(sc) == 102.0
    assert default_horizon(parse_scenario(scenario())) == 60.0


def test_loss_later_makes_hosts_send_wire_sized_packets_from_bring_up() -> None:
    def wire_sized(data: dict[str, Any]) -> bool:
        return build_plan(parse_scenario(data), "x", 64).wire_sized_packets

    assert not wire_sized(scenario({"schedule": [{"at": "1s", "rate": "10mbit"}]}))
    assert wire_sized(scenario({"schedule": [{"at": "1s", "loss": "1%"}]}))
    assert wire_sized(scenario({"trace": {"file": "x.csv", "format": "csv"}}))
    burst = {"kind": "burst_loss", "link": "east-west", "at": "1s", "duration": "1s", "p": "1%",
             "r": "9%"}  # fmt: skip
    assert wire_sized(scenario(faults=[burst]))


def test_a_partition_cuts_only_links_between_two_groups() -> None:
    data = scenario(
        faults=[
            {"kind": "partition", "at": "1s", "duration": "1s", "groups": [["west"], ["south"]]}
        ]
    )
    tl = timeline(data)
    assert {(e.action, e.link) for e in tl.events} == {
        ("blackhole", "west-south"),
        ("unblackhole", "west-south"),
    }  # east is in no group: east-west stays up


def test_the_issue_example_expands(tmp_path: Path) -> None:
    """Every kind of WAN change in one scenario (schedule, preset, trace, each fault, bulk traffic;
    the trace a synthetic one in mahimahi format)."""
    name = write(tmp_path, "lte.up", "\n".join(str(t) for t in range(2, 201, 2)) + "\n")
    text = f"""
name: issue
clusters: {{east: {{hosts: 1}}, west: {{hosts: 1}}, south: {{hosts: 1}}}}
wan:
  - between: [east, west]
    rate: 1gbit
    delay: 40ms
    preset: pantheon/aws-korea-china
    schedule:
      - {{at: 10s, rate: 300mbit}}
      - {{at: 20s, delay: 60ms, loss: 0.5%, direction: forward}}
      - {{at: 30s, restore: true}}
  - between: [west, south]
    trace: {{file: {name}, format: mahimahi, direction: forward, scale: 10, bin: 100ms}}
faults:
  - {{kind: blackhole, link: east-west, at: 12s, duration: 2s}}
  - {{kind: link_down, link: east-west, at: 40s, duration: 5s}}
  - {{kind: reset, link: east-west, at: 50s}}
  - {{kind: flap, link: east-west, at: 60s, down: 500ms, up: 3s, count: 5}}
  - {{kind: burst_loss, link: east-west, at: 80s, duration: 10s, p: 1%, r: 25%}}
  - {{kind: partition, at: 95s, duration: 5s, groups: [[east], [west, south]]}}
  - {{kind: gateway_crash, cluster: west, at: 110s, restore_after: 10s}}
  - {{kind: blackhole, link: east-west, after: {{iteration: 3, offset: 50ms}}, duration: 2s}}
traffic:
  - {{kind: bulk, from: east-h0, to: west-h0, congestion: cubic, start: 0s, duration: 60s}}
tcp: {{user_timeout: 0s, retries2: 15}}
workload: {{timeout: 30s}}
"""
    (tmp_path / "s.yaml").write_text(text.replace("user_timeout: 0s, ", ""))
    from testbed.config.loading import load_scenario

    sc = load_scenario(tmp_path / "s.yaml")
    # written fields win over the preset's (rate, delay); the rest come from it
    assert (sc.wan[0].rate, sc.wan[0].delay, sc.wan[0].loss) == (1_000_000_000, 0.04, 0.0006)
    tl = build_timeline(sc, build_plan(sc, "x", 64), tmp_path, default_horizon(sc))
    assert tl.horizon == 120.0
    kinds = [e.action for e in tl.events if e.source == "fault"]
    assert kinds.count("link_down") == 6 and kinds.count("gateway_up") == 1
    trace_rates = {c.rate for e in tl.events if e.source == "trace" for c in e.changes}
    assert trace_rates == {10 * 6_000_000}  # one opportunity every 2 ms = 6 Mbit/s, x 10
