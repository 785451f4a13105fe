"""WAN dynamics and faults on real namespaces, with real TCP between testbed hosts: blackhole,
reset, link down, gateway crash (``testbed.net.faults``), rate and delay changes and burst loss
(the link backend's ``set_rate`` / ``set_impairments``).

The flows are made by this process: their sockets are created inside the hosts' namespaces (a
socket stays in the namespace it was made in), so the test reads the sender's ``tcp_info`` and
every receive time directly. They run on whichever backend ``auto`` picks (the userspace delay
line on kernels without netem); the netem side of the same changes is in
test_kernel_backend.py (run inside `testbed vm`). Bounds are behaviour with honest tolerances
for a busy 2-core machine, not timing targets; each test prints what it measured.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import socket
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import delay_steps, hold_and_release, scenario, unique_name

from testbed.config.loading import parse_scenario
from testbed.core.frames import GOODPUT_FACTOR
from testbed.live.network import Network
from testbed.live.selfcheck import probe_rtt
from testbed.net import netns
from testbed.net.faults import FaultOps
from testbed.plan.render import rate_change_lines
from testbed.plan.sizing import bdp_bytes
from testbed.trace.tcp import parse_tcp_info

pytestmark = pytest.mark.live

CHUNK = 1 << 16
PORTS = iter(range(47000, 48000))


class Flow:
    """One bulk TCP connection ``src`` -> ``dst`` made from this process: a sender thread writes
    until stopped (or its first error), a receiver thread records (monotonic time, total bytes)
    at every read."""

    def __init__(self, tb: Network, src: str, dst: str) -> None:
        port, addr = next(PORTS), tb.hosts[dst]

        def listener() -> socket.socket:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((addr, port))
            s.listen(1)
            return s

        srv, self.sock = netns.run_in(
            [
                (tb.namespace(dst), listener),
                (tb.namespace(src), lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM)),
            ]
        )
        with srv:
            srv.settimeout(10)
            self.sock.settimeout(10)
            self.sock.connect((addr, port))
            self.conn, _ = srv.accept()
        self.sock.settimeout(None)
        self.conn.settimeout(60)
        self.arrivals: list[tuple[float, int]] = []
        self.send_error: tuple[float, BaseException] | None = None
        self.recv_error: tuple[float, BaseException] | None = None
        self.stopping = False
        self._threads = [
            threading.Thread(target=self._send, daemon=True),
            threading.Thread(target=self._recv, daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _send(self) -> None:
        data = memoryview(bytes(CHUNK))
        try:
            while not self.stopping:
                self.sock.sendall(data)
        except OSError as e:
            if not self.stopping:
                self.send_error = (time.monotonic(), e)

    def _recv(self) -> None:
        buf = bytearray(CHUNK)
        total = 0
        try:
            while True:
                n = self.conn.recv_into(buf)
                if not n:
                    return
                total += n
                self.arrivals.append((time.monotonic(), total))
        except OSError as e:
            if not self.stopping:
                self.recv_error = (time.monotonic(), e)

    def info(self) -> dict[str, Any]:
        return parse_tcp_info(self.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256))

    def received(self) -> int:
        return self.arrivals[-1][1] if self.arrivals else 0

    def goodput(self, t0: float, t1: float) -> float:
        """bit/s of payload that arrived between monotonic ``t0`` and ``t1``."""
        inside = [(t, b) for t, b in self.arrivals if t0 <= t <= t1]
        if len(inside) < 2:
            return 0.0
        (ta, ba), (tb_, bb) = inside[0], inside[-1]
        return (bb - ba) * 8 / (tb_ - ta)

    def max_gap(self, since: float) -> tuple[float, float]:
        """The longest time without data after ``since``: (gap, when it ended)."""
        times = [t for t, _ in self.arrivals if t >= since]
        gaps = [(b - a, b) for a, b in itertools.pairwise(times)]
        return max(gaps) if gaps else (0.0, since)

    def wait_resumed(self, after: float, timeout: float) -> float | None:
        """The first arrival after monotonic ``after`` (waiting up to ``timeout`` s)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            later = [t for t, _ in self.arrivals[-50:] if t > after]
            if later:
                return next(t for t, _ in self.arrivals if t > after)
            time.sleep(0.01)
        return None

    def close(self) -> None:
        self.stopping = True
        for s in (self.sock, self.conn):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        for t in self._threads:
            t.join(timeout=5)


@pytest.fixture
def flows() -> Iterator[list[Flow]]:
    made: list[Flow] = []
    yield made
    for f in made:
        f.close()


def up(data: dict) -> Network:
    return Network(parse_scenario(data, "test"), name=unique_name()).up()


@pytest.fixture(scope="module")
def line3() -> Iterator[Network]:
    """east - mid - west, one host each: east-mid 100 Mbit/s 10 ms, mid-west 100 Mbit/s 5 ms."""
    if os.geteuid() != 0:
        pytest.skip("needs root: network namespaces and qdiscs")
    data = scenario(
        clusters={"east": {"hosts": 1}, "mid": {"hosts": 1}, "west": {"hosts": 1}},
        wan=[
            {"between": ["east", "mid"], "rate": "100mbit", "delay": "10ms"},
            {"between": ["mid", "west"], "rate": "100mbit", "delay": "5ms"},
        ],
    )
    tb = up(data)
    try:
        yield tb
    finally:
        tb.down()


def gateway_routes(tb: Network) -> dict[str, set[tuple[str, str]]]:
    """Gateway namespace -> its routes with a next hop, as (destination, next hop)."""
    out = {}
    for g in tb.plan.gateways:
        shown = subprocess.run(
            ["ip", "-n", g.ns, "-j", "route", "show"], capture_output=True, text=True, check=True
        ).stdout
        out[g.ns] = {(r["dst"], r["gateway"]) for r in json.loads(shown) if "gateway" in r}
    return out


def planned_routes(tb: Network) -> dict[str, set[tuple[str, str]]]:
    return {
        g.ns: {(r.dst, r.via) for r in tb.plan.routes if r.ns == g.ns} for g in tb.plan.gateways
    }


def backlog(ns: str, dev: str) -> int:
    """Bytes queued in the root qdisc of ``dev`` now."""
    shown = subprocess.run(
        ["tc", "-n", ns, "-s", "-j", "qdisc", "show", "dev", dev],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sum(q.get("backlog", 0) for q in json.loads(shown) if q.get("root"))


# --------------------------------------------------------------------------------- blackhole


@pytest.mark.timing
def test_a_2s_blackhole_stalls_tcp_for_the_rto_series_then_it_resumes(flows):
    """A silent drop of both directions: TCP backs off (RTO doubling) and the flow resumes at
    the first retransmission after the blackhole, not when it ends."""
    if os.geteuid() != 0:
        pytest.skip("needs root: network namespaces and qdiscs")
    tb = up(scenario(wan=[{"between": ["east", "west"], "rate": "50mbit", "delay": "40ms"}]))
    try:
        ops = FaultOps(tb.plan)
        ops.prepare()  # the rules in place: the blackhole is then one rtnetlink request
        flow = Flow(tb, "east-h0", "west-h0")
        flows.append(flow)
        time.sleep(3.0)  # past slow start: the RTT estimate includes the flow's queue
        before = flow.info()
        rto0 = before["rto"] / 1e6
        both = ["east->west", "west->east"]
        t_on = time.monotonic()
        ops.blackhole(both, True)
        applied = time.monotonic() - t_on
        # the sender's retransmissions as they happen: when its counter grows (10 ms steps)
        probes, seen = [], before["total_retrans"]
        while time.monotonic() < t_on + 2.0:
            now_retrans = flow.info()["total_retrans"]
            if now_retrans > seen:
                probes.append(round(time.monotonic() - t_on, 2))
                seen = now_retrans
            time.sleep(0.01)
        t_off = time.monotonic()
        ops.blackhole(both, False)
        resumed = flow.wait_resumed(t_off, timeout=12.0)
        assert resumed is not None, "the flow never resumed"
        time.sleep(1.0)
        after = flow.info()
        stall, _ = flow.max_gap(t_on - 0.5)
        blackhole = t_off - t_on
        # the probes go at rto0 x (2^k - 1) after the last ACK; the first one after the
        # blackhole gets through
        k = next(k for k in range(1, 12) if rto0 * (2**k - 1) >= blackhole)
        predicted, next_step = rto0 * (2**k - 1), rto0 * (2 ** (k + 1) - 1)
        retrans = after["total_retrans"] - before["total_retrans"]
        # With new data to send, a tail loss probe (new data, not a retransmission) goes first
        # at 2 x SRTT and the RTO is armed from it: the series then starts that much later.
        pto = 2 * before["rtt"] / 1e6
        j = next(j for j in range(1, 12) if pto + rto0 * (2**j - 1) >= blackhole)
        with_tlp = pto + rto0 * (2**j - 1)
        print(
            f"blackhole {blackhole:.3f} s (on in {applied * 1e3:.1f} ms), rto0 {rto0 * 1e3:.0f} "
            f"ms (srtt {before['rtt'] / 1e3:.0f} ms): stall {stall:.3f} s, predicted "
            f"{predicted:.3f} s (probe {k}; {with_tlp:.3f} s after a tail loss probe), next "
            f"step {next_step:.3f} s, resumed "
            f"{resumed - t_off:.3f} s after the end, retransmissions +{retrans}; retransmissions"
            f" seen during the blackhole at {probes} s"
        )
        assert flow.send_error is None and flow.recv_error is None
        # what was in flight and queued still arrives (~ one way + queue), so the gap starts
        # a little after the blackhole; it ends with a probe, never before the blackhole does.
        # Lead: one way (40 ms) + a 1-BDP queue (80 ms at 50 Mbit/s) = 0.12 s <= 0.3 s; arrivals
        # are stamped per recv of <= 64 KiB (10.5 ms at 50 Mbit/s); next_step is the kernel's RTO
        # series (rto0 from tcp_info, us) one doubling on. No RESULTS.md table for this link.
        assert blackhole - 0.3 <= stall <= next_step, (stall, predicted)
        # stall >= predicted + one way - that 0.12 s lead = predicted - 0.08 s, so a probe >= 0.2 s
        # after the end leaves >= 0.12 s: 0.02 s (two recv stamps) above the 0.1 s asked
        assert stall > blackhole + 0.1 or predicted - blackhole < 0.2  # not the blackhole alone
        assert retrans >= k
        assert flow.goodput(resumed + 0.3, time.monotonic()) > 0  # data flows again
    finally:
        for f in flows:
            f.close()
        tb.down()


# ------------------------------------------------------------------------------------ reset


@pytest.mark.timing
def test_reset_gives_an_established_sender_econnreset_within_1s(line3, flows):
    ops = FaultOps(line3.plan)
    flow = Flow(line3, "east-h0", "mid-h0")
    flows.append(flow)
    time.sleep(0.5)
    t_on = time.monotonic()
    try:
        ops.reset("east-mid", True)
        deadline = t_on + 3.0
        while time.monotonic() < deadline and not (flow.send_error or flow.recv_error):
            time.sleep(0.005)
    finally:
        ops.reset("east-mid", False)
    errors = [e for e in (flow.send_error, flow.recv_error) if e]
    assert errors, "no error within 3 s of the reset"
    first = min(errors, key=lambda e: e[0])
    print(f"reset: {type(first[1]).__name__} ({first[1]}) {first[0] - t_on:.3f} s after")
    assert isinstance(first[1], ConnectionResetError), first
    # expected: the rules' install (one iptables-restore, 10.5 ms p50 / 25 ms p99, RESULTS.md
    # "Measurements moved from docstrings") + one RTT with a 1-BDP queue (40 ms) + the 5 ms poll;
    # RESULTS.md "WAN faults" read 2.2-24 ms. 1 s is ~14x that 70 ms (a busy host's wake-ups).
    assert first[0] - t_on < 1.0
    # the reset rule's counters: this link's directions, apart from any queue drop
    counted = {r["direction"]: r for r in ops.fault_drops()}
    assert set(counted) == {d.name for d in line3.plan.wan if "mid" in d.name and "east" in d.name}
    assert sum(r["fault_reset_packets"] for r in counted.values()) >= 1, counted
    # once the window is over, a new connection crosses the link
    again = Flow(line3, "east-h0", "mid-h0")
    flows.append(again)
    assert again.wait_resumed(time.monotonic() - 1, timeout=3.0) is not None


# -------------------------------------------------------------------------------- link down


@pytest.mark.timing
def test_link_down_is_survived_and_its_routes_come_back(line3, flows):
    ops = FaultOps(line3.plan)
    assert gateway_routes(line3) == planned_routes(line3)
    flow = Flow(line3, "east-h0", "west-h0")  # over both links: east's route to west too
    flows.append(flow)
    time.sleep(1.0)
    before = flow.info()
    t_down = time.monotonic()
    try:
        op = ops.link("east-mid", False)
        during = gateway_routes(line3)
        time.sleep(2.0)
    finally:
        t_up = time.monotonic()
        op_up = ops.link("east-mid", True)
    resumed = flow.wait_resumed(t_up, timeout=10.0)
    print(f"link down: {op}\nlink up: {op_up}")
    assert resumed is not None, "the flow never resumed"
    print(
        f"link down {t_up - t_down:.3f} s: data again {resumed - t_up:.3f} s after the up, "
        f"retransmissions +{flow.info()['total_retrans'] - before['total_retrans']}"
    )
    east_gw = f"{line3.plan.prefix}-east-gw"
    assert during[east_gw] == set()  # the admin down flushed both routes through w-mid
    assert gateway_routes(line3) == planned_routes(line3)
    # ICMP net unreachable is a soft error for an established connection: it keeps retrying
    assert flow.send_error is None and flow.recv_error is None
    # the first retransmission after the up: within one RTO step, < down time (2 s) + rto0
    # (~0.25 s: 30 ms RTT + queues, RTO_MIN 200 ms) even with full backoff; the ICMP unreachables
    # revert backoff (RFC 6069) to ~rto0. RESULTS.md "WAN faults" link_down recover 0.9-2.1 s.
    assert resumed - t_up < 3.0


# ---------------------------------------------------------------------------- gateway crash


def test_gateway_crash_loses_its_queues_and_is_survived_after_restore(line3, flows):
    ops = FaultOps(line3.plan)
    east_gw = f"{line3.plan.prefix}-east-gw"
    flow = Flow(line3, "east-h0", "mid-h0")
    flows.append(flow)
    time.sleep(1.5)
    queued = max(backlog(east_gw, "w-mid") for _ in range(5))
    t_down = time.monotonic()
    try:
        ops.gateway("east", False)
        lost = backlog(east_gw, "w-mid")
        time.sleep(2.0)
    finally:
        t_up = time.monotonic()
        ops.gateway("east", True)
    resumed = flow.wait_resumed(t_up, timeout=12.0)
    print(
        f"gateway down {t_up - t_down:.3f} s: bottleneck backlog {queued} B before, {lost} B "
        f"after the crash; data again {None if resumed is None else resumed - t_up} s after"
    )
    assert queued > 0 and lost == 0  # the queue was there, and the crash dropped it
    assert resumed is not None, "the flow never resumed"
    assert flow.send_error is None and flow.recv_error is None
    assert gateway_routes(line3) == planned_routes(line3)


@pytest.mark.parametrize("down", ["gateway", "link"])
def test_what_is_sent_while_a_gateway_or_link_is_down_is_lost_not_held(line3, down):
    """Datagrams sent while the mid gateway is crashed (or the east-mid link is down) do not
    arrive when it comes back. Without the pinned neighbour entries (FaultOps._pin) every one
    of them did: the peers, their carrier gone, queued them for address resolution and sent
    them all at the restore, which made a 2 s crash a 2 s pause for TCP."""
    ops = FaultOps(line3.plan)
    src, dst = line3.plan.host("east-h0"), line3.plan.host("mid-h0")

    def receiver() -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((dst.address, 0))
        s.settimeout(1.0)  # the last one waits for address resolution, on a busy machine
        return s

    def sender() -> socket.socket:
        return socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

    rx, tx = netns.run_in([(dst.ns, receiver), (src.ns, sender)])
    try:
        port = rx.getsockname()[1]
        act = (lambda up: ops.gateway("mid", up)) if down == "gateway" else (
            lambda up: ops.link("east-mid", up)
        )  # fmt: skip
        act(False)
        t_down = time.monotonic()
        for i in range(20):
            tx.sendto(f"{i}".encode(), (dst.address, port))
            time.sleep(0.025)
        act(True)
        tx.sendto(b"after", (dst.address, port))
        got = []
        with contextlib.suppress(TimeoutError):
            while True:
                got.append(rx.recv(64).decode())
        print(f"{down} down {time.monotonic() - t_down:.2f} s: received {got}")
        assert got == ["after"], got  # none of the 20, and the link works again
    finally:
        rx.close()
        tx.close()


def _ip_json(ns: str, *args: str) -> list[dict[str, Any]]:
    out = subprocess.run(["ip", "-n", ns, "-j", *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout or "[]")


@pytest.mark.parametrize("down", ["gateway", "link"])
def test_a_port_back_up_and_its_peer_know_each_others_mac_at_once(line3, down):
    """When a crashed gateway (or a link that was down) comes back, every port it took down and
    that port's peer hold each other's MAC as soon as the fault's up returns, so nothing waits
    for address resolution. The kernel gives the peer its queue back only later (its
    link-watch work): with the entries left to ARP, the peer's reply to the port's first
    request could be dropped there, and the port held all it sent that way until it asked
    again 1 s later (UDP probes answered 780 ms late after a flap)."""
    ops = FaultOps(line3.plan)
    if down == "gateway":
        ns = ops.gateways["mid"].ns
        ports = [(ns, p) for p in ops.ports(ns)]
        act = lambda up: ops.gateway("mid", up)  # noqa: E731
    else:
        ports = list(ops.links["east-mid"].ends)
        act = lambda up: ops.link("east-mid", up)  # noqa: E731
    pairs = ops.pairs(ports)
    assert pairs and all(p.peer_ip for p in pairs if down == "link"), pairs
    act(False)
    act(True)
    learned = {}
    for p in pairs:
        for ns, dev, ip, owner_ns, owner in (
            (p.peer_ns, p.peer_if, p.ip, p.ns, p.dev),
            *([(p.ns, p.dev, p.peer_ip, p.peer_ns, p.peer_dev)] if p.peer_ip else []),
        ):
            (link,) = _ip_json(owner_ns, "link", "show", "dev", owner)
            entries = [e for e in _ip_json(ns, "neigh", "show", "dev", dev) if e["dst"] == ip]
            learned[f"{ns} {dev} {ip}"] = entries
            assert [e.get("lladdr") for e in entries] == [link["address"]], (ns, dev, ip, entries)
            assert set(entries[0]["state"]) <= {"STALE", "DELAY", "REACHABLE", "PROBE"}, entries
    print(f"{down} back up: {learned}")


# ------------------------------------------------------------------------- rate and delay


@pytest.mark.timing
def test_set_rate_goodput_follows_100_30_100_mbit(line3, flows):
    backend = line3.backend
    d = next(d for d in line3.plan.wan if d.name == "east->mid")
    flow = Flow(line3, "east-h0", "mid-h0")
    flows.append(flow)
    rtt = 2 * d.delay
    took, goodputs = [], []
    try:
        for rate in (100_000_000, 30_000_000, 100_000_000):
            t = time.monotonic()
            backend.set_rate({d.name: (rate, max(bdp_bytes(rate, rtt), 1))})
            took.append(time.monotonic() - t)
            time.sleep(3.0)
            now = time.monotonic()
            goodputs.append(flow.goodput(now - 1.5, now))
    finally:
        backend.set_rate({d.name: (d.rate, d.buffer)})
    print(
        "goodput "
        + " -> ".join(f"{g / 1e6:.1f}" for g in goodputs)
        + f" Mbit/s; set_rate took {', '.join(f'{x * 1e3:.1f}' for x in took)} ms"
    )
    # Upper: the ceiling (rate x GOODPUT_FACTOR) + HTB's burst (htb_burst: 66 KB = 1.2% of
    # 30 Mbit/s over 1.5 s) + one 64 KiB recv stamp (1.2%) = 0.98 x rate, so 1.03 admits a 5%
    # leak. Lower: cubic regrowing after 30 -> 100 (about +1 segment per 20 ms RTT) within the
    # 1.5-3 s window, a behaviour bound: no RESULTS.md table measures it.
    for rate, g in zip((100e6, 30e6, 100e6), goodputs, strict=True):
        assert 0.6 * rate * GOODPUT_FACTOR <= g <= 1.03 * rate, (rate, goodputs)
    assert flow.send_error is None and flow.recv_error is None


def _shaper_state(ns: str, dev: str) -> tuple[str, str]:
    """``tc -d`` dumps of ``dev``'s classes and qdiscs (with HTB's buffers in ticks; this tc
    prints no JSON for HTB classes)."""

    def show(what: str) -> str:
        argv = ["tc", "-n", ns, "-d", what, "show", "dev", dev]
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout

    return show("class"), show("qdisc")


@pytest.mark.parametrize("rate", [30_000_000, 40_000_000_000])
def test_set_rate_by_rtnetlink_leaves_what_tc_class_change_leaves(line3, rate):
    """The rate change's rtnetlink requests against ``tc`` itself: the same class and leaf
    afterwards (above 34 Gbit/s the 64-bit rate attributes too)."""
    d = next(d for d in line3.plan.wan if d.name == "east->mid")
    ns, dev = d.shaper.ns, d.shaper.ifname
    try:
        line3.backend.set_rate({d.name: (rate, 409_600)})
        ours = _shaper_state(ns, dev)
        line3.backend.set_rate({d.name: (d.rate, d.buffer)})
        assert _shaper_state(ns, dev) != ours
        tc = subprocess.run(
            ["tc", "-n", ns, "-batch", "-"],
            input="\n".join(rate_change_lines(d, rate, 409_600)) + "\n",
            capture_output=True,
            text=True,
        )
        assert tc.returncode == 0, tc.stderr
        assert _shaper_state(ns, dev) == ours
    finally:
        line3.backend.set_rate({d.name: (d.rate, d.buffer)})
    print(ours)


@pytest.mark.timing
def test_a_delay_step_is_followed_by_the_rtt(line3):
    backend = line3.backend
    d = next(d for d in line3.plan.wan if d.name == "east->mid")
    comp = line3.compensation_of(d.name)
    offset = comp.compensation_s if comp else 0.0
    r0 = statistics.median(probe_rtt(line3, "east-h0", "mid-h0", count=30, interval=0.01)["rtts"])
    try:
        t = time.monotonic()
        backend.set_impairments({d.name: dataclasses.replace(d.impairment, delay=0.030 - offset)})
        took = time.monotonic() - t
        r1 = statistics.median(
            probe_rtt(line3, "east-h0", "mid-h0", count=30, interval=0.01)["rtts"]
        )
    finally:
        backend.set_impairments({d.name: dataclasses.replace(d.impairment, delay=d.delay - offset)})
    print(f"RTT {r0 * 1e3:.2f} ms -> {r1 * 1e3:.2f} ms (set_impairments {took * 1e3:.1f} ms)")
    # 1 ms: rtt_within_tolerance's floor; medians of 30 ns-stamped probes, the compensation
    # offset applied to the step too (RESULTS.md "Link fidelity": compensated -0.15..+0.12 ms)
    assert r0 == pytest.approx(0.020, abs=1e-3)
    assert r1 == pytest.approx(0.040, abs=1e-3)


@pytest.mark.timing
def test_the_delay_line_bunches_at_a_delay_decrease_and_gaps_at_an_increase(line3):
    """Packets every ~1 ms; the delay goes 30 -> 10 ms (the packets that arrive while the old
    ones drain leave together after the last of them: a burst, in order) and back to 30 ms (a
    gap of about the difference). netem reorders at the decrease instead: the same steps in
    test_kernel_backend.py."""
    if not line3.link_stats():
        pytest.skip("the delay line's behaviour: this testbed runs netem")
    sent, got, steps = delay_steps(line3, "east->mid", next(PORTS))
    seqs = [s_ for s_, _ in got]
    gaps = [(s_, b - a) for (_, a), (s_, b) in itertools.pairwise(got)]
    # the burst: the most packets delivered within 0.5 ms of each other in a row, after the
    # decrease; the gap: the longest pause after the increase
    run = best = 0
    for s_, g in gaps:
        if s_ >= steps["down"]:
            run = run + 1 if g < 0.0005 else 0
            best = max(best, run)
    after_up = max(g for s_, g in gaps if s_ >= steps["up"])
    print(
        f"{sent} packets ~{0.45 / sent * 1e3:.2f} ms apart: {len(got)} arrived, in order: "
        f"{seqs == sorted(seqs)}; after 30 -> 10 ms: {best + 1} delivered back to back "
        f"(< 0.5 ms apart); after 10 -> 30 ms: a {after_up * 1e3:.1f} ms gap"
    )
    assert seqs == sorted(seqs) and len(got) == sent  # never reordered, nothing lost
    # the 20 ms step holds back what arrives in it: ~18 packets at the sender's ~1.1 ms
    # (time.sleep(0.001)); 8 admits a 2.3x slower sender. Released in one verdict batch
    # (DEFAULT_RELEASE_GAP 0.2 ms < the 0.5 ms asked); receive stamps are kernel ns.
    assert best + 1 >= 8  # ~20 ms of arrivals held back, then released together
    # expected 20 ms + one spacing (~1 ms), whenever the step lands; -8 ms / +19 ms around it
    # for the sender's sleeps on a busy host (no measured spread in RESULTS.md)
    assert 0.012 <= after_up <= 0.040  # ~20 ms: the new packets wait the extra delay


# ------------------------------------------------------------------------------ burst loss


def test_burst_loss_on_the_delay_line_matches_gilbert_elliott(line3):
    backend = line3.backend
    d = next(d for d in line3.plan.wan if d.name == "east->mid")
    p, r, n = 0.05, 0.25, 20_000
    port = next(PORTS)
    dst = line3.hosts["mid-h0"]

    def receiver() -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE: never the socket's drop
        s.bind((dst, port))
        return s

    rx, tx = netns.run_in(
        [
            (line3.namespace("mid-h0"), receiver),
            (line3.namespace("east-h0"), lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM)),
        ]
    )
    got: list[int] = []

    def collect() -> None:
        rx.settimeout(2.0)
        try:
            while True:
                got.append(int.from_bytes(rx.recv(64)[:4], "big"))
        except (TimeoutError, OSError):
            return

    stats0 = {row["direction"]: row for row in line3.link_stats()}
    backend.set_impairments({d.name: dataclasses.replace(d.impairment, ge_p=p, ge_r=r)})
    try:
        t = threading.Thread(target=collect)
        t.start()
        pad = bytes(60)
        for seq in range(n):  # ~10 000 packets/s, 20 at a time: well below the link's rate
            tx.sendto(seq.to_bytes(4, "big") + pad, (dst, port))
            if seq % 20 == 19:
                time.sleep(0.002)
        t.join()
    finally:
        backend.set_impairments({d.name: d.impairment})
        rx.close()
        tx.close()
    received = set(got)
    lost = [seq not in received for seq in range(n)]
    runs, run = [], 0
    for x in lost:
        if x:
            run += 1
        elif run:
            runs.append(run)
            run = 0
    rate = sum(lost) / n
    want = p / (p + r)
    # Bursts are geometric (mean 1/r) and start about n p r/(p+r) times; the loss count's
    # relative sd is about sqrt((2 - r) / bursts): 4 sigma bounds (a binomial bound over n
    # packets would be far too tight for correlated losses).
    bursts = n * p * r / (p + r)
    rel = 4 * ((2 - r) / bursts) ** 0.5
    mean = sum(runs) / len(runs)
    stats = {row["direction"]: row for row in line3.link_stats()}
    burst_drops = (
        stats[d.name]["dropped_burst"] - stats0[d.name].get("dropped_burst", 0) if stats0 else None
    )
    print(
        f"burst loss p={p} r={r}: lost {rate:.4f} of {n} (p/(p+r) {want:.4f} +-{rel:.0%}), "
        f"{len(runs)} bursts of mean {mean:.2f} (1/r {1 / r:.1f}); line dropped {burst_drops}"
    )
    assert rate == pytest.approx(want, rel=rel)
    assert mean == pytest.approx(1 / r, rel=4 * (1 - r) ** 0.5 / len(runs) ** 0.5)
    if stats0:
        # the delay line counts what its bad state dropped: these, and at most the packets it saw
        # in the window that were not ours (seen once beside a second test worker: 3534 dropped
        # for 3533 of ours lost; which packet the other was is not known)
        seen = stats[d.name]["packets"] - stats0[d.name].get("packets", 0)
        strays = max(0, seen - n)
        assert sum(lost) <= burst_drops <= sum(lost) + strays, (burst_drops, sum(lost), seen)


@pytest.mark.timing
def test_a_zero_rate_trace_bin_holds_the_queue_and_loses_nothing(make_testbed) -> None:
    """A trace's zero-rate bin holds (Mahimahi): what is sent during it waits in the bottleneck
    queue and leaves at the release, none lost, in order; a blackhole would drop it."""
    trace = Path(__file__).resolve().parents[2] / "scenarios" / "traces" / "steps-60s.csv"
    link = {"between": ["east", "west"], "rate": "20mbit", "delay": "5ms"}
    link["trace"] = {"file": str(trace), "format": "csv", "direction": "forward"}
    flow = {"kind": "bulk", "from": "east-h0", "to": "west-h0", "duration": "1s"}  # not run
    tb = make_testbed(scenario(wan=[link], traffic=[flow]))
    sent, got, held, released = hold_and_release(tb, "east->west", 47990)
    # 50 ms after the hold for the reload to land and what passed the queue to cross (5 ms one
    # way); 20 ms before the release. Stamps: kernel ns on the realtime clock of held/released.
    during = [s for s, t in got if held + 0.05 < t < released - 0.02]
    after = [s for s, t in got if t >= released - 0.02]
    print(f"sent {sent}, arrived {len(got)}: {len(during)} during the hold, {len(after)} after")
    assert len(got) == sent, "a held bin loses nothing"
    assert [s for s, _ in got] == sorted(s for s, _ in got), "in order"
    assert during == [], "nothing leaves a held queue"
    # one datagram per time.sleep(0.01) (>= 10 ms a turn): 0.7 admits a 1.4x slower sender
    assert len(after) >= 0.7 * (released - held) / 0.01  # what was sent during the hold
    # the first held datagram leaves at once: the reload's ack (event lateness max 9.9 ms,
    # RESULTS.md "WAN faults") + 5 ms one way + 0.4 ms for 1 KB at 20 Mbit/s = ~15 ms; 0.1 s ~6x
    assert min(t for _, t in got if t >= released - 0.02) - released < 0.1  # served at once
