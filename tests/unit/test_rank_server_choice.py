"""Which workloads start their ranks from the rank server (traffic.zygote): the kinds whose
ranks are ``python -m <rank_module>``; never a user's own program (the command kind)."""

from __future__ import annotations

import testbed.experiment.workloads  # noqa: F401  (registers the kinds)
from testbed.experiment.workloads.base import KINDS


def test_only_the_rank_module_kinds_fork_from_the_rank_server():
    forked = {name for name, kind in KINDS.items() if kind.runs_rank_module}
    assert "command" in KINDS and "command" not in forked
    assert {"training", "collectives"} <= forked


def test_the_rank_server_serves_local_rank_modules_unless_turned_off(monkeypatch):
    from testbed.experiment import ranks

    monkeypatch.setattr(ranks, "PREFORK", True)
    assert ranks.forks_ranks(local=True, rank_module=True)
    assert not ranks.forks_ranks(local=False, rank_module=True)  # across machines
    assert not ranks.forks_ranks(local=True, rank_module=False)  # a user's program
    monkeypatch.setattr(ranks, "PREFORK", False)  # TESTBED_PREFORK=0
    assert not ranks.forks_ranks(local=True, rank_module=True)
