"""Shared fixtures: live testbeds with unique names that are always torn down, and the test tiers.

Tiers are directories, and each test gets its tier's marker from its path: ``tests/unit`` (pure,
no root, seconds: ``make test-unit``), ``tests/live`` (root and real namespaces; skipped with the
reason elsewhere), ``tests/guest`` (boots a QEMU guest), ``tests/acceptance`` (root: bounds
other projects wrote - Mininet's link tests - on both engines). Every testbed a test makes is named
``t<pid>-<hex>`` and destroyed in a finalizer, and the session ends by checking that none of this
run's testbeds is left (so a missing cleanup fails loudly). Tests that assert on a time or a
rate carry ``@pytest.mark.timing``: the plugin in ``tests/timing.py`` tells a saturated host from a
failing product for them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import RUN_TAG, unique_name

from testbed.config.loading import parse_scenario
from testbed.live.network import Network
from testbed.net import registry

pytest_plugins = ["timing"]  # the `timing` marker's rerun on a saturated host

TIERS = ("unit", "live", "guest", "acceptance")
HERE = Path(__file__).resolve().parent


# Files whose tests share a machine-wide resource, so that two pytest-xdist workers never run two
# of them at once: Mininet (its switches' interfaces and its cleanup live in the root namespace;
# the acceptance files drive both engines) and Ray (clusters of raylets on this machine).
SHARED_RESOURCE_GROUPS = {
    "mininet": (
        "acceptance/",
        "live/test_mininet_engine.py",
        "live/test_mininet_link.py",
        "live/test_mininet_composed.py",
    ),
    "ray": ("live/test_ray_sweep.py", "live/test_spanned"),  # test_spanned*.py
}


def xdist_group_of(relpath: str) -> str:
    """The pytest-xdist group (``--dist loadgroup``) of a test file given relative to tests/: its
    shared-resource group, else the file itself (a file's tests, and its module-scoped networks,
    stay on one worker)."""
    for group, members in SHARED_RESOURCE_GROUPS.items():
        if any(relpath.startswith(m) for m in members):
            return group
    return relpath


def _start_order(relpath: str) -> int:
    """Where a file's tests stand in the run: the shared-resource groups first (each runs on one
    worker, start to end: started first, the longest queue does not end the run alone), then the
    other live files, then the pure ones (short: they even the workers out at the end)."""
    if xdist_group_of(relpath) in SHARED_RESOURCE_GROUPS:
        return 0
    return 2 if relpath.startswith("unit/") else 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def relpath(item: pytest.Item) -> str:
        return "/".join(Path(str(item.path)).resolve().relative_to(HERE).parts)

    for item in items:
        parts = relpath(item).split("/")
        if parts and parts[0] in TIERS:
            item.add_marker(getattr(pytest.mark, parts[0]))
        if xdist_group_of(relpath(item)) == "ray":
            item.add_marker(pytest.mark.ray)  # `make test` runs them in a phase of their own
    items.sort(key=lambda item: _start_order(relpath(item)))  # stable: files stay whole


@pytest.hookimpl(optionalhook=True)  # a session without pytest-xdist has no such hook
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` as the groups above say: a scope per group, each on one worker at a
    time. pytest-xdist's own loadgroup reads ``xdist_group`` markers by renaming node ids, which
    pytest 9 no longer allows (its node ids are derived): the same file then ran on both
    workers. Here the scope comes from the test's path instead."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedResourceScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group_of(nodeid.split("::", 1)[0].removeprefix("tests/"))

    return SharedResourceScheduling(config, log)


@pytest.fixture
def root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: network namespaces and qdiscs")


@pytest.fixture
def make_testbed(root: None) -> Iterator[Callable[..., Network]]:
    made: list[Network] = []

    def make(data: dict[str, Any], **kwargs: Any) -> Network:
        tb = Network(parse_scenario(data, "test"), name=unique_name(), **kwargs)
        made.append(tb)
        return tb.up()

    yield make
    for tb in made:
        tb.down()


@pytest.fixture(scope="session", autouse=True)
def nothing_left_behind() -> Iterator[None]:
    yield
    left = [r for r in registry.records() if r.name.startswith(RUN_TAG)]
    for rec in left:  # clean up, then fail: a leak must not poison the next run
        from testbed.net import build

        build.destroy(rec)
    assert not left, f"testbeds left behind by this test run: {[r.name for r in left]}"
