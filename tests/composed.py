"""Composed runs for the live tests of one column of docs/features.md (engine x link): one
scenario that combines many features at once, run through the real runner, and the evidence
each feature leaves in the results (imported as ``composed`` by tests/live/test_composed_*.py
and tests/live/test_mininet_composed.py).

``faults_scenario``: a command workload that probes the WAN (UDP echoes from several source
ports, so an l4 hash spreads them over a link's paths, and TCP connects), bulk and DCQCN
cross-traffic, a schedule step, every fault kind at its own time, and tcp_info, queue and pcap
tracing. ``check_faults_run`` asserts each one's evidence: its events applied, and the probes
lost during a blackhole, link down, partition or crash, answered again after it, refused by
TCP during a reset, the RTT moved by the schedule step, the flows in the traces.

``training_scenario``: an emulated-model DiLoCo training with bulk cross-traffic, a trace and
a preset on the link (or on a path), a fault during a step, tracing and the column's routing.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from helpers import RUN_TAG

# The probing program, on every rank: rank 1 (west-h0) answers; rank 0 (east-h0) sends a UDP
# probe from each of SOCKETS source ports every PERIOD s and tries a TCP connect every PERIOD s,
# then prints one json-lines metric per probe: udp (rtt in ms, -1: no answer within LOST_AFTER s)
# and tcp (0 connected, 1 refused or reset, 2 timed out after 0.3 s), each with its send time
# t (a connect's also with its end, t_end).
PROBER = textwrap.dedent(
    """
    import json, selectors, socket, sys, threading, time
    rank, peer, seconds = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    PORT, SOCKETS, PERIOD, LOST_AFTER = 29700, 16, 0.05, 1.0
    end = time.time() + seconds
    if rank == 1:
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.bind(("0.0.0.0", PORT))
        tcp = socket.socket()
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        tcp.bind(("0.0.0.0", PORT))
        tcp.listen(64)
        def accept():
            while True:
                conn, _ = tcp.accept()
                conn.close()
        threading.Thread(target=accept, daemon=True).start()
        udp.settimeout(0.2)
        while time.time() < end + 2:
            try:
                data, addr = udp.recvfrom(64)
            except TimeoutError:
                continue
            udp.sendto(data, addr)
        sys.exit(0)
    time.sleep(1.0)  # the echo is up
    addr = socket.gethostbyname(peer)
    socks = []
    for i in range(SOCKETS):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("0.0.0.0", 29710 + i))
        s.setblocking(False)
        socks.append(s)
    sent, got, tcp = {}, {}, []
    def connects():
        while time.time() < end:
            t = time.time()
            c = socket.socket()
            c.settimeout(0.3)
            try:
                c.connect((addr, PORT))
                v = 0
            except (ConnectionRefusedError, ConnectionResetError):
                v = 1
            except OSError:
                v = 2
            c.close()
            tcp.append((t, time.time(), v))
            time.sleep(max(0.0, t + PERIOD - time.time()))
    def receive():
        sel = selectors.DefaultSelector()
        for s in socks:
            sel.register(s, selectors.EVENT_READ)
        while time.time() < end + LOST_AFTER:
            for key, _ in sel.select(0.1):
                now = time.time()
                try:
                    data = key.fileobj.recv(64)
                except BlockingIOError:
                    continue
                i, j = map(int, data.split())
                got.setdefault((i, j), now)
    threads = [threading.Thread(target=connects), threading.Thread(target=receive)]
    for th in threads:
        th.start()
    k = 0
    while time.time() < end:
        t = time.time()
        for i, s in enumerate(socks):
            sent[(i, k)] = time.time()
            s.sendto(f"{i} {k}".encode(), (addr, PORT))
        k += 1
        time.sleep(max(0.0, t + PERIOD - time.time()))
    for th in threads:
        th.join()
    for (i, j), t in sorted(sent.items(), key=lambda x: x[1]):
        back = got.get((i, j))
        rtt = (back - t) * 1e3 if back is not None and back - t < LOST_AFTER else -1
        print(json.dumps({"metric": "udp", "value": rtt, "step": j, "t": t, "sock": i}))
    for t, t_end, v in tcp:
        print(json.dumps({"metric": "tcp", "value": v, "t": t, "t_end": t_end}))
    """
)


def fault_times(hold: float = 1.0) -> dict[str, float]:
    """Fault -> when (s on the wall clock from the run's start; the prober sends from ~1.5 s
    on). Each fault lasts ``hold`` s but the flap (2 x (300 ms down, 300 ms up)) and the burst
    loss (1 s: its statistics, in check_faults_run), the next 0.5 s after it ends (0.8 s after
    the flap) so that the probes answer again between them."""
    t = {"blackhole": 4.5}
    t["link_down"] = t["blackhole"] + hold + 0.5
    t["flap"] = t["link_down"] + hold + 0.5
    t["burst_loss"] = t["flap"] + 2.0
    t["partition"] = t["burst_loss"] + 1.5
    t["gateway_crash"] = t["partition"] + hold + 0.5
    t["reset"] = t["gateway_crash"] + hold + 0.5
    return t


FAULT_TIMES = fault_times()  # 4.5, 6, 7.5, 9.5, 11, 12.5, 14 s
# A fault of 0.6 s on one machine (events apply within ms there): ~10 rounds of probes inside
# each (from 5 ms after it applied to 60 ms before its undoing began), every one of which must
# be lost (or, for a link down on paths, answered by path 0)
HOLD_ONE_MACHINE = 0.6
SCHEDULE_AT = 3.0  # the delay step, once the traffic's queue has drained


def link_name(paths: bool) -> str:
    """What a link fault names: the link, or its path 1 on a link of two paths."""
    return "east-west/1" if paths else "east-west"


def wan(paths: bool, **dynamics: Any) -> list[dict[str, Any]]:
    """One 100 Mbit/s link east-west (5 ms) with ``dynamics``; or two such paths with them on
    path 1, which weighs 2 against path 0's 1 (unequal path weights)."""
    one = {"rate": "100mbit", "delay": "5ms"}
    if not paths:
        return [{"between": ["east", "west"], **one, **dynamics}]
    first, second = {**one, "weight": 1}, {**one, "weight": 2, **dynamics}
    return [{"between": ["east", "west"], "paths": [first, second]}]


def faults_scenario(
    tmp: Path, engine: str, paths: bool, routing: dict[str, Any], hold: float = 1.0
) -> dict:
    """The probing command workload beside bulk and DCQCN cross-traffic, a schedule step, every
    fault kind (each ``hold`` s but the flap and the burst loss: fault_times), and tcp_info /
    queues / pcap tracing (module docstring). Writes the prober into ``tmp``."""
    (tmp / "prober.py").write_text(PROBER)
    link = link_name(paths)
    times = fault_times(hold)
    t = {k: f"{round(v * 1000)}ms" for k, v in times.items()}
    held = f"{round(hold * 1000)}ms"
    probe_seconds = times["reset"] + 0.5
    data = {
        "name": f"{RUN_TAG}-cf"[:32],
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": wan(paths, schedule=[{"at": f"{SCHEDULE_AT}s", "delay": "25ms"}]),
        "routing": routing,
        "workload": {
            "kind": "command",
            "argv": ["python", "prober.py", "{rank}", "west-h0", str(probe_seconds)],
            "metrics": "json-lines",
            "timeout": "60s",
        },
        "traffic": [  # both done before the first fault
            {
                "kind": "bulk",
                "from": "east-h0",
                "to": "west-h0",
                "start": "0s",
                "duration": "1200ms",
            },
            {"kind": "dcqcn", "from": "west-h0", "to": "east-h0", "start": "0s", "duration": "1s"},
        ],
        "faults": [
            {"kind": "blackhole", "link": link, "at": t["blackhole"], "duration": held},
            {"kind": "link_down", "link": link, "at": t["link_down"], "duration": held},
            {
                "kind": "flap",
                "link": link,
                "at": t["flap"],
                "down": "300ms",
                "up": "300ms",
                "count": 2,
            },
            {
                "kind": "burst_loss",
                "link": link,
                "at": t["burst_loss"],
                "duration": "1s",
                "p": "20%",
                "r": "30%",
            },
            {
                "kind": "partition",
                "groups": [["east"], ["west"]],
                "at": t["partition"],
                "duration": held,
            },
            {
                "kind": "gateway_crash",
                "cluster": "west",
                "at": t["gateway_crash"],
                "restore_after": held,
            },
            {"kind": "reset", "link": link, "at": t["reset"]},
        ],
        "trace": {"tcp_info": "100ms", "queues": "20ms", "pcap": True},
        "clock": "wall",
    }
    if engine != "native":
        data["engine"] = engine
    return data


def windows(events: Any, on: str, off: str) -> list[tuple[float, float]]:
    """(applied time of each ``on`` action, of the ``off`` that follows it), unix seconds."""
    rows = events.drop_duplicates("event").sort_values("applied_unix")
    ons = list(rows[rows["action"] == on]["applied_unix"])
    offs = list(rows[rows["action"] == off]["applied_unix"])
    assert len(ons) == len(offs) and ons, (on, off, rows[["action", "applied_unix"]])
    return list(zip(ons, offs, strict=True))


def probes(metrics: Any, name: str) -> list[dict[str, Any]]:
    rows = metrics[metrics["metric"] == name]
    return [
        {**json.loads(f), "value": v} for f, v in zip(rows["fields"], rows["value"], strict=True)
    ]


Window = tuple[float, float, float, float]  # an action begun, applied; its undoing begun, applied


def fault_windows(events: Any, faults: list[dict[str, Any]]) -> dict[str, list[Window]]:
    """Each fault's windows as its actions were applied (unix s; an action began ``apply_s``
    before it was applied), by its kind (``faults``: the scenario's): a flap's per down, a
    partition's from its first blackhole to its last one lifted."""
    rows = events.drop_duplicates("event").sort_values("applied_unix")
    out: dict[str, list[Window]] = {}
    for fault, part in rows[rows["source"] == "fault"].groupby("fault"):
        kind = faults[int(fault)]["kind"]
        done = list(part["applied_unix"])
        begun = list(part["applied_unix"] - part["apply_s"])
        if kind == "flap":  # down, up, down, up
            out[kind] = [(begun[i], done[i], begun[i + 1], done[i + 1]) for i in (0, 2)]
        else:
            half = len(done) // 2
            out[kind] = [(begun[0], done[half - 1], begun[half], done[-1])]
    return out


def _rtt_median(rows: list[dict[str, Any]]) -> float:
    rtts = sorted(p["value"] for p in rows if p["value"] >= 0)
    assert rtts, rows
    return rtts[len(rtts) // 2]


def _rtt_least(rows: list[dict[str, Any]]) -> float:
    rtts = [p["value"] for p in rows if p["value"] >= 0]
    assert rtts, rows
    return min(rtts)


def check_faults_run(res: Any, paths: bool) -> None:
    """The evidence of every feature of ``faults_scenario`` in its loaded results ``res``."""
    assert (res.runs["status"] == "ok").all(), res.runs[["status", "reason"]]
    (manifest,) = res.manifests.values()
    ev = res.events
    assert set(ev["status"]) == {"applied"}, ev[["action", "status", "error"]]
    link_dirs = {"east->west/1", "west->east/1"} if paths else {"east->west", "west->east"}
    on_link = ev[ev["action"].isin(["set", "blackhole", "link_down", "reset"])]
    on_link = on_link[on_link["fault"].isna() | (on_link["fault"] != 4)]  # not the partition
    assert set(on_link["direction"].dropna()) <= link_dirs, on_link  # path 1 only
    win = fault_windows(ev, manifest["scenario"]["faults"])
    assert sorted(win) == sorted(FAULT_TIMES), win
    udp, tcp = probes(res.metrics, "udp"), probes(res.metrics, "tcp")

    def sent(rows: list[dict[str, Any]], a: float, b: float) -> list[dict[str, Any]]:
        return [p for p in rows if a <= p["t"] <= b]

    # A probe sent 5 ms after a fault's action was applied crosses the WAN after it; one sent
    # 60 ms before its undoing began is back (30 ms RTT) or dropped before it; one sent 0.1 s
    # after its undoing was applied is answered.
    def inside(kind: str, rows: list[dict[str, Any]] = udp) -> list[dict[str, Any]]:
        return [p for _, on, off, _ in win[kind] for p in sent(rows, on + 0.005, off - 0.06)]

    def lost_socks(rows: list[dict[str, Any]]) -> set[int]:
        return {p["sock"] for p in rows if p["value"] < 0}

    # the sockets on the faulted path: every probe of theirs lost in the blackhole, the
    # others' none (an l4 hash keeps a socket on one path); on a link of one path, all
    hole = inside("blackhole")
    on1 = lost_socks(hole)
    assert on1 and all(p["value"] < 0 for p in hole if p["sock"] in on1), hole
    on0 = {p["sock"] for p in udp} - on1
    assert all(p["value"] >= 0 for p in hole if p["sock"] in on0), hole
    if not paths:
        assert not on0, on0
    # partition and crash cut every path; a reset drops UDP and answers TCP with an RST
    for kind in ("partition", "gateway_crash"):
        assert all(p["value"] < 0 for p in inside(kind)), kind
    reset = inside("reset")
    assert lost_socks(reset) == on1 and all(p["value"] >= 0 for p in reset if p["sock"] in on0)
    resets = [p["value"] for p in inside("reset", tcp)]
    assert 1 in resets and (paths or set(resets) == {1}), resets  # a connect hashed to path 0 works
    # a link down (once, and each down of the flap): on one path every probe lost; on paths,
    # static routing leaves path 1 and path 0 carries them (from 0.1 s on: the routes moved)
    for kind in ("link_down", "flap"):
        if paths:
            moved = [p for _, on, off, _ in win[kind] for p in sent(udp, on + 0.1, off - 0.06)]
            assert moved and all(p["value"] >= 0 for p in moved), (kind, moved)
            # carried by path 0: its RTT (10 ms) not path 1's (50 ms after the schedule step);
            # the median, half way between them (a busy host adds ms, not tens of ms, to most)
            assert _rtt_median(moved) < 30, (kind, _rtt_median(moved))
        else:
            assert all(p["value"] < 0 for p in inside(kind)), kind
    # burst loss (Gilbert-Elliott p 20%, r 30%: 40% of the time in the losing state): some of
    # the faulted path's probes lost, none of the other's; 20 rounds of probes make "none of
    # the faulted path's lost" a 0.8^20 (1%) event per socket, all of them lost 0.7^20
    burst = inside("burst_loss")
    burst1 = [p for p in burst if p["sock"] in on1]
    assert 0 < sum(p["value"] < 0 for p in burst1) < len(burst1), burst1
    assert all(p["value"] >= 0 for p in burst if p["sock"] in on0)
    # between the faults every probe is answered (the link loses nothing; LOST_AFTER is 30 RTTs)
    cuts = sorted(w for ws in win.values() for w in ws)
    gaps = [(cuts[i][3] + 0.1, cuts[i + 1][0] - 0.06) for i in range(len(cuts) - 1)]
    for a, b in gaps:
        between = sent(udp, a, b)
        assert all(p["value"] >= 0 for p in between), (a, b, [p for p in between if p["value"] < 0])
    # and every connect that began and ended between them connected
    done = [p for a, b in gaps for p in sent(tcp, a, b) if p["t_end"] <= b]
    assert done and all(p["value"] == 0 for p in done), done
    # the schedule step (5 -> 25 ms one way on path 1) seen in the RTT: 10 ms before, 50
    # after. The least RTT of ~10 rounds (a busy host only adds to a reading: the delay line's
    # and the prober's wake-ups); -0.5 / +3 ms as the engine tests' ping RTTs (compensated floor)
    step = ev[ev["source"] == "schedule"].iloc[0]
    begun, done = step["applied_unix"] - step["apply_s"], step["applied_unix"]
    before = [p for p in sent(udp, begun - 0.5, begun - 0.05) if p["sock"] in on1]
    after = sent(udp, done + 0.1, win["blackhole"][0][0] - 0.06)
    assert 9.5 <= _rtt_least(before) <= 13, before
    assert 49.5 <= _rtt_least([p for p in after if p["sock"] in on1]) <= 53, after
    if on0:  # path 0 keeps its 5 ms
        assert 9.5 <= _rtt_least([p for p in after if p["sock"] in on0]) <= 13, after
    # the traffic: the bulk flow's goodput, the DCQCN flow's start and end, and both in the traces
    assert res.flows_goodput["bytes"].sum() > 1e6, res.flows_goodput
    kinds = list(res.dcqcn["kind"])
    assert kinds.count("start") == 1 and kinds.count("end") == 1, kinds
    assert res.dcqcn.loc[res.dcqcn["kind"] == "end", "sent"].iloc[0] > 0
    bulk = res.flows[res.flows["dport"] == 5300]  # the bulk sink's port, in the pcap's flows
    assert bulk["payload_bytes"].sum() >= res.flows_goodput["bytes"].sum() * 0.9, bulk
    assert {"east-h0", "west-h0"} <= set(res.tcp["peer_host"]), res.tcp  # tcp_info samples
    queued = set(res.queues["direction"])
    assert link_dirs <= queued, queued  # each traced direction's queue samples


# The trace: path rates in Mbit/s, one per second, replayed on a link (or path 0) and held at
# the last one.
TRACE_MBIT = (80, 20, 60, 40, 80)
PRESET = "pantheon/aws-korea-china"  # 77.72 Mbit/s, 51 ms one way, a 94-packet queue, 0.06% loss
PRESET_CAPACITY = 77.72e6 * (1 - 0.0006)  # its uplink's rate less its loss
WORKLOADS = {
    "real": {"kind": "training", "model": "char-mlp", "algorithm": "diloco", "steps": 8,
             "ranks_per_host": 1, "eval_every": 4, "diloco": {"inner_steps": 4},
             "timeout": "120s"},
    "emulated": {"kind": "training", "model": "llama-3-1b", "scale": "1/1000",
                 "compute": {"step": "0.1s"}, "algorithm": "diloco", "steps": 10,
                 "diloco": {"inner_steps": 5}, "timeout": "120s"},
    "dcqcn": {"kind": "dcqcn", "flows": [{"from": "east-h0", "to": "west-h0"}],
              "duration": "3s"},
    "collectives": {"kind": "collectives", "collectives": ["all_reduce"], "algorithms": ["flat"],
                    "sizes": ["1MiB"], "warmup": 1, "iterations": 3, "timeout": "60s"},
}  # fmt: skip


def workloads_scenario(tmp: Path, engine: str, paths: bool, kinds: tuple[str, ...]) -> dict:
    """A sweep of one case per workload of ``kinds`` (WORKLOADS) on one scenario: bulk
    cross-traffic, a preset with a trace (on a link of two paths the preset on both, the trace
    on path 0, an l4 hash), tcp_info and queue tracing. Writes the trace into ``tmp``."""
    rows = "".join(f"{k}s,{r}mbit\n" for k, r in enumerate(TRACE_MBIT))
    (tmp / "rates.csv").write_text("t,rate\n" + rows)
    trace = {"file": "rates.csv", "format": "csv", "bin": "1s", "loop": False}
    preset = {"preset": PRESET, "delay": "5ms"}  # its rate, queue and loss; a shorter delay
    if paths:  # equal paths at bring-up: the self-check's probes take either
        link = {"between": ["east", "west"], "paths": [{**preset, "trace": trace}, preset]}
    else:
        link = {"between": ["east", "west"], **preset, "trace": trace}
    data = {
        "name": f"{RUN_TAG}-cw"[:32],
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": [link],
        "routing": {"ecmp": {"hash": "l4"}},
        "workload": WORKLOADS[kinds[0]],
        "traffic": [
            {"kind": "bulk", "from": "east-h0", "to": "west-h0", "start": "0s", "duration": "2s"}
        ],
        "trace": {"tcp_info": "100ms", "queues": "50ms"},
        "sweep": {"cases": [{"workload": WORKLOADS[k]} for k in kinds]},
    }
    if engine != "native":
        data["engine"] = engine
    return data


def check_workloads_run(res: Any, kinds: tuple[str, ...], paths: bool) -> None:
    """The evidence of every feature of ``workloads_scenario`` in its loaded results: each case's
    workload completed, the bulk flow beside it, the trace's rates applied in order on the
    traced direction, the preset's rate and delay on its direction, tcp_info and queue samples."""
    assert (res.runs["status"] == "ok").all(), res.runs[["run_id", "status", "reason"]]
    runs = [f"p{i:03d}-r0" for i in range(len(kinds))]
    assert sorted(res.runs["run_id"]) == runs
    traced = "east->west/0" if paths else "east->west"
    preset = "east->west/1" if paths else "east->west"
    ev = res.events.drop_duplicates(["run_id", "event"])
    for run, kind in zip(runs, kinds, strict=True):
        workload = WORKLOADS[kind]
        if workload["kind"] == "training":
            steps = res.training[res.training["run_id"] == run]
            assert set(steps["outcome"]) == {"ok"}, steps
            assert steps["step"].nunique() == workload["steps"], steps["step"].unique()
            emulated = set(steps["compute_kind"]) == {"emulated"}
            assert emulated == (kind == "emulated"), set(steps["compute_kind"])
        elif kind == "dcqcn":
            rows = res.dcqcn[res.dcqcn["run_id"] == run]
            assert sorted(rows["kind"].unique()) >= ["end", "start"], rows
            assert rows.loc[rows["kind"] == "end", "sent"].iloc[0] > 0, rows
        else:  # collectives
            ops = res.collectives[res.collectives["run_id"] == run]
            assert len(ops) == workload["iterations"] * 2 and set(ops["outcome"]) == {"ok"}, ops
        # the trace: its bins' rates in order, applied on the traced direction alone (a run
        # shorter than the trace ends it early)
        sets = ev[(ev["run_id"] == run) & (ev["source"] == "trace")].sort_values("applied_unix")
        assert len(sets) and set(sets["status"]) == {"applied"}, sets
        assert set(sets["direction"]) == {traced}, sets["direction"]
        rates = [r / 1e6 for r in sets["rate_bps"]]
        assert rates == list(TRACE_MBIT[: len(rates)]), rates
        # the preset: its rate and loss (the uplink's) planned, the delay written over it
        (row,) = res.links[
            (res.links["run_id"] == run) & (res.links["direction"] == preset)
        ].to_dict("records")
        assert abs(row["capacity_configured_bps"] - PRESET_CAPACITY) < 1, row
        assert abs(row["delay_configured_s"] - 0.005) < 1e-9, row
        # the bulk cross-traffic, and both traces sampled
        assert res.flows_goodput.loc[res.flows_goodput["run_id"] == run, "bytes"].sum() > 0, run
        assert (res.tcp["run_id"] == run).any(), run
        assert traced in set(res.queues.loc[res.queues["run_id"] == run, "direction"]), run


def bulk_alone(data: dict[str, Any]) -> dict[str, Any]:
    """``workloads_scenario``'s data without a workload: its bulk flow alone (the clock's origin
    is then the traffic's start), the trace, the preset and the tracing kept."""
    return {k: v for k, v in data.items() if k not in ("workload", "sweep")} | {
        "name": f"{RUN_TAG}-cb"[:32]
    }


def check_bulk_alone(res: Any, paths: bool) -> None:
    assert (res.runs["status"] == "ok").all(), res.runs[["status", "reason"]]
    g = res.flows_goodput
    assert len(g) >= 10 and g["bytes"].sum() > 0, g  # 2 s in 100 ms samples
    sets = res.events[res.events["source"] == "trace"]
    assert len(sets) and set(sets["status"]) == {"applied"}, sets
    assert set(sets["direction"]) == {"east->west/0" if paths else "east->west"}
