"""analysis.flows on small hand-built pcaps: exact counters per flow and bin (pure, no root)."""

from __future__ import annotations

import math

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw
from scapy.utils import RawPcapReader, RawPcapWriter, wrpcap

from analysis.flows import COLUMNS, SUMMARY_COLUMNS, flow_summary, flows_from_pcap

A, B = "10.64.1.10", "10.65.1.10"
T0 = 1_700_000_000.0  # a multiple of 0.1 s, so bin starts are T0 + k * 0.1


def seg(t, seq, size, src=A, dst=B, sport=40000, dport=5201, tos=0, flags="A", **kw):
    """One TCP packet at unix time ``t`` with ``size`` payload bytes."""
    pkt = (
        Ether()
        / IP(src=src, dst=dst, tos=tos)
        / TCP(sport=sport, dport=dport, seq=seq, flags=flags, **kw)
    )
    if size:
        pkt = pkt / Raw(b"x" * size)
    pkt.time = t
    return pkt


def ack(t, ackno, flags="A"):
    """A pure ACK B->A."""
    return seg(t, 1, 0, src=B, dst=A, sport=5201, dport=40000, ack=ackno, flags=flags)


@pytest.fixture
def capture(tmp_path):
    """A flow A->B in two bins: ECT/CE marks, one retransmission, pure ACKs back, noise."""
    s = 1000
    pkts = [
        seg(T0 + 0.010, s, 1000, tos=0x02),  # ECT(0)
        seg(T0 + 0.020, s + 1000, 1000, tos=0x03),  # CE
        ack(T0 + 0.030, s + 2000),
        seg(T0 + 0.040, s + 2000, 500, tos=0x02, flags="AC"),  # ECT(0), CWR
        seg(T0 + 0.150, s + 2500, 1000, tos=0x02),
        seg(T0 + 0.160, s + 1000, 1000, tos=0x02),  # retransmission of the CE-marked segment
        seg(T0 + 0.170, s + 3500, 200, tos=0x03),  # CE
        ack(T0 + 0.180, s + 3700, flags="AE"),  # ACK with ECE
        Ether() / ARP(),  # not IPv4: ignored
        Ether() / IP(src=A, dst=B) / Raw(b"udp-ish"),  # IPv4 but no TCP (proto 0): ignored
    ]
    pkts[-2].time = pkts[-1].time = T0 + 0.05
    path = tmp_path / "east-west.pcap"
    wrpcap(str(path), pkts)
    return path


def test_columns_and_counters_per_flow_and_bin(capture):
    df = flows_from_pcap(capture)
    assert list(df.columns) == COLUMNS
    assert set(df["flow"]) == {f"{A}:40000>{B}:5201", f"{B}:5201>{A}:40000"}
    data = df[df["flow"] == f"{A}:40000>{B}:5201"].reset_index(drop=True)
    assert (data["capture"] == "east-west").all()  # default label: the file's stem
    assert data["time"].tolist() == pytest.approx([T0, T0 + 0.1])
    assert data[["src", "sport", "dst", "dport"]].iloc[0].tolist() == [A, 40000, B, 5201]
    assert data["packets"].tolist() == [3, 3]
    assert data["wire_packets"].tolist() == [3, 3]
    assert data["payload_bytes"].tolist() == [2500, 2200]
    assert data["throughput_bps"].tolist() == pytest.approx([2500 * 8 / 0.1, 2200 * 8 / 0.1])
    assert data["retransmissions"].tolist() == [0, 1]
    assert data["retransmitted_bytes"].tolist() == [0, 1000]
    assert data["ce_packets"].tolist() == [1, 1]
    assert data["ect_packets"].tolist() == [2, 2]
    assert data["ce_bytes"].tolist() == [1000, 200]
    assert data["ce_share"].tolist() == pytest.approx([1000 / 2500, 200 / 2200])
    assert data["cwr"].tolist() == [1, 0]
    assert data["ece"].tolist() == [0, 0]
    assert (data["bin_seconds"] == 0.1).all()


def test_pure_acks_count_as_packets_not_payload(capture):
    df = flows_from_pcap(capture, label="east->west@to-east")
    acks = df[df["flow"] == f"{B}:5201>{A}:40000"].reset_index(drop=True)
    assert (acks["capture"] == "east->west@to-east").all()
    assert acks["packets"].tolist() == [1, 1]
    assert acks["wire_packets"].tolist() == [1, 1]
    assert acks["payload_bytes"].tolist() == [0, 0]
    assert acks["throughput_bps"].tolist() == [0, 0]
    assert acks["retransmissions"].tolist() == [0, 0]
    assert acks["ece"].tolist() == [0, 1]
    assert acks["ce_share"].isna().all()  # no payload: NaN, not 0


def test_summary_one_row_per_flow(capture):
    summary = flow_summary(flows_from_pcap(capture))
    assert list(summary.columns) == SUMMARY_COLUMNS
    row = summary.set_index("flow").loc[f"{A}:40000>{B}:5201"]
    assert row["start"] == pytest.approx(T0)
    assert row["duration"] == pytest.approx(0.2)
    assert row["packets"] == 6
    assert row["payload_bytes"] == 4700
    assert row["mean_throughput_bps"] == pytest.approx(4700 * 8 / 0.2)
    assert row["retransmissions"] == 1
    assert row["retransmitted_bytes"] == 1000
    assert row["retransmission_share"] == pytest.approx(1000 / 4700)
    assert row["ce_packets"] == 2
    assert row["ce_share"] == pytest.approx(1200 / 4700)
    assert row["cwr"] == 1
    back = summary.set_index("flow").loc[f"{B}:5201>{A}:40000"]
    assert back["payload_bytes"] == 0 and back["ece"] == 1
    assert math.isnan(back["retransmission_share"]) and math.isnan(back["ce_share"])


def test_idle_bins_inside_a_flow_are_zero_rows(tmp_path):
    path = tmp_path / "gap.pcap"
    wrpcap(str(path), [seg(T0 + 0.01, 1, 100), seg(T0 + 0.31, 101, 100)])
    df = flows_from_pcap(path)
    assert df["time"].tolist() == pytest.approx([T0, T0 + 0.1, T0 + 0.2, T0 + 0.3])
    assert df["packets"].tolist() == [1, 0, 0, 1]
    assert df["ce_share"].isna().tolist() == [False, True, True, False]


def test_bin_width_is_a_parameter(capture):
    df = flows_from_pcap(capture, bin_seconds=1.0)
    data = df[df["sport"] == 40000]
    assert len(data) == 1
    assert data["payload_bytes"].iloc[0] == 4700
    assert data["throughput_bps"].iloc[0] == pytest.approx(4700 * 8)


def test_sequence_wraparound_is_not_a_retransmission(tmp_path):
    top = 2**32 - 1500
    pkts = [
        seg(T0 + 0.01, top, 1000),
        seg(T0 + 0.02, top + 1000, 1000),  # crosses 2^32
        seg(T0 + 0.03, (top + 2000) % 2**32, 1000),  # after the wrap: small seq, new data
        seg(T0 + 0.04, top + 1000, 1000),  # the crossing segment again: a retransmission
        seg(T0 + 0.05, (top + 2500) % 2**32, 1000),  # partial overlap: new data
    ]
    path = tmp_path / "wrap.pcap"
    wrpcap(str(path), pkts)
    s = flow_summary(flows_from_pcap(path)).iloc[0]
    assert s["retransmissions"] == 1
    assert s["retransmitted_bytes"] == 1000


def test_truncated_gso_packet_counts_by_its_ip_length(tmp_path):
    """A 20000-byte GSO packet captured with snaplen 96 counts by IP length, in MSS segments."""
    syn_ack = seg(T0, 5000, 0, src=B, dst=A, sport=5201, dport=40000, flags="SA",
                  options=[("MSS", 1460)])  # fmt: skip
    big = seg(T0 + 0.01, 1, 20000 - 40 - 12, options=[("Timestamp", (1, 2))])  # TCP hdr 32 bytes
    path = tmp_path / "gso.pcap"
    # What tcpdump -s 96 writes: the first 96 bytes of each frame, and the frame's length.
    with RawPcapWriter(str(path), linktype=1, snaplen=96) as out:
        out.write_header(None)
        for i, pkt in enumerate((syn_ack, big)):
            raw = bytes(pkt)
            out.write_packet(raw[:96], sec=int(T0), usec=i * 10_000, caplen=min(len(raw), 96),
                             wirelen=len(raw))  # fmt: skip
    lengths = [(len(data), meta.wirelen) for data, meta in RawPcapReader(str(path))]
    assert lengths[1] == (96, 14 + 20000)
    df = flows_from_pcap(path)
    row = df[df["sport"] == 40000].iloc[0]
    payload = 20000 - 20 - 32
    assert row["payload_bytes"] == payload
    # Segment = peer's MSS 1460 minus 12 option bytes = 1448: ceil(19948 / 1448) = 14.
    assert row["wire_packets"] == math.ceil(payload / 1448) == 14
    assert row["packets"] == 1


def test_segment_size_without_a_syn_falls_back_to_the_mtu(tmp_path):
    path = tmp_path / "nosyn.pcap"
    wrpcap(str(path), [seg(T0, 1, 14600)])
    assert flows_from_pcap(path)["wire_packets"].tolist() == [10]  # 14600 / 1460
    assert flows_from_pcap(path, mtu=9000)["wire_packets"].tolist() == [2]  # 14600 / 8960


def test_nanosecond_pcap_and_empty_capture(tmp_path):
    path = tmp_path / "nano.pcap"
    wrpcap(str(path), [seg(T0 + 0.123456789, 1, 10)], nano=True)
    df = flows_from_pcap(path)
    assert df["time"].tolist() == pytest.approx([T0 + 0.1])
    empty = tmp_path / "empty.pcap"
    wrpcap(str(empty), [Ether() / ARP()])
    flows = flows_from_pcap(empty)
    assert flows.empty and list(flows.columns) == COLUMNS
    summary = flow_summary(flows)
    assert summary.empty and list(summary.columns) == SUMMARY_COLUMNS


def test_pcapng_reads_like_pcap(tmp_path, capture):
    from scapy.utils import PcapNgWriter, rdpcap

    ng = tmp_path / "east-west.pcapng"
    with PcapNgWriter(str(ng)) as out:
        for pkt in rdpcap(str(capture)):
            out.write(pkt)
    a, b = flows_from_pcap(capture), flows_from_pcap(ng)
    assert b.drop(columns="time").equals(a.drop(columns="time"))
    assert b["time"].tolist() == pytest.approx(a["time"].tolist())


def test_analysis_does_not_import_the_network_layer():
    import subprocess
    import sys

    code = (
        "import sys, analysis.flows; print(any(m.split('.')[0] == 'testbed' "
        "and m != 'testbed' and not m.startswith('testbed.core') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
