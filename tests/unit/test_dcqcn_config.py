"""The scenario's DCQCN fields (testbed.config.dcqcn): parsing, defaults per variant, dilation."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from pydantic import ValidationError

from testbed.config.dcqcn import DcqcnParamsSpec, DcqcnSettings, resolve
from testbed.config.loading import parse_scenario
from testbed.core.dcqcn import defaults
from testbed.core.errors import ScenarioError
from testbed.experiment.flows import dcqcn_setup
from testbed.plan.topology import build_plan


def test_the_issues_params_line_parses_to_the_papers_defaults() -> None:
    spec = DcqcnParamsSpec.model_validate(
        {"T": "55us", "K": "55us", "N": "50us", "g": "1/256", "F": 5, "B": "10MB",
         "rai": "40mbit", "rhai": "200mbit"}
    )  # fmt: skip
    got, want = dataclasses.asdict(resolve("paper", spec)), dataclasses.asdict(defaults("paper"))
    assert got == pytest.approx(want)


def test_unset_fields_keep_the_variants_defaults_and_dilation_applies() -> None:
    spec = DcqcnParamsSpec.model_validate({"T": "5ms", "min_dec_fac": "95%", "B": "off"})
    p = resolve("mellanox", spec)
    assert (p.rate_timer, p.min_dec_fac, p.byte_counter) == (0.005, 0.95, None)
    assert p.rai == defaults("mellanox").rai  # not given: the NIC's 5 Mbit/s
    d = resolve("paper", DcqcnParamsSpec(), dilation=100)
    assert d.rate_timer == pytest.approx(5.5e-3) and d.rai == pytest.approx(0.4e6)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [("g", "1/0", "not a ratio"), ("g", "2", "(0, 1]"), ("F", 0, "greater than or equal"),
     ("T", "fast", "T"), ("rai", "-1mbit", "rai"), ("Q", 1, "Extra inputs")],
)  # fmt: skip
def test_bad_params_are_refused_naming_the_field(field, value, says) -> None:
    with pytest.raises(ValidationError) as exc:
        DcqcnParamsSpec.model_validate({field: value})
    assert says in str(exc.value)


def test_settings_defaults() -> None:
    s = DcqcnSettings()
    assert (s.variant, s.line_rate, s.size) == ("paper", None, 1400)
    with pytest.raises(ValidationError):
        DcqcnSettings.model_validate({"variant": "timely"})


# -- the scenario: workload, traffic, dilation ---------------------------------------------------
def dcqcn_scenario(**extra: Any) -> dict[str, Any]:
    link = {"between": ["east", "west"], "rate": "100mbit", "delay": "17ms", "buffer": "1MB"}
    link["aqm"] = {"kind": "red", "kmin": "5KB", "kmax": "200KB", "pmax": "1%"}
    flows = [
        {"from": "east-h0", "to": "west-h0"},
        {"from": "east-h1", "to": "west-h1", "start": "5s"},
    ]
    data = {
        "name": "d",
        "clusters": {"east": {"hosts": 2}, "west": {"hosts": 2}},
        "wan": [link],
        "workload": {"kind": "dcqcn", "flows": flows, "duration": "20s", "params": {"B": "150KB"}},
        "dilation": 400,
    }
    return data | extra


def test_a_dcqcn_workload_is_flows_without_ranks() -> None:
    sc = parse_scenario(dcqcn_scenario())
    assert sc.rank_workload is None and sc.dilation == 400
    assert [(f.kind, f.from_, f.start, f.duration) for f in sc.flows] == [
        ("dcqcn", "east-h0", 0.0, 20.0),
        ("dcqcn", "east-h1", 5.0, 15.0),  # until the workload's end
    ]
    assert sc.flows[1].params.B == 150_000


def test_dcqcn_traffic_runs_beside_bulk_flows_and_a_workload() -> None:
    traffic = [
        {"kind": "dcqcn", "from": "east-h1", "to": "west-h1", "duration": "10s"},
        {"kind": "bulk", "from": "east-h0", "to": "west-h0", "duration": "10s"},
    ]
    sc = parse_scenario(dcqcn_scenario(workload={"kind": "collectives"}, traffic=traffic))
    assert [f.kind for f in sc.flows] == ["dcqcn", "bulk"]
    assert sc.rank_workload is sc.workload


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (
            {"traffic": [{"kind": "udp", "from": "east-h0", "to": "west-h0"}]},
            "traffic[0].kind: 'udp' is not allowed; allowed: 'bulk', 'dcqcn'",
        ),
        (
            {"traffic": [{"kind": "dcqcn", "from": "east-h0", "to": "west-h0", "duratio": "1s"}]},
            "traffic[0].duratio: unknown key 'duratio'",
        ),
        ({"dilation": 0.5}, "dilation: "),
    ],
)
def test_bad_dcqcn_scenarios_name_the_field(change: dict[str, Any], says: str) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(dcqcn_scenario(**change))
    assert says in str(info.value)


def test_a_flow_starting_after_the_end_or_on_no_host_is_refused() -> None:
    data = dcqcn_scenario()
    data["workload"]["flows"][1]["start"] = "30s"
    with pytest.raises(ScenarioError, match=r"workload.flows\[1\].start: starts at 30 s, not"):
        parse_scenario(data)
    data["workload"]["flows"][1] = {"from": "east-h0", "to": "west-h9"}
    with pytest.raises(ScenarioError, match=r"workload.flows\[1\].to: no host 'west-h9'"):
        parse_scenario(data)


def test_a_flows_setup_is_dilated_with_the_bottleneck_it_queues_in() -> None:
    sc = parse_scenario(dcqcn_scenario())
    plan = build_plan(sc, "t", 9)
    u = dcqcn_setup(sc.flows[0], plan, sc.dilation)
    assert u["direction"] == "east->west" and u["bottleneck_bps"] == 100e6
    assert u["line_rate_bps"] == 200e6  # twice the bottleneck: one flow builds a queue
    assert u["rtt_s"] == pytest.approx(0.034)
    assert u["params"]["rate_timer"] == pytest.approx(55e-6 * 400)
    assert u["params"]["rai"] == pytest.approx(40e6 / 400)
    assert u["params"]["byte_counter"] == 150_000  # bytes are not dilated
    assert u["buffer_bytes"] == 1_000_000 and u["aqm"]["kmax"] == 200_000
