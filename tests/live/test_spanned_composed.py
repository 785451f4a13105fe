"""Live test of everything at once across machines: three clusters on two stand-in machines
(east on node-a; west and north on node-b: two WAN links, each across the machines, east-north
of two paths), a trace replayed on the link of one path, a blackhole on every path of the other,
tcp_info tracing, a bulk flow and a DiLoCo training of a real model over both links, run through
the runner across the machines and on one machine; the two report alike."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import yaml

import analysis
from analysis import faults
from testbed.net import registry

pytestmark = pytest.mark.live
ray = pytest.importorskip("ray", reason="the [ray] extra is not installed")

PLACEMENT = {"machines": {"east": "node-a", "west": "node-b", "north": "node-b"}}


def scenario() -> dict:
    trace = {"file": "rates.csv", "format": "csv", "bin": "1s", "loop": True}
    return {
        "name": "span-composed",
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}, "north": {"hosts": 1}},
        "wan": [
            {"between": ["east", "west"], "rate": "100mbit", "delay": "10ms", "trace": trace},
            # two equal paths of east-west's rate and delay: a flow sees its path (the hash's
            # pick) as the link of one path, and the blackhole below takes both
            {"between": ["east", "north"],
             "paths": [{"rate": "100mbit", "delay": "10ms"} for _ in range(2)]},
        ],
        "faults": [{"kind": "blackhole", "link": "east-north",
                    "after": {"iteration": 4, "offset": "50ms"}, "duration": "1s"}],
        # the run's clock from its start: the flow runs while the ranks start (torch's import
        # and rendezvous take longer), so the WAN bytes of the training's steps are its own (a
        # flow beside the steps puts its bytes in them, as many as its overlap, run to run)
        "clock": "wall",
        "traffic": [{"kind": "bulk", "from": "east-h0", "to": "west-h0", "start": "0s",
                     "duration": "1s"}],
        "trace": {"tcp_info": "100ms"},
        "workload": {"kind": "training", "model": "char-mlp", "algorithm": "diloco",
                     "diloco": {"inner_steps": 2}, "steps": 10, "batch": 8, "eval_every": 5,
                     "timeout": "60s"},
    }  # fmt: skip


def run(doc: dict, tmp: Path, name: str, address: str | None) -> tuple[dict, Path, dict]:
    from testbed.config.sweep import load_runs
    from testbed.experiment.sweep import Experiment

    (tmp / "rates.csv").write_text("t,rate\n0s,60mbit\n1s,40mbit\n2s,60mbit\n3s,40mbit\n")
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    exp = Experiment(load_runs(str(path), []), str(path), tmp / name, resume=False)
    exp.ray_address = address
    exp.run(selfcheck_seconds=0.3)
    (entry,) = exp.manifest["runs"].values()
    assert entry["status"] == "ok", entry.get("reason")
    (summary,) = exp.summaries
    return entry, exp.results.path, summary


# measured (call) on 2 cores at a load average of 2-3: 37-39 s with east-north of one path (3
# runs), 49-51 s with two (5 runs): each path's directions are delay-line processes of their own,
# each self-checked, in both runs
# measured (call) in three clean suites on 2 cores: 48-49 s; the shared stand-in machines'
# start (once a session) 12-36 s; a saturated host's rerun doubles it
@pytest.mark.timeout(240)
@pytest.mark.timing
def test_a_placed_scenario_with_everything_reports_like_one_machine(machines, tmp_path):
    address, _ = machines
    across, out, s_across = run({**scenario(), "placement": PLACEMENT}, tmp_path, "a", address)
    assert not [r for r in registry.records() if r.prefix == across["prefix"]]
    _, out1, s_one = run(scenario(), tmp_path, "o", None)

    # one clock: each machine's offset to the driver, within its bound of 0 on one kernel
    assert sorted(across["clock_offset"]) == ["node-a", "node-b"]
    for o in across["clock_offset"].values():
        assert abs(o["offset_s"]) <= o["bound_s"], across["clock_offset"]
    # the self-check passed on every direction, on both (its capacity and goodput: a timing
    # reading, which a saturated host fails on one machine as well)
    for path in (out, out1):
        links = pd.read_parquet(path / "links.parquet")
        assert links["ok"].all(), links[["direction", "problem"]]
        assert {"east->north/0", "east->north/1", "east->west"} <= set(links["direction"])
    # the trace's bins, the blackhole's start and end: applied on both
    for path in (out, out1):
        events = pd.read_parquet(path / "events.parquet")
        assert set(events["status"]) == {"applied"}, events[["action", "status", "error"]]
        assert {"set", "blackhole", "unblackhole"} <= set(events["action"]), events["action"]
    # tcp_info of the ranks' and the flow's sockets; the bulk flow's goodput
    assert len(pd.read_parquet(out / "tcp.parquet")) > 0
    assert len(pd.read_parquet(out / "flows_goodput.parquet")) > 0
    # the fault as the runner judged it: survived on both, and last (below) its stall within
    # the band that scenarios/wan-faults.yaml expects of a blackhole (0.8-1.2 x the TLP + RTO
    # series + slow start), the sync step it meets against the run's sync steps (not DiLoCo's
    # inner steps); benchmarks/RESULTS.md has it term by term
    assert s_across["fault_survived"] == s_one["fault_survived"] == 1
    # DiLoCo's bytes per step: its parameters every H steps, the same across machines and on
    # one; 10%: the goal's bound
    wan = s_across["wan_bytes_per_step"], s_one["wan_bytes_per_step"]
    assert wan[1] > 0 and abs(wan[0] - wan[1]) <= 0.10 * wan[1], wan
    # Its slow start runs on the slowest connection the blackhole stalled: the ring's
    # north-west one crosses both links (40 ms; the first WAN direction's 20 ms read 1.05-1.24
    # with east-north of two paths, 3 of 6 runs in the band). 18 saved runs of one path
    # re-analysed so: 0.76-1.12, mean 0.97 (load 25-42; one run below the band)
    # Where a stalled socket's RTO was spurious (the blackhole caught only its ACKs: the kernel
    # undoes the RTO, and its RTT sample across the outage lengthens its next timeouts; the
    # verdict flags it) the prediction prices none of it and is a floor: flagged arms read
    # 0.95, 1.11, 1.36 and 1.48, the other 8 of 12 arms 0.93-1.05
    stall = s_across["fault_stall_over_predicted"], s_one["fault_stall_over_predicted"]
    for ratio, path in zip(stall, (out, out1), strict=True):
        (fault,) = faults.analyse(analysis.load(path)).faults.to_dict("records")
        top = math.inf if fault["rto_spurious"] else 1.2
        assert 0.8 <= ratio <= top, (stall, fault["verdict"])
