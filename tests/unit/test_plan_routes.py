"""The plan's routes (testbed.plan.routes): its next hops are testbed.core.wanpaths', and they
are the ones the plan's own breadth-first search gave before it used the shared one, on every
scenario (and sweep point) in scenarios/ and examples/. Pure."""

from __future__ import annotations

from collections import deque
from pathlib import Path

import pytest

from testbed.config.loading import load_yaml, parse_scenario
from testbed.config.scenario import Scenario
from testbed.config.sweep import expand
from testbed.plan.routes import cluster_distances, cluster_next_hops

REPO = Path(__file__).resolve().parents[2]
FILES = sorted([*REPO.glob("scenarios/*.yaml"), *REPO.glob("examples/*/scenario.yaml")])


def bfs_next_hops(scenario: Scenario) -> dict[tuple[str, str], str]:
    """The plan's former search, kept as the reference: BFS over the links, ties by order."""
    neighbours: dict[str, list[str]] = {c: [] for c in scenario.clusters}
    for link in scenario.wan:
        a, b = link.between
        neighbours[a].append(b)
        neighbours[b].append(a)
    hops: dict[tuple[str, str], str] = {}
    for src in scenario.clusters:
        first: dict[str, str] = {}
        queue: deque[str] = deque()
        for n in neighbours[src]:
            if n not in first:
                first[n] = n
                queue.append(n)
        while queue:
            here = queue.popleft()
            for n in neighbours[here]:
                if n != src and n not in first:
                    first[n] = first[here]
                    queue.append(n)
        for dst, nxt in first.items():
            hops[(src, dst)] = nxt
    return hops


def scenarios() -> list[tuple[str, Scenario]]:
    out = []
    for f in FILES:
        for spec in expand(load_yaml(f), str(f)):
            out.append((f"{f.relative_to(REPO)}:{spec.run_id}", spec.scenario))
    return out


# more clusters than the files have: chains, rings and ties that link order breaks
SHAPES = {
    "chain": ["a-b", "b-c", "c-d"],
    "ring": ["a-b", "b-c", "c-d", "d-a"],
    "ring, links reordered": ["c-d", "a-b", "d-a", "b-c"],
    "star and a chord": ["a-d", "b-d", "c-d", "a-b"],
}


@pytest.mark.parametrize("shape", SHAPES)
def test_next_hops_on_larger_topologies(shape: str) -> None:
    sc = parse_scenario(
        {
            "name": "shape",
            "clusters": {c: {"hosts": 1} for c in "abcd"},
            "wan": [
                {"between": pair.split("-"), "rate": "1gbit", "delay": "5ms"}
                for pair in SHAPES[shape]
            ],
            "workload": {"timeout": "30s"},
        }
    )
    assert cluster_next_hops(sc) == bfs_next_hops(sc)


def test_every_scenario_file_is_covered() -> None:
    assert len(FILES) >= 10
    assert any(sc.wan[0].paths for _, sc in scenarios())  # multipath links route once per link


@pytest.mark.parametrize(("name", "sc"), scenarios(), ids=lambda v: v if isinstance(v, str) else "")
def test_next_hops_are_the_plans_former_ones(name: str, sc: Scenario) -> None:
    assert cluster_next_hops(sc) == bfs_next_hops(sc), name


@pytest.mark.parametrize(("name", "sc"), scenarios(), ids=lambda v: v if isinstance(v, str) else "")
def test_distances_follow_the_next_hops(name: str, sc: Scenario) -> None:
    hops = cluster_next_hops(sc)
    dist = cluster_distances(sc)
    for (src, dst), n in dist.items():
        if src == dst:
            assert n == 0, name
        else:
            assert n == 1 + dist[(hops[(src, dst)], dst)], name
