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


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.path)).resolve().relative_to(HERE).parts
        if parts and parts[0] in TIERS:
            item.add_marker(getattr(pytest.mark, parts[0]))
        item.add_marker(pytest.mark.xdist_group(xdist_group_of("/".join(parts))))


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
