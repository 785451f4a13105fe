"""The scenarios the committed result fixtures were made with say what they ask and expect in the
schema's `question:` and `expected:` fields (what a report's headline shows), as the ready
scenarios do, not in comments; each still loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.config.loading import load_scenario

SCENARIOS = Path(__file__).resolve().parents[1] / "fixtures" / "scenarios"


@pytest.mark.parametrize("name", ["collectives", "congestion", "failure"])
def test_a_fixture_scenario_asks_its_question_in_the_schema(name: str) -> None:
    path = SCENARIOS / f"{name}.yaml"
    sc = load_scenario(path)
    assert sc.question.startswith("does ") and sc.question.endswith("?")
    assert sc.expected
    comments = [line for line in path.read_text().splitlines() if line.lstrip().startswith("#")]
    assert not [c for c in comments if "Question:" in c or "Expected outcome:" in c]


def test_every_fixture_scenario_loads() -> None:
    files = sorted(SCENARIOS.glob("*.yaml"))
    assert len(files) >= 4
    for path in files:
        assert load_scenario(path).name, path.name
