"""Tests for the userspace NFQUEUE delay line (testbed.link.delayline).

The live tests build their own three namespaces ``<prefix>-{a,r,b}`` (a -- r -- b, r forwards),
run ``python -m testbed.link.delayline`` in ``r`` with one queue per direction (NFQUEUE rules on
r's two ingress interfaces) and measure real packets. Everything they create is removed in
finalizers, also on failure; the prefix and every process they start are in the machine's
registry of testbeds first, so a test process killed outright (no finalizer runs) leaves
nothing that ``testbed clean`` does not remove. The pure parts are tested in
tests/unit/test_delayline_parts.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import secrets
import select
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from testbed.link import delayline as dl
from testbed.net import registry

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable

A_IP, B_IP = "10.77.1.1", "10.77.2.1"
Q_AB, Q_BA = 11, 12  # queue a->b (on r's "ra" ingress), b->a (on r's "rb" ingress)

live = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("iptables") is None or shutil.which("ip") is None,
    reason="needs root, iproute2 and iptables",
)


# --------------------------------------------------------------------------- helpers


def sh(argv: list[str], check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{argv} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def nsx(ns: str, argv: list[str]) -> list[str]:
    return ["ip", "netns", "exec", ns, *argv]


@dataclass
class Topo:
    record: registry.Record
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def prefix(self) -> str:
        return self.record.prefix + "-"

    @property
    def a(self) -> str:
        return self.prefix + "a"

    @property
    def r(self) -> str:
        return self.prefix + "r"

    @property
    def b(self) -> str:
        return self.prefix + "b"

    def spawn(self, ns: str, argv: list[str], **kw: Any) -> subprocess.Popen:
        p = subprocess.Popen(nsx(ns, argv), cwd=REPO, **kw)
        self.procs.append(p)
        self.record.add_process(p.pid, " ".join(argv[:3]))  # `ip netns exec` execs argv itself
        return p

    def build(self) -> None:
        for ns in (self.a, self.r, self.b):
            sh(["ip", "netns", "add", ns])
            sh(["ip", "-n", ns, "link", "set", "lo", "up"])
        sh(
            [
                "ip",
                "-n",
                self.a,
                "link",
                "add",
                "eth0",
                "type",
                "veth",
                "peer",
                "name",
                "ra",
                "netns",
                self.r,
            ]
        )
        sh(
            [
                "ip",
                "-n",
                self.b,
                "link",
                "add",
                "eth0",
                "type",
                "veth",
                "peer",
                "name",
                "rb",
                "netns",
                self.r,
            ]
        )
        for ns, dev, addr in (
            (self.a, "eth0", A_IP + "/24"),
            (self.r, "ra", "10.77.1.254/24"),
            (self.r, "rb", "10.77.2.254/24"),
            (self.b, "eth0", B_IP + "/24"),
        ):
            sh(["ip", "-n", ns, "addr", "add", addr, "dev", dev])
            sh(["ip", "-n", ns, "link", "set", dev, "up"])
        sh(["ip", "-n", self.a, "route", "add", "default", "via", "10.77.1.254"])
        sh(["ip", "-n", self.b, "route", "add", "default", "via", "10.77.2.254"])
        sh(nsx(self.r, ["sysctl", "-qw", "net.ipv4.ip_forward=1"]))
        for ns in (self.a, self.b):  # room for big bandwidth-delay products (benchmarks)
            sh(nsx(ns, ["sysctl", "-qw", "net.ipv4.tcp_rmem=4096 131072 134217728"]))
            sh(nsx(ns, ["sysctl", "-qw", "net.ipv4.tcp_wmem=4096 16384 134217728"]))

    def cleanup(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=5)
        self.procs.clear()
        for ns in (self.a, self.r, self.b):
            sh(["ip", "netns", "del", ns], check=False)
        self.record.remove()


def make_topo() -> Topo:
    topo = Topo(registry.claim(f"delayline-test-{os.getpid()}-{secrets.token_hex(2)}"))
    try:
        topo.build()
    except BaseException:
        topo.cleanup()
        raise
    return topo


@pytest.fixture(scope="module")
def topo() -> Iterator[Topo]:
    t = make_topo()
    try:
        yield t
    finally:
        t.cleanup()


def qcfg(num: int, name: str, delay: float, **kw: Any) -> dict[str, Any]:
    return {"num": num, "name": name, "delay": delay, "seed": num, **kw}


class Line:
    """A running delay line in ``topo.r`` with NFQUEUE rules on ra (a->b) and rb (b->a)."""

    def __init__(
        self,
        topo: Topo,
        workdir: Path,
        ab: dict[str, Any],
        ba: dict[str, Any],
        stats_interval: float = 0.2,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.topo = topo
        self.stats_file = workdir / "stats.json"
        self.config = workdir / "delayline.json"
        self.config.write_text(
            json.dumps(
                {
                    "queues": [ab, ba],
                    "stats_file": str(self.stats_file),
                    "stats_interval": stats_interval,
                    **(extra or {}),
                }
            )
        )
        self.rules = [("ra", ab["num"]), ("rb", ba["num"])]
        self.stderr_path = workdir / "delayline.stderr"
        self.stderr = open(self.stderr_path, "w")  # noqa: SIM115
        self.proc = topo.spawn(
            topo.r,
            [PYTHON, "-m", "testbed.link.delayline", "--config", str(self.config)],
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )
        self.rules_in = False
        self.final: dict[str, Any] | None = None
        try:
            self._wait_ready()
            for iface, num in self.rules:
                for argv in dl.iptables_rules(iface, num):
                    sh(nsx(topo.r, argv))
                self.rules_in = True
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float = 10.0) -> None:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if line.strip() != "READY":
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(
                f"delay line not ready: {line!r}; stderr: {self.stderr_path.read_text()}"
            )

    def remove_rules(self) -> None:
        if self.rules_in:
            for iface, num in self.rules:
                for argv in dl.iptables_delete_rules(iface, num):
                    sh(nsx(self.topo.r, argv), check=False)
            self.rules_in = False

    def stop(self) -> int:
        """Rules out, SIGTERM, wait; returns the exit code (final stats in ``self.final``)."""
        self.remove_rules()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.stderr.close()
        with contextlib.suppress(OSError, ValueError):
            self.final = dl.read_stats(self.stats_file)
        return self.proc.returncode


@contextlib.contextmanager
def delay_line(
    topo: Topo,
    workdir: Path,
    ab: dict[str, Any],
    ba: dict[str, Any],
    check_clean: bool = True,
    extra: dict[str, Any] | None = None,
) -> Iterator[Line]:
    workdir.mkdir(parents=True, exist_ok=True)
    line = Line(topo, workdir, ab, ba, extra=extra)
    ok = False
    try:
        yield line
        ok = True
    finally:
        rc = line.stop()
        if ok and check_clean:
            assert rc == 0, line.stderr_path.read_text()
            assert line.final is not None and line.final["final"] is True
            assert line.final["errors"] == [], line.final["errors"]


def ping_rtts(topo: Topo, count: int, interval: float, dst: str = B_IP) -> tuple[list[float], int]:
    """RTTs (ms) of the answered pings and the number sent."""
    r = sh(
        nsx(
            topo.a,
            [
                "ping",
                "-n",
                "-c",
                str(count),
                "-i",
                str(interval),
                "-W",
                "2",
                dst,
            ],
        ),
        check=False,
        timeout=count * interval + 30,
    )
    rtts = [float(m) for m in re.findall(r"time=([\d.]+) ms", r.stdout)]
    return rtts, count


UDP_RECV = r"""
import json, socket, struct, sys, time
port, expect, idle = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE
s.setsockopt(socket.SOL_SOCKET, 35, 1)  # SO_TIMESTAMPNS
s.bind(("0.0.0.0", port))
print("READY", flush=True)
out, last = [], None
s.settimeout(idle)
while len(out) < expect:
    try:
        data, anc, _f, _a = s.recvmsg(64, 64)
    except TimeoutError:
        if out:
            break
        continue
    seq, sent = struct.unpack_from("!Id", data)
    rx = time.time()
    for lvl, typ, val in anc:
        if lvl == socket.SOL_SOCKET and typ == 35:
            sec, nsec = struct.unpack("qq", val[:16])
            rx = sec + nsec * 1e-9
    out.append((seq, sent, rx))
print(json.dumps(out), flush=True)
"""

UDP_SEND = r"""
import socket, struct, sys, time
dst, port, n, gap = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
t0 = time.monotonic() + 0.05
for i in range(n):
    t = t0 + i * gap
    while True:
        d = t - time.monotonic()
        if d <= 0:
            break
        if d > 0.0015:
            time.sleep(d - 0.001)
    s.sendto(struct.pack("!Id", i, time.time()) + b"x" * 20, (dst, port))
"""


def udp_run(
    topo: Topo, n: int, gap: float, port: int = 9000, idle: float = 1.5
) -> list[tuple[int, float, float]]:
    """Send ``n`` numbered datagrams a->b every ``gap`` s; (seq, sent, kernel rx time) received."""
    rx = topo.spawn(
        topo.b,
        [PYTHON, "-c", UDP_RECV, str(port), str(n), str(idle)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert rx.stdout is not None
        assert rx.stdout.readline().strip() == "READY"
        sh(
            nsx(topo.a, [PYTHON, "-c", UDP_SEND, B_IP, str(port), str(n), str(gap)]),
            timeout=n * gap + 30,
        )
        out, _ = rx.communicate(timeout=n * gap + 30)
    finally:
        if rx.poll() is None:
            rx.kill()
            rx.wait()
    return [tuple(x) for x in json.loads(out.strip().splitlines()[-1])]


def late_arrivals(seqs: list[int]) -> int:
    """Packets that arrived after a packet with a higher sequence number."""
    hi, n = -1, 0
    for s in seqs:
        if s < hi:
            n += 1
        hi = max(hi, s)
    return n


def model_owd_std(sends: list[float], delay: float, jitter: float, reps: int = 200) -> float:
    """Std of the one-way delay under the delay line's order-preserving jitter rule."""
    rng = random.Random(7)
    stds = []
    for _ in range(reps):
        last = -1e18
        owd = []
        for s in sends:
            r = s + max(0.0, delay + rng.gauss(0.0, jitter))
            last = max(last, r)
            owd.append(last - s)
        stds.append(statistics.pstdev(owd))
    return statistics.fmean(stds)


def test_bad_config_exits_2(tmp_path: Path) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"queues": [{"num": 1, "loss": 2}]}))
    r = subprocess.run(
        [PYTHON, "-m", "testbed.link.delayline", "--config", str(cfg)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2 and "loss" in r.stderr and r.stdout == ""


# --------------------------------------------------------------------------- live tests


@live
@pytest.mark.live
@pytest.mark.parametrize(("d_ab", "d_ba"), [(0.010, 0.010), (0.050, 0.050), (0.010, 0.030)])
@pytest.mark.timing
def test_rtt(topo: Topo, tmp_path: Path, d_ab: float, d_ba: float) -> None:
    with delay_line(topo, tmp_path, qcfg(Q_AB, "a->b", d_ab), qcfg(Q_BA, "b->a", d_ba)) as line:
        rtts, sent = ping_rtts(topo, 100, 0.01)
    assert len(rtts) >= sent - 1
    expected = (d_ab + d_ba) * 1000
    med = statistics.median(rtts)
    # 1 ms: rtt_within_tolerance's floor. No compensation here: RESULTS.md "Link fidelity" raw
    # medians read +0.31..+0.36 ms; ping prints 0.1 ms steps below 100 ms RTT but whole ms at
    # 100 ms (rounded: +-0.5 ms), so the 100 ms case resolves the bound only to one print step.
    assert abs(med - expected) <= 1.0, (med, expected)
    # never early (EARLY_SLACK = 0): 0.05 ms is half of ping's 0.1 ms print step below 100 ms
    assert min(rtts) >= expected - 0.05, (min(rtts), expected)  # never early
    st = line.final
    assert st is not None
    for q in st["queues"].values():
        assert q["packets"] >= sent and q["accepted"] == q["packets"] and q["held"] == 0


@live
@pytest.mark.live
def test_loss_one_percent(topo: Topo, tmp_path: Path) -> None:
    n = 4000
    with delay_line(
        topo, tmp_path, qcfg(Q_AB, "a->b", 0.005, loss=0.01), qcfg(Q_BA, "b->a", 0.005)
    ) as line:
        got = udp_run(topo, n, 0.0001, idle=1.0)
    lost = n - len({s for s, _, _ in got})
    assert 0.005 * n <= lost <= 0.015 * n, lost
    st = line.final
    assert st is not None
    qab = st["queues"][str(Q_AB)]
    assert qab["packets"] == n and qab["dropped_loss"] == lost


@live
@pytest.mark.live
@pytest.mark.timing
def test_jitter_keeps_order_and_matches_model(topo: Topo, tmp_path: Path) -> None:
    delay, jitter, n, gap = 0.020, 0.005, 500, 0.004
    with delay_line(
        topo, tmp_path, qcfg(Q_AB, "a->b", delay, jitter=jitter), qcfg(Q_BA, "b->a", 0.0)
    ) as line:
        got = udp_run(topo, n, gap)
    assert len(got) == n
    seqs = [s for s, _, _ in got]
    assert late_arrivals(seqs) == 0  # order-preserving jitter: no reordering
    owd = [rx - sent for _, sent, rx in got]
    sends = [sent for _, sent, _ in sorted(got)]
    model = model_owd_std(sends, delay, jitter)
    measured = statistics.pstdev(owd)
    # the model replays the line's own rule (N(0, jitter), release >= previous) on these send
    # times, 200 times over; the std of 500 correlated draws (runs released together) has a
    # relative error of ~3-7% (1/sqrt(2n) for n = 500..100 effective): 30% is over 4 of them.
    # Stamps: sender time.time() (us), receiver kernel ns; lateness's spread (0.1-0.3 ms) adds
    # < 0.3% in quadrature.
    assert abs(measured - model) <= 0.3 * model, (measured, model)
    # minimum one-way delay can't be below zero extra delay; mean is above the configured delay
    assert min(owd) >= 0 and statistics.fmean(owd) >= delay
    assert line.final is not None and line.final["queues"][str(Q_AB)]["reordered"] == 0


@live
@pytest.mark.live
@pytest.mark.timing
def test_jitter_sparse_packets_std_is_jitter(topo: Topo, tmp_path: Path) -> None:
    """Packets far apart (>> jitter): order preservation never binds, so std ~ jitter."""
    delay, jitter, n, gap = 0.020, 0.003, 120, 0.025
    with delay_line(
        topo, tmp_path, qcfg(Q_AB, "a->b", delay, jitter=jitter), qcfg(Q_BA, "b->a", 0.0)
    ):
        got = udp_run(topo, n, gap)
    owd = [rx - sent for _, sent, rx in got]
    assert len(got) == n
    # 25 ms apart is 5.9 sigma of the difference of two N(0, 3 ms) draws: order never binds.
    # The std of n = 120 normal draws errs by 1/sqrt(2(n-1)) = 6.5%: 30% is 4.6 of those.
    assert abs(statistics.pstdev(owd) - jitter) <= 0.3 * jitter, statistics.pstdev(owd)
    # the median of 120 draws errs by 1.2533 x 3 ms / sqrt(120) = 0.34 ms; the raw line adds
    # ~+0.17 ms one way (RESULTS.md "Link fidelity", raw RTT +0.31..+0.36): 1.5 ms is 3.9 SE on top
    assert abs(statistics.median(owd) - delay) <= 0.0015


@live
@pytest.mark.live
@pytest.mark.timing
def test_reorder(topo: Topo, tmp_path: Path) -> None:
    n = 400
    with delay_line(
        topo, tmp_path, qcfg(Q_AB, "a->b", 0.010, reorder=0.2), qcfg(Q_BA, "b->a", 0.0)
    ) as line:
        got = udp_run(topo, n, 0.001)
    assert len(got) == n
    late = late_arrivals([s for s, _, _ in got])
    # a held packet (p = 0.8) is late when one of the ~9 sent after it within the 10 ms delay
    # (1 ms apart, busy-wait paced) is released at once: expected 0.8 x (1 - 0.8^9) = 0.69 n
    assert late > 0.3 * n  # held packets overtaken by the ~20% released at once
    st = line.final
    assert st is not None
    # Binomial(400, 0.2): mean 80, sd 8; 48..112 is +-4 sd (the seed is fixed: a count, not a time)
    assert 0.12 * n <= st["queues"][str(Q_AB)]["reordered"] <= 0.28 * n


@live
@pytest.mark.live
@pytest.mark.timing
def test_bulk_tcp_htb_100mbit(topo: Topo, tmp_path: Path) -> None:
    if shutil.which("iperf3") is None:
        pytest.skip("iperf3 missing")
    rate, delay = 100_000_000, 0.025
    bdp = int(rate / 8 * 2 * delay)
    tc = ["tc", "-n", topo.r]
    sh([*tc, "qdisc", "replace", "dev", "rb", "root", "handle", "1:", "htb", "default", "10"])
    try:
        sh(
            [
                *tc,
                "class",
                "add",
                "dev",
                "rb",
                "parent",
                "1:",
                "classid",
                "1:10",
                "htb",
                "rate",
                "100mbit",
                "burst",
                "64k",
                "cburst",
                "64k",
            ]
        )
        sh(
            [
                *tc,
                "qdisc",
                "add",
                "dev",
                "rb",
                "parent",
                "1:10",
                "handle",
                "10:",
                "bfifo",
                "limit",
                str(2 * bdp),
            ]
        )
        with delay_line(topo, tmp_path, qcfg(Q_AB, "a->b", delay), qcfg(Q_BA, "b->a", delay)):
            srv = topo.spawn(
                topo.b,
                ["iperf3", "-s", "-1", "-B", B_IP, "-p", "5211"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                res = None
                for _ in range(20):
                    r = sh(
                        nsx(
                            topo.a, ["iperf3", "-c", B_IP, "-p", "5211", "-t", "5", "-O", "1", "-J"]
                        ),
                        check=False,
                        timeout=60,
                    )
                    if r.returncode == 0:
                        res = json.loads(r.stdout)
                        break
                    time.sleep(0.1)
                assert res is not None, "iperf3 client failed"
            finally:
                if srv.poll() is None:
                    srv.kill()
                srv.wait()
        goodput = res["end"]["sum_received"]["bits_per_second"]
        # HTB's ceiling is rate x 1448/1514 = 95.6 Mbit/s; 85 Mbit/s is 88.9% of it. Resolution:
        # bytes over iperf3's 5 s (one 64 KiB GSO packet = 0.1 Mbit/s). Spread: FIELD-NOTES
        # (NFQUEUE table, 100 Mbit/s 25 ms: 92-94) and RESULTS.md "Link fidelity" Bulk TCP (92-96).
        assert goodput >= 85e6, goodput
    finally:
        sh([*tc, "qdisc", "del", "dev", "rb", "root"], check=False)


@live
@pytest.mark.live
@pytest.mark.timing
def test_sigkill_stops_traffic(topo: Topo, tmp_path: Path) -> None:
    with delay_line(
        topo, tmp_path, qcfg(Q_AB, "a->b", 0.005), qcfg(Q_BA, "b->a", 0.005), check_clean=False
    ) as line:
        rtts, _ = ping_rtts(topo, 5, 0.05)
        assert len(rtts) == 5
        line.proc.kill()
        line.proc.wait(timeout=5)
        assert line.rules_in
        r = sh(nsx(topo.a, ["ping", "-n", "-c", "5", "-i", "0.1", "-W", "1", B_IP]), check=False)
        assert r.returncode != 0 and " 0 received" in r.stdout, r.stdout
    # after the rules are gone the path works again, undelayed
    rtts, _ = ping_rtts(topo, 3, 0.05)
    # 5 ms: half the delayed RTT (2 x 5 ms); undelayed reads 0.14 ms median, 0.27 ms p99
    # (RESULTS.md "Link fidelity", 0 ms row); ping prints 0.001 ms steps there
    assert len(rtts) == 3 and max(rtts) < 5.0


@live
@pytest.mark.live
@pytest.mark.timing
def test_stats_file_after_normal_run(topo: Topo, tmp_path: Path) -> None:
    with delay_line(topo, tmp_path, qcfg(Q_AB, "a->b", 0.005), qcfg(Q_BA, "b->a", 0.007)) as line:
        ping_rtts(topo, 50, 0.01)
        time.sleep(0.3)
        live_stats = dl.read_stats(line.stats_file)
        assert live_stats["final"] is False and live_stats["pid"] == line.proc.pid
    st = line.final
    assert st is not None and st["final"] is True and st["errors"] == []
    assert st["sched_fifo"] is True and st["rcvbuf"] >= 64 << 20
    assert st["cpu_seconds"] > 0 and st["enobufs"] == 0 and st["wakeups"] > 0
    for num, name in ((Q_AB, "a->b"), (Q_BA, "b->a")):
        q = st["queues"][str(num)]
        assert q["name"] == name
        assert q["packets"] >= 50 and q["bytes"] >= 50 * 84
        assert q["dropped_loss"] == 0 and q["reordered"] == 0 and q["max_held"] >= 1
        assert q["queue_dropped"] == 0 and q["user_dropped"] == 0
        assert q["timestamp_fallbacks"] == 0  # kernel arrival timestamps were used
        lat = q["lateness_us"]
        assert lat["count"] == q["accepted"] and 0 <= lat["p50"] <= lat["p99"] <= lat["max"]
        # The file's content is under test here; the line's timing accuracy is measured by
        # benchmarks/link_fidelity.py and bounded in test_live_delay.py. p99 of ~100 pings is the
        # single worst one: a VM scheduling hiccup once made it 2.4 ms in CI.
        # p50 bound: the histogram has 1 us bins below 1 ms (LatenessHistogram.FINE); a correct
        # line is late by select()'s oversleep (50-150 us, RESULTS.md "Delay line design
        # measurements", less the learnt MAX_WAKE_EARLY) + at most DEFAULT_RELEASE_GAP (200 us).
        assert lat["p50"] < 1000


@live
@pytest.mark.live
def test_queue_already_bound_fails(topo: Topo, tmp_path: Path) -> None:
    with delay_line(topo, tmp_path / "one", qcfg(Q_AB, "a->b", 0.0), qcfg(Q_BA, "b->a", 0.0)):
        cfg = tmp_path / "two.json"
        cfg.write_text(json.dumps({"queues": [qcfg(Q_AB, "dup", 0.0)]}))
        r = sh(
            nsx(topo.r, [PYTHON, "-m", "testbed.link.delayline", "--config", str(cfg)]), check=False
        )
        assert r.returncode == 1 and "READY" not in r.stdout
        assert "cannot bind NFQUEUE" in r.stderr


@live
@pytest.mark.live
def test_overflow_is_reported_not_silent(topo: Topo, tmp_path: Path) -> None:
    """A stalled line overflows: kernel queue full (a->b, maxlen 20) and netlink buffer full
    (b->a, small receive buffer). Both must show up as errors in the stats and on stderr."""
    ab = qcfg(Q_AB, "a->b", 0.001, maxlen=20)
    ba = qcfg(Q_BA, "b->a", 0.001)
    with delay_line(topo, tmp_path, ab, ba, check_clean=False, extra={"rcvbuf": 65536}) as line:
        line.proc.send_signal(signal.SIGSTOP)
        try:
            sh(nsx(topo.a, [PYTHON, "-c", UDP_SEND, B_IP, "9001", "100", "0"]))
            sh(nsx(topo.b, [PYTHON, "-c", UDP_SEND, A_IP, "9002", "3000", "0"]))
        finally:
            line.proc.send_signal(signal.SIGCONT)
        time.sleep(0.5)
    assert line.proc.returncode == 0
    st = line.final
    assert st is not None
    qab, qba = st["queues"][str(Q_AB)], st["queues"][str(Q_BA)]
    assert qab["queue_dropped"] > 0 and qba["user_dropped"] > 0 and st["enobufs"] > 0
    text = " | ".join(st["errors"])
    assert "queue_dropped" in text and "user_dropped" in text and "ENOBUFS" in text
    assert "ERROR" in line.stderr_path.read_text()


@live
@pytest.mark.live
def test_launcher_forks_one_line_per_namespace_and_names_the_ones_that_failed(
    topo: Topo, tmp_path: Path
) -> None:
    """``--line NS CONFIG LOG``: the launcher (in the initial namespace) says READY with the pid
    for the good line, whose ``--rules`` are in once it is READY; FAILED with the namespace and
    exit code for a bad config (2), a namespace that does not exist (3) and rules that do not
    apply (4), whose reasons are in their logs; then it exits 1."""
    good = tmp_path / "good.json"
    stats_file = tmp_path / "stats.json"
    good.write_text(
        json.dumps({"queues": [qcfg(Q_AB, "a->b", 0.0)], "stats_file": str(stats_file)})
    )
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"queues": [qcfg(Q_BA, "b->a", 0.0)]}))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"queues": [{"num": 1, "loss": 2}]}))
    rules = dl.iptables_rules("ra", Q_AB)
    (tmp_path / "good.rules").write_text(dl.restore_input(rules))
    (tmp_path / "bad.rules").write_text("*mangle\n-A NOSUCHCHAIN -j ACCEPT\nCOMMIT\n")
    missing = f"{topo.prefix}nosuch"
    argv = [PYTHON, "-m", "testbed.link.delayline"]
    for ns, cfg, log in (
        (topo.r, good, "good"),
        (topo.a, bad, "bad"),
        (missing, good, "gone"),
        (topo.b, other, "norules"),
    ):
        argv += ["--line", ns, str(cfg), str(tmp_path / f"{log}.log")]
    argv += ["--rules", topo.r, str(tmp_path / "good.rules")]
    argv += ["--rules", topo.b, str(tmp_path / "bad.rules")]
    r = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=30)
    said = {line.split()[1]: line.split() for line in r.stdout.splitlines()}
    pid = int(said[topo.r][2]) if said.get(topo.r, [""])[0] == "READY" else None
    try:
        assert r.returncode == 1, r.stdout + r.stderr
        assert set(said) == {topo.r, topo.a, topo.b, missing}, r.stdout + r.stderr
        assert said[topo.a][0] == "FAILED" and said[topo.a][3] == "2"
        assert "config error" in (tmp_path / "bad.log").read_text()
        assert said[missing][0] == "FAILED" and said[missing][3] == "3"
        assert f"cannot enter namespace {missing}" in (tmp_path / "gone.log").read_text()
        assert said[topo.b][0] == "FAILED" and said[topo.b][3] == "4"
        assert "iptables rules failed" in (tmp_path / "norules.log").read_text()
        assert pid is not None, r.stdout
        # The good line runs on in its namespace (not the launcher's), bound to its queue, and
        # its rule is in.
        assert os.stat(f"/run/netns/{topo.r}").st_ino == os.stat(f"/proc/{pid}/ns/net").st_ino
        queues = sh(nsx(topo.r, ["cat", "/proc/net/netfilter/nfnetlink_queue"])).stdout
        assert queues.split()[0] == str(Q_AB), queues
        saved = sh(nsx(topo.r, ["iptables-save", "-t", "mangle"])).stdout
        assert f"--queue-num {Q_AB}" in saved, saved
        assert "NFQUEUE" not in sh(nsx(topo.b, ["iptables-save", "-t", "mangle"])).stdout
    finally:
        for argv_d in dl.deletions_of(rules):  # rules first, then the line (the protocol)
            sh(nsx(topo.r, argv_d), check=False)
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5  # SIGTERM: it unbinds and writes its final stats
    while time.monotonic() < deadline and not dl.read_stats(stats_file).get("final"):
        time.sleep(0.05)
    final = dl.read_stats(stats_file)
    assert final["final"] is True and final["pid"] == pid and final["errors"] == []


def test_launcher_with_wait_forks_nothing_if_stdin_closes_before_the_go(tmp_path: Path) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"queues": [qcfg(Q_AB, "a->b", 0.0)]}))
    line = ["--line", "nosuch-ns", str(cfg), str(tmp_path / "c.log")]
    r = subprocess.run(
        [PYTHON, "-m", "testbed.link.delayline", "--wait", *line],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 1 and r.stdout == "" and "no lines started" in r.stderr
    assert not (tmp_path / "c.log").exists()


def reload(line: Line, queues: list[dict[str, Any]], timeout: float = 5.0) -> dict[str, Any]:
    """Rewrite the line's config with ``queues``, SIGHUP it, and return the stats it wrote in
    answer (its ``reloads`` count went up; its errors say whether the reload was refused)."""
    before = dl.read_stats(line.stats_file)["reloads"]
    data = json.loads(line.config.read_text())
    data["queues"] = queues
    tmp = line.config.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(line.config)
    line.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = dl.read_stats(line.stats_file)
        if st["reloads"] > before:
            return st
        time.sleep(0.005)
    raise AssertionError("the line did not answer SIGHUP")


@live
@pytest.mark.live
@pytest.mark.timing
def test_sighup_changes_delay_without_dropping_held_packets(topo: Topo, tmp_path: Path) -> None:
    """A stream a->b crosses a reload from 10 ms to 30 ms (and loss 0 -> 0): every datagram
    arrives, in order; those sent before the reload took 10 ms, those well after 30 ms. A
    reload that changes the queue set is refused (error, old settings kept), a good one clears
    the error."""
    ab, ba = qcfg(Q_AB, "a->b", 0.010), qcfg(Q_BA, "b->a", 0.010)
    with delay_line(topo, tmp_path, ab, ba) as line:
        result: list[list[tuple[int, float, float]]] = []
        sender = threading.Thread(target=lambda: result.append(udp_run(topo, 400, 0.002)))
        sender.start()
        time.sleep(0.5)  # the receiver's start-up, then about 100 datagrams at 10 ms
        t_reload = time.time()
        st = reload(line, [{**ab, "delay": 0.030}, ba])
        sender.join(timeout=60)
        assert st["reloads"] == 1 and st["errors"] == []
        assert st["queues"][str(Q_AB)]["delay"] == 0.030
        assert st["queues"][str(Q_BA)]["delay"] == 0.010
        got = result[0]
        assert len(got) == 400  # nothing held was dropped
        assert late_arrivals([seq for seq, _, _ in got]) == 0
        # 50 ms each side of the SIGHUP: the line takes the reload within a wakeup (reload()
        # polls its stats every 5 ms; ~25 datagrams, 2 ms apart, are left out)
        before = [rx - sent for _, sent, rx in got if sent < t_reload - 0.05]
        after = [rx - sent for _, sent, rx in got if sent > t_reload + 0.05]
        assert len(before) > 20 and len(after) > 20
        # 1 ms: rtt_within_tolerance's floor; one way, sender time.time() and kernel ns stamps,
        # medians of > 20; the raw line adds ~+0.17 ms one way (RESULTS.md "Link fidelity", raw)
        assert statistics.median(before) == pytest.approx(0.010, abs=0.001)
        assert statistics.median(after) == pytest.approx(0.030, abs=0.001)

        refused = reload(line, [{**ab, "delay": 0.001}])  # b->a missing: the set changed
        assert refused["reloads"] == 2
        assert any("reload refused" in e for e in refused["errors"])
        assert refused["queues"][str(Q_AB)]["delay"] == 0.030  # kept
        rtts, _ = ping_rtts(topo, 10, 0.02)
        # as test_rtt: 1 ms (rtt_within_tolerance's floor) around the raw +0.31..+0.36 ms; ping
        # prints 0.1 ms steps at 40 ms; median of 10
        assert statistics.median(rtts) == pytest.approx(40.0, abs=1.0)
        ok = reload(line, [ab, ba])
        assert ok["reloads"] == 3 and ok["errors"] == []
