"""The ``timing`` marker's rule (tests/timing.py): which failures are the host's, and the reason
an xfail gives."""

from __future__ import annotations

import pytest
from timing import ATTEMPTS, decide, host_saturated, others_limit, saturated_reason


@pytest.mark.parametrize(
    ("failed", "saturated", "attempt", "verdict"),
    [
        (False, False, 1, "pass"),
        (False, True, 1, "pass"),  # a pass on a busy host is still a pass
        (True, False, 1, "fail"),  # an idle host: the product failed
        (True, True, 1, "rerun"),
        (False, True, 2, "pass"),  # the rerun passed
        (True, False, 2, "fail"),  # failed again, now on an idle host
        (True, True, 2, "xfail"),  # failed twice, saturated both times
    ],
)
def test_decide(failed: bool, saturated: bool, attempt: int, verdict: str) -> None:
    assert decide(failed, saturated, attempt) == verdict


def test_one_rerun_at_most() -> None:
    assert ATTEMPTS == 2
    assert decide(True, True, ATTEMPTS) == "xfail"


def test_the_reason_gives_the_monitors_numbers_in_percent() -> None:
    summary = {
        "cpu_busy_mean": 0.973,
        "cpu_busy_p95": 1.0,
        "cpu_saturated_share": 0.8,
        "cpu_saturated": True,
    }
    assert saturated_reason(summary) == (
        "host saturated: busy mean 97%, p95 100%, saturated share 80%"
    )


def test_the_reason_of_a_monitor_without_samples() -> None:
    summary = {"cpu_busy_mean": None, "cpu_busy_p95": None, "cpu_saturated": False}
    assert saturated_reason(summary) == (
        "host saturated: busy mean n/a, p95 n/a, saturated share n/a"
    )


def test_a_tcg_guest_counts_as_a_saturated_host(monkeypatch) -> None:
    from timing import emulated_cpu

    monkeypatch.setenv("TESTBED_VM_ACCEL", "tcg")
    assert emulated_cpu()
    assert saturated_reason({}, emulated=True).startswith("host saturated: emulated CPU (TCG)")
    monkeypatch.setenv("TESTBED_VM_ACCEL", "kvm")
    assert not emulated_cpu()


def test_a_host_is_saturated_by_its_samples_or_by_others_beyond_its_limit() -> None:
    limit = others_limit()  # one core's worth plus a quiet machine's background
    assert host_saturated({"cpu_saturated": True})
    assert not host_saturated({"cpu_saturated": False})
    assert not host_saturated({"cpu_saturated": False, "cpu_others_mean": None})
    assert not host_saturated({"cpu_saturated": False, "cpu_others_mean": limit})
    assert host_saturated({"cpu_saturated": False, "cpu_others_mean": limit + 0.01})


def test_the_reason_names_the_others_share_when_measured() -> None:
    summary = {
        "cpu_busy_mean": 0.89,
        "cpu_busy_p95": 1.0,
        "cpu_saturated_share": 0.38,
        "cpu_saturated": False,
        "cpu_others_mean": 0.62,
    }
    assert saturated_reason(summary).endswith("saturated share 38%, others 62%")
