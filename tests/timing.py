"""The ``timing`` marker's plugin: a timing test that fails on a saturated host is run once more,
and reported as an xfail when it fails on a saturated host again.

A bound on a time or a rate is derived from the measurement's resolution and spread on a host
that runs the test; a host whose CPUs are busy with something else measures itself. The product's
own monitor (:class:`testbed.trace.cpu.CpuMonitor`, the whole machine's busy share from
``/proc/stat`` every 0.2 s) watches the call phase of every ``@pytest.mark.timing`` test (the
phase that measures; setup only builds). ``decide`` is the whole rule:

- a pass is a pass, on any host;
- a failure on a host that was not saturated is a failure. A host is saturated when more than
  half of the samples were at or above ``CPU_SATURATED`` (``cpu_saturated``), or when processes
  other than the test's own (the pytest process running it and its descendants) kept more of
  the machine busy over the call than one core's worth plus a quiet machine's background
  (``cpu_others_mean`` above ``others_limit()``): that is beyond the load the flake hunt holds
  every timing test to (``make test-stress``: stress-ng on one core, which reads 48-50% of 2
  cores here), e.g. a second xdist worker's burst on top of it (beside stress-ng and one
  live-tier worker: 55-65%);
- a failure on a saturated host runs the test once more, with its fixtures made afresh (the
  first attempt's reports are not logged; its failure is kept as a section of the final report);
- a second failure on a saturated host is an xfail whose reason gives the monitor's numbers;
- in a `testbed vm` guest under software emulation (TCG) every timing failure counts as one on a
  saturated host: the times and rates measured there are the emulator's (docs/vm.md).

The monitor sees the whole machine, so a test whose own processes saturate both cores reads as a
saturated host too; the xfail reason's numbers and ``make test-stress``'s table keep such cases
visible. A call shorter than one monitor period has no sample and counts as unsaturated. The
test's pytest-timeout covers both attempts. Loaded by tests/conftest.py (``pytest_plugins``).
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any, Literal

import pytest
from _pytest.runner import runtestprotocol

from testbed.trace.cpu import CpuMonitor

Verdict = Literal["pass", "fail", "rerun", "xfail"]
ATTEMPTS = 2  # the first, and one more when it failed on a saturated host

_cpu_key = pytest.StashKey[dict[str, Any]]()


BACKGROUND = 0.05  # a quiet machine's others' share: 0-4% of 2 cores over 8 quiet calls


def others_limit() -> float:
    """The share of all cores that other processes may keep busy before the host counts as
    saturated: one core's worth, plus the quiet machine's own background (``BACKGROUND``), so
    the flake hunt's one busy core (48-50% of 2 cores) stays below it."""
    return 1.0 / (os.cpu_count() or 1) + BACKGROUND


def host_saturated(summary: dict[str, Any]) -> bool:
    """The monitor's verdict on one call (see the module's rule)."""
    others = summary.get("cpu_others_mean")
    return bool(summary.get("cpu_saturated")) or (others is not None and others > others_limit())


def decide(failed: bool, saturated: bool, attempt: int) -> Verdict:
    """What becomes of attempt ``attempt`` (1-based) of a timing test's call."""
    if not failed:
        return "pass"
    if not saturated:
        return "fail"
    return "rerun" if attempt < ATTEMPTS else "xfail"


def cpu_text(summary: dict[str, Any]) -> str:
    """The monitor's summary of one call, in percent."""

    def pct(key: str) -> str:
        value = summary.get(key)
        return "n/a" if value is None else f"{100 * value:.0f}%"

    text = (
        f"busy mean {pct('cpu_busy_mean')}, p95 {pct('cpu_busy_p95')}, "
        f"saturated share {pct('cpu_saturated_share')}"
    )
    if "cpu_others_mean" in summary:
        text += f", others {pct('cpu_others_mean')}"
    return text


def emulated_cpu() -> bool:
    """Running in a `testbed vm` guest under software emulation (TCG, told by the runner's
    TESTBED_VM_ACCEL): every time and rate measured there is the emulator's, not the product's,
    whatever the guest's own /proc/stat says."""
    return os.environ.get("TESTBED_VM_ACCEL") == "tcg"


def saturated_reason(summary: dict[str, Any], emulated: bool = False) -> str:
    """The xfail reason: the monitor's summary of the last attempt's call."""
    if emulated:
        return (
            f"host saturated: emulated CPU (TCG), the timing is the emulator's; {cpu_text(summary)}"
        )
    return f"host saturated: {cpu_text(summary)}"


def is_timing(item: pytest.Item) -> bool:
    return item.get_closest_marker("timing") is not None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """Watch the host's CPU while a timing test's function runs."""
    if not is_timing(item):
        return (yield)
    monitor = CpuMonitor(own=os.getpid())
    monitor.start()
    try:
        return (yield)
    finally:
        monitor.stop()
        item.stash[_cpu_key] = monitor.summary()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """Run a timing test up to ``ATTEMPTS`` times as ``decide`` says; other tests are left to
    pytest's own protocol."""
    if not is_timing(item):
        return None
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    earlier: list[str] = []
    for attempt in range(1, ATTEMPTS + 1):
        if _cpu_key in item.stash:
            del item.stash[_cpu_key]
        # log=False: nothing is reported until the verdict; teardown to the real next item
        # (function-scoped fixtures are always made afresh for the next attempt)
        reports = runtestprotocol(item, log=False, nextitem=nextitem)
        call = next((r for r in reports if r.when == "call"), None)
        cpu = item.stash.get(_cpu_key, {})
        emulated = emulated_cpu()
        saturated = host_saturated(cpu) or emulated
        verdict = decide(call is not None and call.failed, saturated, attempt)
        if verdict == "rerun" and call is not None:
            earlier.append(
                f"attempt {attempt} failed ({saturated_reason(cpu, emulated)}):\n"
                + call.longreprtext
            )
            continue
        if verdict == "xfail" and call is not None:
            call.outcome = "skipped"
            call.wasxfail = saturated_reason(cpu, emulated)  # type: ignore[attr-defined]
        for text in earlier:  # shown with the final outcome (-rA shows it beside a pass)
            (call or reports[0]).sections.append(("timing: earlier attempt", text))
        for report in reports:  # JUnit XML takes the properties from the teardown report
            report.user_properties.append(("timing_attempts", attempt))
            if cpu:
                report.user_properties.append(("timing_cpu", cpu_text(cpu)))
            item.ihook.pytest_runtest_logreport(report=report)
        break
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True
