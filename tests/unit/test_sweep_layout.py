"""Pure tests: sweep expansion, --set overrides, rank placement."""

from __future__ import annotations

import itertools

import pytest

from testbed.config.loading import parse_scenario
from testbed.config.sweep import expand, parse_override, parse_path, set_path
from testbed.core.errors import ScenarioError
from testbed.plan.ranks import place_ranks
from testbed.plan.topology import build_plan


def base(**extra) -> dict:
    data = {
        "name": "x",
        "clusters": {"east": {"hosts": 2}, "west": {"hosts": 2}},
        "wan": [{"between": ["east", "west"], "rate": "100mbit"}],
        "workload": {"algorithms": ["flat"]},
    }
    data.update(extra)
    return data


def test_parse_path():
    assert parse_path("wan[0].rate") == ["wan", 0, "rate"]
    assert parse_path("workload.algorithms") == ["workload", "algorithms"]
    assert parse_path("clusters.east.hosts") == ["clusters", "east", "hosts"]
    with pytest.raises(ValueError, match="not a field path"):
        parse_path("wan[0]..rate")


def test_set_path_creates_mappings_but_not_list_items():
    data = base()
    set_path(data, "tcp.congestion", "bbr")
    assert data["tcp"] == {"congestion": "bbr"}
    with pytest.raises(ValueError, match=r"there is no wan\[1\]"):
        set_path(data, "wan[1].rate", "1gbit")


def test_cartesian_product_in_written_order_times_repeat():
    data = base(
        sweep={
            "wan[0].rate": ["50mbit", "1gbit"],
            "workload.algorithms": [["flat"], ["hierarchical"]],
        },
        repeat=2,
    )
    runs = expand(data, "x.yaml")
    assert [r.run_id for r in runs] == [
        "p000-r0",
        "p000-r1",
        "p001-r0",
        "p001-r1",
        "p002-r0",
        "p002-r1",
        "p003-r0",
        "p003-r1",
    ]
    assert [(r.scenario.wan[0].rate, tuple(r.scenario.workload.algorithms)) for r in runs[::2]] == [
        (50_000_000, ("flat",)),
        (50_000_000, ("hierarchical",)),
        (1_000_000_000, ("flat",)),
        (1_000_000_000, ("hierarchical",)),
    ]
    assert runs[2].params == {"wan[0].rate": "50mbit", "workload.algorithms": ["hierarchical"]}
    assert runs[2].label() == "wan[0].rate=50mbit, workload.algorithms=[hierarchical]"


def test_no_sweep_is_one_run():
    runs = expand(base(), "x.yaml")
    assert len(runs) == 1 and runs[0].params == {} and runs[0].label() == "(no sweep)"


def test_bad_sweep_value_names_the_point():
    with pytest.raises(ScenarioError) as info:
        expand(base(sweep={"wan[0].rate": ["1gbit", "fast"]}), "x.yaml")
    assert str(info.value) == (
        "x.yaml (sweep point wan[0].rate=fast): wan[0].rate: 'fast' is not a rate; "
        "examples: 100mbit, 1gbit, 500kbit"
    )


def test_sweep_over_a_missing_list_item_is_an_error():
    with pytest.raises(ScenarioError, match=r"x.yaml: sweep: wan\[2\].rate: there is no wan\[2\]"):
        expand(base(sweep={"wan[2].rate": ["1gbit"]}), "x.yaml")


def test_sweep_values_must_be_a_list():
    with pytest.raises(ScenarioError, match="expected a non-empty list"):
        expand(base(sweep={"wan[0].rate": "1gbit"}), "x.yaml")


def test_overrides_apply_before_the_sweep():
    runs = expand(
        base(),
        "x.yaml",
        [
            parse_override("wan[0].delay=50ms"),
            parse_override("workload.algorithms=[flat, hierarchical]"),
        ],
    )
    assert runs[0].scenario.wan[0].delay == pytest.approx(0.05)
    assert runs[0].scenario.workload.algorithms == ["flat", "hierarchical"]
    with pytest.raises(ScenarioError, match="expected PATH=VALUE"):
        parse_override("wan[0].delay")


def test_bad_workload_block_is_a_clear_error():
    with pytest.raises(ScenarioError) as info:
        expand(base(workload={"collectives": ["all_reduce", "allreduce"]}), "x.yaml")
    assert "workload.collectives[1]: 'allreduce' is not allowed" in str(info.value)
    with pytest.raises(ScenarioError) as info:
        expand(base(workload={"sizes": ["16 MiB", "big"]}), "x.yaml")
    assert "workload.sizes[1]: 'big' is not a size" in str(info.value)
    with pytest.raises(ScenarioError) as info:
        expand(base(workload={"timeout": "0s"}), "x.yaml")
    assert "workload.timeout" in str(info.value)


def plan_of(hosts: dict[str, int]):
    names = list(hosts)
    data = {
        "name": "x",
        "clusters": {c: {"hosts": n} for c, n in hosts.items()},
        "wan": [{"between": [a, b]} for a, b in itertools.pairwise(names)],
    }
    return build_plan(parse_scenario(data), "mctb0000", 64)


def test_by_cluster_placement():
    ranks = place_ranks(plan_of({"east": 2, "west": 1}), ranks_per_host=2, placement="by-cluster")
    assert [(r.rank, r.host, r.cluster, r.local_rank) for r in ranks] == [
        (0, "east-h0", "east", 0),
        (1, "east-h0", "east", 1),
        (2, "east-h1", "east", 2),
        (3, "east-h1", "east", 3),
        (4, "west-h0", "west", 0),
        (5, "west-h0", "west", 1),
    ]


def test_interleaved_placement_round_robins_and_skips_exhausted_clusters():
    ranks = place_ranks(plan_of({"east": 3, "west": 1}), ranks_per_host=1, placement="interleaved")
    assert [(r.host, r.local_rank) for r in ranks] == [
        ("east-h0", 0),
        ("west-h0", 0),
        ("east-h1", 1),
        ("east-h2", 2),
    ]


def test_each_rank_carries_its_hosts_tcp_user_timeout():
    data = {
        "name": "x",
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1, "tcp": {"user_timeout": "2s"}}},
        "wan": [{"between": ["east", "west"]}],
        "tcp": {"user_timeout": "500ms"},
    }
    plan = build_plan(parse_scenario(data), "mctb0000", 64)
    ranks = place_ranks(plan, ranks_per_host=1, placement="by-cluster")
    assert [(r.host, r.tcp_user_timeout) for r in ranks] == [("east-h0", 0.5), ("west-h0", 2.0)]
    assert ranks[1].as_dict()["tcp_user_timeout"] == 2.0


def test_sweep_cases_are_hand_picked_points_crossed_with_the_other_axes():
    data = base(
        workload={"kind": "training", "diloco": {"inner_steps": 30}},
        sweep={
            "wan[0].rate": ["50mbit", "1gbit"],
            "cases": [
                {"workload.algorithm": "ddp"},
                {"workload.algorithm": "ddp", "workload.ddp.hook": "fp16"},
                {"workload.algorithm": "diloco", "workload.diloco.inner_steps": 10},
            ],
        },
    )
    runs = expand(data, "x.yaml")
    assert len(runs) == 6
    got = [
        (
            r.scenario.wan[0].rate,
            r.scenario.workload.algorithm,
            r.scenario.workload.ddp.hook,
            r.scenario.workload.diloco.inner_steps,
        )
        for r in runs
    ]
    assert got[:3] == [
        (50_000_000, "ddp", "none", 30),
        (50_000_000, "ddp", "fp16", 30),
        (50_000_000, "diloco", "none", 10),
    ]
    # every run has every case path as a parameter (None: the scenario's value)
    assert runs[0].params == {
        "wan[0].rate": "50mbit",
        "workload.algorithm": "ddp",
        "workload.ddp.hook": None,
        "workload.diloco.inner_steps": None,
    }
    assert runs[2].label() == (
        "wan[0].rate=50mbit, workload.algorithm=diloco, workload.diloco.inner_steps=10"
    )


@pytest.mark.parametrize("cases", [[], [{}], ["ddp"], [{"workload.[": 1}]])
def test_bad_sweep_cases_are_clear_errors(cases):
    with pytest.raises(ScenarioError, match="sweep"):
        expand(base(sweep={"cases": cases}), "x.yaml")
