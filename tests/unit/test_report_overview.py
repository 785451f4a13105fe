"""The report's Overview and network tables in the words a scenario and the CLI use: the sweep's
values as the scenario wrote them, and one spelling of a direction (``east->west``) in every
table. Pure: the committed fixtures, no root."""

from __future__ import annotations

import html
from pathlib import Path

import pytest

from analysis import tables as T
from analysis.display import network_display
from analysis.loader import load
from analysis.report import _html, _markdown
from analysis.report_sections import sections

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "results"


@pytest.mark.parametrize(
    ("name", "sweep"),
    [
        ("training", "wan[0].rate: 50mbit, 200mbit; workload.algorithm: ddp, diloco"),
        ("faults", "faults[0].duration: 2s, 40s"),
        (
            "congestion",
            "tcp.congestion: reno, bbr, dctcp; wan[0].loss: 0%, 1%; wan[0].aqm: "
            "{kind: droptail}, {kind: red, kmin: 20KB, kmax: 200KB, pmax: 1%}",
        ),
    ],
)
def test_the_sweep_line_shows_the_values_as_the_scenario_wrote_them(name: str, sweep: str) -> None:
    pairs = dict(T.header(load(FIXTURES / name)))
    assert pairs["sweep"] == sweep


def test_a_direction_is_written_as_in_the_scenario_and_the_cli() -> None:
    wan = {"between": ["east", "west"], "rate": 1e8, "delay": 0.02, "jitter": 0.0, "loss": 0.0,
           "buffer": ["bdp", 1.0], "aqm": None, "reverse": None, "paths": []}  # fmt: skip
    runs = {"p000-r0": {"params": {}, "backend": "userspace", "resolved": {"wan": [wan]}}}
    rows = network_display(runs).to_dict("records")
    assert [r["direction"] for r in rows] == ["east->west", "west->east"]


@pytest.mark.parametrize("name", ["collectives", "faults", "training"])
def test_no_report_table_spells_a_direction_with_an_arrow_glyph(name: str) -> None:
    secs, _csv = sections(load(FIXTURES / name))
    for sec in secs:
        sec.plots = []
    for text in (html.unescape(_html(name, secs, {}, [])), _markdown(name, secs, [])):
        assert "→" not in text
        assert "east->west" in text
