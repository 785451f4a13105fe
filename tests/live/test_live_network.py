"""Live tests of the foundation: real namespaces, real packets (root)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import (
    RUN_TAG,
    root_namespace_state,
    scenario,
    skip_without_mininet,
    unique_name,
    veths_sharing_their_peers_index,
    wait_for_line,
)

from testbed.core.frames import GOODPUT_FACTOR
from testbed.live.selfcheck import check_direction
from testbed.net import netns, registry

pytestmark = pytest.mark.live
CLI = [sys.executable, "-m", "testbed.cli"]


def three_cluster_chain() -> dict:
    """east - west - north with no east-north link: traffic east<->north transits west."""
    return scenario(
        clusters={"east": {"hosts": 2}, "west": {"hosts": 2}, "north": {"hosts": 1}},
        wan=[
            {"between": ["east", "west"], "rate": "1gbit"},
            {"between": ["west", "north"], "rate": "1gbit"},
        ],
    )


def test_every_host_reaches_every_other_host_by_name(make_testbed):
    tb = make_testbed(three_cluster_chain())
    names = list(tb.hosts)
    pings = {
        (a, b): tb.popen(a, ["ping", "-n", "-c", "1", "-W", "2", b], stdout=subprocess.DEVNULL)
        for a, b in itertools.permutations(names, 2)
    }
    failed = [pair for pair, p in pings.items() if p.wait(timeout=10) != 0]
    assert not failed, f"unreachable pairs: {failed}"
    # each veth end its own index (else a port brought up again, by a link down's or a
    # gateway crash's end, has its carrier back on the kernel's slow path: up to 1 s)
    assert not veths_sharing_their_peers_index(tb.record.namespaces)


def test_transit_path_goes_through_the_middle_cluster(make_testbed):
    tb = make_testbed(three_cluster_chain())
    r = tb.run("east-h0", ["ping", "-n", "-c", "1", "-W", "2", "north-h0"])
    # host -> east-gw -> wire -> west-gw -> wire -> north-gw -> host: 5 routers, TTL 64-5.
    assert "ttl=59" in r.stdout, r.stdout


@pytest.mark.timing
def test_wan_goodput_per_direction_matches_asymmetric_htb_ceiling(make_testbed):
    tb = make_testbed(
        scenario(
            wan=[{"between": ["east", "west"], "rate": "100mbit", "reverse": {"rate": "40mbit"}}]
        )
    )
    checks = {d.name: check_direction(tb, d, duration=3.0, pings=5) for d in tb.plan.wan}
    for name, rate in (("east->west", 100e6), ("west->east", 40e6)):
        c = checks[name]
        ceiling = rate * GOODPUT_FACTOR
        assert c.goodput_configured_bps == pytest.approx(ceiling)
        # SELFCHECK_TOLERANCE either side; bytes over a 3 s window resolve one 64 KiB read
        # (0.18-0.46%). RESULTS.md "Link self-check": TCP 99.9-100.0% of the ceiling. Above the
        # ceiling the product's own rule flags at SELFCHECK_LEAK (1.01): +10% admits a leak.
        assert c.goodput_bps == pytest.approx(ceiling, rel=0.10), c


def test_congestion_control_and_ecn_per_namespace_are_in_effect(make_testbed):
    data = scenario(
        clusters={
            "east": {"hosts": 1, "tcp": {"congestion": "bbr", "ecn": True}},
            "west": {"hosts": 1},
        },
        tcp={"congestion": "reno", "ecn": False},
    )
    tb = make_testbed(data)
    keys = ["net.ipv4.tcp_congestion_control", "net.ipv4.tcp_ecn"]
    east = netns.read_sysctls(tb.namespace("east-h0"), keys)
    west = netns.read_sysctls(tb.namespace("west-h0"), keys)
    assert east == {"net.ipv4.tcp_congestion_control": "bbr", "net.ipv4.tcp_ecn": "1"}
    assert west == {"net.ipv4.tcp_congestion_control": "reno", "net.ipv4.tcp_ecn": "0"}
    # And on a real connection: the sender's socket reports its namespace's algorithm.
    checks = {d.name: check_direction(tb, d, duration=1.0, pings=2) for d in tb.plan.wan}
    assert checks["east->west"].congestion == "bbr"
    assert checks["west->east"].congestion == "reno"


def test_two_testbeds_at_once_do_not_collide(make_testbed):
    a = make_testbed(scenario())
    b = make_testbed(scenario())
    assert a.record.prefix != b.record.prefix
    assert a.record.slot != b.record.slot
    assert set(a.hosts.values()).isdisjoint(b.hosts.values())
    for tb in (a, b):
        r = tb.run("east-h0", ["ping", "-n", "-c", "1", "-W", "2", "west-h1"])
        assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("engine", ["native", "mininet"])
def test_kill_9_of_up_then_clean_leaves_nothing(root, tmp_path, engine):
    """Also for the Mininet engine: its nodes' shells are recorded processes like the lines."""
    if engine == "mininet":
        skip_without_mininet()
    before = root_namespace_state()
    path = tmp_path / "s.yaml"
    # With delay, so that a delay line runs too (in its own session: it survives the kill).
    data = scenario(wan=[{"between": ["east", "west"], "rate": "100mbit", "delay": "5ms"}])
    path.write_text(json.dumps(data | {"engine": engine}))
    name = unique_name("kill")
    up = subprocess.Popen(
        [*CLI, "up", str(path), "--name", name, "--foreground"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ),
    )
    try:
        wait_for_line(up, "press Ctrl-C", timeout=30)
        rec = registry.find(name)
        helpers = [pid for pid, start, _ in rec.processes if registry.process_alive(pid, start)]
        sleeper = subprocess.Popen(["ip", "netns", "exec", f"{rec.prefix}-east-h0", "sleep", "300"])
        time.sleep(0.2)
        up.send_signal(signal.SIGKILL)
        up.wait()
        ls = subprocess.run([*CLI, "ls"], capture_output=True, text=True)
        assert "leftover" in ls.stdout
        r = subprocess.run([*CLI, "clean"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert rec.prefix in r.stdout
        sleeper.wait(timeout=5)  # it was stopped by clean (found in the testbed's namespace)
        for pid in helpers:  # e.g. the delay line: stopped by its recorded pid
            assert registry.process_start(pid) is None, f"process {pid} survived clean"
        assert registry.namespaces_with_prefix(rec.prefix) == []
        assert not list(Path("/etc/netns").glob(f"{rec.prefix}-*"))
        assert not rec.path.exists()
        assert root_namespace_state() == before
    finally:
        if up.poll() is None:
            up.kill()
        subprocess.run([*CLI, "clean"], capture_output=True)


def test_clean_leaves_live_testbeds_alone(make_testbed):
    tb = make_testbed(scenario())
    r = subprocess.run([*CLI, "clean"], capture_output=True, text=True)
    assert r.returncode == 0
    assert tb.record.prefix not in r.stdout
    assert (netns.NETNS_DIR / tb.namespace("east-h0")).exists()


def test_cli_up_exec_ls_down(root, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(scenario()))
    name = unique_name("cli")
    env = dict(os.environ)
    try:
        up = subprocess.run(
            [*CLI, "up", str(path), "--name", name], capture_output=True, text=True, env=env
        )
        assert up.returncode == 0, up.stderr
        assert "east-h0" in up.stdout and "10." in up.stdout
        ex = subprocess.run(
            [*CLI, "exec", name, "east-h0", "--", "ping", "-c", "1", "-W", "2", "west-h1"],
            capture_output=True,
            text=True,
        )
        assert ex.returncode == 0, ex.stdout + ex.stderr
        ls = subprocess.run([*CLI, "ls"], capture_output=True, text=True, env=env)
        assert name in ls.stdout and "up" in ls.stdout
        bad = subprocess.run(
            [*CLI, "exec", name, "nosuch-h9", "--", "true"], capture_output=True, text=True
        )
        assert bad.returncode == 1 and "no host 'nosuch-h9'" in bad.stderr
        again = subprocess.run(
            [*CLI, "up", str(path), "--name", name], capture_output=True, text=True
        )
        assert again.returncode == 1 and "already up" in again.stderr
    finally:
        down = subprocess.run([*CLI, "down", name], capture_output=True, text=True)
    assert down.returncode == 0, down.stderr
    assert not any(r.name == name for r in registry.records())


def test_backend_kernel_without_netem_is_a_clear_error(root, tmp_path):
    from testbed.net import probe as kernel

    if kernel.probe().has_qdisc("netem"):
        pytest.skip("this kernel has netem")
    path = tmp_path / "s.yaml"
    data = scenario(backend="kernel")
    data["wan"][0]["delay"] = "10ms"
    path.write_text(json.dumps(data))
    r = subprocess.run(
        [*CLI, "run", str(path), "--out", str(tmp_path)], capture_output=True, text=True
    )
    # The point is skipped with the reason, and since nothing was measured the exit code is 1.
    assert r.returncode == 1, r.stdout + r.stderr
    text = " ".join((r.stdout + r.stderr).split())
    assert "skipped" in text and "backend: kernel needs sch_netem" in text
    assert "unsupported on this kernel" in text
    assert "Traceback" not in r.stderr


def test_fabric_delay_on_the_userspace_backend_is_a_clear_error(root):
    from testbed.config.loading import parse_scenario
    from testbed.core.errors import UnsupportedError
    from testbed.live.network import Network

    data = scenario(backend="userspace")
    data["clusters"]["east"]["fabric"] = {"delay": "50us"}
    with pytest.raises(UnsupportedError, match=r"fabric\.delay needs netem"):
        Network(parse_scenario(data), name=unique_name()).up()


def test_validate_cli_exit_codes(tmp_path):
    good = subprocess.run(
        [*CLI, "validate", "scenarios/quickstart.yaml"], capture_output=True, text=True
    )
    assert good.returncode == 0, good.stderr
    path = tmp_path / "bad.yaml"
    path.write_text(
        "name: x\nclusters:\n  east: {hosts: 1}\n  west: {hosts: 1}\nwan:\n"
        "  - {between: [east, west], delay: 25 parsecs}\n"
    )
    bad = subprocess.run([*CLI, "validate", str(path)], capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr.strip() == (
        f"error: {path}: wan[0].delay: '25 parsecs' is not a duration; examples: 25ms, 100us, 1.5s"
    )
    assert "Traceback" not in bad.stderr


def test_plan_cli_touches_no_kernel(root, tmp_path):
    # plan runs in a mount namespace of its own whose /run/netns is an empty tmpfs: a namespace it
    # made would be there afterwards, and namespaces other tests make meanwhile (another
    # pytest-xdist worker) are not
    left = tmp_path / "netns-left"
    script = 'mkdir -p /run/netns && mount -t tmpfs plan-check /run/netns && "$@"; rc=$?; '
    script += f'ls -A /run/netns > "{left}"; exit $rc'
    isolated = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"]
    r = subprocess.run(
        [*isolated, *CLI, "plan", "scenarios/quickstart.yaml"],
        capture_output=True,
        text=True,
        env=dict(os.environ),
    )
    assert r.returncode == 0, r.stderr
    assert "east->west" in r.stdout and "bfifo" in r.stdout
    assert left.read_text() == ""


def test_doctor_reports_netem(root):
    from testbed.net import probe as kernel

    r = subprocess.run([*CLI, "doctor"], capture_output=True, text=True, env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    line = next(line for line in r.stdout.splitlines() if "qdisc netem" in line)
    assert ("yes" in line) == kernel.probe().has_qdisc("netem")
    if not kernel.probe().has_qdisc("netem"):
        assert "netem is missing" in r.stdout
        assert "testbed vm -- testbed run" in " ".join(r.stdout.split())


def test_vagrantfile_validates():
    import shutil

    if not shutil.which("vagrant"):
        pytest.skip("vagrant is not installed (apt-get install --no-install-recommends vagrant)")
    r = subprocess.run(["vagrant", "validate", "-p"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


assert RUN_TAG
