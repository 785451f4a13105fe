"""`testbed plan` tells what a run will do: the sweep's size and points, where the ranks go, the
expectations and the rows they test, the α-β model's predicted times and the run's estimated
duration, the backend it will get (never "auto"); `--set`/`--point` as `testbed run` takes them;
readable at 80 columns (stacked rows, nothing cut to ``dir…``); settings in the scenario's own
syntax; `--graph mermaid|dot`; `--json`. Pure: no root, no kernel."""

from __future__ import annotations

import copy
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

import testbed.cli.plan_view as plan_view
from analysis.model import predict_timed
from testbed.cli import main
from testbed.config.loading import load_scenario
from testbed.core.syntax import duration_text, percent_text, rate_text, size_text
from testbed.core.units import parse_duration, parse_percent, parse_rate, parse_size
from testbed.experiment.execute import model_topology
from testbed.plan.ranks import place_ranks
from testbed.plan.topology import build_plan

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "scenarios" / "quickstart.yaml"
CC_LOSS = REPO / "scenarios" / "cc-loss.yaml"


def plan(capsys, *argv: str, width: int | None = None) -> tuple[int, str]:
    """`testbed plan ARGV` and what it printed; ``width``: the console's columns (rich)."""
    if width is not None:
        buffer = io.StringIO()
        saved = plan_view.out
        plan_view.out = Console(file=buffer, width=width, force_terminal=False)
        try:
            code = main(["plan", *argv])
        finally:
            plan_view.out = saved
        return code, buffer.getvalue() + capsys.readouterr().out
    code = main(["plan", *argv])
    got = capsys.readouterr()
    return code, got.out + got.err


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def quickstart(**top: Any) -> dict[str, Any]:
    data = yaml.safe_load(QUICKSTART.read_text())
    data.update(copy.deepcopy(top))
    return data


# -- the scenario's syntax ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "bps", [1, 999, 64_000, 95_600_000, 100_000_000, 1_500_000_000, 123_456_789]
)
def test_rate_text_reads_back(bps: int) -> None:
    assert parse_rate(rate_text(bps)) == bps


@pytest.mark.parametrize("seconds", [0.0, 250e-6, 0.02, 0.0001234, 1.5, 120.0, 2.3123456])
def test_duration_text_reads_back(seconds: float) -> None:
    assert parse_duration(duration_text(seconds)) == pytest.approx(seconds, rel=1e-9)


@pytest.mark.parametrize("nbytes", [1, 1500, 15140, 500_000, 262_144, 16 << 20, 1_234_567])
def test_size_text_reads_back(nbytes: int) -> None:
    assert parse_size(size_text(nbytes)) == nbytes


@pytest.mark.parametrize("fraction", [0.0, 0.001, 0.01, 1 / 3, 1.0])
def test_percent_text_reads_back(fraction: float) -> None:
    assert parse_percent(percent_text(fraction)) == pytest.approx(fraction, rel=1e-9)


def test_written_forms() -> None:
    assert [rate_text(1e8), duration_text(0.02), size_text(16 << 20), percent_text(0.001)] == [
        "100mbit", "20ms", "16MiB", "0.1%",
    ]  # fmt: skip


def test_plan_prints_settings_the_parser_reads(capsys) -> None:
    code, text = plan(capsys, str(QUICKSTART), width=80)
    assert code == 0
    assert "Mbit/s" not in text.split("WAN directions")[1].split("TCP per cluster")[0]
    for key, parse in (("rate", parse_rate), ("delay", parse_duration), ("buffer", parse_size)):
        values = re.findall(rf"^  {key}: (\S+)$", text, re.MULTILINE)
        assert values, key
        for v in values:
            parse(v)  # raises if the scenario parser refuses it
    assert "  rate: 100mbit" in text and "  delay: 20ms" in text


# -- sweep, ranks, predictions, estimate, expectations, backend --------------------------------
def test_the_sweep_size_and_every_point(capsys) -> None:
    code, text = plan(capsys, str(CC_LOSS))
    assert code == 0
    assert (
        "runs: 18 (18 points x 1 repeat: tcp.congestion x 3, wan[0].loss x 3, wan[0].delay x 2)"
        in (" ".join(text.split()))
    )
    for k in range(18):
        assert f"p{k:03d}-r0" in text


def test_rank_placement_says_which_rank_runs_on_which_host(tmp_path: Path, capsys) -> None:
    data = quickstart()
    data["workload"].update(ranks_per_host=2, placement="interleaved")
    code, text = plan(capsys, str(write(tmp_path, data)), width=200)
    assert code == 0
    sc = load_scenario(write(tmp_path, data))
    slots = place_ranks(build_plan(sc, "x", 64), 2, "interleaved")
    assert "ranks: 8 (2 per host, interleaved)" in text
    rows = [line for line in text.splitlines() if re.match(r"│ east-h0 +│ east +│", line)]
    mine = [s.rank for s in slots if s.host == "east-h0"]
    assert rows and ", ".join(map(str, mine)) in rows[0], (rows, mine)


def test_predicted_times_are_the_models(capsys) -> None:
    code, text = plan(capsys, str(QUICKSTART), width=200)
    assert code == 0
    sc = load_scenario(QUICKSTART)
    p = build_plan(sc, "x", 64)
    topo = model_topology(p, place_ranks(p, 1, "by-cluster"), "by-cluster", 1)
    for algorithm in ("flat", "hierarchical"):
        seconds = predict_timed("all_reduce", algorithm, 16 << 20, topo)
        shown = duration_text(float(f"{seconds:.3g}"))
        assert f"all_reduce {algorithm} 16MiB: {shown} x6" in text
    # the scenario's own expectation of the model: ~2.3 s flat, ~1.5 s hierarchical
    flat = predict_timed("all_reduce", "flat", 16 << 20, topo)
    hier = predict_timed("all_reduce", "hierarchical", 16 << 20, topo)
    assert 1.8 < flat < 2.8 and 1.2 < hier < 1.8


def test_the_estimate_counts_every_run_and_prices_loss(tmp_path: Path, capsys) -> None:
    code, text = plan(capsys, str(CC_LOSS), "--json")
    assert code == 0
    got = json.loads(text)
    runs = {r["run_id"]: r for r in got["runs"]}
    assert len(runs) == 18
    assert got["estimate_s"] == pytest.approx(sum(r["estimate_s"] for r in runs.values()))
    for r in runs.values():
        assert r["estimate_s"] == pytest.approx(sum(r["estimate_parts_s"].values()))
    # reno at 1% loss and 100 ms RTT: the Mathis bound, ~1.4 Mbit/s, ~95 s per all-reduce
    lossy = next(
        r for r in runs.values()
        if r["params"] == {"tcp.congestion": "reno", "wan[0].loss": "1%", "wan[0].delay": "50ms"}
    )  # fmt: skip
    lossless = next(
        r for r in runs.values()
        if r["params"] == {"tcp.congestion": "reno", "wan[0].loss": "0%", "wan[0].delay": "50ms"}
    )  # fmt: skip
    assert 60 < lossy["predicted"][0]["seconds"] < 130
    assert lossy["predicted"][0]["seconds"] > 10 * lossless["predicted"][0]["seconds"]
    bbr = next(
        r for r in runs.values()
        if r["params"] == {"tcp.congestion": "bbr", "wan[0].loss": "1%", "wan[0].delay": "50ms"}
    )  # fmt: skip
    assert bbr["predicted"][0]["seconds"] == pytest.approx(lossless["predicted"][0]["seconds"])
    code, human = plan(capsys, str(CC_LOSS))
    assert code == 0
    assert "estimated duration" in human


def test_expectations_and_the_rows_they_test(capsys) -> None:
    code, text = plan(capsys, str(CC_LOSS), width=200)
    assert code == 0
    assert "at 1% loss bbr finishes the all-reduce in less than half of cubic's time" in text
    got = json.loads(plan(capsys, str(CC_LOSS), "--json")[1])
    (exp,) = got["expectations"]
    assert len(exp["rows"]) == 2  # bbr at 1% loss, at both delays
    assert all(r.startswith(("p016-r0", "p017-r0")) for r in exp["rows"])


def test_the_backend_is_the_chosen_one_not_auto(tmp_path: Path, capsys) -> None:
    code, text = plan(capsys, str(QUICKSTART))
    assert code == 0
    line = next(x for x in text.splitlines() if x.startswith("backend: "))
    assert not line.startswith("backend: auto")
    code, text = plan(capsys, str(write(tmp_path, quickstart(backend="userspace"))))
    line = next(x for x in text.splitlines() if x.startswith("backend: "))
    assert line.startswith("backend: userspace")


# -- --set, --point -----------------------------------------------------------------------------
def test_set_and_point_as_run_takes_them(capsys) -> None:
    code, text = plan(capsys, str(QUICKSTART), "--set", "wan[0].delay=50ms", width=80)
    assert code == 0 and "  delay: 50ms" in text and "  delay: 20ms" not in text
    code, text = plan(capsys, str(CC_LOSS), "--point", "5", width=200)
    assert code == 0 and "p005-r0" in text and "p004-r0" not in text
    assert "shown: p005-r0 (--point)" in text
    code, text = plan(capsys, str(CC_LOSS), "--point", "18")
    assert code == 2 and "--point 18: " in text and "18 run(s): 0 to 17" in text


def test_plan_reports_every_problem_at_once(tmp_path: Path, capsys) -> None:
    data = quickstart(sweep={"wan[0].dealy": ["10ms"]})
    data["workload"]["iterations"] = 0
    code, text = plan(capsys, str(write(tmp_path, data)))
    assert code == 2
    assert "sweep.wan[0].dealy: unknown key 'dealy'" in text
    assert "workload.iterations: 0 is out of range" in text
    code, text = plan(capsys, str(write(tmp_path, data)), "--json")
    got = json.loads(text)
    assert code == 2 and got["ok"] is False
    assert {p["field"] for p in got["problems"]} == {"sweep.wan[0].dealy", "workload.iterations"}


# -- 80 columns ---------------------------------------------------------------------------------
@pytest.mark.parametrize("scenario", ["quickstart.yaml", "cc-loss.yaml", "wan-faults.yaml"])
def test_readable_at_80_columns(capsys, scenario: str) -> None:
    code, text = plan(capsys, str(REPO / "scenarios" / scenario), width=80)
    assert code == 0
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    # the WAN table too wide for 80 columns: each direction stacked, every value whole
    assert re.search(r"^east->west\n  rate: \S+\n  delay: \S+", text, re.MULTILINE)


# -- graph, json ------------------------------------------------------------------------------
def test_graph_mermaid(capsys) -> None:
    code, text = plan(capsys, str(QUICKSTART), "--graph", "mermaid")
    assert code == 0
    assert text.startswith("flowchart LR\n")
    assert 'subgraph east["east (2 hosts)"]' in text and 'subgraph west["west (2 hosts)"]' in text
    assert 'east_gw{{"east-gw"}}' in text and "east_h1 --- east_gw" in text
    edge = next(line for line in text.splitlines() if "east_gw ---|" in line)
    assert "east->west: 100mbit 20ms buffer 500KB" in edge and edge.endswith("| west_gw")


def test_graph_dot_with_a_multipath_link(capsys) -> None:
    code, text = plan(capsys, str(REPO / "scenarios" / "multipath-unequal.yaml"), "--graph", "dot")
    assert code == 0
    assert text.startswith('graph "multipath-unequal" {') and text.rstrip().endswith("}")
    assert 'subgraph "cluster_east"' in text and '"east-gw" [shape=box' in text
    edges = [line for line in text.splitlines() if '"east-gw" -- "west-gw"' in line]
    assert len(edges) == 2 and "path 0, weight" in edges[0] and "path 1, weight" in edges[1]


def test_json_shape(capsys) -> None:
    code, text = plan(capsys, str(QUICKSTART), "--json")
    assert code == 0
    got = json.loads(text)
    assert set(got) == {
        "version", "file", "scenario", "description", "sweep", "estimate_s",
        "estimate_leaves_out", "backend", "engine", "network", "workload", "ranks",
        "expectations", "runs", "warnings",
    }  # fmt: skip
    assert got["version"] == 1 and got["scenario"] == "quickstart"
    assert got["sweep"] == {"paths": [], "points": 1, "repeat": 1, "runs": 1}
    assert got["backend"]["requested"] == "auto" and got["backend"]["chosen"] != "auto"
    assert [d["direction"] for d in got["network"]["wan"]] == ["east->west", "west->east"]
    assert got["network"]["wan"][0]["rate_bps"] == 100_000_000
    assert got["network"]["wan"][0]["delay_s"] == pytest.approx(0.02)
    assert [(r["rank"], r["host"]) for r in got["ranks"]] == [
        (0, "east-h0"), (1, "east-h1"), (2, "west-h0"), (3, "west-h1"),
    ]  # fmt: skip
    (run,) = got["runs"]
    assert run["run_id"] == "p000-r0" and len(run["predicted"]) == 4
    assert {p["what"] for p in run["predicted"]} >= {"all_reduce flat 16MiB"}


def test_an_emulated_training_workload_reads_as_one(capsys) -> None:
    """A synthetic model has no dataset: its line names the model, the emulated step and scale
    (it read `SyntheticSpec(params=...) on None`)."""
    code, text = plan(capsys, "scenarios/streaming-diloco-table4.yaml")
    assert code == 0
    (line,) = [x for x in text.splitlines() if x.startswith("workload:")]
    assert "None" not in line and "Spec(" not in line
    assert "synthetic 1e+09 params (bf16, 24 layers), emulated compute 100ms per step" in line
