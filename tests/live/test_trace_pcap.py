"""Live tests of testbed.trace.pcap: tcpdump on the WAN wire namespace, parsed by analysis.flows."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from helpers import scenario

from analysis.flows import flow_summary, flows_from_pcap
from testbed.live.selfcheck import SELFCHECK_PORT, measure_goodput
from testbed.net import registry
from testbed.trace.pcap import CaptureError, CaptureSpec, PcapCapture

if TYPE_CHECKING:
    from testbed.live.network import Network

pytestmark = pytest.mark.live
RATE = 50e6


def wan(**extra) -> dict:
    return scenario(wan=[{"between": ["east", "west"], "rate": "50mbit", "delay": "5ms", **extra}])


def wire_specs(tb: Network, out: Path) -> list[CaptureSpec]:
    """Both interfaces of the east->west wire: where packets enter it and where they leave."""
    d = tb.plan.wan[0]
    im = d.impairment
    return [
        CaptureSpec(im.ns, im.ingress_if, out / "in.pcap", f"{d.name}@{im.ingress_if}"),
        CaptureSpec(im.ns, im.egress_if, out / "out.pcap", f"{d.name}@{im.egress_if}"),
    ]


def assert_gone(pids: list[int]) -> None:
    left = [pid for pid in pids if registry.process_start(pid) is not None]
    assert not left, f"tcpdump processes still running: {left}"


def bulk_summary(tb: Network, stats: list[dict]) -> dict[str, dict]:
    """Per capture label: the summary row of the bulk flow east-h0 -> west-h0."""
    src, dst = tb.hosts["east-h0"], tb.hosts["west-h0"]
    out = {}
    for s in stats:
        summary = flow_summary(flows_from_pcap(s["path"], label=s["label"]))
        rows = summary[(summary["src"] == src) & (summary["dst"] == dst)]
        rows = rows[rows["dport"] == SELFCHECK_PORT]
        assert len(rows) == 1, f"bulk flow not in {s['label']}: {summary[['flow', 'packets']]}"
        out[s["label"]] = rows.iloc[0].to_dict()
    return out


def retrans_segs(tb: Network, host: str) -> int:
    """The kernel's count of retransmitted TCP segments in ``host``'s namespace."""
    lines = tb.run(host, ["cat", "/proc/net/snmp"], check=True).stdout.splitlines()
    names, values = (line.split() for line in lines if line.startswith("Tcp:"))
    return int(values[names.index("RetransSegs")])


@pytest.mark.timing
def test_bulk_flow_is_captured_at_its_rate_without_retransmissions(make_testbed, tmp_path):
    # Drop-tail would drop the end of slow start (cubic overshoots a 1-BDP buffer): a receive
    # window of at most 512 KiB cannot fill a 1 MiB buffer, so this run has no loss at all.
    tb = make_testbed(wan(buffer="1MiB") | {"tcp": {"rmem": "512KiB"}})
    before = time.time()
    with PcapCapture(wire_specs(tb, tmp_path), record=tb.record) as cap:
        pids = cap.pids
        recorded = {pid for pid, _, _ in tb.record.processes}
        assert set(pids) <= recorded  # `testbed clean` can end them by recorded id
        measure_goodput(tb, "east-h0", "west-h0", duration=2.0)
    after = time.time()
    assert_gone(pids)
    assert retrans_segs(tb, "east-h0") == 0  # the premise: the kernel retransmitted nothing
    for s in cap.stats:
        assert s["packets"] > 100 and not s["truncated"], s
        assert s["dropped_by_kernel"] == 0, s
        assert s["bytes"] <= 24 + s["packets"] * (128 + 16), s
    for label, row in bulk_summary(tb, cap.stats).items():
        # Time stamps are on time.time()'s clock.
        assert before <= row["start"] <= row["start"] + row["duration"] <= after + 0.1, row
        # the ceiling is 50 x 1448/1514 = 47.8 Mbit/s. Upper 52 (1.088 x it): the ingress capture
        # spans the flow less its queue's drain (<= 512 KiB window = 4% of 2 s at 50 Mbit/s) +
        # HTB's burst (66 KB, 0.5%). Lower 35 (0.73 x): handshake, slow start and the last
        # window inside the ~2 s span. pcap stamps are us. No RESULTS.md spread for this run.
        assert 35e6 <= row["mean_throughput_bps"] <= 52e6, (label, row)
        assert row["retransmissions"] == 0, (label, row)
        assert row["wire_packets"] >= row["packets"], row  # GSO packets count as several


def test_loss_shows_as_retransmissions_the_kernel_counts_too(make_testbed, tmp_path):
    tb = make_testbed(wan(loss="1%"))
    wire = wire_specs(tb, tmp_path)[0]
    host = CaptureSpec(tb.namespace("east-h0"), "eth0", tmp_path / "host.pcap", "east-h0@eth0")
    with PcapCapture([wire, host], record=tb.record) as cap:
        measure_goodput(tb, "east-h0", "west-h0", duration=1.5)
    assert_gone([s["pid"] for s in cap.stats])
    rows = bulk_summary(tb, cap.stats)
    assert rows[wire.label]["retransmissions"] > 0, rows[wire.label]
    assert 0 < rows[wire.label]["retransmission_share"] < 0.2, rows[wire.label]
    # At the sender every retransmitted segment passes eth0 (the wire misses those the shaper
    # drops again): retransmitted payload in MSS-sized segments is what the kernel counted.
    segments = rows[host.label]["retransmitted_bytes"] / 1448  # MSS 1460 - 12 timestamp bytes
    assert segments == pytest.approx(retrans_segs(tb, "east-h0"), rel=0.05)


def test_size_cap_stops_the_capture_and_reports_truncation(make_testbed, tmp_path):
    tb = make_testbed(wan())
    cap = PcapCapture(wire_specs(tb, tmp_path)[:1], max_bytes=50 * (128 + 16), record=tb.record)
    assert cap.max_packets == 50
    cap.start()
    pids = cap.pids
    try:
        r = tb.run("east-h0", ["ping", "-n", "-q", "-c", "40", "-i", "0.01", "west-h0"])
        assert r.returncode == 0, r.stdout + r.stderr
        # 40 requests in and 40 replies out of to-east: tcpdump must end by itself at 50.
        deadline = time.monotonic() + 5
        while cap.running[0].proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cap.running[0].proc.poll() is not None, "tcpdump did not stop at its cap"
    finally:
        (stats,) = cap.stop()
    assert_gone(pids)
    assert stats["truncated"] and stats["packets"] == 50, stats
    assert stats["bytes"] <= 24 + 50 * (128 + 16), stats


def test_a_bad_interface_fails_with_its_name_and_leaves_nothing(make_testbed, tmp_path):
    tb = make_testbed(wan())
    good, _ = wire_specs(tb, tmp_path)
    bad = CaptureSpec(good.ns, "no-such-if", tmp_path / "bad.pcap", "bad")
    cap = PcapCapture([good, bad], record=tb.record)
    with pytest.raises(CaptureError, match=f"{good.ns}/no-such-if"):
        cap.start()
    assert not cap.running
    assert_gone([pid for pid, _, what in tb.record.processes if what.startswith("tcpdump")])
