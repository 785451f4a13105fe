"""Helpers shared by the test files (imported as ``helpers``; pytest advises against importing
conftest): unique testbed names of this run and a small default scenario."""

from __future__ import annotations

import os
import secrets
from typing import Any

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
