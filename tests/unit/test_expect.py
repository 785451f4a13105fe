"""Scenario expectations, pure: matching rows by summary columns and scenario paths with units,
twins for compare_to, fixed values, conditions, and what happens when nothing matches."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.faults import summarize_faults
from analysis.operations import rank_operations
from testbed.config.expect import Expectation, check, parse_value, split_condition
from testbed.config.loading import parse_scenario
from testbed.config.sweep import expand
from testbed.core.errors import ScenarioError

BASE = {
    "name": "x",
    "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
    "wan": [{"between": ["east", "west"], "rate": "1gbit", "delay": "5ms"}],
}


def resolved(rate: str) -> dict:
    data = {**BASE, "wan": [{**BASE["wan"][0], "rate": rate}]}
    return parse_scenario(data).model_dump(mode="json")


# two sweep points (rate), each with flat and hierarchical rows
RESOLVED = {"p000-r0": resolved("1gbit"), "p001-r0": resolved("100mbit")}


def row(run_id: str, rate: str, algorithm: str, t: float, ratio: float = 1.1) -> dict:
    return {
        "run_id": run_id,
        "repeat": 0,
        "wan[0].rate": rate,
        "collective": "all_reduce",
        "algorithm": algorithm,
        "size": 16 << 20,
        "ranks": 4,
        "time_p50": t,
        "measured_over_predicted": ratio,
    }


ROWS = [
    row("p000-r0", "1gbit", "flat", 0.30),
    row("p000-r0", "1gbit", "hierarchical", 0.33),  # slower at the fast point
    row("p001-r0", "100mbit", "flat", 3.0),
    row("p001-r0", "100mbit", "hierarchical", 2.1, ratio=1.4),
]
PARAMS = ["wan[0].rate"]


def run(*expectations: dict, rows=ROWS, skipped: int = 0):
    exps = [Expectation(**e) for e in expectations]
    return check(exps, rows, RESOLVED, PARAMS, skipped_runs=skipped)


HIER_FASTER = {
    "where": {"algorithm": "hierarchical"},
    "compare_to": {"algorithm": "flat"},
    "metric": "time_p50",
    "relation": "<",
}


def test_compare_to_twin_at_the_slow_points_only() -> None:
    (c,) = run({**HIER_FASTER, "when": {"wan[0].rate": "<=200mbit"}})
    assert (c.status, c.lhs, c.rhs) == ("passed", 2.1, 3.0)
    assert "p001-r0 all_reduce/hierarchical" in c.row


def test_a_failed_expectation_carries_the_numbers() -> None:
    checks = run(HIER_FASTER)
    assert [c.status for c in checks] == ["failed", "passed"]
    assert "0.33 vs 0.3" in checks[0].text()
    assert checks[0].text().startswith("expect[0] failed: algorithm=hierarchical: time_p50 <")


def test_factor_scales_the_reference() -> None:
    (c,) = run({**HIER_FASTER, "factor": 0.8, "when": {"wan[0].rate": "100mbit"}})
    assert c.status == "passed" and c.rhs == pytest.approx(2.4)
    (c,) = run({**HIER_FASTER, "factor": 0.6, "when": {"wan[0].rate": "100mbit"}})
    assert c.status == "failed"


def test_fixed_value_over_every_row() -> None:
    checks = run({"metric": "measured_over_predicted", "relation": "<=", "value": 1.25})
    assert [c.status for c in checks] == ["passed", "passed", "passed", "failed"]


def test_where_accepts_units_for_paths_and_sizes() -> None:
    checks = run(
        {
            "where": {"wan[0].rate": "1gbit", "size": "16MiB", "algorithm": "flat"},
            "metric": "time_p50",
            "relation": "<",
            "value": 1.0,
        }
    )
    assert [(c.status, c.row.split()[0]) for c in checks] == [("passed", "p000-r0")]


def test_nothing_matched_fails_unless_points_were_skipped() -> None:
    e = {
        "where": {"algorithm": "hierarchical-2d"},
        "metric": "time_p50",
        "relation": "<",
        "value": 1,
    }
    (c,) = run(e)
    assert c.status == "failed" and "check where/when" in c.detail
    (c,) = run(e, skipped=2)
    assert c.status == "unchecked" and "2 run(s) skipped" in c.detail


def test_missing_twin_is_unchecked_not_passed() -> None:
    (c,) = run({**HIER_FASTER, "when": {"wan[0].rate": "100mbit"}}, rows=ROWS[3:])
    assert c.status == "unchecked" and c.detail == "no twin row"


def test_conditions_and_values() -> None:
    assert parse_value("200mbit") == 200e6
    assert parse_value("10ms") == pytest.approx(0.01)
    assert parse_value("16MiB") == 16 << 20
    assert parse_value("1%") == pytest.approx(0.01)
    assert parse_value("bbr") == "bbr"
    rel, v = split_condition("!=bbr")
    assert rel("cubic", v) and not rel("bbr", v)
    rel, v = split_condition(">=1gbit")
    assert rel(1e9, v) and not rel(1e8, v)


def test_schema_errors_name_the_field() -> None:
    with pytest.raises(ScenarioError, match=r"expect\[0\].*exactly one of `value`"):
        parse_scenario({**BASE, "expect": [{"metric": "time_p50", "relation": "<"}]}, "x.yaml")
    with pytest.raises(ScenarioError, match=r"expect\[0\]\.relation"):
        parse_scenario(
            {**BASE, "expect": [{"metric": "time_p50", "relation": "=<", "value": 1}]}, "x.yaml"
        )


def test_sweeps_carry_the_expectations() -> None:
    data = {
        **BASE,
        "expect": [{"metric": "time_p50", "relation": "<", "value": 10}],
        "sweep": {"wan[0].rate": ["1gbit", "100mbit"]},
    }
    runs = expand(data)
    assert all(len(r.scenario.expect) == 1 for r in runs)


def test_training_runs_compare_with_their_ddp_twin_across_a_swept_algorithm() -> None:
    def training(algorithm: str) -> dict:
        data = {**BASE, "workload": {"kind": "training", "algorithm": algorithm}}
        return parse_scenario(data).model_dump(mode="json")

    resolved_runs = {"p000-r0": training("ddp"), "p001-r0": training("diloco")}
    rows = [
        {
            "run_id": "p000-r0",
            "repeat": 0,
            "workload.algorithm": "ddp",
            "algorithm": "ddp",
            "wan_bytes_per_step": 1000.0,
            "final_loss": 2.30,
        },
        {
            "run_id": "p001-r0",
            "repeat": 0,
            "workload.algorithm": "diloco",
            "algorithm": "diloco",
            "wan_bytes_per_step": 34.0,
            "final_loss": 2.36,
        },
    ]
    expectations = [
        Expectation(
            where={"workload.algorithm": "diloco"},
            compare_to={"workload.algorithm": "ddp"},
            metric="wan_bytes_per_step",
            relation="<",
            factor=0.05,
        ),
        Expectation(
            where={"algorithm": "diloco"},
            compare_to={"algorithm": "ddp"},
            metric="final_loss",
            relation="<=",
            factor=1.05,
        ),
    ]
    checks = check(expectations, rows, resolved_runs, ["workload.algorithm"])
    assert [(c.status, c.lhs, c.rhs) for c in checks] == [
        ("passed", 34.0, pytest.approx(50.0)),
        ("passed", 2.36, pytest.approx(2.415)),
    ]
    assert checks[0].row == "p001-r0 diloco"


def test_fault_metrics_on_summary_rows() -> None:
    # "2 s blackhole: stall within 20% of the RTO-series prediction, nothing fails" as expectations:
    # the runner adds analysis.faults.summarize_faults to every summary row of the run
    resolved_run = {"workload": {"timeout": 30.0}, "tcp": {"retries2": 15}, "faults": []}
    t0 = 1_700_000_000.0
    ops = pd.DataFrame(
        {
            "run_id": "p000-r0",
            "rank": 0,
            "collective": "all_reduce",
            "algorithm": "flat",
            "size": 16 << 20,
            "iteration": [0, 1, 2],
            "start": [t0, t0 + 1.1, t0 + 4.4],
            "seconds": [1.0, 3.2, 1.0],
        }
    )
    events = pd.DataFrame(
        {
            "run_id": "p000-r0",
            "event": [0, 1],
            "source": "fault",
            "fault": [0, 0],
            "action": ["blackhole", "unblackhole"],
            "link": "east-west",
            "scheduled_unix": [t0 + 1.2, t0 + 3.2],
            "applied_unix": [t0 + 1.2, t0 + 3.2],
            "late_s": [0.001, 0.03],
        }
    )
    metrics = summarize_faults(events, rank_operations(ops), resolved_run, rtt_s=0.08)
    # 80 ms RTT: TLP at 0.162 s, RTOs at 0.442, 1.002, 2.122 s: resumes 2.122 s after the start
    assert metrics["fault_stall"] == pytest.approx(2.2)
    assert metrics["fault_stall_over_predicted"] == pytest.approx(2.2 / 2.122)
    assert metrics["events_late"] == 1.0 and metrics["fault_survived"] == 1.0
    rows = [{"run_id": "p000-r0", "collective": "all_reduce", **metrics}]
    expectations = [
        Expectation(metric="fault_stall_over_predicted", relation="<=", value=1.2),
        Expectation(metric="fault_survived", relation="==", value=1),
        Expectation(metric="fault_detect", relation="<", value=1),  # nothing failed: missing
    ]
    checks = check(expectations, rows, {"p000-r0": resolved_run}, [])
    assert [c.status for c in checks] == ["passed", "passed", "unchecked"]


def test_twins_across_a_swept_list_compare_on_a_field_inside_it() -> None:
    """A sweep over ``traffic`` (whole lists); ``where``/``compare_to`` name a field inside it
    (``traffic[0].kind``) or the list itself (``traffic: []``): the twin differs in the swept
    path that holds the compared field, and only there."""
    tenants = {
        "p000-r0": [],
        "p001-r0": [{"kind": "dcqcn", "from": "east-h0", "to": "west-h0", "duration": "9s"}],
        "p002-r0": [{"kind": "bulk", "from": "east-h0", "to": "west-h0", "duration": "9s"}],
    }
    resolved = {
        r: parse_scenario({**BASE, "traffic": t}).model_dump(mode="json")
        for r, t in tenants.items()
    }
    rows = [
        row("p000-r0", "1gbit", "flat", 0.4),
        row("p001-r0", "1gbit", "flat", 30.0),
        row("p002-r0", "1gbit", "flat", 0.5),
    ]
    slower = {"where": {"traffic[0].kind": "dcqcn"}, "metric": "time_p50", "relation": ">"}
    exps = [
        Expectation(**slower, compare_to={"traffic[0].kind": "bulk"}),
        Expectation(**slower, compare_to={"traffic": []}),
    ]
    checks = check(exps, rows, resolved, ["traffic"])
    assert [(c.status, c.lhs, c.rhs) for c in checks] == [
        ("passed", 30.0, 0.5),
        ("passed", 30.0, 0.4),
    ]
