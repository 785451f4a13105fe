"""Scenario schema (testbed.config): defaults, overrides and the exact user-facing errors.

Every error names the file, the field path (``wan[0].delay``), the bad value and what is allowed,
one line per problem. Pure tests: no root, no kernel.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any

import pytest

from testbed.config.loading import load_scenario, parse_scenario
from testbed.core.errors import ScenarioError

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "scenarios" / "quickstart.yaml"
DELETE = object()  # marker for edit(): remove the key


def scenario(**top: Any) -> dict[str, Any]:
    """A small valid scenario (two clusters, one WAN link) as loaded YAML; ``top`` replaces keys."""
    data: dict[str, Any] = {
        "name": "t",
        "clusters": {"east": {"hosts": 2}, "west": {"hosts": 2}},
        "wan": [{"between": ["east", "west"], "rate": "100mbit", "delay": "20ms"}],
    }
    data.update(copy.deepcopy(top))
    return data


def edit(path: str, value: Any, data: dict[str, Any] | None = None) -> dict[str, Any]:
    """``scenario()`` with the value at a dotted path (``wan.0.delay``) replaced or deleted."""
    data = scenario() if data is None else data
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node: Any = data
    for part in parents:
        node = node[part]
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return data


def error_of(data: Any, source: str = "x.yaml") -> str:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data, source)
    assert info.value.exit_code == 2
    return str(info.value)


# --- good scenarios ---------------------------------------------------------------------------


def test_quickstart_loads() -> None:
    s = load_scenario(QUICKSTART)
    assert s.name == "quickstart"
    assert list(s.clusters) == ["east", "west"]
    assert [c.hosts for c in s.clusters.values()] == [2, 2]
    (link,) = s.wan
    assert link.between == ("east", "west")
    assert link.rate == 100_000_000
    assert link.delay == pytest.approx(0.020)
    assert link.buffer == ("bdp", 1.0)
    assert (s.tcp.congestion, s.tcp.ecn) == ("cubic", False)
    assert s.backend == "auto"


@pytest.mark.parametrize("path", sorted((REPO / "scenarios").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_scenario_loads(path: Path) -> None:
    assert load_scenario(path).name


def test_defaults() -> None:
    s = parse_scenario(
        {
            "name": "m",
            "clusters": {"a": {"hosts": 1}, "b": {"hosts": 1}},
            "wan": [{"between": ["a", "b"]}],
        }
    )
    (link,) = s.wan
    assert link.rate == 1_000_000_000
    assert (link.delay, link.jitter, link.loss, link.reorder) == (0.0, 0.0, 0.0, 0.0)
    assert link.buffer == ("bdp", 1.0)
    assert link.reverse is None
    assert link.direction(True) == link.direction(False)
    assert s.tcp.model_dump() == {
        "congestion": "cubic",
        "ecn": False,
        "rmem": "auto",
        "wmem": "auto",
        "slow_start_after_idle": True,
        "retries2": None,
        "user_timeout": 0.0,
    }
    assert s.backend == "auto"
    assert s.description == ""
    fabric = s.clusters["a"].fabric
    assert (fabric.rate, fabric.delay) == (None, 0.0)
    assert s.clusters["a"].tcp is None
    assert s.cluster_tcp("a") == s.tcp


def test_a_single_cluster_needs_no_wan() -> None:
    s = parse_scenario({"name": "solo", "clusters": {"only": {"hosts": 3}}})
    assert s.wan == []


def test_reverse_overrides_only_the_given_fields() -> None:
    data = edit(
        "wan.0",
        {
            "between": ["east", "west"],
            "rate": "100mbit",
            "delay": "20ms",
            "jitter": "1ms",
            "loss": "1%",
            "reorder": "2%",
            "buffer": "2bdp",
            "reverse": {"rate": "200mbit", "delay": "10ms"},
        },
    )
    link = parse_scenario(data).wan[0]
    forward = {
        "rate": 100_000_000,
        "delay": pytest.approx(0.020),
        "jitter": pytest.approx(0.001),
        "loss": pytest.approx(0.01),
        "reorder": pytest.approx(0.02),
        "buffer": ("bdp", 2.0),
        "aqm": None,
    }
    assert link.direction(False) == forward
    assert link.direction(True) == {**forward, "rate": 200_000_000, "delay": pytest.approx(0.010)}


def test_reverse_can_set_a_field_to_zero() -> None:
    link = parse_scenario(edit("wan.0.reverse", {"delay": "0ms", "loss": "0%"})).wan[0]
    assert link.direction(True)["delay"] == 0.0
    assert link.direction(False)["delay"] == pytest.approx(0.020)


def test_cluster_tcp_override_inherits_the_rest() -> None:
    data = scenario(tcp={"congestion": "cubic", "ecn": True, "rmem": "4MiB"})
    data["clusters"]["east"]["tcp"] = {"congestion": "bbr"}
    data["clusters"]["west"]["tcp"] = {"wmem": "8MiB", "ecn": False}
    s = parse_scenario(data)
    east, west = s.cluster_tcp("east"), s.cluster_tcp("west")
    assert (east.congestion, east.ecn, east.rmem, east.wmem) == ("bbr", True, 4 * 2**20, "auto")
    assert (west.congestion, west.ecn, west.rmem, west.wmem) == (
        "cubic",
        False,
        4 * 2**20,
        8 * 2**20,
    )
    assert s.tcp.congestion == "cubic"  # the top-level block is unchanged


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("name", "a" * 32),
        ("name", "multi-dc-2"),
        ("clusters.east.hosts", 1),
        ("clusters.east.hosts", 64),
        ("wan.0.loss", "100%"),
        ("wan.0.loss", 0),  # zero needs no unit
        ("wan.0.delay", 0),
        ("wan.0.buffer", "4MiB"),
        ("wan.0.buffer", "0.5xBDP"),
        ("backend", "kernel"),
        ("backend", "userspace"),
        ("clusters.east.fabric", {"rate": "10gbit", "delay": "50us"}),
    ],
)
def test_accepts(path: str, value: Any) -> None:
    parse_scenario(edit(path, value))


def test_longest_cluster_name_is_accepted() -> None:
    data = scenario()
    data["clusters"]["abcdefghijkl"] = data["clusters"].pop("west")
    data["wan"][0]["between"] = ["east", "abcdefghijkl"]
    assert "abcdefghijkl" in parse_scenario(data).clusters


# --- bad scenarios: the exact message ---------------------------------------------------------

ALLOWED_TOP = (
    "name, description, question, expected, clusters, wan, tcp, backend, engine, routing, "
    "placement, workload, "
    "trace, faults, traffic, dilation, clock, sweep, repeat, expect"
)
ALLOWED_WAN = (
    "between, rate, delay, jitter, loss, reorder, buffer, aqm, reverse, schedule, trace, preset, "
    "scale, paths"
)
ALLOWED_TCP = "congestion, ecn, rmem, wmem, slow_start_after_idle, retries2, user_timeout"
CLUSTER_RULE = "allowed: a lowercase letter, then a-z and 0-9, at most 12 characters"
PAIR_ONCE = "a cluster pair appears at most once"


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        pytest.param(
            "wan.0.between",
            ["east", "north"],
            "wan[0].between: unknown cluster 'north'; clusters are: east, west",
            id="between-unknown-cluster",
        ),
        pytest.param(
            "wan.0.between",
            ["east", "east"],
            "wan[0].between: a WAN link joins two different clusters, got ['east', 'east']",
            id="between-same-cluster-twice",
        ),
        pytest.param(
            "clusters.east.hosts",
            0,
            "clusters.east.hosts: 0 is out of range; must be at least 1",
            id="zero-hosts",
        ),
        pytest.param(
            "clusters.east.hosts",
            65,
            "clusters.east.hosts: 65 is out of range; must be at most 64",
            id="65-hosts",
        ),
        pytest.param(
            "clusters.east.hosts",
            DELETE,
            "clusters.east.hosts: missing required field",
            id="hosts-missing",
        ),
        pytest.param(
            "wan.0.delay",
            "-5ms",
            "wan[0].delay: '-5ms': a duration must not be negative; examples: 0ms, 25ms, 100us",
            id="negative-delay",
        ),
        pytest.param(
            "wan.0.delay",
            "25 parsecs",
            "wan[0].delay: '25 parsecs' is not a duration; examples: 25ms, 100us, 1.5s",
            id="delay-bad-unit",
        ),
        pytest.param(
            "wan.0.delay",
            "25",
            "wan[0].delay: '25' is not a duration (unit missing); examples: 25ms, 100us, 1.5s",
            id="delay-unit-missing",
        ),
        pytest.param(
            "wan.0.jitter",
            "a lot",
            "wan[0].jitter: 'a lot' is not a duration; examples: 25ms, 100us, 1.5s",
            id="bad-jitter",
        ),
        pytest.param(
            "wan.0.loss",
            "150%",
            "wan[0].loss: '150%': 150% is out of range; allowed: 0% to 100%",
            id="loss-above-100",
        ),
        pytest.param(
            "wan.0.loss",
            1.5,
            "wan[0].loss: 1.5 is not a percentage (% sign missing); examples: 0%, 0.1%, 1%",
            id="loss-without-percent-sign",
        ),
        pytest.param(
            "wan.0.reorder",
            "-1%",
            "wan[0].reorder: '-1%': -1% is out of range; allowed: 0% to 100%",
            id="negative-reorder",
        ),
        pytest.param(
            "wan.0.rate",
            "0mbit",
            "wan[0].rate: '0mbit': a rate must be positive; examples: 100mbit, 1gbit",
            id="zero-rate",
        ),
        pytest.param(
            "wan.0.rate",
            "fast",
            "wan[0].rate: 'fast' is not a rate; examples: 100mbit, 1gbit, 500kbit",
            id="bad-rate",
        ),
        pytest.param(
            "wan.0.buffer",
            "lots",
            "wan[0].buffer: 'lots' is not a buffer size; examples: 1bdp, 0.5bdp, 2bdp, 4MiB, 256KB",
            id="bad-buffer",
        ),
        pytest.param(
            "wan.0.buffer",
            "0bdp",
            "wan[0].buffer: '0bdp': buffer must be positive; examples: 1bdp, 0.5bdp, 4MiB",
            id="zero-buffer",
        ),
        pytest.param(
            "wan.0.reverse",
            {"rate": "x"},
            "wan[0].reverse.rate: 'x' is not a rate; examples: 100mbit, 1gbit, 500kbit",
            id="bad-reverse-rate",
        ),
        pytest.param(
            "wan.0.reverse",
            {"delay": "-1ms"},
            "wan[0].reverse.delay: '-1ms': a duration must not be negative; "
            "examples: 0ms, 25ms, 100us",
            id="negative-reverse-delay",
        ),
        pytest.param(
            "clusters.east.fabric",
            {"rate": "fast"},
            "clusters.east.fabric.rate: 'fast' is not a rate; examples: 100mbit, 1gbit, 500kbit",
            id="bad-fabric-rate",
        ),
        pytest.param(
            "name",
            "My Test",
            "name: 'My Test' is not a valid scenario name; "
            "allowed: a-z, 0-9 and '-', 1 to 32 characters",
            id="scenario-name-uppercase-and-blank",
        ),
        pytest.param(
            "name",
            "a" * 33,
            f"name: {'a' * 33!r} is not a valid scenario name; "
            "allowed: a-z, 0-9 and '-', 1 to 32 characters",
            id="scenario-name-too-long",
        ),
        pytest.param("name", DELETE, "name: missing required field", id="name-missing"),
        pytest.param(
            "clusters.East",
            {"hosts": 1},
            f"clusters.East: 'East' is not a valid cluster name; {CLUSTER_RULE}",
            id="cluster-name-uppercase",
        ),
        pytest.param(
            "clusters.abcdefghijklm",
            {"hosts": 1},
            f"clusters.abcdefghijklm: 'abcdefghijklm' is not a valid cluster name; {CLUSTER_RULE}",
            id="cluster-name-13-chars",
        ),
        pytest.param(
            "clusters.a--b",
            {"hosts": 1},
            f"clusters.a--b: 'a--b' is not a valid cluster name; {CLUSTER_RULE}",
            id="cluster-name-double-dash",
        ),
        pytest.param(
            "clusters.1dc",
            {"hosts": 1},
            f"clusters.1dc: '1dc' is not a valid cluster name; {CLUSTER_RULE}",
            id="cluster-name-leading-digit",
        ),
        pytest.param(
            "colour",
            "red",
            f"colour: unknown key 'colour'; allowed: {ALLOWED_TOP}",
            id="unknown-key-top",
        ),
        pytest.param(
            "clusters.east.gpus",
            8,
            "clusters.east.gpus: unknown key 'gpus'; allowed: hosts, fabric, tcp",
            id="unknown-key-cluster",
        ),
        pytest.param(
            "clusters.east.fabric",
            {"latency": "1ms"},
            "clusters.east.fabric.latency: unknown key 'latency'; allowed: rate, delay",
            id="unknown-key-fabric",
        ),
        pytest.param(
            "clusters.east.tcp",
            {"cc": "bbr"},
            f"clusters.east.tcp.cc: unknown key 'cc'; allowed: {ALLOWED_TCP}",
            id="unknown-key-cluster-tcp",
        ),
        pytest.param(
            "wan.0.latency",
            "5ms",
            f"wan[0].latency: unknown key 'latency'; allowed: {ALLOWED_WAN}",
            id="unknown-key-wan",
        ),
        pytest.param(
            "wan.0.reverse",
            {"latency": "5ms"},
            "wan[0].reverse.latency: unknown key 'latency'; "
            "allowed: rate, delay, jitter, loss, reorder, buffer, aqm",
            id="unknown-key-reverse",
        ),
        pytest.param(
            "tcp",
            {"cc": "bbr"},
            f"tcp.cc: unknown key 'cc'; allowed: {ALLOWED_TCP}",
            id="unknown-key-tcp",
        ),
        pytest.param(
            "tcp",
            {"congestion": "Bad CC"},
            "tcp.congestion: 'Bad CC' is not a congestion control name; examples: cubic, bbr, reno",
            id="bad-congestion-name",
        ),
        pytest.param(
            "backend",
            "docker",
            "backend: 'docker' is not allowed; allowed: 'auto', 'kernel', 'userspace' or 'tclink'",
            id="bad-backend",
        ),
    ],
)
def test_rejects(path: str, value: Any, message: str) -> None:
    assert error_of(edit(path, value)) == f"x.yaml: {message}"


@pytest.mark.parametrize(
    "pair", [["east", "west"], ["west", "east"]], ids=["same-order", "reversed-order"]
)
def test_duplicate_pair(pair: list[str]) -> None:
    data = scenario()
    data["wan"].append({"between": pair})
    assert error_of(data) == (
        f"x.yaml: wan[1].between: the pair {pair!r} already appears in wan[0]; {PAIR_ONCE}"
    )


def test_duplicate_pair_names_the_first_occurrence() -> None:
    data = scenario()
    data["clusters"]["north"] = {"hosts": 1}
    data["wan"] += [{"between": ["west", "north"]}, {"between": ["north", "west"]}]
    assert error_of(data) == (
        f"x.yaml: wan[2].between: the pair ['north', 'west'] already appears in wan[1]; {PAIR_ONCE}"
    )


@pytest.mark.parametrize(
    ("clusters", "wan", "missing"),
    [
        pytest.param(["east", "west", "north"], [("east", "west")], "north", id="one-island"),
        pytest.param(["east", "west"], [], "west", id="no-wan-at-all"),
        pytest.param(["a", "b", "c", "d"], [("a", "b"), ("c", "d")], "c, d", id="two-components"),
    ],
)
def test_disconnected_wan_graph(
    clusters: list[str], wan: list[tuple[str, str]], missing: str
) -> None:
    data = {
        "name": "t",
        "clusters": {c: {"hosts": 1} for c in clusters},
        "wan": [{"between": list(pair)} for pair in wan],
    }
    assert error_of(data) == (
        f"x.yaml: wan: cluster(s) {missing} have no WAN path to {clusters[0]}; "
        "add a `between` entry that connects them"
    )


def test_one_line_per_problem() -> None:
    data = edit("wan.0.loss", "150%", edit("wan.0.delay", "-5ms"))
    data["clusters"]["east"]["hosts"] = 0
    assert error_of(data).splitlines() == [
        "x.yaml: clusters.east.hosts: 0 is out of range; must be at least 1",
        "x.yaml: wan[0].delay: '-5ms': a duration must not be negative; examples: 0ms, 25ms, 100us",
        "x.yaml: wan[0].loss: '150%': 150% is out of range; allowed: 0% to 100%",
    ]


@pytest.mark.parametrize("data", [["name", "clusters"], "just text", None, 5], ids=repr)
def test_top_level_must_be_a_mapping(data: Any) -> None:
    assert error_of(data) == "x.yaml: a scenario is a mapping of keys (name, clusters, wan, ...)"


# --- messages worded for users, not in pydantic's words ------------------------------------


def test_bad_tcp_buffer_is_one_line_naming_both_forms() -> None:
    message = error_of(scenario(tcp={"rmem": "huge"}))
    assert len(message.splitlines()) == 1
    assert message.startswith("x.yaml: tcp.rmem: 'huge'")
    assert "auto" in message
    assert "4MiB" in message


@pytest.mark.parametrize(
    ("path", "value", "prefix", "must_say"),
    [
        pytest.param(
            "clusters",
            {f"c{i}": {"hosts": 1} for i in range(17)},
            "x.yaml: clusters: ",
            "16",
            id="17-clusters",
        ),
        pytest.param(
            "clusters", {}, "x.yaml: clusters: ", "at least one cluster", id="no-clusters"
        ),
        pytest.param(
            "wan.0.between",
            ["east", "west", "north"],
            "x.yaml: wan[0].between: ",
            "two cluster",
            id="between-three-names",
        ),
    ],
)
def test_size_limits_are_worded_for_users(
    path: str, value: Any, prefix: str, must_say: str
) -> None:
    message = error_of(edit(path, value))
    assert message.startswith(prefix)
    assert must_say in message
    assert "after validation" not in message
    assert "{'c0'" not in message
    assert "Tuple" not in message


# --- files: load_scenario / YAML errors -------------------------------------------------------


def write(tmp_path: Path, text: str | bytes, name: str = "x.yaml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def load_error(path: Path) -> str:
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert info.value.exit_code == 2
    return str(info.value)


def test_load_scenario_names_the_file_in_validation_errors(tmp_path: Path) -> None:
    path = write(tmp_path, "name: t\nclusters: {east: {hosts: 0}}\n")
    assert load_error(path) == f"{path}: clusters.east.hosts: 0 is out of range; must be at least 1"


@pytest.mark.parametrize(
    ("text", "where", "problem"),
    [
        pytest.param(
            "name: t\nclusters:\n  east: {hosts: 2\n  west:\n    hosts: 2\n",
            "line 4, column 7",
            "expected ',' or '}', but got ':'",
            id="unclosed-flow-mapping",
        ),
        pytest.param(
            "name: t\n\ttab: 1\n",
            "line 2, column 1",
            "found character '\\t' that cannot start any token",
            id="tab-indent",
        ),
        pytest.param(
            "name: t\nclusters:\n  east:\n    hosts: 2\n   west: 1\n",
            "line 5, column 4",
            "expected <block end>, but found '<block mapping start>'",
            id="bad-indent",
        ),
    ],
)
def test_yaml_syntax_error_reports_the_line(
    tmp_path: Path, text: str, where: str, problem: str
) -> None:
    path = write(tmp_path, text)
    assert load_error(path) == f"{path}: {where}: YAML syntax error: {problem}"


@pytest.mark.parametrize(
    ("text", "name"),
    [("- east\n- west\n", "list.yaml"), ("just text\n", "text.yaml")],
)
def test_file_whose_top_level_is_not_a_mapping(tmp_path: Path, text: str, name: str) -> None:
    path = write(tmp_path, text, name)
    assert load_error(path) == f"{path}: a scenario is a mapping of keys (name, clusters, wan, ...)"


def test_empty_file(tmp_path: Path) -> None:
    path = write(tmp_path, "", "empty.yaml")
    assert load_error(path) == f"{path}: the scenario file is empty"


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    assert load_error(path) == f"{path}: cannot read scenario: No such file or directory"


def test_directory_instead_of_file(tmp_path: Path) -> None:
    assert load_error(tmp_path) == f"{tmp_path}: cannot read scenario: Is a directory"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files regardless of their mode")
def test_unreadable_file(tmp_path: Path) -> None:
    path = write(tmp_path, "name: t\n")
    path.chmod(0)
    assert load_error(path) == f"{path}: cannot read scenario: Permission denied"


def test_python_tags_are_not_executed(tmp_path: Path) -> None:
    path = write(tmp_path, "name: t\nx: !!python/object/apply:os.system [echo hi]\n")
    assert load_error(path) == (
        f"{path}: line 2, column 4: YAML syntax error: could not determine a constructor for the "
        "tag 'tag:yaml.org,2002:python/object/apply:os.system'"
    )


def test_non_utf8_file(tmp_path: Path) -> None:
    path = write(tmp_path, b"name: t\xff\xfe\n")
    assert load_error(path).startswith(f"{path}: cannot read scenario: ")


def test_control_character_is_reported_like_other_syntax_errors(tmp_path: Path) -> None:
    path = write(tmp_path, "name: t\x07\n")
    assert load_error(path) == (
        f"{path}: line 1, column 8: YAML syntax error: unacceptable character #x0007: "
        "special characters are not allowed"
    )


def test_duplicate_yaml_key_is_an_error(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "name: t\nclusters: {a: {hosts: 1}, b: {hosts: 1}}\n"
        "wan:\n  - between: [a, b]\n    delay: 20ms\n    delay: 2ms\n",
    )
    message = load_error(path)
    assert message.startswith(f"{path}: line 6")
    assert "delay" in message


def test_faults_given_to_a_call_are_checked_like_a_scenarios() -> None:
    from testbed.config.loading import with_faults

    sc = parse_scenario(
        {
            "name": "x",
            "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
            "wan": [{"between": ["east", "west"]}],
        }
    )
    hole = {"kind": "blackhole", "link": "west-east", "after": {"iteration": 1}, "duration": "2s"}
    assert with_faults(sc, [hole]).faults[0].duration == 2.0  # no workload: the caller's counts
    bad = [
        ({**hole, "link": "east-north"}, "faults[0].link: no WAN link 'east-north'"),
        ({**hole, "duration": "2"}, "faults[0].duration: '2' is not a duration"),
        ({**hole, "kind": "blackhol"}, "faults[0].kind: 'blackhol' is not allowed"),
    ]
    for fault, message in bad:
        with pytest.raises(ScenarioError, match=re.escape(f"call: {message}")):
            with_faults(sc, [fault], "call")
