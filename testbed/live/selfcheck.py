"""The link self-check: per WAN direction, measured RTT, capacity and TCP goodput against the plan.

Three probes between the first host of each cluster, one after the other:

- RTT, idle: median and p99 of ``pings`` UDP echoes (traffic.udpping), with the direction's RTT
  compensation made at bring-up (testbed.plan.compensation).
- Capacity: paced UDP a little above the link's rate (traffic.udprate), counted by the receiver
  over a window whose edges are kernel receive timestamps: what the link carries, whatever TCP
  does; above SELFCHECK_LEAK of the rate on CAPACITY_PROBES probes in a row the emulation leaks
  and the run fails, below SELFCHECK_CAPACITY_LOW on as many it carries too little.
- TCP goodput: one bulk flow (traffic.bulk) started with an initial window of one BDP and fixed
  socket buffers, so a long fat link is full within a few round trips; the ceiling is rate x
  1448/1514 (1398/1464 at MTU 1450).

A path of a multipath link is checked on that path: host routes in both gateways hold the
probes on it while they run (testbed.plan.pathpin), whatever the gateways' hash would pick.

``size_probes`` (pure) sizes the probes; ``judge`` (pure) is the flag rule. Any live network
(testbed.live.protocol.LiveNetwork) can be checked; the rows go to ``links.parquet``.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass

from testbed.core.direction import Direction
from testbed.core.errors import NetError
from testbed.core.frames import MSS, UDP_IP_HEADERS
from testbed.core.stats import quantile
from testbed.core.vocab import SELFCHECK_CAPACITY_LOW, SELFCHECK_LEAK, SELFCHECK_TOLERANCE
from testbed.live.protocol import LiveNetwork
from testbed.plan.compensation import configured_one_way
from testbed.plan.model import NetworkPlan, WanDirection
from testbed.plan.pathpin import PinRoute, pin_routes
from testbed.plan.sizing import htb_burst

SELFCHECK_PORT = 5299
RTT_PORT = 5298
CAPACITY_PORT = 5297
OVERDRIVE = 1.05  # the capacity probe sends at least this multiple of the rate
BURST_DRAIN = 0.25  # s: the overdrive empties the shaper's full token bucket within this
PING_INTERVAL = 0.02


@dataclass(frozen=True)
class ProbeSizes:
    """How long each probe of one direction runs (seconds) and how the TCP probe starts."""

    capacity_overdrive: float  # the capacity probe sends this multiple of the rate
    capacity_skip: float  # after the first datagram, before the window opens
    capacity_window: float
    capacity_send: float  # the sender's duration: skip + window + a margin
    tcp_warmup: float
    tcp_duration: float  # the sender's duration: warm-up + window
    initcwnd: int  # segments: one BDP, at least the kernel's 10
    mark_spacing: float  # between the receiver's window-start candidates (bulk.MARKS of them)
    buffer: int  # bytes of each TCP probe socket buffer


def size_probes(rate: float, rtt: float, window: float = 1.0, burst: int = 0) -> ProbeSizes:
    """Probe lengths for a link of ``rate`` bit/s and round trip ``rtt`` s; ``window`` is the TCP
    measurement after the last window-start candidate. With a BDP-sized initial window the flow
    fills the link one round trip after the handshake; the slow-start overshoot's losses are
    repaired within the next two, which the receiver's candidates (RTT/2 apart) step over.

    ``burst`` (bytes) is the shaper's token bucket, full after idle: sent at ``overdrive`` x rate,
    it lets (overdrive - 1) x rate more through until it is empty, so the capacity window opens
    only after that (a 67 kB bucket at 50 Mbit/s took 0.21 s at 1.05 x and read 101.1% in a
    0.5 s window opened after 0.1 s)."""
    bdp = rate * rtt / 8
    spacing = max(rtt / 2, 0.05)
    warmup = rtt + 0.1
    overdrive = max(OVERDRIVE, 1 + burst * 8 / (rate * BURST_DRAIN))
    skip = max(0.1, 1.2 * burst * 8 / ((overdrive - 1) * rate))
    return ProbeSizes(
        capacity_overdrive=overdrive,
        capacity_skip=skip,
        capacity_window=0.5,
        capacity_send=rtt / 2 + skip + 0.5 + 0.2,
        tcp_warmup=warmup,
        tcp_duration=warmup + 4 * spacing + window,
        initcwnd=max(10, math.ceil(bdp / MSS)),
        mark_spacing=spacing,
        # room for the BDP in flight and a BDP of bottleneck queue, twice over
        buffer=max(4 << 20, math.ceil(4 * bdp)),
    )


def rtt_within_tolerance(measured: float, configured: float) -> bool:
    """The self-check's RTT rule (seconds): within SELFCHECK_TOLERANCE of the configured RTT,
    or 1 ms."""
    return abs(measured - configured) <= max(SELFCHECK_TOLERANCE * configured, 0.001)


# A leak or a shortfall must show on this many capacity probes in a row. The window's edges are
# kernel receive stamps, but on a busy host the receiving namespace's softirq can stamp the first
# counted datagram late: 5 ms of that is SELFCHECK_LEAK's 1% of the 0.5 s window, read as a leak
# (seen beside a second test worker, 101.1%). And the shaper's queue holds ~10 ms at the rate,
# filled at the probe's 5% above it: a sender descheduled longer than that leaves the link idle
# (seen at a 36% saturated share, across machines: 94.4% in a probe whose sender averaged over
# the rate, the TCP probe after it 99.998%). A real leak or shortfall shows on every probe; a
# late stamp or a stalled sender on one window.
CAPACITY_PROBES = 2
# A TCP reading above SELFCHECK_LEAK whose connection had received data out of order before
# every window start (tcpi_rcv_ooopack, a count since the connection began: a loss repaired
# then, or still being repaired, whose held data lands inside the window and reads high) is probed
# once more: a correct 100 Mbit/s, 40 ms link read 104.3% once beside a second test worker, the
# capacity probe 100.0%.
TCP_PROBES = 2


def out_of_order_before_every_start(marks: list[dict]) -> bool:
    """Whether the TCP probe's connection had received data out of order before each of its
    window starts (``marks``: traffic.bulk's, each with tcpi_rcv_ooopack as ``ooo_packets``)."""
    return bool(marks) and all((m.get("ooo_packets") or 0) > 0 for m in marks)


def probe_tcp_again(ratio: float, repairing: bool) -> bool:
    """Whether a TCP reading (``ratio`` to its ceiling) is probed once more: above SELFCHECK_LEAK
    with out-of-order data before every window start (``repairing``), a loss repair's held data
    may have landed inside the window."""
    return ratio > SELFCHECK_LEAK and repairing


def _off(ratio: float) -> float:
    """How far a capacity reading is from the rate, either way (by its log; 0 is farthest)."""
    return abs(math.log(ratio)) if ratio > 0 else math.inf


def judge(
    capacity_ratio: float | None, goodput_ratio: float | None, repairing: bool = False
) -> list[str]:
    """The flag rule for one direction's capacity and TCP goodput (ratios to their ceilings).
    ``repairing``: the TCP probe's connection had received data out of order before every
    window start (a loss repair, whose held data lands inside the window and reads high, may
    have been under way); such a reading above SELFCHECK_LEAK is a flag, not a leak, when the
    capacity probe found none."""
    problems = []
    if capacity_ratio is None:
        problems.append("capacity probe gave no result")
    elif capacity_ratio > SELFCHECK_LEAK:
        problems.append(
            f"LEAK: the link carries {capacity_ratio:.1%} of its rate (the emulation does not "
            "hold the configured rate)"
        )
    elif capacity_ratio < SELFCHECK_CAPACITY_LOW:
        problems.append(f"capacity {capacity_ratio:.1%} of the configured rate")
    if goodput_ratio is not None:
        if probe_tcp_again(goodput_ratio, repairing) and (capacity_ratio or 0) <= SELFCHECK_LEAK:
            problems.append(
                f"TCP goodput read {goodput_ratio:.1%} of the configured ceiling with data "
                "received out of order (a loss repair) before every window start (not a leak: "
                f"the capacity probe read {capacity_ratio or 0:.1%})"
            )
        elif goodput_ratio > SELFCHECK_LEAK:
            problems.append(f"LEAK: TCP goodput {goodput_ratio:.1%} of the configured ceiling")
        elif goodput_ratio < 1 - SELFCHECK_TOLERANCE:
            problems.append(f"TCP goodput {goodput_ratio:.1%} of the configured ceiling")
    return problems


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
    capacity_configured_bps: float | None = None
    capacity_bps: float | None = None
    capacity_ratio: float | None = None
    capacity_window_s: float | None = None
    goodput_window_s: float | None = None
    initcwnd: int | None = None
    seconds: float | None = None
    leak: bool = False  # the link carried more than SELFCHECK_LEAK x its ceiling: fails the run
    # RTT compensation of this direction (testbed.plan.compensation), one way, seconds; None
    # when the testbed did not compensate (no delay anywhere, or turned off)
    delay_configured_s: float | None = None
    delay_emulated_s: float | None = None
    floor_s: float | None = None
    compensation_s: float | None = None

    def row(self) -> dict:
        return asdict(self)


def configured_rtt(plan: NetworkPlan, d: WanDirection) -> float:
    """Round trip between hosts of ``d.src`` and ``d.dst``: both WAN directions and the fabric
    delays of both clusters, each crossed twice. A path of a multipath link comes back on the
    same path (the self-check holds its probes there)."""
    reverse = str(Direction.parse(d.name).reverse())
    back = next(w for w in plan.wan if w.name == reverse)
    return configured_one_way(plan, d) + configured_one_way(plan, back)


def configured_rate(plan: NetworkPlan, d: WanDirection) -> int:
    """The HTB rate (bit/s of Ethernet frames) of the slowest hop between the two checked hosts."""
    ends = {plan.host(f"{c}-h0").ns for c in (d.src, d.dst)}
    return min([d.rate] + [p.rate for p in plan.fabric if p.rate and p.ns in ends])


def configured_goodput(plan: NetworkPlan, d: WanDirection) -> float:
    """The HTB ceiling of the slowest hop between the two checked hosts."""
    return configured_rate(plan, d) * plan.goodput_factor


def measure_rtt(
    tb: LiveNetwork, src: str, dst: str, pings: int, interval: float = 0.05
) -> list[float]:
    """Round-trip times in seconds of ``pings`` UDP probes (microsecond resolution)."""
    return probe_rtt(tb, src, dst, pings, interval)["rtts"]


def _server(tb: LiveNetwork, host: str, module: str, *args: str):
    """``python -m module serve args`` inside ``host`` once it printed READY (a context: its
    ``communicate()`` gives what it wrote after, it is stopped on the way out)."""
    return tb.serving(host, module, "serve", *args)


def _client(tb: LiveNetwork, host: str, module: str, args: list[str], timeout: float) -> dict:
    """Run ``python -m module args`` inside ``host``; its JSON output line."""
    r = tb.run(host, [sys.executable, "-m", module, *args], timeout=timeout)
    if r.returncode != 0:
        raise NetError(f"{module} on {host} failed: {r.stderr.strip()[-300:]}")
    return json.loads(r.stdout)


def probe_rtt(tb: LiveNetwork, src: str, dst: str, count: int, interval: float) -> dict:
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


def measure_goodput(
    tb: LiveNetwork,
    src: str,
    dst: str,
    duration: float,
    warmup: float | None = None,
    buffer: int = 0,
    spacing: float = 0.05,
) -> dict:
    """One bulk TCP flow ``src`` -> ``dst``: the receiver's JSON plus the sender's as 'sender'."""
    if warmup is None:
        warmup = min(1.0, duration / 3)
    port = ["--port", str(SELFCHECK_PORT)]
    fixed = ["--buffer", str(buffer)] if buffer else []
    serve = [*port, "--warmup", str(warmup), "--spacing", str(spacing), *fixed]
    with _server(tb, dst, "traffic.bulk", *serve) as server:
        args = ["send", "--host", dst, *port, "--duration", str(duration), *fixed]
        sent = _client(tb, src, "traffic.bulk", args, timeout=duration + 60)
        line, _ = server.communicate(timeout=30)
        return {**json.loads(line), "sender": sent}


def measure_capacity(tb: LiveNetwork, src: str, dst: str, rate: float, sizes: ProbeSizes) -> dict:
    """Paced UDP ``src`` -> ``dst`` above ``rate``: the receiver's JSON, the sender's
    as 'sender'."""
    assert tb.plan is not None
    # datagrams as large as the interfaces carry (1450 when VXLAN cables cross machines)
    port = ["--port", str(CAPACITY_PORT), "--payload", str(tb.plan.interface_mtu - UDP_IP_HEADERS)]
    window = ["--skip", str(sizes.capacity_skip), "--window", str(sizes.capacity_window)]
    with _server(tb, dst, "traffic.udprate", *port, *window) as server:
        args = ["send", "--host", dst, *port, "--rate", str(rate * sizes.capacity_overdrive)]
        args += ["--duration", str(sizes.capacity_send)]
        sent = _client(tb, src, "traffic.udprate", args, timeout=sizes.capacity_send + 60)
        line, _ = server.communicate(timeout=30)
        return {**json.loads(line), "sender": sent}


@contextlib.contextmanager
def initial_window(tb: LiveNetwork, src: str, dst: str, segments: int) -> Iterator[None]:
    """Host routes ``src`` -> ``dst`` with ``initcwnd`` and back with ``initrwnd`` of
    ``segments``, for the length of the block (the testbed's own routes are left untouched)."""
    added: list[tuple[str, list[str]]] = []
    try:
        for host, peer, metric in ((src, dst, "initcwnd"), (dst, src, "initrwnd")):
            address = tb.hosts[peer]
            got = tb.run(host, ["ip", "-o", "route", "get", address]).stdout.split()
            via = ["via", got[got.index("via") + 1]] if "via" in got else []
            dev = ["dev", got[got.index("dev") + 1]]
            route = [f"{address}/32", *via, *dev]
            r = tb.run(host, ["ip", "route", "replace", *route, metric, str(segments)])
            if r.returncode != 0:
                raise NetError(f"route with {metric} on {host}: {r.stderr.strip()}")
            added.append((host, route))
        yield
    finally:
        for host, route in added:
            tb.run(host, ["ip", "route", "del", *route])


@contextlib.contextmanager
def on_path(tb: LiveNetwork, d: WanDirection, src: str, dst: str) -> Iterator[None]:
    """Traffic ``src`` <-> ``dst`` held on ``d``'s path for the length of the block (host
    routes in both gateways, testbed.plan.pathpin; nothing for a link with one path), deleted
    on the way out, also after an error."""
    assert tb.plan is not None
    added: list[PinRoute] = []
    try:
        for r in pin_routes(tb.plan, d, src, dst):
            got = tb.run(r.gateway, r.add_argv())
            if got.returncode != 0:
                raise NetError(f"{' '.join(r.add_argv())} in {r.gateway}: {got.stderr.strip()}")
            added.append(r)
        yield
    finally:
        for r in reversed(added):
            tb.run(r.gateway, r.del_argv())


def check_direction(
    tb: LiveNetwork, d: WanDirection, duration: float = 1.0, pings: int = 20
) -> LinkCheck:
    """Check one WAN direction; ``duration`` is the TCP probe's window after its warm-up. The
    probes of a multipath link's path cross that path (``on_path``)."""
    src, dst = f"{d.src}-h0", f"{d.dst}-h0"
    with on_path(tb, d, src, dst):
        return _check(tb, d, src, dst, duration, pings)


def _check(
    tb: LiveNetwork, d: WanDirection, src: str, dst: str, duration: float, pings: int
) -> LinkCheck:
    """``check_direction``'s probes, ``src`` -> ``dst``."""
    plan = tb.plan
    assert plan is not None
    began = time.monotonic()
    rtt_conf = configured_rtt(plan, d)
    rate = configured_rate(plan, d)
    good_conf = configured_goodput(plan, d)
    sizes = size_probes(rate, rtt_conf, duration, burst=htb_burst(rate))
    capacity_conf = rate * (1 - d.loss)  # the emulated random loss is part of the plan
    problems = []
    samples = measure_rtt(tb, src, dst, pings, PING_INTERVAL)
    median = quantile(samples, 0.5) if samples else None
    p99 = quantile(samples, 0.99) if samples else None
    if median is None:  # no samples
        problems.append("no ping replies")
    elif not rtt_within_tolerance(median, rtt_conf):
        problems.append(f"RTT {median * 1e3:.2f} ms vs configured {rtt_conf * 1e3:.2f} ms")
    capacity = capacity_ratio = capacity_window = None
    try:
        for _ in range(CAPACITY_PROBES):
            cap = measure_capacity(tb, src, dst, rate, sizes)
            if cap["socket_drops"]:
                drops = cap["socket_drops"]
                problems.append(f"capacity probe: {drops} datagrams dropped by the receiver")
                break
            if cap["sender"]["send_rate_bps"] < rate:
                problems.append("capacity probe: the sender could not reach the link's rate")
                break
            if cap["rate_bps"] is None:
                break
            ratio_now = cap["rate_bps"] / capacity_conf
            # the reading nearest the rate stands: a flag needs every probe outside the band
            if capacity_ratio is None or _off(ratio_now) < _off(capacity_ratio):
                capacity, capacity_window = cap["rate_bps"], cap["seconds"]
                capacity_ratio = ratio_now
            if SELFCHECK_CAPACITY_LOW <= capacity_ratio <= SELFCHECK_LEAK:
                break
    except (NetError, ValueError, OSError, KeyError) as exc:
        problems.append(f"capacity probe: {exc}")
    goodput = ratio = window = None
    repairing = False
    congestion = ""
    try:
        for _ in range(TCP_PROBES):
            with initial_window(tb, src, dst, sizes.initcwnd):
                result = measure_goodput(
                    tb, src, dst, sizes.tcp_duration, sizes.tcp_warmup, sizes.buffer,
                    sizes.mark_spacing,
                )  # fmt: skip
            congestion = result["sender"]["congestion"]
            if result["steady_goodput_bps"] is None:
                problems.append("TCP probe: no data after the warm-up")
                break
            ratio_now = result["steady_goodput_bps"] / good_conf
            # the reading nearest the ceiling stands (a high one after a repair is probed again)
            if ratio is None or _off(ratio_now) < _off(ratio):
                goodput, ratio = result["steady_goodput_bps"], ratio_now
                window = result["seconds"] - max(m["t"] for m in result["marks"])
                repairing = out_of_order_before_every_start(result["marks"])
            if not probe_tcp_again(ratio, repairing):
                break
    except (NetError, ValueError, OSError) as exc:
        problems.append(str(exc))
    if capacity_ratio is not None or not any(p.startswith("capacity probe") for p in problems):
        problems += judge(capacity_ratio, ratio, repairing)
    else:
        problems += judge(1.0, ratio)  # the probe failed (said above); judge TCP alone
    comp = tb.compensation_of(d.name)
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
        capacity_configured_bps=capacity_conf,
        capacity_bps=capacity,
        capacity_ratio=capacity_ratio,
        capacity_window_s=capacity_window,
        goodput_window_s=window,
        initcwnd=sizes.initcwnd,
        seconds=time.monotonic() - began,
        leak=any(p.startswith("LEAK") for p in problems),
        delay_configured_s=comp.configured_s if comp else None,
        delay_emulated_s=comp.emulated_s if comp else None,
        floor_s=comp.floor_s if comp else None,
        compensation_s=comp.compensation_s if comp else None,
    )


def check_links(
    tb: LiveNetwork, duration: float = 1.0, pings: int = 20, progress=None
) -> list[LinkCheck]:
    """Check every WAN direction one after the other (so they do not share the CPU)."""
    assert tb.plan is not None
    out = []
    for d in tb.plan.wan:
        out.append(check_direction(tb, d, duration, pings))
        if progress:
            progress(d)
    return out
