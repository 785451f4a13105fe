"""Per-path dynamics of a multipath WAN link, pure: the schema takes `schedule`, `trace` and
`preset` in each path (not at the link), the plan marks only the changed path's directions and
the timeline's events name that path's directions only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testbed.config.loading import parse_scenario
from testbed.core.errors import ScenarioError
from testbed.plan.timeline import build_timeline
from testbed.plan.topology import build_plan


def two_paths(path0: dict[str, Any] | None = None, **link: Any) -> dict[str, Any]:
    return {
        "name": "mpd",
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": [
            {
                "between": ["east", "west"],
                "paths": [
                    {"rate": "100mbit", "delay": "5ms", **(path0 or {})},
                    {"rate": "100mbit", "delay": "10ms"},
                ],
                **link,
            }
        ],
        "routing": {"ecmp": {"hash": "l4"}},
        "traffic": [{"kind": "bulk", "from": "east-h0", "to": "west-h0", "duration": "5s"}],
    }


def test_a_schedule_on_one_path_changes_that_path_only() -> None:
    steps = [{"at": "1s", "rate": "20mbit"}, {"at": "2s", "restore": True}]
    sc = parse_scenario(two_paths({"schedule": steps}), "s.yaml")
    paths = sc.wan[0].paths_of()
    assert [len(p.schedule) for p in paths] == [2, 0]
    plan = build_plan(sc, "x", 64)
    tl = build_timeline(sc, plan, Path("."), 10.0, source="s.yaml")
    assert [(e.at, e.link, e.directions, e.what) for e in tl.events] == [
        (1.0, "east-west/0", ("east->west/0", "west->east/0"), "rate 20mbit"),
        (2.0, "east-west/0", ("east->west/0", "west->east/0"), "restore the configured settings"),
    ]
    assert [c.rate for c in tl.events[0].changes] == [20_000_000, 20_000_000]
    assert [c.rate for c in tl.events[1].changes] == [100_000_000, 100_000_000]


def test_a_trace_on_one_path_replays_on_that_path_and_marks_only_it(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("t,rate\n0s,80mbit\n1s,20mbit\n2s,60mbit\n")
    trace = {"file": "t.csv", "format": "csv", "bin": "1s", "loop": False}
    sc = parse_scenario(two_paths({"trace": trace}), "s.yaml")
    plan = build_plan(sc, "x", 64)
    # the traced direction keeps its queue where a zero-rate bin can hold it; the others not
    assert {d.name: d.traced for d in plan.wan} == {
        "east->west/0": True, "west->east/0": False,
        "east->west/1": False, "west->east/1": False,
    }  # fmt: skip
    # a csv trace may carry delay: its direction's emulation exists from bring-up
    assert [d.name for d in plan.wan if d.changes_later] == ["east->west/0"]
    tl = build_timeline(sc, plan, tmp_path, 10.0, source="s.yaml")
    got = [(e.at, e.link, e.directions, e.changes[0].rate) for e in tl.events]
    assert got == [
        (0.0, "east-west/0", ("east->west/0",), 80_000_000),
        (1.0, "east-west/0", ("east->west/0",), 20_000_000),
        (2.0, "east-west/0", ("east->west/0",), 60_000_000),
    ]


def test_a_path_takes_a_preset_and_its_errors_name_the_path(tmp_path: Path) -> None:
    sc = parse_scenario(two_paths({"preset": "pantheon/aws-korea-china", "scale": 0.1}))
    p0, p1 = sc.wan[0].paths_of()
    # the preset fills what the path does not write (its loss, its buffer), as on a link
    assert (p0.preset, p0.rate, p1.preset, p1.rate) == (
        "pantheon/aws-korea-china", 100_000_000, None, 100_000_000,
    )  # fmt: skip
    assert p0.loss > 0 and p0.buffer[0] == "bytes" and p1.loss == 0 and p1.buffer == ("bdp", 1.0)
    assert p0.preset_source is not None and p0.preset_source.startswith("pantheon/aws-korea")
    steps = [{"at": "2s", "rate": "20mbit"}, {"at": "1s", "rate": "30mbit"}]
    with pytest.raises(ScenarioError, match=r"wan\[0\]\.paths\[0\]\.schedule\[1\]\.at: 1s is not"):
        parse_scenario(two_paths({"schedule": steps}))
    sc = parse_scenario(two_paths({"trace": {"file": "gone.csv", "format": "csv"}}), "s.yaml")
    with pytest.raises(ScenarioError, match=r"wan\[0\]\.paths\[0\]\.trace\.file: .*gone\.csv"):
        build_timeline(sc, build_plan(sc, "x", 64), tmp_path, 10.0, source="s.yaml")


@pytest.mark.parametrize(
    ("link", "field"),
    [
        ({"schedule": [{"at": "1s", "rate": "20mbit"}]}, "schedule"),
        ({"trace": {"file": "t.csv", "format": "csv"}}, "trace"),
        ({"preset": "pantheon/aws-korea-china"}, "preset"),
    ],
)
def test_link_wide_dynamics_on_a_multipath_link_say_to_put_them_on_a_path(
    link: dict[str, Any], field: str
) -> None:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(two_paths(**link))
    text = str(err.value)
    assert f"wan[0].{field}: a link with `paths` takes `{field}` per path" in text
    assert "move it into the path it applies to" in text
    assert "issue" not in text


def test_the_report_takes_each_paths_set_rates_from_the_events() -> None:
    import pandas as pd
    from matplotlib.figure import Figure

    from analysis.multipath import path_set_rates
    from analysis.multipath_plots import _set_rate_steps

    row = {"run_id": "r0", "action": "set", "status": "applied", "source": "trace"}
    events = pd.DataFrame(
        [
            {**row, "direction": "east->west/0", "applied_unix": 10.0, "rate_bps": 80e6},
            {**row, "direction": "east->west/0", "applied_unix": 11.0, "rate_bps": 20e6},
            {**row, "direction": "east->west", "applied_unix": 11.0, "rate_bps": 5e6},
            {**row, "direction": "east->west/0", "applied_unix": 12.0, "rate_bps": 60e6,
             "status": "skipped"},
            {**row, "direction": None, "applied_unix": 12.0, "rate_bps": None, "action": "down"},
        ]
    )  # fmt: skip
    rates = path_set_rates(events)
    got = rates[["base", "path", "time", "rate_bps"]].values.tolist()
    assert got == [["east->west", 0, 10.0, 80e6], ["east->west", 0, 11.0, 20e6]]
    ax = Figure().subplots()
    _set_rate_steps(ax, rates, ("", "r0", "east->west", 0), (9.0, 13.0), "C0")
    (line,) = ax.get_lines()
    assert list(line.get_xdata()) == [1.0, 2.0, 4.0]  # held to the panel's end
    assert list(line.get_ydata()) == [80.0, 20.0, 20.0]
    _set_rate_steps(ax, rates, ("", "r0", "east->west", 1), (9.0, 13.0), "C1")
    assert len(ax.get_lines()) == 1  # path 1 never changed: no line


def test_a_path_trace_composes_with_faults_on_either_path(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("t,rate\n0s,80mbit\n1s,20mbit\n")
    trace = {"file": "t.csv", "format": "csv", "bin": "1s", "loop": False}
    data = two_paths({"trace": trace})
    data["faults"] = [
        {"kind": "burst_loss", "link": "east-west/0", "at": "1.5s", "duration": "1s",
         "p": "1%", "r": "25%"},
        {"kind": "blackhole", "link": "east-west/1", "at": "0.5s", "duration": "1s"},
    ]  # fmt: skip
    sc = parse_scenario(data, "s.yaml")
    tl = build_timeline(sc, build_plan(sc, "x", 64), tmp_path, 10.0, source="s.yaml")
    got = [(e.at, e.link, e.source, e.action) for e in tl.events]
    assert got == [
        (0.0, "east-west/0", "trace", "set"),
        (0.5, "east-west/1", "fault", "blackhole"),
        (1.0, "east-west/0", "trace", "set"),
        (1.5, "east-west/1", "fault", "unblackhole"),  # an end before a start at one time
        (1.5, "east-west/0", "fault", "set"),
        (2.5, "east-west/0", "fault", "set"),
    ]
    burst = tl.events[4]
    # the burst loss on path 0 keeps the rate its trace set there (20 Mbit/s), on path 0 only
    assert {c.direction: c.rate for c in burst.changes} == {
        "east->west/0": 20_000_000, "west->east/0": 100_000_000,
    }  # fmt: skip
