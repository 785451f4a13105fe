"""`testbed plan` and `testbed validate` on a scenario with presets, a schedule, a trace and faults:
what the plan shows (preset source, schedule steps, trace summary, faults table) and bad input
exiting 2 with the file and field."""

from __future__ import annotations

from pathlib import Path

import yaml

from testbed.cli import main

SCENARIO = {
    "name": "dyn",
    "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}, "south": {"hosts": 1}},
    "wan": [
        {
            "between": ["east", "west"],
            "preset": "pantheon/aws-korea-china",
            "schedule": [
                {"at": "10s", "rate": "30mbit"},
                {"at": "20s", "delay": "60ms", "direction": "forward"},
            ],
        },
        {
            "between": ["west", "south"],
            "rate": "10mbit",
            "trace": {"file": "traces/steps.csv", "format": "csv", "bin": "1s"},
        },
    ],
    "faults": [
        {"kind": "blackhole", "link": "east-west", "at": "12s", "duration": "2s"},
        {"kind": "flap", "link": "west-south", "at": "30s", "down": "1s", "up": "2s", "count": 3},
        {"kind": "gateway_crash", "cluster": "south", "after": {"iteration": 2}},
    ],
    "workload": {"timeout": "30s"},
}


def write(tmp_path: Path, data: dict) -> Path:
    (tmp_path / "traces").mkdir(exist_ok=True)
    (tmp_path / "traces" / "steps.csv").write_text("t,rate\n0s,2mbit\n2s,0\n3s,6mbit\n4s,0\n")
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_plan_shows_presets_schedules_traces_and_faults(tmp_path: Path, capsys) -> None:
    path = write(tmp_path, SCENARIO)
    assert main(["plan", str(path)]) == 0
    out = capsys.readouterr().out
    assert "pantheon/aws-korea-china" in out
    assert "result 361" in out and "10488e0" in out
    # values in the scenario's own syntax, so a user can copy them into a scenario or a --set
    assert "10s: rate 30mbit" in out
    assert "20s: delay 60ms (east->west)" in out
    assert (
        "trace traces/steps.csv (csv, forward): 4 bins of 1s, mean 2.5mbit, 0bit..6mbit, "
        "1 bins at rate 0 (blackholes), loops to 60s"
    ) in out
    assert "Mbit/s" not in out.split("WAN links: preset")[1]
    rows = [line for line in out.splitlines() if line.startswith("│ ")]
    assert any("12s" in r and "14s" in r and "blackhole" in r and "east-west" in r for r in rows)
    assert any("30s" in r and "37s" in r and "3 x (down 1s, up 2s)" in r for r in rows)
    assert any("iteration 2 + 0ms" in r and "never" in r and "south" in r for r in rows)
    assert "times count from the first measured iteration (clock: workload)" in out


def test_validate_and_plan_exit_2_on_a_missing_trace(tmp_path: Path, capsys) -> None:
    data = {**SCENARIO, "wan": [SCENARIO["wan"][0], {**SCENARIO["wan"][1]}]}
    data["wan"][1]["trace"] = {"file": "gone.csv", "format": "csv"}
    path = write(tmp_path, data)
    for verb in ("validate", "plan"):
        assert main([verb, str(path)]) == 2
        err = capsys.readouterr().err
        assert f"error: {path}: wan[1].trace.file: {tmp_path / 'gone.csv'}: no such trace file" in (
            err.replace("\n", "")
        )


def test_plan_exits_2_on_contradicting_faults(tmp_path: Path, capsys) -> None:
    data = dict(SCENARIO)
    data["faults"] = [
        {"kind": "link_down", "link": "east-west", "at": "1s", "duration": "5s"},
        {"kind": "link_down", "link": "west-east", "at": "2s", "duration": "1s"},
    ]
    path = write(tmp_path, data)
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err.replace("\n", "")
    assert f"{path}: faults[1]: link_down 2 s .. 3 s overlaps faults[0]" in err
