"""Live test: one bbr flow through the emulated WAN leaves STARTUP.

With ``wmem: auto`` at 4 x BDP, Linux woke the blocked writer only below 2.67 BDP queued, under
bbr's STARTUP inflight (2.89 BDP): every write found the socket application-limited, bbr never
counted a round towards leaving STARTUP, and its 2.89-BDP inflight overflowed the 1-BDP buffer
(docs/congestion.md, "bbr through the delay line"). 200 Mbit/s x 50 ms one-way is a BDP above the
kernel's 6 MiB floor / 4, where that happened, at a rate a shared 2-core machine carries.
"""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest
from helpers import scenario

from testbed.net import procs

pytestmark = pytest.mark.live

PORT = 5311
STARTUP_GAIN = "2.88672"  # bbr's STARTUP pacing gain as ss prints it


def _bbr_gain(ss_out: str) -> str | None:
    """pacing_gain of the busiest connection in ``ss -tin`` output (the iperf3 data one)."""
    best: tuple[int, str] | None = None
    for block in re.split(r"\n(?=\S)", ss_out):
        acked = re.search(r"bytes_acked:(\d+)", block)
        gain = re.search(r"pacing_gain:([\d.]+)", block)
        if acked and gain and (best is None or int(acked.group(1)) > best[0]):
            best = (int(acked.group(1)), gain.group(1))
    return best[1] if best else None


@pytest.mark.timing
def test_bbr_leaves_startup_with_the_auto_send_buffer(make_testbed):
    tb = make_testbed(
        scenario(
            wan=[{"between": ["east", "west"], "rate": "200mbit", "delay": "50ms"}],
            tcp={"congestion": "bbr"},
        )
    )
    ns = tb.namespace("east-h0")
    server = tb.popen(
        "west-h0",
        ["iperf3", "-s", "-1", "-p", str(PORT), "--forceflush"],
        stdout=subprocess.PIPE,
        text=True,
    )
    gains: list[str] = []
    with procs.ready(server, "iperf3 server on west-h0", "Server listening", substring=True):
        client = tb.popen(
            "east-h0",
            ["iperf3", "-c", "west-h0", "-p", str(PORT), "-t", "7", "-J"],
            stdout=subprocess.PIPE,
            text=True,
        )
        began = time.monotonic()
        while client.poll() is None:
            if time.monotonic() - began > 3.0:  # STARTUP takes ~1 s here; judge what follows
                r = subprocess.run(
                    ["ss", "-N", ns, "-tinH", "dport", "=", str(PORT)],
                    capture_output=True,
                    text=True,
                )
                gain = _bbr_gain(r.stdout)
                if gain is not None:
                    gains.append(gain)
            time.sleep(0.1)
        out, _ = client.communicate(timeout=30)
    end = json.loads(out)["end"]
    assert len(gains) >= 20, gains
    in_startup = gains.count(STARTUP_GAIN) / len(gains)
    # stuck runs showed STARTUP in 12-100% of the samples after 3 s; a free flow shows it only
    # when it restarts after PROBE_RTT (one sample or two).
    # Resolution: one ss sample per >= 0.1 s over the last ~4 s: ~35 samples, each ~3% (5% at
    # the 20 required), so a free flow's one or two read 3-10% and a stuck run's 12% is four
    # samples or more: 0.1 separates them (at 0.2 s samples the two were one sample apart).
    assert in_startup <= 0.1, (in_startup, gains)
    assert end["sum_received"]["bits_per_second"] > 0
    assert not tb.problems()
