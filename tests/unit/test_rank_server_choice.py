"""Which workloads start their ranks from the rank server (traffic.zygote): the kinds whose
ranks are ``python -m <rank_module>``; never a user's own program (the command kind)."""

from __future__ import annotations

import testbed.experiment.workloads  # noqa: F401  (registers the kinds)
from testbed.experiment.workloads.base import KINDS


def test_only_the_rank_module_kinds_fork_from_the_rank_server():
    forked = {name for name, kind in KINDS.items() if kind.runs_rank_module}
    assert "command" in KINDS and "command" not in forked
    assert {"training", "collectives"} <= forked
