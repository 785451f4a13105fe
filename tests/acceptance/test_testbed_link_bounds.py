"""Mininet's own link assertions on Mininet's own topology with the project's ``TestbedLink`` in
place of ``TCLink`` (``Mininet(topo, link=TestbedLink)``, as a user's script would): h1 - s1 - h2
with the link parameters on both host links, a LinuxBridge switch in a namespace of its own.
Bounds from Mininet's test sources, as in test_mininet_bounds.py (test_hifi testLinkBandwidth,
testLinkDelay, testLinkLoss; test_walkthrough testLinkChange). A TestbedLink's ``delay`` applies
once per direction, as a TCLink's applies once per interface: two links of delay D give an RTT
of 4 D either way."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from helpers import skip_without_mininet

from testbed.net import procs


@pytest.fixture
def single_switch(root):
    """``make(**link_params)``: a started h1 - s1 - h2 network of TestbedLinks, stopped after."""
    skip_without_mininet()
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.nodelib import LinuxBridge
    from mininet.topo import Topo

    from testbed.mininet import TestbedLink

    class SingleSwitch(Topo):
        def build(self, **link_params):  # type: ignore[override]
            s1 = self.addSwitch("s1", inNamespace=True)  # nothing in the initial namespace
            for h in ("h1", "h2"):
                self.addLink(self.addHost(h), s1, **link_params)

    setLogLevel("warning")
    nets = []

    def make(**link_params):
        net = Mininet(
            topo=SingleSwitch(**link_params), link=TestbedLink, switch=LinuxBridge,
            controller=None, autoStaticArp=True,
        )  # fmt: skip
        nets.append(net)
        net.start()
        return net

    yield make
    for net in nets:
        net.stop()


def within(measured: float, expected: float, fraction: float) -> bool:
    """Mininet's assertWithinTolerance: [f x expected, expected + (1 - f) x expected]."""
    return fraction * expected <= measured <= expected + (1 - fraction) * expected


def iperf_mbit(net, seconds: int = 5) -> float:
    h1, h2 = net.get("h1", "h2")
    argv = ["iperf3", "-s", "-1", "-p", "5202", "--forceflush"]
    server = h2.popen(argv, stdout=subprocess.PIPE, text=True)
    with procs.ready(server, "iperf3 server on h2", "Server listening", substring=True):
        out = h1.cmd(f"iperf3 -c {h2.IP()} -p 5202 -t {seconds} -J")
    return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e6


def ping(net, count: int, interval: float = 0.2) -> dict:
    h1, h2 = net.get("h1", "h2")
    out = h1.cmd(f"ping -c {count} -i {interval} -W 1 {h2.IP()}")
    sent, got = map(int, re.search(r"(\d+) packets transmitted, (\d+) received", out).groups())
    m = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)/", out)
    rtt = dict(zip(("min", "avg", "max"), map(float, m.groups()), strict=True)) if m else {}
    return {"sent": sent, "received": got, **rtt}


@pytest.mark.timing
def test_link_bandwidth(single_switch):
    """testLinkBandwidth: bw 5 Mbit/s, iperf rate within 80% tolerance: 4..6 Mbit/s."""
    rate = iperf_mbit(single_switch(bw=5), 3)
    # Mininet's 4..6; the ceiling is 5 x 1448/1514 = 4.78 (4 is 84% of it); bytes over 3 s with
    # slow start in (sub-ms RTT: over in a few ms; 64 KiB = 0.17 Mbit/s, the 0.78 Mbit/s to 4
    # are 4.5 steps); no RESULTS.md spread at 5 Mbit/s
    assert within(rate, 5, 0.8), rate


@pytest.mark.timing
def test_link_delay(single_switch):
    """testLinkDelay: delay 15 ms on each link, one ping within 80% tolerance of 4 x 15 ms."""
    p = ping(single_switch(delay="15ms"), 1)
    assert p["received"] == p["sent"] == 1, p
    # Mininet's 48..72; TestbedLink is not compensated: 60 ms + two lines' floors each way
    # (~0.4 ms a line, RESULTS.md "Engines", Mininet + TestbedLink); ping's summary is in us
    assert all(within(p[k], 60, 0.8) for k in ("min", "avg", "max")), p


def test_link_loss(single_switch):
    """testLinkLoss: loss 99% on each link, some of 10 pings are lost."""
    p = ping(single_switch(loss=99), 10, 0.05)  # all 10 back: < 0.01^10, whatever the interval
    assert p["received"] < p["sent"], p


@pytest.mark.timing
def test_link_change(single_switch):
    """testLinkChange (`mn --link tc,bw=10,delay=10ms`): TCP 9.0 < bw < 10.1 Mbit/s and ping
    RTT avg within 40..50 ms."""
    net = single_switch(bw=10, delay="10ms")
    p = ping(net, 4)
    # Mininet's 40..50: 40 ms + the lines' floors (~0.8 ms, uncompensated: never below 40)
    assert p["received"] == 4 and 40 <= p["avg"] <= 50, p
    rate = iperf_mbit(net)
    # Mininet's: the ceiling 9.56 Mbit/s, 9.0 is 94% of it; 5 s of iperf3 with slow start in
    # at 40 ms RTT (~0.1 Mbit/s) resolves 0.1 Mbit/s: ~4 steps of margin; 10.1 admits 5.6%
    assert 9.0 < rate < 10.1, rate
