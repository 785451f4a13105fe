"""Shared fixtures: live testbeds with unique names that are always torn down.

Live tests need root and real namespaces; they are skipped with the reason elsewhere. Every
testbed a test makes is named ``t<pid>-<hex>`` and destroyed in a finalizer, and the session ends
by checking that none of this run's testbeds is left (so a missing cleanup fails loudly).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from testbed.config.scenario import parse_scenario
from testbed.net import registry
from testbed.run.testbed import Testbed

RUN_TAG = f"t{os.getpid()}"


def unique_name(stem: str = "") -> str:
    return f"{RUN_TAG}-{stem + '-' if stem else ''}{secrets.token_hex(2)}"


def scenario(**overrides: Any) -> dict[str, Any]:
    """Two clusters of two hosts and one WAN link; keys in ``overrides`` replace the defaults."""
    data: dict[str, Any] = {
        "name": "test",
        "clusters": {"east": {"hosts": 2}, "west": {"hosts": 2}},
        "wan": [{"between": ["east", "west"], "rate": "100mbit"}],
    }
    data.update(overrides)
    return data


@pytest.fixture
def root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: network namespaces and qdiscs")


@pytest.fixture
def make_testbed(root: None) -> Iterator[Callable[..., Testbed]]:
    made: list[Testbed] = []

    def make(data: dict[str, Any], **kwargs: Any) -> Testbed:
        tb = Testbed(parse_scenario(data, "test"), name=unique_name(), **kwargs)
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
        from testbed import net

        net.destroy(rec)
    assert not left, f"testbeds left behind by this test run: {[r.name for r in left]}"
