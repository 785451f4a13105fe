"""The readiness handshake (testbed.net.procs) against real tiny Python processes; its timeouts on a
ManualClock (testbed.core.clock) that jumps each wait to its deadline, so a timeout is exact and
takes no real time."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from testbed.core.clock import ManualClock
from testbed.core.errors import NetError
from testbed.net.procs import ready, wait_ready


def child(code: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **kwargs,
    )


SERVER = """
import sys
print("starting", flush=True)
print("READY", flush=True)
print("result 42", flush=True)
sys.stdin.read()
"""


def test_ready_line_and_nothing_after_it_is_consumed():
    proc = child(SERVER, text=True)
    try:
        got = wait_ready(proc, timeout=10)
        assert got and got.ok and got.reason == "ready"
        assert got.output == "starting\nREADY\n"
        assert got.returncode is None  # still running: wait_ready never kills
        # everything after the ready line is still in the pipe: what the server wrote until it
        # exited (at the end of its stdin) is exactly the line after it
        rest, _ = proc.communicate("")
        assert rest == "result 42\n"
    finally:
        proc.kill()
        proc.wait()


def test_token_must_be_the_whole_line():
    proc = child("print('NOT READY', flush=True)\nprint('READY ', flush=True)\nimport time\n"
                 "time.sleep(30)")  # fmt: skip
    try:
        got = wait_ready(proc, timeout=10)
        assert got.ok and got.output == "NOT READY\nREADY \n"
    finally:
        proc.kill()
        proc.wait()


def test_exit_before_ready():
    proc = child("import sys\nprint('bad config', file=sys.stderr)\nsys.exit(3)")
    got = wait_ready(proc, timeout=10)
    assert not got and not got.timed_out
    assert got.returncode == 3 and got.reason == "exited with code 3"


def test_timeout_leaves_the_process_running():
    proc = child("import time\ntime.sleep(30)")
    clock = ManualClock(1000.0, autojump=True)
    try:
        got = wait_ready(proc, timeout=0.5, clock=clock)
        assert not got and got.timed_out and got.reason == "no ready line within the timeout"
        # it waited out the whole timeout on its clock, and not longer
        assert clock.now() == pytest.approx(1000.5)
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_substring_on_stderr_keeps_the_rest_for_communicate():
    code = """
import sys
sys.stderr.write("warning: something\\n")
sys.stderr.write("tcpdump: listening on eth0, link-type EN10MB\\n")
sys.stderr.flush()
sys.stdin.read()
sys.stderr.write("3 packets captured\\n")
"""
    proc = child(code)
    got = wait_ready(proc, "listening on", 10, stream=proc.stderr, substring=True)
    assert got.ok and got.output.endswith("listening on eth0, link-type EN10MB\n")
    assert got.output.startswith("warning: something\n")
    _, rest = proc.communicate(b"", timeout=10)
    assert rest == b"3 packets captured\n"


def test_ready_context_kills_on_the_way_out():
    proc = child(SERVER, text=True)
    with ready(proc, "test server") as p:
        assert p is proc and proc.poll() is None
    assert proc.returncode is not None  # killed and reaped


def test_ready_context_raises_naming_the_process_and_its_output():
    proc = child("import sys\nprint('port in use', file=sys.stderr)\nsys.exit(2)", text=True)
    with pytest.raises(NetError) as info, ready(proc, "traffic.bulk server on east-h0"):
        pass
    message = str(info.value)
    assert message.startswith("traffic.bulk server on east-h0 did not start (exited with code 2)")
    assert "port in use" in message
    assert proc.returncode == 2


def test_ready_context_times_out_and_kills():
    proc = child("import time\ntime.sleep(30)")
    with (
        pytest.raises(NetError, match="no ready line within the timeout"),
        ready(proc, "slow", timeout=0.3, clock=ManualClock(autojump=True)),
    ):
        pass
    assert proc.returncode is not None


def test_needs_a_pipe():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        with pytest.raises(ValueError, match="PIPE"):
            wait_ready(proc)
    finally:
        proc.wait()


def test_an_exited_process_is_not_alive_before_it_is_reaped() -> None:
    # A delay line whose `testbed up` has gone is a zombie until PID 1 reaps it; teardown must
    # see it as gone, not wait for the reaping (it waited for seconds before).
    from pathlib import Path

    from testbed.net.registry import process_alive, process_start

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    start = process_start(proc.pid)
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # until it exited, not reaping it
    assert Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    try:
        assert process_start(proc.pid) is None
        assert not process_alive(proc.pid, start)
    finally:
        proc.wait()
