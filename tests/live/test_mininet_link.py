"""Live tests of ``testbed.mininet`` in Mininet scripts as a user writes them:
``TestbedLink`` per direction, its errors, nothing left after ``net.stop()`` or after the script
is killed (``testbed clean``), and ``topo_from_scenario``."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import textwrap

import pytest
from helpers import (
    kill_owner,
    owner_script,
    root_namespace_state,
    skip_without_mininet,
    testbed_clean,
)

from testbed.core.errors import ScenarioError, UnsupportedError
from testbed.core.frames import GOODPUT_FACTOR
from testbed.net import procs, registry

pytestmark = pytest.mark.live


@pytest.fixture
def net(root):
    """An empty Mininet network (no controller, no switch), stopped whatever the test does."""
    skip_without_mininet()
    from mininet.log import setLogLevel
    from mininet.net import Mininet

    setLogLevel("warning")
    network = Mininet(topo=None, build=False, controller=None)
    try:
        yield network
    finally:
        network.stop()


def rtt_avg_ms(out: str) -> float:
    m = re.search(r"= [\d.]+/([\d.]+)/", out)
    assert m, out
    return float(m.group(1))


def mine() -> list[registry.Record]:
    return [r for r in registry.records() if r.name == f"mininet-{os.getpid()}"]


@pytest.mark.timing
def test_a_testbed_link_emulates_each_direction_and_leaves_nothing(net):
    from testbed.mininet import TestbedLink

    before = root_namespace_state()
    h1 = net.addHost("h1", ip="10.0.0.1/24")
    h2 = net.addHost("h2", ip="10.0.0.2/24")
    link = net.addLink(
        h1, h2, cls=TestbedLink, bw=20, delay="10ms", reverse={"bw": 20, "delay": "5ms"}
    )
    net.build()
    (rec,) = mine()
    assert link.wire in rec.namespaces and link.wire.startswith(rec.prefix)
    out = h1.cmd("ping -c 10 -i 0.2 10.0.0.2")
    # TestbedLink is not compensated: 15 ms + the line's floor, never below 15 (EARLY_SLACK 0).
    # RESULTS.md "Engines", Mininet + TestbedLink: +0.40 ms; ping's avg of 10 prints us. ARP is
    # not IP (no NFQUEUE): the first ping adds ~0.1 ms. 3 ms above is ~7x the floor.
    assert 15.0 <= rtt_avg_ms(out) <= 18.0, out  # 10 ms there, 5 ms back, the line's floor
    argv = ["iperf3", "-s", "-1", "-p", "5201", "--forceflush"]
    server = h2.popen(argv, stdout=subprocess.PIPE, text=True)
    with procs.ready(server, "iperf3 server on h2", "Server listening", substring=True):
        report = json.loads(h1.cmd("iperf3 -c 10.0.0.2 -p 5201 -t 2 -O 1 -J"))
    goodput = report["end"]["sum_received"]["bits_per_second"]
    # lower: 1 - SELFCHECK_TOLERANCE of the ceiling (20 Mbit/s x GOODPUT_FACTOR = 19.1); upper:
    # 1.02 x rate = 1.067 x the ceiling, looser than SELFCHECK_LEAK (1.01). Bytes over 2 s after
    # 1 s omitted (slow start at 15 ms RTT: ~0.1 s; 64 KiB = 0.26 Mbit/s, 1.4% of the ceiling:
    # the 6.5% below the lowest reading are ~5 steps); RESULTS.md "Engines", Mininet +
    # TestbedLink: 96.5-97.8% of ceiling.
    assert 0.9 * 20e6 * GOODPUT_FACTOR <= goodput <= 1.02 * 20e6, goodput
    stats = {s["name"]: s for s in link.stats()}
    assert set(stats) == {"n1->n2", "n2->n1"}, stats
    assert root_namespace_state() == before  # everything is in the wire namespace
    pids = [pid for pid, _, what in rec.processes if what.startswith("delay line")]
    assert pids
    net.stop()
    assert registry.namespaces_with_prefix(rec.prefix) == []
    assert not rec.path.exists() and not (registry.STATE_DIR / rec.prefix).exists()
    assert all(registry.process_start(pid) is None for pid in pids)


def test_testbed_link_errors_name_the_keyword_and_what_is_allowed(net):
    from testbed.mininet import TestbedLink

    h1, h2 = net.addHost("h1"), net.addHost("h2")
    cases = [
        ({"delay": 10}, "delay: 10 is not a duration string; examples: '10ms'"),
        ({"bw": "fast"}, "bw: 'fast' is not a rate in Mbit/s"),
        ({"loss": 120}, "loss: 120 is not a percentage"),
        ({"speedup": 2}, "unknown keyword 'speedup'; allowed: bw, delay"),
        ({"delay": "10 parsecs"}, "TestbedLink(h1, h2): delay:"),
        ({"max_queue_size": 100, "buffer": "1bdp"}, "max_queue_size (packets) or buffer"),
        ({"reverse": {"bw": -1}}, "TestbedLink(h1, h2): reverse: bw: -1"),
        ({"aqm": {"kind": "codel"}}, "aqm.kind: 'codel' is not allowed"),
    ]
    for params, text in cases:
        with pytest.raises(ScenarioError) as err:
            net.addLink(h1, h2, cls=TestbedLink, **params)
        assert text in str(err.value), (params, str(err.value))
    assert mine() == []  # nothing claimed by a link that never was


def test_the_kernel_backend_is_refused_where_netem_is_missing(net):
    from testbed.mininet import TestbedLink
    from testbed.net.probe import probe

    if probe().has_qdisc("netem"):
        pytest.skip("this kernel has sch_netem: the kernel backend runs here")
    h1, h2 = net.addHost("h1"), net.addHost("h2")
    with pytest.raises(UnsupportedError, match="unsupported on this kernel: netem"):
        net.addLink(h1, h2, cls=TestbedLink, delay="5ms", backend="kernel")
    assert mine() == []


SCRIPT = """
    import os, sys, time
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from testbed.mininet import TestbedLink
    setLogLevel("warning")
    net = Mininet(topo=None, build=False, controller=None)
    h1, h2 = net.addHost("h1", ip="10.0.0.1/24"), net.addHost("h2", ip="10.0.0.2/24")
    link = net.addLink(h1, h2, cls=TestbedLink, bw=50, delay="5ms")
    net.build()
    print("READY", link.wire, h1.pid, h2.pid, flush=True)
    time.sleep(600)
"""


def test_a_killed_script_leaves_what_testbed_clean_removes(root):
    skip_without_mininet()
    shells: list[int] = []
    try:
        with owner_script(SCRIPT, 60) as (proc, (wire, *pids)):
            shells = [int(p) for p in pids]
            prefix = wire.rsplit("-", 1)[0]
            (rec,) = [r for r in registry.records() if r.prefix == prefix]
            lines = [pid for pid, _, what in rec.processes if what.startswith("delay line")]
            kill_owner(proc)
            assert registry.namespaces_with_prefix(prefix) == [wire]  # a leftover now
            testbed_clean()
            assert registry.namespaces_with_prefix(prefix) == []
            assert not rec.path.exists()
            assert all(registry.process_start(pid) is None for pid in lines)
    finally:
        for pid in shells:  # Mininet's own node shells: the script's, ended by their pids
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.timing
def test_topo_from_scenario_builds_the_clusters_and_the_wan(root, tmp_path):
    skip_without_mininet()
    from mininet.log import setLogLevel
    from mininet.net import Mininet

    from testbed.mininet import topo_from_scenario

    (tmp_path / "bad.yaml").write_text(
        "name: x\nclusters: {a: {hosts: 1}, b: {hosts: 1}}\nwan: [{between: [a, b], delay: 5}]\n"
    )
    with pytest.raises(ScenarioError, match=r"bad\.yaml: wan\[0\]\.delay"):
        topo_from_scenario(tmp_path / "bad.yaml")
    path = tmp_path / "s.yaml"
    path.write_text(
        textwrap.dedent(
            """
            name: mn-topo
            clusters: {east: {hosts: 2}, west: {hosts: 1}, south: {hosts: 1}}
            wan:
              - {between: [east, west], rate: 100mbit, delay: 10ms}
              - {between: [west, south], rate: 100mbit, delay: 5ms, reverse: {delay: 2ms}}
            workload: {kind: collectives, sizes: [1MiB]}
            """
        )
    )
    setLogLevel("warning")
    topo = topo_from_scenario(path)
    assert topo.left_out == ["workload"]
    net = Mininet(topo=topo, controller=None)
    try:
        net.start()
        names = sorted(n.name for n in net.hosts)
        assert names == ["east_gw", "east_h0", "east_h1", "south_gw", "south_h0", "west_gw",
                         "west_h0"]  # fmt: skip
        east, south = net.get("east_h1"), net.get("south_h0")
        out = east.cmd(f"ping -c 6 -i 0.2 {south.IP()}")
        # east -> west -> south: 10 + 5 ms there, 2 + 10 ms back
        # 27 ms + two uncompensated lines' floors (2 x ~0.4 ms, RESULTS.md "Engines", Mininet +
        # TestbedLink), never early; avg of 6 pings (us); 3.5 ms above is ~4x those floors
        assert 27.0 <= rtt_avg_ms(out) <= 30.5, out
    finally:
        net.stop()
    assert mine() == []
