"""Pure tests of the multipath analysis (analysis.multipath) and of the flow-path sampler's
pure parts (header parsing, the sampling filter, samples -> intervals)."""

from __future__ import annotations

import socket
import struct

import pandas as pd
import pytest

from analysis.multipath import (
    flow_paths,
    operation_windows,
    path_throughput,
    path_utilisation,
    split_direction,
)
from testbed.trace.flowpaths import FlowPaths, PathTap, parse_headers, sampling_filter


def queues(samples: dict[str, list[tuple[float, int, int]]]) -> pd.DataFrame:
    rows = [
        {"results": "r", "run_id": "p0", "time": t, "direction": d, "bytes": b, "packets": p}
        for d, points in samples.items()
        for t, b, p in points
    ]
    return pd.DataFrame(rows)


def test_split_direction_keeps_single_path_names():
    base, path = split_direction(pd.Series(["east->west/1", "west->east"]))
    assert base.tolist() == ["east->west", "west->east"]
    assert path.iloc[0] == 1 and pd.isna(path.iloc[1])


def test_path_throughput_differences_the_counters_and_drops_a_reset():
    q = queues(
        {
            "east->west/0": [(0.0, 0, 0), (1.0, 1_000_000, 100), (2.0, 500, 101)],
            "east->west": [(0.0, 0, 0), (1.0, 10, 1)],  # single path: not here
        }
    )
    tp = path_throughput(q)
    assert tp["direction"].tolist() == ["east->west/0", "east->west/0"]
    assert tp["bps"].iloc[0] == pytest.approx(8e6)
    assert tp["pps"].iloc[0] == pytest.approx(100)
    assert pd.isna(tp["bps"].iloc[1])  # the counter went backwards


def fp_row(sport: int, path: int, t0: float, t1: float, nbytes: int, d: str = "east->west"):
    return {
        "results": "r", "run_id": "p0", "time_from": t0, "time_to": t1, "src_host": "east-h0",
        "dst_host": "west-h0", "src": "10.1.0.10", "sport": sport, "dst": "10.1.1.10",
        "dport": 5000, "protocol": "tcp", "link": "east-west", "path": path,
        "direction": f"{d}/{path}", "samples": 10, "bytes": nbytes,
    }  # fmt: skip


def test_flow_paths_names_moves_and_splits_tcp_bytes_at_them():
    fp = pd.DataFrame(
        [
            fp_row(40000, 0, 0.0, 4.0, 4_000_000),
            fp_row(40000, 1, 6.0, 10.0, 4_000_000),
            fp_row(40001, 1, 0.0, 10.0, 100_000),
        ]
    )
    tcp = pd.DataFrame(
        {
            "results": "r",
            "run_id": "p0",
            "time": [0.0, 5.0, 10.0],
            "local": "10.1.0.10:40000",
            "peer": "10.1.1.10:5000",
            "bytes_sent": [0, 5_000_000, 10_000_000],
        }
    )
    out = flow_paths(fp, tcp)
    first = out.iloc[0]
    assert (first["sport"], first["paths"], first["moves"]) == (40000, "0>1", 1)
    assert first["moved_at"] == [5.0]  # midway between the last sample on 0 and the first on 1
    assert first["bytes"] == 8_000_000
    assert first["bytes_by_path"] == "0: 4e+06, 1: 4e+06"
    assert first["tcp_bytes_by_path"] == "0: 5e+06, 1: 5e+06"
    second = out.iloc[1]
    assert (second["paths"], second["moves"]) == ("1", 0)
    assert pd.isna(second["tcp_bytes_by_path"])  # no traced socket


def test_path_utilisation_shares_per_window_and_paths_of_data_flows():
    q = queues(
        {
            "east->west/0": [(0.0, 0, 0), (10.0, 9_000_000, 0), (20.0, 9_000_000, 0)],
            "east->west/1": [(0.0, 0, 0), (10.0, 1_000_000, 0), (20.0, 11_000_000, 0)],
        }
    )
    fp = pd.DataFrame(
        [
            fp_row(1, 0, 0.0, 10.0, 9_000_000),
            fp_row(2, 1, 0.0, 10.0, 1_000_000),
            fp_row(3, 1, 11.0, 20.0, 10_000_000),
            fp_row(4, 0, 11.0, 20.0, 1_000),  # ACKs only: not a data flow
        ]
    )
    windows = pd.DataFrame(
        {
            "results": "r",
            "run_id": "p0",
            "collective": "all_reduce",
            "algorithm": ["flat", "hierarchical-2d"],
            "size": 16,
            "start": [0.0, 10.5],
            "end": [10.0, 20.0],
        }
    )
    util = path_utilisation(q, fp, windows).set_index("window")
    run = util.loc["run"]
    assert run["bytes"] == pytest.approx(20_000_000)
    assert run["share_by_path"] == "0: 45%, 1: 55%"
    assert (run["paths"], run["paths_carrying"]) == (2, 2)
    flat = util.loc["all_reduce flat 16"]
    assert flat["share_by_path"] == "0: 90%, 1: 10%"
    assert (flat["flows"], flat["flow_paths_used"]) == (2, 2)
    h2d = util.loc["all_reduce hierarchical-2d 16"]
    assert h2d["bytes_by_path"] == "0: 0, 1: 9.5e+06"
    assert (h2d["paths_carrying"], h2d["flows"], h2d["flow_paths_used"]) == (1, 1, 1)


def test_operation_windows_span_every_rank_and_iteration():
    c = pd.DataFrame(
        {
            "results": "r",
            "run_id": "p0",
            "collective": "all_reduce",
            "algorithm": "flat",
            "size": 16,
            "start": [1.0, 1.1, 3.0],
            "seconds": [1.0, 1.5, 1.0],
        }
    )
    w = operation_windows(c)
    assert (w["start"].iloc[0], w["end"].iloc[0]) == (1.0, 4.0)


# -- the sampler's pure parts ---------------------------------------------------------------
TAP = PathTap("east-west", 1, "ns", "p1-west", "east->west/1", "west->east/1", 25_000)


def header(src: str, sport: int, dst: str, dport: int, total: int) -> bytes:
    eth = b"\0" * 12 + struct.pack(">H", 0x0800)
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, total, 0, 0x4000, 64, 6, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))  # fmt: skip
    return eth + ip + struct.pack(">HH", sport, dport) + b"\0" * 16


def test_parse_headers_takes_the_ip_length_plus_ethernet():
    assert parse_headers(header("10.1.0.10", 40000, "10.1.1.10", 5000, 65000)) == (
        "10.1.0.10", 40000, "10.1.1.10", 5000, 65014,
    )  # fmt: skip
    assert parse_headers(b"\0" * 20) is None


def test_samples_become_intervals_and_a_move_starts_a_row():
    other = PathTap("east-west", 0, "ns", "p0-west", "east->west/0", "west->east/0", 25_000)
    fp = FlowPaths({"10.1.0.10": "east-h0", "10.1.1.10": "west-h0"})
    big = header("10.1.0.10", 40000, "10.1.1.10", 5000, 65000)
    ack = header("10.1.1.10", 5000, "10.1.0.10", 40000, 52)
    fp.add(TAP, 1.0, True, big)
    fp.add(TAP, 2.0, True, big)
    fp.add(TAP, 2.5, False, ack)
    fp.add(other, 3.0, True, big)
    rows = fp.table()
    data = [r for r in rows if r["sport"] == 40000]
    got = [(r["path"], r["direction"], r["time_from"], r["time_to"], r["samples"]) for r in data]
    assert got == [
        (1, "east->west/1", 1.0, 2.0, 2),
        (0, "east->west/0", 3.0, 3.0, 1),
    ]  # fmt: skip
    assert data[0]["bytes"] == 2 * 65014  # larger than sample_bytes: counted as they are
    (ack_row,) = [r for r in rows if r["sport"] == 5000]
    assert (ack_row["direction"], ack_row["bytes"], ack_row["src_host"]) == (
        "west->east/1", 25_000, "west-h0",
    )  # fmt: skip


def test_sampling_filter_jumps_land_on_its_returns():
    prog = sampling_filter(25_000)
    for i, (code, jt, jf, _k) in enumerate(prog):
        if code & 0x07 == 0x05:  # BPF_JMP
            for target in (i + 1 + jt, i + 1 + jf):
                assert target < len(prog)
    assert prog[-1] == (0x06, 0, 0, 0) and prog[-2][0] == 0x06
