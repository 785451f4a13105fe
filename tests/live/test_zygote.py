"""The rank server (traffic.zygote) on a real network: a forked child sees its host as a process
that ``ip netns exec`` started sees it (namespace, /etc/hosts, /sys), and its exit status and
signals reach the launcher's side as a Popen's would."""

from __future__ import annotations

import os
import signal
import time

import pytest
from helpers import scenario

from testbed.live.processes import rank_env
from traffic.zygote import Zygote

pytestmark = pytest.mark.live
SMALL = scenario(clusters={"east": {"hosts": 1}, "west": {"hosts": 1}})

PROBE = """\
import faulthandler, os, signal, sys, time
faulthandler.register(signal.SIGUSR1, all_threads=True)
print("name", __name__)
print("argv", " ".join(sys.argv[1:]))
print("net", os.readlink("/proc/self/ns/net"))
print("sys", " ".join(sorted(os.listdir("/sys/class/net"))))
print("hosts", open("/etc/hosts").read().replace(chr(10), "|"))
print("env", os.environ.get("PROBE_X"), os.environ.get("OMP_NUM_THREADS"))
sys.stdout.flush()
if sys.argv[1] == "sleep":
    time.sleep(60)
sys.exit(int(sys.argv[1]))
"""


def lines(path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        key, _, value = line.partition(" ")
        out.setdefault(key, value)
    return out


@pytest.fixture
def zygote(tmp_path):
    (tmp_path / "zprobe.py").write_text(PROBE)
    env = {**rank_env(), "PYTHONPATH": f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}"}
    z = Zygote(env, tmp_path / "server.log")
    z.wait_ready(timeout=120)
    yield z, env
    z.close()


def test_a_forked_child_sees_its_host_as_ip_netns_exec_does(make_testbed, zygote, tmp_path):
    z, env = zygote
    tb = make_testbed(SMALL)
    host = sorted(tb.hosts)[0]
    log = tmp_path / "child.log"
    child = z.start(tb.namespace(host), "zprobe", ["3"], {**env, "PROBE_X": "yes"}, log)
    assert child.wait(timeout=30) == 3
    assert child.poll() == 3 and child.returncode == 3
    seen = lines(log)
    assert seen["name"] == "__main__"
    assert seen["argv"] == "3"
    assert seen["env"] == "yes 1"
    script = "import os; print(os.readlink('/proc/self/ns/net'))"
    assert seen["net"] == tb.run(host, ["python3", "-c", script]).stdout.strip()
    assert seen["sys"] == " ".join(sorted(tb.run(host, ["ls", "/sys/class/net"]).stdout.split()))
    hosts = tb.run(host, ["cat", "/etc/hosts"]).stdout.replace("\n", "|")
    assert seen["hosts"] == hosts
    assert seen["net"] != os.readlink("/proc/self/ns/net")  # the server's own is untouched


def test_signals_reach_the_child_and_its_end_comes_back(make_testbed, zygote, tmp_path):
    z, env = zygote
    tb = make_testbed(SMALL)
    ns = tb.namespace(sorted(tb.hosts)[0])
    log = tmp_path / "sleep.log"
    child = z.start(ns, "zprobe", ["sleep"], env, log)
    deadline = time.monotonic() + 30
    while "env" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert child.poll() is None
    child.send_signal(signal.SIGUSR1)  # the stack dump, and it runs on
    while "most recent call first" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "most recent call first" in log.read_text()
    assert child.poll() is None
    child.terminate()
    assert child.wait(timeout=10) == -signal.SIGTERM
    child.kill()  # a reaped child: nothing is sent (never a stranger that took the pid)
    other = z.start(ns, "zprobe", ["sleep"], env, tmp_path / "kill.log")
    other.kill()
    assert other.wait(timeout=10) == -signal.SIGKILL


def test_a_child_that_cannot_enter_its_host_fails_with_the_reason_in_its_log(zygote, tmp_path):
    z, env = zygote
    log = tmp_path / "missing.log"
    child = z.start("no-such-namespace-z", "zprobe", ["0"], env, log)
    assert child.wait(timeout=30) == 1
    assert "no-such-namespace-z" in log.read_text()


def test_a_child_outlives_a_killed_server_and_is_still_stopped(make_testbed, zygote, tmp_path):
    z, env = zygote
    tb = make_testbed(SMALL)
    child = z.start(tb.namespace(sorted(tb.hosts)[0]), "zprobe", ["sleep"], env, tmp_path / "o.log")
    z.proc.kill()
    z.proc.wait()
    assert child.poll() is None
    child.kill()  # straight to the pid now (its start time tells it from a later owner)
    assert child.wait(timeout=10) == -signal.SIGKILL
