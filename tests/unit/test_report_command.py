"""The report's command-workload section (analysis.command_report) on real results, no root:
tests/fixtures/command_report (a service, rank 1 exits with code 3 after its 10th step and
stop-all stops rank 0, a 0.5 s WAN blackhole at rank 0's step 5; logs kept) and
tests/fixtures/command_results (two runs that exited 0, no logs, no recorded starts)."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from analysis import command_report as CR
from analysis.loader import load
from analysis.report import write_report

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FAILED = FIXTURES / "command_report"
OK = FIXTURES / "command_results"


@pytest.fixture(scope="module")
def failed_table():
    res = load(FAILED)
    return res, CR.process_table(res)


def test_each_process_and_service_with_its_outcome_and_the_first_failure(failed_table) -> None:
    _, t = failed_table
    rows = {r["process"]: r for r in t.to_dict("records")}
    assert list(rows) == ["rank 0", "rank 1", "service store"]
    r0, r1, store = rows["rank 0"], rows["rank 1"], rows["service store"]
    # rank 1 failed first, as the run's status says; rank 0 was stopped after it (SIGTERM)
    assert (r1["outcome"], r1["exit_code"], r1["first_failure"]) == (
        "failed",
        3,
        "exited with code 3",
    )
    assert (r0["outcome"], CR.exit_text(r0["exit_code"]), r0["first_failure"]) == (
        "stopped", "SIGTERM", "",
    )  # fmt: skip
    # on the run's axis: rank 0 started first (the origin), the service before the workload
    assert r0["start_s"] == 0.0 and 0.0 <= r1["start_s"] < 1.0
    assert store["start_s"] < 0 and store["outcome"] == "service"
    # rank 1's exit is timed; the stopped ones end at the run's last timed exit
    assert r1["end_s"] == pytest.approx(r1["start_s"] + r1["duration"])
    assert not r1["end_estimated"] and r0["end_estimated"] and store["end_estimated"]
    assert r0["end_s"] == store["end_s"] == r1["end_s"]


def test_the_table_a_reader_sees(failed_table) -> None:
    _, t = failed_table
    shown = CR.processes_display(t).set_index("process")
    assert shown.loc["rank 1", "status"] == "first failure: exited with code 3"
    assert shown.loc["rank 1", "exit"] == "3" and shown.loc["rank 0", "exit"] == "SIGTERM"
    assert shown.loc["rank 0", "end"].endswith("(stopped)")
    assert shown.loc["rank 1", "duration"].endswith(" s")  # a unit, from analysis.display
    assert shown.loc["service store", "start"].startswith("−")  # before the workload


@pytest.mark.parametrize(
    ("reason", "named"),
    [
        ("rank 3 (west-h1) exited with code 3: boom | x; stopped after rank 3 (west-h1) failed",
         ("rank 3 (west-h1)", "exited with code 3")),
        ("rank 3 (west-h0) did not finish within 4s (workload.timeout): rank 3 waits",
         ("rank 3 (west-h0)", "did not finish within 4s (workload.timeout)")),
        ("host 1 (west-h0) was killed by signal SIGKILL: oom",
         ("host 1 (west-h0)", "was killed by signal SIGKILL")),
        ("service lighthouse (east-h0) was not ready within 2s (workload.services[0].timeout; "
         "ready: port 29599 listening): listening soon",
         ("service lighthouse (east-h0)", "was not ready within 2s")),
        ("service lighthouse (east-h0) exited with code 1 while the workload ran: bad",
         ("service lighthouse (east-h0)", "exited with code 1 while the workload ran")),
        ("interrupted by the user", None),
        (None, None),
    ],
)  # fmt: skip
def test_the_first_failure_as_the_status_names_it(reason, named) -> None:
    assert CR.first_failure(reason) == named


def test_exit_codes_and_signals() -> None:
    assert [CR.exit_text(c) for c in (0, 3, -15, -9, -64, None, math.nan)] == [
        "0", "3", "SIGTERM", "SIGKILL", "signal 64", "-", "-",
    ]  # fmt: skip


def test_a_log_tail_is_its_last_lines_each_cut(tmp_path: Path) -> None:
    log = tmp_path / "rank-0.log"
    lines = [f"line {i}" for i in range(10_000)] + ["x" * 200_000, "", "last"]
    log.write_text("\n".join(lines) + "\n")
    tail = CR.log_tail(log, lines=3)
    assert tail is not None
    got = tail.split("\n")
    assert got[0] == "line 9999" and got[2] == "last"  # the empty line is not one of them
    assert got[1] == "x" * CR.LINE_CHARS + " …"
    assert CR.log_tail(tmp_path / "absent.log") is None
    # a last line longer than what is read of a log is shown from where the read began
    log.write_text("head\n" + "y" * (2 * CR.LOG_READ_MAX) + "\n")
    assert CR.log_tail(log) == "… " + "y" * (CR.LINE_CHARS - 2)


def test_log_tails_of_the_kept_logs(failed_table) -> None:
    res, t = failed_table
    tails = dict(CR.log_tails(res, t))
    assert len(tails) == 3
    (rank1,) = [text for head, text in tails.items() if "rank 1" in head]
    assert rank1.endswith("rank 1: <giving up> & exiting with code 3")
    assert len(rank1.split("\n")) == CR.LOG_LINES


def test_the_fault_on_the_runs_axis_and_at_its_step(failed_table) -> None:
    res, t = failed_table
    origin = t.loc[t["process"] == "rank 0", "start"].iloc[0]
    (fault,) = CR.fault_intervals(res, "command_report", "p000-r0", origin)
    assert fault["what"] == "blackhole east-west"
    # 0.5 s as scheduled; applied within the workload (rank 1's run ended after it)
    assert fault["end_s"] - fault["start_s"] == pytest.approx(0.5, abs=0.01)
    r1_end = t.loc[t["process"] == "rank 1", "end_s"].iloc[0]
    assert 0 < fault["start_s"] < fault["end_s"] < r1_end
    # the steps: integers from every line; the blackhole stalled the step read after it began
    m = CR.metric_frame(res, t)
    assert sorted(m.loc[m["process"] == "rank 0", "step"].unique()) == list(range(10))
    run = m[m["metric"] == "step_time"]
    stalled = run.loc[run["value"].idxmax(), "step"]
    assert CR._step_at(run, fault["start_s"]) == stalled == 6


def test_results_without_starts_or_logs() -> None:
    res = load(OK)
    t = CR.process_table(res)
    assert len(t) == 4 and set(t["outcome"]) == {"ok"}
    assert t["start_s"].isna().all() and not t["end_estimated"].any()
    assert (t["end_s"] == t["duration"]).all()  # drawn from 0
    assert set(CR.processes_display(t)["start"]) == {"-"}
    assert CR.log_tails(res, t) == []
    m = CR.metric_frame(res, t)
    assert m["step"].isna().all() and (m["t"] >= 0).all()  # over time: no step in the lines


def test_the_headline_says_how_each_run_ended(failed_table) -> None:
    _, t = failed_table
    assert CR.headline_lines(t, "command_report") == [
        "✗ p000-r0: 0 of 2 process(es) exited 0; first failure: rank 1 (west-h0) exited with code 3"
    ]
    res = load(OK)
    lines = CR.headline_lines(CR.process_table(res), "command_results")
    assert lines == [
        "✓ p000-r0: 2 of 2 process(es) exited 0, the slowest in 268.8 ms",
        "✓ p001-r0: 2 of 2 process(es) exited 0, the slowest in 530.3 ms",
    ]


def test_a_figure_per_metric_name_up_to_a_bound(failed_table) -> None:
    res, t = failed_table
    plots = CR.plot_metrics(res, t)
    assert [p.name for p in plots] == ["command_metric_step_time", "command_metric_bytes"]
    assert "over its `step`" in plots[0].caption
    # a program printing many metric names: the first MAX_METRIC_FIGURES get a figure, the
    # last one's caption names the others
    many = res.metrics.copy()
    for i in range(CR.MAX_METRIC_FIGURES):
        extra = res.metrics[res.metrics["metric"] == "bytes"].assign(metric=f"m{i}")
        many = pd.concat([many, extra], ignore_index=True)
    res.metrics = many
    try:
        plots = CR.plot_metrics(res, t)
    finally:
        res.metrics = load(FAILED).metrics
    assert len(plots) == CR.MAX_METRIC_FIGURES
    assert plots[-1].caption.endswith("more metric(s) without a figure (m6, m7): metrics.parquet.")


def test_the_report_section(tmp_path: Path) -> None:
    results = shutil.copytree(FAILED, tmp_path / "command_report")
    report = write_report(results)
    assert "command" in report.sections
    names = sorted(p.name for p in report.pngs)
    assert names == [
        "command_metric_bytes.png", "command_metric_step_time.png", "command_timeline.png",
        "wan_timeline.png",
    ]  # fmt: skip
    page = report.html.read_text()
    # the log tails escaped, each in a block of its own that opens on demand
    assert page.count('<details class="log">') == 3
    assert "rank 1: &lt;giving up&gt; &amp; exiting with code 3" in page
    assert "<giving up>" not in page
    assert "first failure: exited with code 3" in page
    (headline,) = report.headlines
    assert any(f.startswith("✗ p000-r0: 0 of 2 process(es) exited 0") for f in headline.findings)
    md = report.markdown.read_text()
    assert "```text\nrank 0 on east-h0" not in md  # the first lines are beyond the last 20
    assert "rank 1: <giving up> & exiting with code 3\n```" in md
    assert (report.out / "command_processes.csv").is_file()
    # a report written again does not keep a metric figure the results no longer have
    stale = report.out / "plots" / f"{CR.METRIC_PREFIX}gone.png"
    stale.write_bytes(b"")
    write_report(results)
    assert not stale.exists()
