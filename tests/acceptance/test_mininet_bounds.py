"""Mininet's own link assertions, re-implemented (parameters and bounds, not code) and run on the
testbed's networks built by both engines (native, mininet), with every link backend this kernel
has (userspace here; kernel where netem exists, else skipped with the reason). Nobody here wrote
these bounds: they come from Mininet's test sources (mininet/test/test_hifi.py,
test_walkthrough.py, examples/test/test_intfoptions.py, test_linearbandwidth.py).

Mininet's tests use h1 - s1 - h2 with a TCLink on each host link, whose ``delay`` applies at both
ends: one link-end delay D gives an RTT of 4 D. Here the same path is two clusters of one host
joined by one WAN link, so a WAN delay of 2 D one way is the same RTT, and the link's ``rate`` is
the path's bottleneck.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import statistics
import subprocess

import pytest
from helpers import skip_without_mininet, unique_name

from testbed.config.loading import parse_scenario
from testbed.live.network import Network
from testbed.net import probe
from testbed.testing.clients import iperf3_goodput, udp_delivered

ENGINES = ["native", "mininet"]
# tclink: Mininet's own TCLink (engine mininet), the reference these bounds were written for
BACKENDS = ["userspace", "kernel", "tclink"]


@pytest.fixture(params=ENGINES)
def engine(request, root) -> str:
    if request.param == "mininet":
        skip_without_mininet()
    return request.param


@pytest.fixture(params=BACKENDS)
def backend(request, root) -> str:
    if request.param in ("kernel", "tclink") and not probe.probe().has_qdisc("netem"):
        pytest.skip(f"backend {request.param}: unsupported on this kernel: netem")
    return request.param


@pytest.fixture
def testbeds():
    made: list[Network] = []

    def make(engine: str, backend: str, wan: list[dict], clusters: int = 2) -> Network:
        if backend == "tclink" and engine != "mininet":
            pytest.skip("backend tclink is Mininet's TCLink: engine mininet only")
        names = [f"c{i}" for i in range(clusters)]
        data = {
            "name": "acceptance",
            "clusters": {c: {"hosts": 1} for c in names},
            "wan": wan,
            "backend": backend,
            "engine": engine,
        }
        tb = Network(parse_scenario(data, "test"), name=unique_name("acc"))
        made.append(tb)
        return tb.up()

    yield make
    for tb in made:
        tb.down()


def wan(rate: str = "1gbit", delay: str | None = None, **more) -> list[dict]:
    link = {"between": ["c0", "c1"], "rate": rate, **more}
    return [link | ({"delay": delay} if delay else {})]


def ping(tb: Network, count: int, interval: float = 0.2, src="c0-h0", dst="c1-h0") -> dict:
    """ping's summary: sent, received, rtt min/avg/max in ms (None when none came back)."""
    r = tb.run(src, ["ping", "-c", str(count), "-i", str(interval), "-W", "1", dst], timeout=60)
    sent, got = map(int, re.search(r"(\d+) packets transmitted, (\d+) received", r.stdout).groups())
    m = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)/", r.stdout)
    rtt = tuple(map(float, m.groups())) if m else (None, None, None)
    return {"sent": sent, "received": got, "min": rtt[0], "avg": rtt[1], "max": rtt[2]}


def warm_arp(tb: Network) -> None:
    """Resolve the path's neighbours before measuring RTTs, as Mininet's delay tests do with
    ``autoStaticArp=True``: otherwise the first ping also waits for ARP across the delayed link
    (measured in a guest on TCLink: 123 ms for 60 configured)."""
    ping(tb, 1)


def emulated_rtt_ms(tb: Network) -> float:
    """What the emulators add over the round trip (ms). A TCLink's netem adds its configured
    delay on top of the path, so Mininet's lower bounds are the configured RTT; the testbed's
    delay is host to host: its emulators add the configured delay less the path floor its
    calibration measured (``tb.compensation``), and the RTT lands on either side of the
    configured one by that measurement's error (ping avg 39.93-40.17 ms for 40 configured)."""
    taken = sum(c.compensation_s for c in tb.compensation)
    return (sum(d.delay for d in tb.plan.wan) - taken) * 1e3


def iperf(tb: Network, seconds: int, dst: str = "c1-h0") -> float:
    return iperf3_goodput(tb, "c0-h0", dst, seconds)


def within(measured: float, expected: float, tolerance: float) -> bool:
    """Mininet's assertWithinTolerance: [f x expected, expected + (1 - f) x expected]."""
    return tolerance * expected <= measured <= expected + (1 - tolerance) * expected


# -- mininet/test/test_hifi.py ----------------------------------------------------------------
@pytest.mark.timing
def test_link_bandwidth(engine, backend, testbeds):
    """testLinkBandwidth: bw 5 Mbit/s, iperf server rate within 80% tolerance: 4..6 Mbit/s."""
    tb = testbeds(engine, backend, wan(rate="5mbit"))
    rate = iperf(tb, 3)
    # Mininet's bound: 4..6 Mbit/s. The ceiling is 5 x GOODPUT_FACTOR = 4.78 (4 is 84% of it);
    # bytes over 3 s with slow start in (sub-ms RTT: over in a few ms; 64 KiB = 0.17 Mbit/s,
    # the 0.78 Mbit/s to 4 are 4.5 steps). No RESULTS.md spread at 5 Mbit/s.
    assert within(rate / 1e6, 5, 0.8), rate


@pytest.mark.timing
def test_link_delay(engine, backend, testbeds):
    """testLinkDelay: 15 ms per link end (RTT 60 ms), 3 reps: nothing lost, min, avg and max
    RTT each within 80% tolerance of 60 ms (48..72 ms)."""
    tb = testbeds(engine, backend, wan(delay="30ms"))
    warm_arp(tb)
    for _ in range(3):
        p = ping(tb, 1)
        assert p["received"] == p["sent"] == 1, p
        # Mininet's 48..72 ms; one ping, its summary in us; compensated RTT -0.15..+0.12 ms
        # (RESULTS.md "Link fidelity"): the bound is 40x wider than the spread
        assert all(within(p[k], 60, 0.8) for k in ("min", "avg", "max")), p


def test_link_loss(engine, backend, testbeds):
    """testLinkLoss: 99% loss; a ping loses something."""
    tb = testbeds(engine, backend, wan(loss="99%"))
    p = ping(tb, 10, interval=0.05)  # all 10 back: < 0.01^10, whatever the interval
    assert p["received"] < p["sent"], p


# -- mininet/test/test_walkthrough.py -----------------------------------------------------------
@pytest.mark.timing
def test_link_change(engine, backend, testbeds):
    """testLinkChange (`mn --link tc,bw=10,delay=10ms`): TCP 9.0 < bw < 10.1 Mbit/s and ping
    avg RTT 40..50 ms (2 links x 2 ends x 10 ms); the lower bound is what the emulators add
    (:func:`emulated_rtt_ms`: 40 ms on a TCLink, 40 ms less the measured floor here)."""
    tb = testbeds(engine, backend, wan(rate="10mbit", delay="20ms"))
    warm_arp(tb)
    p = ping(tb, 4)
    # lower: the emulators' share (never early: the path adds its floor on top); upper: Mininet's
    # 50 ms. avg of 4 pings (us); RESULTS.md "One link, four tools": ping p50 39.90-40.10 ms.
    assert p["received"] == 4 and emulated_rtt_ms(tb) <= p["avg"] <= 50, (p, tb.compensation)
    rate = iperf(tb, 3)
    # Mininet's bounds. The ceiling is 10 x GOODPUT_FACTOR = 9.56 Mbit/s: 9.0 is 94% of it, and
    # 3 s of iperf3 with slow start in (no omit; ~0.15 Mbit/s lost in the first 2 RTTs at 40
    # ms) resolve 64 KiB / 3 s = 0.17 Mbit/s. Measured here (native, fresh bring-ups, load 10):
    # 3 s 9.446-9.471 Mbit/s over 8 runs (5 s: 9.468-9.508): 9.0 is 2.6 steps and 18 spreads
    # below the lowest. 10.1 admits a 5.6% leak.
    assert 9.0e6 < rate < 10.1e6, rate


# -- examples/test/test_intfoptions.py (tolerance 25%, "for cloud CI tests") -----------------------
@pytest.mark.timing
def test_runtime_reconfiguration_of_one_direction(engine, backend, testbeds):
    """config(bw=10) -> TCP within 7.5..12.5 Mbit/s; config(loss=50) -> UDP 10M delivered
    37.5..62.5%; config(delay='15ms') on one interface -> RTT avg 11.25..18.75 ms. Here: the
    running testbed's backend changes one WAN direction in place (set_rate, set_impairments);
    the link starts at 1 Gbit/s with 1 ms so that its delay line exists."""
    if backend == "tclink":
        pytest.skip("a TCLink changes through Mininet's intf.config(), not the testbed's backend")
    tb = testbeds(engine, backend, wan(delay="1ms"))
    fwd, rev = (d.name for d in tb.plan.wan)
    d = tb.plan.wan[0]
    tb.backend.set_rate({fwd: (10_000_000, d.buffer)})
    rate = iperf(tb, 2)
    # Mininet's 25% around 10 Mbit/s; ceiling 9.56, bytes over 2 s (64 KiB = 0.26 Mbit/s: the
    # 2 Mbit/s to 7.5 are 8 steps; slow start at the 2 ms RTT is over in ~20 ms)
    assert 7.5e6 <= rate <= 12.5e6, rate
    tb.backend.set_rate({fwd: (d.rate, d.buffer)})
    lossy = dataclasses.replace(d.impairment, loss=0.5)
    tb.backend.set_impairments({fwd: lossy})
    delivered = udp_delivered(tb, "c0-h0", "c1-h0", "10M", 2)
    # Mininet's 25% around 50%; ~1 700 datagrams in 2 s at 10 Mbit/s: binomial sd
    # sqrt(0.25 / 1700) = 1.2%, so the 12.5% either side is 10 sd; a count
    assert 0.375 <= delivered <= 0.625, delivered
    back = tb.plan.wan[1]
    tb.backend.set_impairments(
        {
            fwd: dataclasses.replace(d.impairment, loss=0.0, delay=0.015),
            rev: dataclasses.replace(back.impairment, delay=0.0),
        }
    )
    p = ping(tb, 5)
    # Mininet's 25% around 15 ms; set without the compensation, so 15 ms + the path's floor
    # (raw +0.31..+0.36 ms, RESULTS.md "Link fidelity"), ping avg of 5 (us)
    assert p["received"] == 5 and 11.25 <= p["avg"] <= 18.75, p


# -- examples/test/test_linearbandwidth.py ------------------------------------------------------
# measured 38-39 s at load 16-26 on 2 cores (one bring-up, 8 runs of 3 s; each iperf3 also
# spends ~10 RTTs setting up and reporting); 53-54 s in full-suite runs with 4 bring-ups and 8
# runs of 5 s: 4x and more for a busy host
@pytest.mark.timeout(160)
@pytest.mark.timing
def test_bandwidth_decreases_with_hop_count(engine, backend, testbeds):
    """linearbandwidth: bw 100 Mbit/s, delay 30 ms per link, reno, iperf across 1 to 4
    switches (2 to 5 links: 30 ms one way each): the bandwidth strictly decreases as the hop
    count grows. Here one chain of 6 clusters joined by 5 WAN links of 100 Mbit/s and 30 ms,
    reno, iperf from the first cluster to the third to sixth (2 to 5 links), the traffic
    transiting the clusters between the ends; each link's buffer is what Mininet's TCLink gives
    without max_queue_size (netem's default limit, 1000 packets).

    Each hop count is measured twice and the means compared. A reno run is decided by slow
    start and its loss episode, which now and then ends with a larger window: Mininet's 5-s
    runs overlapped (across 4 links a CI run and 1 of 34 runs here measured 57.7 Mbit/s, the
    other 33 gave 39-43; 3 links 55-60, once 69.8). 3-s runs end closer to slow start, whose
    ramp is slower the longer the RTT, and separate better: 18 rounds here on a loaded host
    (load 12-40; 10 native, 8 mininet) gave 2 links 62.7-70.9 Mbit/s (mean 68.5, sd 2.6), 3
    links 41.7-54.6 (48.5, 3.3), 4 links 28.4-35.4 (31.2, 1.8), 5 links 13.2-23.3 (17.4, 3.7)
    and once 28.5 (mininet: a slow-start loss episode ending with a larger window)."""
    chain = [
        {"between": [f"c{i}", f"c{i + 1}"], "rate": "100mbit", "delay": "30ms",
         "buffer": f"{1000 * 1514}B"}
        for i in range(5)
    ]  # fmt: skip
    # one chain c0 - c1 - ... - c5 for every hop count: c0-h0 to c{hops}-h0 crosses hops links
    # (the shortest path), the links past c{hops} idle, as a chain of hops links would be
    tb = testbeds(engine, backend, chain, clusters=6)
    subprocess.run(  # the sender's default congestion control (its namespace's sysctl)
        [
            "ip", "netns", "exec", tb.namespace("c0-h0"), "sysctl", "-q",
            "net.ipv4.tcp_congestion_control=reno",
        ],
        check=True,
    )  # fmt: skip
    runs: dict[int, list[float]] = {hops: [] for hops in range(2, 6)}
    for _ in range(2):  # the rounds interleaved: a load spike hits a run of each hop count
        for hops in runs:
            runs[hops].append(iperf(tb, 3, dst=f"c{hops}-h0"))
    rates = [statistics.mean(r) for r in runs.values()]
    print([f"{r / 1e6:.1f}" for r in rates])
    # an ordering, not a tolerance: its margin is the gap between hop counts against their
    # spread. 3-s runs (docstring): adjacent means 20.0 / 17.3 / 13.8 Mbit/s apart, the sd of
    # a difference of two 2-run means sqrt((sd_a^2 + sd_b^2) / 2) = 3.0 / 2.7 / 2.9: 6.7 / 6.5
    # / 4.7 sd. A single run crossed once (5 links 28.5 vs 4 links 28.4, of other rounds); the
    # means of 2 did not: the two highest 5-link runs (25.9) stay below the two lowest 4-link
    # ones (28.45). Bytes over 3 s resolve 64 KiB / 3 s = 0.17 Mbit/s.
    assert all(a > b for a, b in itertools.pairwise(rates)), rates
