"""The link self-check: per WAN direction, measured RTT and TCP goodput against the configuration.

RTT is measured idle with ping (median and p99 of ``pings`` echoes) between the first host of each
cluster; goodput with one bulk TCP flow for ``duration`` seconds, counted by the receiver after a
warm-up (slow start excluded). The configured goodput is the HTB ceiling: rate x 1448/1514, the
TCP payload share of a full-size frame. Any run can call it; its rows go to ``links.parquet``.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass

from testbed.core.errors import NetError
from testbed.core.frames import GOODPUT_FACTOR
from testbed.core.stats import quantile
from testbed.net import procs
from testbed.plan.topology import NetworkPlan, WanDirection
from testbed.run.testbed import Testbed

SELFCHECK_PORT = 5299
RTT_PORT = 5298
TOLERANCE = 0.10  # a direction is flagged when RTT or goodput is off by more than this


@dataclass
class LinkCheck:
    direction: str
    src_host: str
    dst_host: str
    rtt_configured_s: float
    rtt_median_s: float | None
    rtt_p99_s: float | None
    rtt_samples: int
    goodput_configured_bps: float
    goodput_bps: float | None
    goodput_ratio: float | None
    congestion: str
    ok: bool
    problem: str = ""

    def row(self) -> dict:
        return asdict(self)


def configured_rtt(plan: NetworkPlan, d: WanDirection) -> float:
    """Round trip between hosts of ``d.src`` and ``d.dst``: both WAN directions and the fabric
    delays of both clusters, each crossed twice."""
    back = next(w for w in plan.wan if w.src == d.dst and w.dst == d.src)
    fabric = {p.ns: p.delay for p in plan.fabric}
    host_delays = sum(
        fabric.get(plan.host(f"{c}-h0").ns, 0.0) + fabric.get(f"{plan.prefix}-{c}-gw", 0.0)
        for c in (d.src, d.dst)
    )
    return d.delay + back.delay + host_delays


def configured_goodput(plan: NetworkPlan, d: WanDirection) -> float:
    """The HTB ceiling of the slowest hop between the two checked hosts."""
    ends = {plan.host(f"{c}-h0").ns for c in (d.src, d.dst)}
    rates = [d.rate] + [p.rate for p in plan.fabric if p.rate and p.ns in ends]
    return min(rates) * GOODPUT_FACTOR


def measure_rtt(tb: Testbed, src: str, dst: str, pings: int, interval: float = 0.05) -> list[float]:
    """Round-trip times in seconds of ``pings`` UDP probes (microsecond resolution)."""
    return probe_rtt(tb, src, dst, pings, interval)["rtts"]


@contextlib.contextmanager
def _server(tb: Testbed, host: str, module: str, *args: str) -> Iterator[subprocess.Popen]:
    """``python -m module serve args`` inside ``host``, yielded once it printed READY."""
    server = tb.python(
        host, module, "serve", *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    with procs.ready(server, f"{module} server on {host}"):
        yield server


def _client(tb: Testbed, host: str, module: str, args: list[str], timeout: float) -> dict:
    """Run ``python -m module args`` inside ``host``; its JSON output line."""
    r = tb.run(host, [sys.executable, "-m", module, *args], timeout=timeout)
    if r.returncode != 0:
        raise NetError(f"{module} on {host} failed: {r.stderr.strip()[-300:]}")
    return json.loads(r.stdout)


def probe_rtt(tb: Testbed, src: str, dst: str, count: int, interval: float) -> dict:
    """Run the UDP prober ``src`` -> echo server on ``dst``; its JSON result (see udpping)."""
    with _server(tb, dst, "traffic.udpping", "--port", str(RTT_PORT)):
        args = [
            "probe",
            "--host",
            dst,
            "--port",
            str(RTT_PORT),
            "--count",
            str(count),
            "--interval",
            str(interval),
        ]
        return _client(tb, src, "traffic.udpping", args, timeout=60 + count * interval)


def measure_goodput(tb: Testbed, src: str, dst: str, duration: float) -> dict:
    """One bulk TCP flow ``src`` -> ``dst``: the receiver's JSON plus the sender's as 'sender'."""
    warmup = min(1.0, duration / 3)
    port = ["--port", str(SELFCHECK_PORT)]
    with _server(tb, dst, "traffic.bulk", *port, "--warmup", str(warmup)) as server:
        args = ["send", "--host", dst, *port, "--duration", str(duration)]
        sent = _client(tb, src, "traffic.bulk", args, timeout=duration + 60)
        line, _ = server.communicate(timeout=30)
        return {**json.loads(line), "sender": sent}


def check_direction(
    tb: Testbed, d: WanDirection, duration: float = 3.0, pings: int = 20
) -> LinkCheck:
    plan = tb.plan
    assert plan is not None
    src, dst = f"{d.src}-h0", f"{d.dst}-h0"
    rtt_conf = configured_rtt(plan, d)
    good_conf = configured_goodput(plan, d)
    problems = []
    samples = measure_rtt(tb, src, dst, pings)
    median = quantile(samples, 0.5) if samples else None
    p99 = quantile(samples, 0.99) if samples else None
    if not samples:
        problems.append("no ping replies")
    elif abs(median - rtt_conf) > max(TOLERANCE * rtt_conf, 0.001):
        problems.append(f"RTT {median * 1e3:.2f} ms vs configured {rtt_conf * 1e3:.2f} ms")
    goodput = ratio = None
    congestion = ""
    try:
        result = measure_goodput(tb, src, dst, duration)
        goodput = result["steady_goodput_bps"] or result["goodput_bps"]
        congestion = result["sender"]["congestion"]
        ratio = goodput / good_conf
        if ratio < 1 - TOLERANCE:
            problems.append(f"goodput {ratio:.0%} of the configured ceiling")
    except (NetError, ValueError, OSError) as exc:
        problems.append(str(exc))
    return LinkCheck(
        direction=d.name,
        src_host=src,
        dst_host=dst,
        rtt_configured_s=rtt_conf,
        rtt_median_s=median,
        rtt_p99_s=p99,
        rtt_samples=len(samples),
        goodput_configured_bps=good_conf,
        goodput_bps=goodput,
        goodput_ratio=ratio,
        congestion=congestion,
        ok=not problems,
        problem="; ".join(problems),
    )


def check_links(
    tb: Testbed, duration: float = 3.0, pings: int = 20, progress=None
) -> list[LinkCheck]:
    """Check every WAN direction one after the other (so they do not share the CPU)."""
    assert tb.plan is not None
    out = []
    for d in tb.plan.wan:
        out.append(check_direction(tb, d, duration, pings))
        if progress:
            progress(d)
    return out
