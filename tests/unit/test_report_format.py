"""The report reads as an answer, not a dump: every number with its unit and a sensible precision,
booleans as ✓/✗, model terms that add up, the network of each run, a headline per scenario, plots
that say what they show, tables that scroll. Pure: the committed fixtures, no root."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from PIL import Image

from analysis.display import (
    format_value,
    network_display,
    network_summary,
    selfcheck_display,
    terms_display,
)
from analysis.loader import load
from analysis.report import _html, _markdown, write_report
from analysis.report_sections import sections

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "results"
RAW_FLOAT = re.compile(r"\d\.\d{6,}|\d{7,}\.\d")  # 0.08457069150063035, 99984737.06119786
LOG_TIME = re.compile(r"\d\d:\d\d:\d\d\.\d+")


# -- single values -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        ("step_time_p50", 0.08457069150063035, "84.57 ms"),
        ("wan_bytes_per_step", 800288.8157135241, "781.5 KiB"),
        ("capacity_bps", 99984737.06119786, "99.98 Mbit/s"),
        ("time_p50", 2.1839970559999813, "2.184 s"),
        ("busbw", 2.7e6, "2.7 MB/s"),
        ("capacity_ratio", 0.99984737, "99.98%"),
        ("measured_over_predicted", 1.3467, "1.35"),
        ("final_loss", 3.15512345, "3.155"),
        ("t_s", -0.25, "−250 ms"),
        ("retransmits", 54.0, "54"),
        ("something", 800288.8157135241, "800,289"),
        ("something", 0.08457069150063035, "0.08457"),
        ("anything", None, "-"),
        ("anything", float("nan"), "-"),
    ],
)
def test_a_value_shows_its_unit_and_a_sensible_precision(name, value, shown):
    assert format_value(name, value) == shown


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        ("correct", True, "✓"),
        ("correct", False, "✗"),
        ("correct", 1.0, "✓"),
        ("ok", False, "✗"),
        ("survived", True, "✓"),
        ("cpu_saturated", True, "✗ saturated"),
        ("cpu_saturated", False, "✓"),
    ],
)
def test_booleans_are_ticks_and_crosses_never_blank(name, value, shown):
    assert format_value(name, value) == shown


def test_a_failed_link_check_says_what_failed_not_off():
    base = {"direction": "east->west", "rtt_configured_s": 0.04, "rtt_median_s": 0.04,
            "goodput_configured_bps": 95.6e6, "goodput_bps": 95e6}  # fmt: skip
    rows = selfcheck_display(
        [{**base, "ok": True}, {**base, "ok": False}, {**base, "ok": False, "problem": "RTT 60 ms"}]
    ).to_dict("records")
    assert [r["status"] for r in rows] == ["✓", "✗", "✗ RTT 60 ms"]


def test_model_terms_are_signed_in_one_unit_and_add_up_to_the_prediction():
    terms = {"model_alpha_beta": 2.2254, "model_segments_and_notify": -0.03968, "model_cwnd": 0.0,
             "model_loss": None}  # fmt: skip
    shown, total = terms_display(terms, 2.18572)
    assert shown == {"model_alpha_beta": "2225.4 ms", "model_segments_and_notify": "−39.7 ms",
                     "model_cwnd": "+0.0 ms", "model_loss": "-"}  # fmt: skip
    assert total == "2185.7 ms"

    def ms(text: str) -> float:
        return float(text.replace("−", "-").removesuffix(" ms"))

    added = sum(ms(v) for v in shown.values() if v != "-")
    assert added == pytest.approx(ms(total), abs=0.05 * len(shown))


# -- the network of each run -------------------------------------------------------------------
def _run(rate: float, delay: float, **link) -> dict:
    wan = {"between": ["east", "west"], "rate": rate, "delay": delay, "jitter": 0.0, "loss": 0.0,
           "buffer": ["bdp", 1.0], "aqm": None, "reverse": None, "paths": [], **link}  # fmt: skip
    return {"params": {}, "backend": "userspace", "resolved": {"wan": [wan]}}


def test_network_shows_rate_rtt_loss_buffer_and_backend_per_direction():
    runs = {"p000-r0": _run(100e6, 0.02, reverse={"rate": 50e6, "loss": 0.01})}
    rows = network_display(runs).to_dict("records")
    assert [r["direction"] for r in rows] == ["east->west", "west->east"]
    east, west = rows
    assert east["rate"] == "100 Mbit/s" and west["rate"] == "50 Mbit/s"
    assert east["RTT"] == west["RTT"] == "40 ms"
    assert east["loss"] == "0%" and west["loss"] == "1%"
    assert east["buffer"] == "1 BDP (488.3 KiB)" and east["backend"] == "userspace"


def test_runs_with_one_network_share_a_row_and_a_sweep_shows_each():
    same = {"p000-r0": _run(100e6, 0.02), "p001-r0": _run(100e6, 0.02)}
    assert network_display(same)["runs"].tolist() == ["all", "all"]
    swept = {"p000-r0": _run(50e6, 0.005), "p001-r0": _run(200e6, 0.005)}
    swept["p000-r0"]["params"] = {"wan[0].rate": "50mbit"}
    swept["p001-r0"]["params"] = {"wan[0].rate": "200mbit"}
    shown = network_display(swept)
    assert shown["runs"].tolist() == ["p000-r0"] * 2 + ["p001-r0"] * 2
    assert network_summary(swept) == "east↔west 50 | 200 Mbit/s, RTT 10 ms, loss 0%, 1 BDP"
    assert network_summary(same) == "east↔west 100 Mbit/s, RTT 40 ms, loss 0%, 1 BDP"


# -- whole reports -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def answered(tmp_path_factory):
    """The collectives fixture as a scenario with a question, an expected outcome and two
    expectations (one passed, one failed), reported once."""
    src = tmp_path_factory.mktemp("answered") / "collectives"
    shutil.copytree(FIXTURES / "collectives", src)
    manifest = json.loads((src / "manifest.json").read_text())
    manifest["scenario"].update(
        question="when does hierarchical pay off?", expected="hierarchical wins at 1 MiB"
    )
    manifest["scenario"]["expect"] = [
        {"name": "hierarchical faster", "metric": "time_p50", "relation": "<"},
        {"name": "busbw at least 100 MB/s", "metric": "busbw", "relation": ">="},
    ]
    manifest["expectations"] = [
        {"expectation": 0, "description": "hierarchical faster", "status": "passed",
         "row": "p000-r0 all_reduce/hierarchical/1048576 B", "lhs": 0.2183970559999813,
         "rhs": 0.2944276557000194, "detail": ""},
        {"expectation": 1, "description": "busbw at least 100 MB/s", "status": "failed",
         "row": "p000-r0 all_reduce/flat/1048576 B", "lhs": 2734567.123456, "rhs": 1e8,
         "detail": ""},
    ]  # fmt: skip
    (src / "manifest.json").write_text(json.dumps(manifest))
    return write_report(src)


def _text(html: str) -> str:
    """The HTML without its embedded images (base64 has no '.', but keep the check honest) and
    the clock times of quoted log lines ('[W1202 13:43:35.551584994 socket.cpp:207]')."""
    return LOG_TIME.sub("", re.sub(r'src="data:[^"]*"', "", html))


@pytest.mark.parametrize("name", ["collectives", "congestion", "failure", "faults", "training"])
def test_no_raw_float_reaches_a_reader(name):
    # the HTML and Markdown of every section, without rendering the figures (the slow part)
    secs, _csv = sections(load(FIXTURES / name))
    for sec in secs:
        sec.plots = []
    for text in (_text(_html(name, secs, {}, [])), _text(_markdown(name, secs, []))):
        assert not RAW_FLOAT.findall(text), RAW_FLOAT.findall(text)[:5]


def test_the_report_opens_with_the_question_the_verdict_and_the_numbers(answered):
    html = answered.html.read_text()
    head = html[html.index("<body>") : html.index('id="warnings"')]
    assert "when does hierarchical pay off?" in head and "hierarchical wins at 1 MiB" in head
    assert "1 of 2 expectations failed" in head
    assert "✓ hierarchical faster: 218.4 ms &lt; 294.4 ms" in head
    assert "✗ busbw at least 100 MB/s: 2.735 MB/s &gt;= 100 MB/s" in head
    # the main comparison: the speed-up of hierarchical over flat, with both times
    assert re.search(r"hierarchical is \d\.\d\d× (faster|slower) than flat", head)
    # the network, per direction, before any warning
    assert "east-&gt;west" in head and "west-&gt;east" in head and "userspace" in head
    md = answered.markdown.read_text()
    assert md.index("when does hierarchical pay off?") < md.index("## Warnings")


def test_expectation_values_carry_their_metric_units(answered):
    html = answered.html.read_text()
    section = html[html.index('id="expectations"') :]
    section = section[: section.index("</section>")]
    assert "218.4 ms" in section and "2.735 MB/s" in section and "1 MiB" in section
    assert "1048576" not in section


def test_wide_tables_scroll_under_one_stylesheet(answered):
    html = answered.html.read_text()
    assert html.count("<style>") == 1 and "overflow-x: auto" in html
    assert html.count("<table>") == html.count('<div class="scroll"><table>')


def test_plots_carry_scenario_wan_backend_and_date_at_twice_the_resolution(answered):
    assert answered.pngs
    for png in answered.pngs:
        with Image.open(png) as img:
            title = str(img.info.get("Title"))  # matplotlib writes it into the PNG's text
            assert img.info.get("dpi", (0, 0))[0] == pytest.approx(200, abs=1)
        assert "collectives" in title and "userspace" in title
        assert "Mbit/s" in title and re.search(r"20\d\d-\d\d-\d\d", title)


def test_bandwidth_against_rate_uses_one_unit_family():
    from analysis.plots import plot_busbw_vs_rate

    plot = plot_busbw_vs_rate(load(FIXTURES / "collectives"))
    assert plot is not None
    labels = {
        ax.get_xlabel() + " " + ax.get_ylabel() for ax in plot.figure.axes if ax.get_visible()
    }
    assert all("Mbit/s" in lb and "MB/s" not in lb for lb in labels), labels


def test_the_report_verb_prints_the_answer_before_the_files(answered, tmp_path, capsys):
    from testbed.cli import main

    src = answered.out.parent
    assert main(["report", str(src), "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "when does hierarchical pay off?" in out and "1 of 2 expectations failed" in out
    assert "✗ busbw at least 100 MB/s: 2.735 MB/s >= 100 MB/s" in out
    assert out.index("expectations failed") < out.index("report.html")


def test_a_long_warnings_list_is_folded_behind_its_counts():
    secs, _csv = sections(load(FIXTURES / "training"))  # 7 warnings
    for sec in secs:
        sec.plots = []
    html = _html("training", secs, {}, [])
    warnings = html[html.index('<section id="warnings">') :]
    warnings = warnings[: warnings.index("</section>")]
    assert "4 cpu-saturated; 3 link check" in warnings
    assert "<details><summary>Show all 7 rows</summary>" in warnings
    assert warnings.index("<details>") < warnings.index("<table>")


def test_a_term_that_rounds_to_zero_is_not_negative():
    shown, _total = terms_display({"model_alpha_beta": 1.0, "model_cwnd": -1e-6}, 1.0)
    assert shown["model_cwnd"] == "+0.0 ms"


def test_a_congestion_sweep_headline_compares_the_senders_goodput():
    from analysis.report_sections import headlines

    (head,) = headlines(load(FIXTURES / "congestion"))
    lines = [f for f in head.findings if "goodput" in f]
    assert len(lines) == 2, head.findings  # the mildest and the harshest point
    assert lines[0].startswith("at loss 0%") and lines[1].startswith("at loss 1%")
    for line in lines:
        assert "reno" in line and "bbr" in line and "Mbit/s" in line


def test_a_faults_headline_gives_each_faults_verdict():
    from analysis.report_sections import headlines

    (head,) = headlines(load(FIXTURES / "faults"))
    lines = [f for f in head.findings if "blackhole" in f]
    assert len(lines) == 2, head.findings
    assert lines[0].startswith("✓ blackhole of 2 s on east-west") and "survived" in lines[0]
    assert lines[1].startswith("✗ blackhole of 31.2 s") and "did not recover" in lines[1]
