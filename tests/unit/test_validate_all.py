"""`testbed validate` checks what `testbed run` checks, every sweep point and the expectations
against the workload, and says every problem in one pass: each line names the file and the field,
names get a "did you mean" (not a list of every name), pydantic's own wording never shows, and
the exit code is 2. ``--json`` gives the same problems as data."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.cli import main

REPO = Path(__file__).resolve().parents[2]

BASE: dict[str, Any] = {
    "name": "v",
    "clusters": {"east": {"hosts": 2}, "west": {"hosts": 2}},
    "wan": [{"between": ["east", "west"], "rate": "100mbit", "delay": "20ms", "buffer": "1bdp"}],
    "workload": {
        "kind": "collectives",
        "algorithms": ["flat", "hierarchical"],
        "sizes": ["1MiB", "16MiB"],
        "iterations": 2,
    },
    "expect": [
        {
            "name": "hierarchical beats flat",
            "where": {"algorithm": "hierarchical", "size": "16MiB"},
            "compare_to": {"algorithm": "flat"},
            "metric": "time_p50",
            "relation": "<",
        }
    ],
}
# pydantic's phrases: none of them may reach a user
PYDANTIC = ("Input should", "Field required", "Extra inputs", "Value error", "validation error")


def scenario(**top: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    data.update(copy.deepcopy(top))
    return data


def validate(tmp_path: Path, data: dict[str, Any], capsys, *extra: str) -> tuple[int, str, Path]:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    code = main(["validate", str(path), *extra])
    got = capsys.readouterr()
    text = (got.out + got.err).replace("\n", " ")
    for phrase in PYDANTIC:
        assert phrase not in text, text
    return code, " ".join(text.split()), path


def test_a_good_scenario_is_ok_and_says_its_runs(tmp_path: Path, capsys) -> None:
    data = scenario(sweep={"wan[0].delay": ["10ms", "50ms"]}, repeat=2)
    code, text, path = validate(tmp_path, data, capsys)
    assert code == 0, text
    assert f"{path}: ok" in text and "4 runs (2 points x 2 repeats)" in text


def test_a_sweep_value_without_its_unit(tmp_path: Path, capsys) -> None:
    code, text, path = validate(tmp_path, scenario(sweep={"wan[0].delay": [10, "20ms"]}), capsys)
    assert code == 2
    assert f"{path}: sweep.wan[0].delay: 10 is not a duration (unit missing)" in text


def test_a_misspelled_sweep_path(tmp_path: Path, capsys) -> None:
    code, text, path = validate(tmp_path, scenario(sweep={"wan[0].dealy": ["10ms"]}), capsys)
    assert code == 2
    assert f"{path}: sweep.wan[0].dealy: unknown key 'dealy'" in text
    assert "did you mean 'delay'?" in text


def test_a_sweep_path_past_the_last_link(tmp_path: Path, capsys) -> None:
    code, text, path = validate(tmp_path, scenario(sweep={"wan[1].rate": ["10mbit"]}), capsys)
    assert code == 2
    assert f"{path}: sweep.wan[1].rate: there is no wan[1]" in text
    assert "1 WAN link" in text


def test_a_typo_in_an_expectations_where_key(tmp_path: Path, capsys) -> None:
    data = scenario()
    data["expect"][0]["where"] = {"algoritm": "hierarchical", "size": "16MiB"}
    code, text, path = validate(tmp_path, data, capsys)
    assert code == 2
    assert f"{path}: expect[0].where.algoritm: unknown key" in text
    assert "did you mean 'algorithm'?" in text


def test_a_typo_in_an_expectations_where_value(tmp_path: Path, capsys) -> None:
    data = scenario()
    data["expect"][0]["where"] = {"algorithm": "hierarchcal"}
    code, text, path = validate(tmp_path, data, capsys)
    assert code == 2
    assert f"{path}: expect[0].where.algorithm: no run has 'hierarchcal'" in text
    assert "did you mean 'hierarchical'?" in text


def test_a_typo_in_an_expectations_when_path(tmp_path: Path, capsys) -> None:
    data = scenario(sweep={"wan[0].loss": ["0%", "1%"]})
    data["expect"][0]["when"] = {"wan[0].los": "1%"}
    code, text, path = validate(tmp_path, data, capsys)
    assert code == 2
    assert f"{path}: expect[0].when.wan[0].los: unknown key" in text
    assert "did you mean 'wan[0].loss'?" in text


def test_a_when_that_no_run_meets(tmp_path: Path, capsys) -> None:
    data = scenario(sweep={"wan[0].loss": ["0%", "1%"]})
    data["expect"][0]["when"] = {"wan[0].loss": "2%"}
    code, text, path = validate(tmp_path, data, capsys)
    assert code == 2
    assert f"{path}: expect[0].when.wan[0].loss: no run has '2%'" in text


def test_a_metric_of_another_workload(tmp_path: Path, capsys) -> None:
    data = scenario()
    data["expect"][0]["metric"] = "final_loss"
    code, text, path = validate(tmp_path, data, capsys)
    assert code == 2
    assert f"{path}: expect[0].metric: 'final_loss' is a metric of training workloads" in text
    assert "time_p50" in text  # this workload's own metrics


def test_an_unknown_metric_gets_this_workloads_metrics_not_every_one(
    tmp_path: Path, capsys
) -> None:
    data = scenario()
    data["expect"][0]["metric"] = "zzz"
    code, text, path = validate(tmp_path, data, capsys)
    assert code == 2
    assert f"{path}: expect[0].metric: unknown metric 'zzz'" in text
    assert "time_p50" in text and "dcqcn_jain" not in text


def test_schema_errors_and_a_misspelled_cluster_come_together(tmp_path: Path, capsys) -> None:
    data = scenario()
    data["wan"][0].update(between=["east", "wst"], rate="fast")
    data["workload"]["iterations"] = 0
    code, text, path = validate(tmp_path, data, capsys)
    assert code == 2
    assert f"{path}: wan[0].rate: 'fast' is not a rate" in text
    assert f"{path}: workload.iterations: 0 is out of range" in text
    assert f"{path}: wan[0].between: unknown cluster 'wst'" in text
    assert "did you mean 'west'?" in text


def test_problems_of_several_points_and_the_base_at_once(tmp_path: Path, capsys) -> None:
    data = scenario(sweep={"wan[0].delay": [10, "20ms", 30], "wan[0].dealy": ["1ms"]})
    data["workload"]["warmup"] = -1
    code, text, path = validate(tmp_path, data, capsys)
    assert code == 2
    assert f"{path}: workload.warmup: -1 is out of range" in text
    assert "10 is not a duration" in text and "30 is not a duration" in text
    assert "sweep.wan[0].dealy: unknown key 'dealy'" in text
    assert text.count("workload.warmup") == 1  # once, not once per point


@pytest.mark.parametrize(
    ("path", "value", "wanted"),
    [
        ("sizes", "16MiB", "workload.sizes: '16MiB' is not a list"),
        ("iterations", "many", "workload.iterations: 'many' is not a whole number"),
        ("collectives", [], "workload.collectives: needs at least 1 item"),
        ("warmup", 1.5, "workload.warmup: 1.5 is not a whole number"),
    ],
)
def test_pydantic_wording_is_replaced(
    tmp_path: Path, capsys, path: str, value: Any, wanted: str
) -> None:
    data = scenario()
    data["workload"][path] = value
    code, text, _ = validate(tmp_path, data, capsys)
    assert code == 2
    assert wanted in text


def test_the_plan_and_timeline_checks_of_every_point(tmp_path: Path, capsys) -> None:
    data = scenario(
        faults=[
            {"kind": "link_down", "link": "east-west", "at": "1s", "duration": "5s"},
            {"kind": "link_down", "link": "west-east", "at": "2s", "duration": "1s"},
        ]
    )
    code, text, path = validate(tmp_path, data, capsys)
    assert code == 2
    assert f"{path}: faults[1]: link_down 2 s .. 3 s overlaps faults[0]" in text


def test_json_lists_every_problem(tmp_path: Path, capsys) -> None:
    data = scenario(sweep={"wan[0].dealy": ["10ms"]})
    data["workload"]["iterations"] = 0
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert main(["validate", str(path), "--json"]) == 2
    got = json.loads(capsys.readouterr().out)
    assert got["ok"] is False and got["file"] == str(path)
    fields = {p["field"] for p in got["problems"]}
    assert fields == {"sweep.wan[0].dealy", "workload.iterations"}
    assert all(set(p) == {"file", "field", "message", "points"} for p in got["problems"])


def test_json_of_a_good_scenario(tmp_path: Path, capsys) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario(sweep={"wan[0].delay": ["10ms", "50ms"]})))
    assert main(["validate", str(path), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got == {
        "version": 1,
        "file": str(path),
        "ok": True,
        "problems": [],
        "scenario": "v",
        "runs": 2,
        "points": 2,
        "repeat": 1,
    }


def test_run_refuses_before_anything_runs(tmp_path: Path, capsys) -> None:
    """`testbed run` checks what validate checks first: a typo in `where` is refused at once
    (exit 2), not reported as a failed expectation after the whole sweep. (--emit-slurm-array
    runs nothing either way: it stands for the sweep here.)"""
    data = scenario(sweep={"wan[0].delay": ["10ms", "20ms"]})
    data["expect"][0]["where"] = {"algoritm": "hierarchical"}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert main(["run", str(path), "--emit-slurm-array"]) == 2
    got = capsys.readouterr()
    assert f"{path}: expect[0].where.algoritm: unknown key" in " ".join(got.err.split())
    assert "#SBATCH" not in got.out


SCENARIOS = sorted(
    [
        *(REPO / "scenarios").glob("*.yaml"),
        *(REPO / "examples").glob("*/scenario.yaml"),
        *(REPO / "tests" / "fixtures" / "scenarios").glob("*.yaml"),
    ]
)


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_every_scenario_of_the_project_is_ok(path: Path, capsys) -> None:
    """`testbed run` refuses what validate finds: a false alarm would refuse a good run."""
    assert main(["validate", str(path)]) == 0, capsys.readouterr().err


def test_another_kinds_columns_are_not_taken_for_typos(tmp_path: Path, capsys) -> None:
    data = scenario(
        workload={"kind": "command", "argv": ["true"]},
        expect=[
            {"where": {"process": "rank 0"}, "metric": "exit_code", "relation": "==", "value": 0},
            {"where": {"metric_name": "step"}, "metric": "p50", "relation": "<", "value": 1},
        ],
    )
    code, text, _ = validate(tmp_path, data, capsys)
    assert code == 0, text
    data["expect"][0]["where"] = {"wan[0].dealy": "20ms"}  # a field path must still exist
    code, text, path = validate(tmp_path, data, capsys)
    assert code == 2 and f"{path}: expect[0].where.wan[0].dealy: unknown key" in text


def test_every_kind_of_problem_in_one_pass(tmp_path: Path, capsys) -> None:
    """Field errors, names the scenario does not know (a cluster, a link) and an expectation's
    typo: all in the first run of validate, none held back for a second round."""
    data = scenario(
        name="Bad Name",
        clusters={"east": {"hosts": 0}, "west": {"hosts": 2, "gpus": 3}},
        wan=[{"between": ["east", "wst"], "rate": "fast", "dealy": "5ms"}],
        faults=[{"kind": "blackhole", "link": "east-wast", "at": "1s", "duration": "2s"}],
    )
    data["workload"].update(algorithms=["flat", "hierarchcal"], iterations=0)
    data["expect"][0]["where"] = {"algoritm": "flat"}
    code, text, path = validate(tmp_path, data, capsys)
    assert code == 2
    for wanted in (
        "name: 'Bad Name' is not a valid scenario name",
        "clusters.east.hosts: 0 is out of range",
        "clusters.west.gpus: unknown key 'gpus'",
        "wan[0].rate: 'fast' is not a rate",
        "wan[0].dealy: unknown key 'dealy'",
        "workload.algorithms[1]: 'hierarchcal' is not allowed",
        "workload.iterations: 0 is out of range",
        "wan[0].between: unknown cluster 'wst'; clusters are: east, west; did you mean 'west'?",
        "faults[0].link: no WAN link 'east-wast'; links are: east-west; did you mean 'east-west'?",
        "expect[0].where.algoritm: unknown key",
    ):
        assert f"{path}: {wanted}" in text, wanted
    assert "did you mean 'hierarchical'?" in text
