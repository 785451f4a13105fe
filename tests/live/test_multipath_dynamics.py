"""Live tests of dynamics on one path of a multipath WAN link (l4 hash): a trace
replays on path 0 through the run's event runner while bulk flows, spread by the gateways' hash,
cross both paths; a schedule step on path 0 changes path 0's shaper and leaves path 1's alone,
with static routing and with BGP + BFD (whose route keeps both paths).
Both drive the real run machinery (testbed.experiment.dynamics.RunDynamics: the clock origin,
the event runner, the link backend, the scenario's bulk flows) on a live testbed."""

from __future__ import annotations

import json
import math
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import class_counters, scenario

from testbed.config.loading import parse_scenario
from testbed.core.frames import FRAME_BYTES, MSS
from testbed.experiment.dynamics import RunDynamics
from testbed.experiment.results import RunResult

pytestmark = pytest.mark.live

PORTS = ("p0-west", "p1-west")  # east's gateway ports: east->west/0 and east->west/1
# the most HTB charges for one packet: a 64 KiB GSO packet, each of its segments a full frame
PACKET = math.ceil(65536 / MSS) * FRAME_BYTES


def traced_scenario(path0: dict[str, Any], seconds: float, flows: int = 10) -> dict[str, Any]:
    """Two clusters of two hosts, one link of two 100 Mbit/s paths (5 and 10 ms) with ``path0``
    on path 0, and ``flows`` bulk flows east -> west for ``seconds``: an l4 hash puts every one
    of them on one path with probability 2^(1 - flows) (1/512 for 10)."""
    paths = [{"rate": "100mbit", "delay": "5ms", **path0}, {"rate": "100mbit", "delay": "10ms"}]
    traffic = [
        {"kind": "bulk", "from": f"east-h{i % 2}", "to": f"west-h{i // 2 % 2}",
         "duration": f"{seconds}s"}
        for i in range(flows)
    ]  # fmt: skip
    return scenario(
        wan=[{"between": ["east", "west"], "paths": paths}],
        routing={"ecmp": {"hash": "l4"}},
        traffic=traffic,
    )


# port, unix time before and after its read, bytes sent, bytes queued
Sample = tuple[str, float, float, int, int]


def run_sampled(
    make_testbed, data: dict[str, Any], run_dir: Path, ports: tuple[str, ...] = PORTS
) -> tuple[list[Sample], list[dict], Any]:
    """Bring ``data`` up and run its dynamics and traffic (RunDynamics, wall clock) while
    reading the HTB counters (sent, queued) of ``ports`` every 50 ms. Returns the samples, the
    events' rows and the testbed."""
    tb = make_testbed(data)
    sc = parse_scenario(data, "test")
    result = RunResult("r0", "ok")
    samples: list[Sample] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            for port in ports:
                t0 = time.time()
                sent, queued = class_counters(tb, port)
                samples.append((port, t0, time.time(), sent, queued))
            done.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        with RunDynamics(tb, sc, run_dir, run_dir / "scenario.yaml", result) as dyn:
            dyn.wait_traffic()
    finally:
        done.set()
        sampler.join(timeout=10)
    assert result.info["events"]["failed"] == 0, result.info
    return samples, result.dynamics["events"], tb


def all_flows_up(run_dir: Path) -> float:
    """When the last of a run's bulk flows began (unix s): a flow's first byte is where its
    receiver's first goodput sample (``flow-<i>.jsonl``, testbed.experiment.flows) began."""
    firsts = [json.loads(p.read_text().splitlines()[0]) for p in run_dir.glob("flow-*.jsonl")]
    assert firsts, f"no flow samples in {run_dir}"
    return max(f["t"] - f["seconds"] for f in firsts)


def rate_between(
    samples: list[Sample], port: str, start: float, end: float
) -> tuple[float, float, float]:
    """The port's mean rate (bit/s) from its first read after ``start`` to its last before
    ``end``, the span between the reads' middles (s), and how far that span may be off: a
    count is taken somewhere inside its read, so each end's time is off by up to half its
    read's duration."""
    inside = [s for s in samples if s[0] == port and s[1] >= start and s[2] <= end]
    first, last = inside[0], inside[-1]
    span = (last[1] + last[2]) / 2 - (first[1] + first[2]) / 2
    slack = (last[2] - last[1] + first[2] - first[1]) / 2
    return 8 * (last[3] - first[3]) / span, span, slack


def line_rate_between(rows: list[dict], start: float, end: float) -> tuple[float, float]:
    """The mean rate (bit/s) through a delay line's bottleneck from its first sample after
    ``start`` to its last before ``end`` (its own time stamps and departed bytes), and the span."""
    inside = [r for r in rows if start <= r["time"] <= end]
    first, last = inside[0], inside[-1]
    span = last["time"] - first["time"]
    return 8 * (last["bytes"] - first["bytes"]) / span, span


@pytest.mark.timing
def test_a_trace_on_one_path_sets_its_rate_while_the_hash_spreads_flows(make_testbed, tmp_path):
    levels = (80e6, 20e6, 60e6, 40e6, 80e6, 30e6)
    rows = "".join(f"{k}s,{r / 1e6:g}mbit\n" for k, r in enumerate(levels))
    (tmp_path / "path0.csv").write_text("t,rate\n" + rows)
    trace = {"file": "path0.csv", "format": "csv", "bin": "1s", "loop": False}
    data = traced_scenario({"trace": trace}, seconds=6.5)
    data["trace"] = {"queues": "20ms"}  # the lines' own samples of what left their queues
    data["backend"] = "userspace"  # whose line holds a traced direction's queue, and counts it
    # path 0's HTB leaf is gone (its line shapes it); path 1's is read by tc
    samples, events, tb = run_sampled(make_testbed, data, tmp_path, ports=("p1-west",))
    # each set takes effect somewhere inside its operation: a bin starts at its operation's end
    # (applied_unix) and ends where the next one's operation began (applied_unix - apply_s)
    applied = sorted(
        (r["event"], r["applied_unix"], r["apply_s"]) for r in events if r["status"] == "applied"
    )
    assert [r["direction"] for r in events] == ["east->west/0"] * len(levels), events
    # A traced direction keeps its queue in the delay line (a zero-rate bin holds it), so
    # path 0's counter is its line's: departed bytes, stamped by the line itself.
    line = [r for r in tb.backend.queue_trace() if r["direction"] == "east->west/0"]
    assert line, "no samples of path 0 line"
    starts = [t for _, t, _ in applied]
    ends = [*(t - took for _, t, took in applied[1:]), starts[-1] + 1.0]
    # the bulk flows' processes start at the origin too (python, a few hundred ms each on a
    # busy host): a bin is measured once bytes flow on the path
    flowing = next(r["time"] for r in line if r["bytes"] > 0)
    # Each bin is measured from 0.3 s after its set was applied (the flows' windows grow into
    # a higher rate within a few RTTs of 5-10 ms; a lower one drains its queue, 1 BDP, in one
    # RTT) to its end. The window's ends are the line's own samples (its clock, bytes counted
    # at departure), so the resolution of one window of span W is what can leave around a
    # sample: one packet the line sends whole (64 KiB, a GSO packet) at each end:
    # bound = 2 x 8 x 64 KiB / W (1.5 Mbit/s for W = 0.7 s).
    # The low end holds where every flow runs: a flow's first byte is where its receiver's first
    # sample began. On a busy host their processes started over 1 s (0 to 0.99 s after the
    # first, two test workers), and a bin before the last of them read 76.88 for 80 Mbit/s.
    up = all_flows_up(tmp_path)
    measured, busy = [], 0
    for level, start, end in zip(levels, starts, ends, strict=True):
        if start + 0.3 < flowing or end > line[-1]["time"]:
            continue  # before the flows, or past what the line has written out so far
        rate, span = line_rate_between(line, start + 0.3, end)
        bound = 2 * 8 * 65536 / span
        measured.append((level / 1e6, round(rate / 1e6, 2), round(bound / 1e6, 2)))
        assert rate <= level + bound, measured  # the shaper never exceeds the bin's rate
        if start + 0.3 >= up:  # and the flows on the path, all running, keep it busy
            busy += 1
            assert rate >= level - bound, (measured, up - starts[0])
    assert busy >= 3, (measured, up - starts[0])  # a fall and a rise at least
    # the other path carried flows throughout (the hash spread them) at its own rate: its HTB
    # counter read by tc, within the resolution derived in the schedule test below
    rate1, span1, slack1 = rate_between(samples, "p1-west", max(starts[0], flowing) + 0.3, ends[-1])
    shown1 = tb.run("east-gw", ["tc", "class", "show", "dev", "p1-west"]).stdout
    burst1 = int(re.search(r"burst (\d+)b", shown1)[1])
    assert 5e6 < rate1 <= htb_bound(100e6, span1, slack1, burst1)[1], (rate1, measured)
    print("trace levels, measured, bound (Mbit/s):", measured, "path 1:", rate1 / 1e6)


def htb_bound(level: float, span: float, slack: float, burst: int) -> tuple[float, float]:
    """The range an HTB class shaping at ``level`` bit/s can show over a window of ``span`` s
    measured with ``slack`` s of uncertainty (rate_between), while flows keep it busy.

    The span's error scales the rate (level x slack / span). Over the window the class sends
    level x span plus the tokens its bucket held at the start less those at the end, and a
    bucket holds between minus one packet (a whole GSO packet is charged at once, ``PACKET``)
    and ``burst`` (tc's ``burst``: tokens saved while a dequeue waited on a late timer). So
    either end is off by up to 8 x (burst + PACKET) / span: 1.1 Mbit/s over 1 s at 100 Mbit/s.
    Below the low end the class lost time: its flows left it idle, or a dequeue came later
    than its bucket covers (5.4 ms at 100 Mbit/s)."""
    off = level * slack / span + 8 * (burst + PACKET) / span
    return level - off, level + off


BGP = {"mode": "bgp", "bgp": {"bfd": {"interval": "50ms", "multiplier": 3}}}


@pytest.mark.timing
@pytest.mark.parametrize("routing", [{}, BGP], ids=["static", "bgp"])
def test_a_schedule_step_on_one_path_changes_that_path_only(make_testbed, tmp_path, routing):
    steps = [{"at": "3s", "rate": "20mbit"}]
    data = traced_scenario({"schedule": steps}, seconds=4.5)
    data["routing"] |= routing
    samples, events, tb = run_sampled(make_testbed, data, tmp_path)
    # the step names path 0 (both its directions); nothing acts on path 1
    assert sorted(r["direction"] for r in events) == ["east->west/0", "west->east/0"], events
    # the step on p0-west (east->west/0) takes effect somewhere inside its operation: "before"
    # ends where the operation began, "after" starts from where it ended
    (step,) = (r for r in events if r["direction"] == "east->west/0")
    at, began = step["applied_unix"], step["applied_unix"] - step["apply_s"]
    shown0 = tb.run("east-gw", ["tc", "class", "show", "dev", "p0-west"]).stdout
    shown1 = tb.run("east-gw", ["tc", "class", "show", "dev", "p1-west"]).stdout
    assert "rate 20Mbit" in shown0 and "rate 100Mbit" in shown1, (shown0, shown1)
    burst0, burst1 = (int(re.search(r"burst (\d+)b", t)[1]) for t in (shown0, shown1))
    # 1 s before the step (the flows' processes start within the first 1.5 s on a busy host)
    # and from 0.3 s after it (path 0's queue of 1 BDP drains at 20 Mbit/s in 0.1 s) on
    before0, span, slack = rate_between(samples, "p0-west", began - 1.0, began)
    lo, hi = htb_bound(100e6, span, slack, burst0)
    assert lo <= before0 <= hi, (before0, lo, hi)
    after0, span, slack = rate_between(samples, "p0-west", at + 0.3, at + 1.3)
    lo, hi = htb_bound(20e6, span, slack, burst0)
    assert lo <= after0 <= hi, (before0, after0, lo, hi)
    # path 1 keeps its rate through the step
    before1, span, slack = rate_between(samples, "p1-west", began - 1.0, began)
    lo, hi = htb_bound(100e6, span, slack, burst1)
    assert lo <= before1 <= hi, (before1, lo, hi)
    after1, span, slack = rate_between(samples, "p1-west", at + 0.3, at + 1.3)
    lo, hi = htb_bound(100e6, span, slack, burst1)
    # the low end assumes the class busy all along: the bytes it held at each read say whether
    # it was
    queued = [s[4] for s in samples if s[0] == "p1-west" and at + 0.3 <= s[1] <= at + 1.3]
    assert lo <= after1 <= hi, (after1, lo, hi, queued)
    if routing:  # BGP: a slower path is still a path; its sessions and BFD stay up
        shown = tb.run("east-gw", ["ip", "route", "show", "proto", "bgp"]).stdout
        assert shown.count("nexthop via") == 2, shown
    print("Mbit/s path 0 before/after:", before0 / 1e6, after0 / 1e6,
          "path 1 before/after:", before1 / 1e6, after1 / 1e6)  # fmt: skip
