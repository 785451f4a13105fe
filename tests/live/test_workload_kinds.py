"""Adding a workload kind is one module and one registry line: a kind defined here, in the test
(its schema, its rank program, its summary, its table), runs through ``testbed run``'s own code
path on a real network and appears in the run's summary, its output and the report."""

from __future__ import annotations

import json
import statistics
import textwrap
from pathlib import Path
from typing import Any, ClassVar, Literal

import pandas as pd
import pytest
import yaml
from helpers import RUN_TAG, scenario
from pydantic import Field

import analysis
from analysis.report import write_report
from testbed.cli import main
from testbed.config.workloads import WORKLOAD_KINDS, RankWorkloadModel
from testbed.core.metrics import Metric
from testbed.experiment.workloads import KINDS, RunRows, WorkloadKind, register

pytestmark = pytest.mark.live

# The kind's rank program: every rank all-reduces a tensor `rounds` times and writes one row per
# round (what traffic.rank does for a collective, in a dozen lines).
RANK_PROGRAM = textwrap.dedent(
    """
    import json, sys, time
    import torch, torch.distributed as dist
    from traffic.context import setup, teardown
    from traffic.entry import log, rank_args, rank_start

    args = rank_args("pingpong", None, None)
    start = rank_start(args)
    ctx = setup(start.spec, args.rank)
    log(start.label, f"joined: world {ctx.world_size}")
    with (start.out_dir / f"rank-{args.rank}.jsonl").open("w") as out:
        tensor = torch.ones(start.spec["elements"])
        for r in range(start.spec["rounds"]):
            t0 = time.time()
            dist.all_reduce(tensor)
            row = {"rank": args.rank, "round": r, "start": t0, "seconds": time.time() - t0}
            out.write(json.dumps(row) + "\\n")
    teardown()
    """
)


class PingPongWorkload(RankWorkloadModel):
    """``workload: kind: pingpong``: ``rounds`` all-reduces of ``elements`` floats."""

    kind: Literal["pingpong"]
    metrics: ClassVar[tuple[Metric, ...]] = (
        Metric("round_p50", "s", "median round of the slowest rank"),
    )
    rounds: int = Field(5, ge=1)
    elements: int = Field(1024, ge=1)


class PingPong(WorkloadKind):
    name = "pingpong"
    schema = PingPongWorkload
    rank_module = "pingpong_rank"
    rows_table = "pingpong"  # its rows: pingpong.parquet

    def spec_keys(self, workload: Any) -> dict[str, Any]:
        return {"rounds": workload.rounds, "elements": workload.elements}

    def summarize(self, run: RunRows) -> list[dict]:
        rows = pd.DataFrame(run.rows)
        if rows.empty:
            return []
        slowest = rows.groupby("round")["seconds"].max()
        return [{**run.params, "rounds": len(slowest), "round_p50": statistics.median(slowest)}]

    def operations(self, rows: pd.DataFrame) -> pd.DataFrame:
        return rows.assign(arm="pingpong", op=rows["round"])

    def table(self, summaries: list[dict], params: list[str]) -> tuple[str, pd.DataFrame]:
        rows = [s for s in summaries if "round_p50" in s]
        shown = [
            {"rounds": s["rounds"], "round p50": f"{s['round_p50'] * 1e3:.1f} ms"} for s in rows
        ]
        return "pingpong rounds", pd.DataFrame(shown)


@pytest.fixture
def pingpong(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The kind registered (one line), its rank program importable by the ranks; unregistered
    after the test."""
    (tmp_path / "pingpong_rank.py").write_text(RANK_PROGRAM)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    register(PingPong())
    yield
    KINDS.pop("pingpong", None)
    WORKLOAD_KINDS.pop("pingpong", None)


@pytest.mark.timing
def test_a_kind_defined_in_a_test_runs_end_to_end(root, pingpong, tmp_path, capsys) -> None:
    data = scenario(
        name=f"{RUN_TAG}-kind",
        clusters={"east": {"hosts": 1}, "west": {"hosts": 1}},
        wan=[{"between": ["east", "west"], "rate": "100mbit", "delay": "5ms"}],
        workload={"kind": "pingpong", "rounds": 4, "elements": 256},
        # at least the RTT, less the compensated path's reading short (below)
        expect=[{"metric": "round_p50", "relation": ">", "value": 0.0097}],
    )
    path = tmp_path / "pingpong.yaml"
    path.write_text(yaml.safe_dump(data))

    code = main(["run", str(path), "--out", str(tmp_path / "results")])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "pingpong rounds" in printed  # the kind's own table in testbed run's output
    assert "expect[0] passed" in printed  # an expectation on the kind's own metric

    (results,) = (tmp_path / "results").iterdir()
    manifest = json.loads((results / "manifest.json").read_text())
    (row,) = manifest["summary"]
    assert row["kind"] == "pingpong" and row["rounds"] == 4
    # the configured RTT (5 ms each way: an all-reduce of two ranks crosses twice) less what the
    # compensated path can read short: 0.15-0.29 ms (RESULTS.md "Link fidelity", a CI run)
    assert row["round_p50"] > 0.010 - 0.0003

    res = analysis.load(results)
    assert list(res.kind_summaries) == ["pingpong"]
    assert len(res.extra_tables["pingpong"]) == 2 * 4  # its rows: two ranks x four rounds
    assert res.kind_summaries["pingpong"]["round_p50"].iloc[0] == pytest.approx(row["round_p50"])
    report = write_report(res, tmp_path / "report")
    assert "Workload: pingpong" in report.markdown.read_text()
