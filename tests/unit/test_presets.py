"""WAN presets (testbed.config.presets, WanLink.preset/scale): the numbers of the measured paths,
what a user writes overriding them, the scale, the source kept, and the errors."""

from __future__ import annotations

import csv
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from testbed.config.loading import parse_scenario
from testbed.config.presets import find, presets
from testbed.core.errors import ScenarioError
from testbed.plan.topology import build_plan

SHARED = Path("/work/shared/traces")
DTFM_CSV = "data/dtfm-geo.csv"


def scenario(**link: Any) -> dict[str, Any]:
    return {
        "name": "t",
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": [{"between": ["east", "west"], **link}],
    }


def error_of(data: dict[str, Any]) -> str:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data, "x.yaml")
    assert info.value.exit_code == 2
    return str(info.value)


def test_pantheon_korea_china_is_the_issue_numbers() -> None:
    """AWS Korea -> China: 77.72 Mbit/s, 51 ms one way, 94-packet drop-tail, 0.06% loss, all on
    the uplink = forward; the reverse has the rate and delay, no loss, the default buffer."""
    link = parse_scenario(scenario(preset="pantheon/aws-korea-china")).wan[0]
    assert (link.rate, link.delay, link.loss) == (77_720_000, pytest.approx(0.051), 0.0006)
    assert link.buffer == ("bytes", 94 * 1514)
    reverse = link.direction(True)
    assert (reverse["rate"], reverse["delay"], reverse["loss"]) == (
        77_720_000,
        pytest.approx(0.051),
        0.0,
    )
    assert reverse["buffer"] == ("bdp", 1.0)
    assert "result 361" in link.preset_source
    assert "10488e0" in link.preset_source


def test_cloud_preset_delay_is_half_the_min_rtt_and_rates_per_direction() -> None:
    link = parse_scenario(scenario(preset="cloud/aws:us-east-1--aws:eu-west-1")).wan[0]
    assert link.delay == pytest.approx(0.084921 / 2)
    assert link.rate == 4_318_000_000
    assert link.direction(True)["rate"] == 4_311_000_000  # the eu-west-1 -> us-east-1 row
    assert link.loss == 0 and link.buffer == ("bdp", 1.0)
    assert "Skyplane" in link.preset_source and "945dca27" in link.preset_source


def test_cloud_presets_cover_the_shipped_grid() -> None:
    path = SHARED / "skyplane-interregion-subset.csv"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    rows = list(csv.DictReader(path.open()))
    cloud = {n: p for n, p in presets().items() if n.startswith("cloud/")}
    assert len(cloud) == len(rows) == 240
    for r in rows:
        p = cloud[f"cloud/{r['src']}--{r['dst']}"]
        assert p.delay == pytest.approx(float(r["min_rtt_ms"]) / 2e3)
        assert p.rate == round(float(r["tput_recv_gbps"]) * 1e9)


def test_dtfm_matrix_is_ten_regions_each_pair_once_both_orders_a_preset() -> None:
    rows = list(csv.DictReader(resources.files("testbed.config").joinpath(DTFM_CSV).open()))
    pairs = {frozenset((r["region_a"], r["region_b"])) for r in rows}
    regions = set().union(*pairs)
    assert len(regions) == 10 and len(rows) == len(pairs) == 45  # 10 x 9 / 2: every pair once
    dtfm = {n: p for n, p in presets().items() if n.startswith("dtfm/")}
    assert len(dtfm) == 90
    for r in rows:
        a, b = r["region_a"].lower(), r["region_b"].lower()
        forward, backward = dtfm[f"dtfm/{a}--{b}"], dtfm[f"dtfm/{b}--{a}"]
        assert (forward.rate, forward.delay) == (backward.rate, backward.delay)
        assert forward.rate == round(float(r["bandwidth_gbps"]) * 1e9)
        assert forward.delay == pytest.approx(float(r["delay_ms"]) / 1e3)
        assert forward.reverse_rate is None  # the same rate both ways


# delay_bandwidth_dict in DS3Lab/DT-FM @ cda948f scheduler/generate_sim_com_matrices.py
@pytest.mark.parametrize(
    "name, ms, gbps",
    [
        ("dtfm/oregon--virginia", 67, 0.79),
        ("dtfm/ohio--virginia", 11, 1.12),  # the source's "Virginia-Ohio", read backwards
        ("dtfm/seoul--ireland", 228, 0.335),
        ("dtfm/sydney--frankfurt", 265, 0.328),
        ("dtfm/london--frankfurt", 14, 1.14),
    ],
)
def test_dtfm_pair_is_the_source_numbers(name: str, ms: float, gbps: float) -> None:
    """The source's one-way netem delay in both directions, its rate both ways; loss and buffer
    stay the link's."""
    link = parse_scenario(scenario(preset=name)).wan[0]
    assert (link.delay, link.rate) == (pytest.approx(ms / 1e3), round(gbps * 1e9))
    reverse = link.direction(True)
    assert (reverse["delay"], reverse["rate"]) == (pytest.approx(ms / 1e3), round(gbps * 1e9))
    assert link.loss == 0 and link.buffer == ("bdp", 1.0)
    assert "DT-FM" in link.preset_source and "cda948f" in link.preset_source


def test_written_fields_override_the_preset_and_scale_applies_to_the_rest() -> None:
    link = parse_scenario(
        scenario(preset="pantheon/aws-korea-china", scale=0.5, delay="10ms", loss="1%")
    ).wan[0]
    assert link.rate == 38_860_000  # 77.72 x 0.5
    assert link.buffer == ("bytes", round(94 * 1514 * 0.5))  # the same fraction of the BDP
    assert (link.delay, link.loss) == (pytest.approx(0.010), 0.01)
    assert link.direction(True)["loss"] == 0.01  # written: both directions, as without a preset
    assert "x 0.5" in link.preset_source
    written = parse_scenario(scenario(preset="pantheon/aws-korea-china", rate="1gbit")).wan[0]
    assert written.rate == 1_000_000_000


def test_a_written_reverse_keeps_the_preset_reverse_defaults_it_does_not_name() -> None:
    link = parse_scenario(
        scenario(preset="pantheon/aws-korea-china", reverse={"delay": "5ms"})
    ).wan[0]
    reverse = link.direction(True)
    assert (reverse["delay"], reverse["loss"], reverse["buffer"]) == (0.005, 0.0, ("bdp", 1.0))


def test_every_preset_builds_a_plan() -> None:
    for name in presets():
        plan = build_plan(parse_scenario(scenario(preset=name, scale=0.01)), "x", 64)
        assert len(plan.wan) == 2


@pytest.mark.parametrize(
    "link, message",
    [
        (
            {"preset": "pantheon/aws-korea-chna"},
            "x.yaml: wan[0].preset: unknown preset 'pantheon/aws-korea-chna'; close names: "
            "pantheon/aws-korea-china",
        ),
        (
            {"preset": "nothing"},
            "x.yaml: wan[0].preset: unknown preset 'nothing'; pantheon presets: "
            "pantheon/nepal-aws-india, ",
        ),
        (
            {"scale": 2},
            "x.yaml: wan[0].scale: scale multiplies a preset's rate; without `preset:` write the "
            "rate itself",
        ),
        (
            {"preset": "pantheon/aws-korea-china", "scale": 0},
            "x.yaml: wan[0].scale: 0 is not a positive number (a rate multiplier, e.g. 0.1)",
        ),
        (
            {"preset": 3},
            "x.yaml: wan[0].preset: 3 is not a preset name; e.g. pantheon/aws-korea-china",
        ),
    ],
)
def test_preset_errors(link: dict[str, Any], message: str) -> None:
    assert error_of(scenario(**link)).startswith(message)


def test_unknown_names_list_the_cloud_regions() -> None:
    with pytest.raises(ValueError, match="cloud/<src>--<dst> with regions aws:ap-northeast-1"):
        find("zzz")
    with pytest.raises(ValueError, match="dtfm/<src>--<dst> with regions frankfurt, ireland, "):
        find("zzz")


def test_a_misspelt_dtfm_name_lists_close_names() -> None:
    message = error_of(scenario(preset="dtfm/oregon--virgina"))
    assert message.startswith(
        "x.yaml: wan[0].preset: unknown preset 'dtfm/oregon--virgina'; close names: "
        "dtfm/oregon--virginia"
    )
