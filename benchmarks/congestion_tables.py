"""Tables of the committed congestion scenarios, from their results directories.

    sudo .venv/bin/testbed run scenarios/cc-loss.yaml --out /tmp/cc
    sudo .venv/bin/testbed run scenarios/ecn-profiles.yaml --out /tmp/ecn
    .venv/bin/python -m benchmarks.congestion_tables /tmp/cc/cc-loss-* /tmp/ecn/ecn-* [--write]

Running and summarising are separate because cc-loss takes about half an hour: its worst points
(loss-based senders at 1% loss) need minutes per all-reduce.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from benchmarks._results import write_section


def _manifest(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text())


def _table(path: Path, name: str) -> pd.DataFrame:
    f = path / f"{name}.parquet"
    return pd.read_parquet(f) if f.exists() else pd.DataFrame()


def _runs(m: dict) -> pd.DataFrame:
    rows = []
    for rid, r in m["runs"].items():
        rows.append({"run_id": rid, **r["params"], "status": r["status"], "reason": r["reason"]})
    return pd.DataFrame(rows)


def _retransmits(tcp: pd.DataFrame) -> pd.Series:
    """Per run: segments retransmitted by the ranks' WAN sockets (last sample of each socket)."""
    if tcp.empty:
        return pd.Series(dtype=float)
    wan = tcp[tcp["host"] != tcp["peer_host"]]
    last = wan.sort_values("time").groupby(["run_id", "host", "local", "peer"]).tail(1)
    return last.groupby("run_id")["retransmits"].sum()


def cc_loss(path: Path) -> str:
    m = _manifest(path)
    runs = _runs(m)
    summary = pd.DataFrame(m.get("summary", []))
    tcp = _table(path, "tcp")
    retx = _retransmits(tcp)
    srtt = (
        tcp[tcp["host"] != tcp["peer_host"]].groupby("run_id")["srtt_ms"].median()
        if not tcp.empty
        else pd.Series(dtype=float)
    )
    lines = [
        f"### cc-loss ({m['kernel']}, {m['runs']['p000-r0'].get('backend', '?')} backend)\n",
        "16 MiB flat all-reduce, 2 ranks (one per cluster), 100 Mbit/s WAN, 1 BDP buffer; time = "
        "slowest rank, median of 2 iterations; algbw = size / time (nccl-tests).\n",
        "| cc | loss | RTT | time p50 | algbw | of 95.6 Mbit/s | WAN retransmits | srtt median |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for _, r in runs.iterrows():
        rtt = f"{2 * float(r['wan[0].delay'].removesuffix('ms')):g} ms"
        head = f"| {r['tcp.congestion']} | {r['wan[0].loss']} | {rtt} |"
        if r["status"] != "ok":
            lines.append(f"{head} {r['status']}: {r['reason'][:80]} | | | | |")
            continue
        s = summary[summary["run_id"] == r["run_id"]].iloc[0]
        mbit = s["algbw"] * 8 / 1e6
        lines.append(
            f"{head} {s['time_p50']:.2f} s | {mbit:.1f} Mbit/s | {mbit / 95.6:.0%} | "
            f"{int(retx.get(r['run_id'], 0))} | {srtt.get(r['run_id'], float('nan')):.1f} ms |"
        )
    return "\n".join(lines) + "\n"


def ecn_profiles(path: Path) -> str:
    m = _manifest(path)
    runs = _runs(m)
    summary = pd.DataFrame(m.get("summary", []))
    queues, line, flows = _table(path, "queues"), _table(path, "delayline"), _table(path, "flows")
    lines = [
        f"### ecn-profiles ({m['kernel']}, {m['runs']['p000-r0'].get('backend', '?')} backend)\n",
        "16 MiB flat all-reduce, 2 ranks, 100 Mbit/s, 10 ms one-way, 4 BDP (1 MB) buffer, ECN "
        "senders. Queue: east->west samples every 10 ms while the queue was not empty. Drops: "
        "buffer overflow / profile drops (non-ECN packets: pure ACKs); data retransmissions from "
        "the pcaps.\n",
        "| cc | aqm | time p50 | queue p50 | queue p95 | marks | drops overflow / profile | "
        "data retransmits | CE share |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for _, r in runs.iterrows():
        aqm = json.loads(r["wan[0].aqm"])
        name = aqm["kind"] + "".join(
            f" {k}={v}" for k, v in aqm.items() if k not in ("kind", "ecn")
        )
        head = f"| {r['tcp.congestion']} | {name} |"
        if r["status"] != "ok":
            lines.append(f"{head} {r['status']}: {r['reason'][:70]} | | | | | | |")
            continue
        rid = r["run_id"]
        s = summary[summary["run_id"] == rid].iloc[0]
        q = queues[(queues["run_id"] == rid) & (queues["direction"] == "east->west")]
        busy = q[q["backlog_bytes"] > 0]["backlog_bytes"]
        d = line[(line["run_id"] == rid) & (line["direction"] == "east->west")]
        d = d.iloc[0] if len(d) else {}
        f = flows[flows["run_id"] == rid] if not flows.empty else flows
        retx = int(f["retransmissions"].sum()) if len(f) else 0
        ce = f["ce_bytes"].sum() / f["payload_bytes"].sum() if len(f) else float("nan")
        lines.append(
            f"{head} {s['time_p50']:.2f} s | {busy.median() / 1e3:.0f} kB | "
            f"{busy.quantile(0.95) / 1e3:.0f} kB | {int(d.get('marked', 0))} | "
            f"{int(d.get('dropped_queue', 0))} / {int(d.get('dropped_aqm', 0))} | {retx} | "
            f"{ce:.2%} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("results", nargs="+", type=Path, help="results directories of the scenarios")
    p.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = p.parse_args()
    text = "## Congestion scenarios\n\n"
    for path in args.results:
        scenario = _manifest(path)["scenario"]["name"]
        if scenario == "cc-loss":
            text += cc_loss(path) + "\n"
        elif scenario == "ecn-profiles":
            text += ecn_profiles(path) + "\n"
        else:
            sys.exit(f"{path}: not a cc-loss or ecn-profiles results directory")
    sys.stdout.write(text)
    if args.write:
        write_section("congestion_tables.py", text)


if __name__ == "__main__":
    main()
