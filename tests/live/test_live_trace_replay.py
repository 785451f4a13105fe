"""Live test of a trace replay: a 24 s step trace on the east->west direction, one
cubic bulk flow, no workload. The bottleneck's counter is recorded without a workload, the link
never delivers more than the trace's rate, it delivers the rate once the flow has caught up, and
the per-second achieved rate follows the target.

Short round trip (10 ms one way) on purpose: cubic's growth after a step up is its own (in its
Reno-friendly region about 0.5 packet per RTT per RTT, so it takes seconds on a 40 ms RTT;
docs/faults.md "Trace replay"); here it catches up within a second, so what is checked is the
link's shaping and the measurement, not TCP's ramp. Userspace backend (this kernel has no
sch_netem); the trace is this test's own synthetic file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import RUN_TAG

from analysis.trace_replay import achieved_rates, per_second, trace_table, trace_targets
from testbed.config.sweep import expand
from testbed.experiment.sweep import Experiment

pytestmark = pytest.mark.live

LEVELS = [80, 20, 60, 10, 40, 90]  # Mbit/s, 4 s each
STEP_S = 4


def edge_resolution(sec: pd.DataFrame, queues: pd.DataFrame, t0: float) -> pd.Series:
    """Per second, how much more its achieved rate can read than crossed the link in it: the
    byte counter is sampled (about every 10 ms) and interpolated at the second's edges, so the
    sample interval that straddles an edge where the target steps spreads the other level's
    bytes linearly over both sides: at most (that interval) x (the step up to the neighbour's
    level) per 1 s, for each of the two edges."""
    times = np.sort(queues[queues["direction"] == "east->west"]["time"].to_numpy(float))

    def gap(edge: float) -> float:
        i = int(np.searchsorted(times, edge))
        return float(times[i] - times[i - 1]) if 0 < i < len(times) else 0.0

    target = dict(zip(sec["second"], sec["target_bps"], strict=True))
    slack = []
    for k in sec["second"]:
        here = target[k]
        later = max(0.0, target.get(k + 1, here) - here) * gap(t0 + k + 1)
        earlier = max(0.0, target.get(k - 1, here) - here) * gap(t0 + k)
        slack.append(later + earlier)
    return pd.Series(slack, index=sec.index)


def replay(tmp_path: Path) -> Experiment:
    trace = tmp_path / "steps.csv"
    rows = [f"{i * STEP_S}s,{r}mbit" for i, r in enumerate(LEVELS)]
    trace.write_text("t,rate\n" + "\n".join(rows) + f"\n{len(LEVELS) * STEP_S}s,90mbit\n")
    flow = {"kind": "bulk", "from": "east-h0", "to": "west-h0", "congestion": "cubic"}
    flow.update(start="0s", duration=f"{len(LEVELS) * STEP_S}s")
    data = {
        "name": f"{RUN_TAG}-tr-replay"[:32],
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": [
            {
                "between": ["east", "west"],
                "rate": "100mbit",
                "delay": "10ms",
                "trace": {"file": str(trace), "format": "csv", "bin": "100ms", "loop": False},
            }
        ],
        "traffic": [flow],
        "backend": "userspace",
    }
    exp = Experiment(expand(data, "test"), "test", tmp_path / "out", resume=False)
    assert exp.run(selfcheck_seconds=0.5), exp.manifest["runs"]["p000-r0"]["reason"]
    return exp


# measured 30 s in full-suite runs on 2 cores: 4x and more for a busy host
@pytest.mark.timeout(180)
@pytest.mark.timing
def test_a_replayed_step_trace_is_followed_second_by_second(root, tmp_path) -> None:
    exp = replay(tmp_path)
    path = exp.results.path
    events = pd.read_parquet(path / "events.parquet").assign(results="")
    # the bottleneck's counter, sampled although the run has no workload
    queues = pd.read_parquet(path / "queues.parquet").assign(results="")
    assert set(queues["direction"]) >= {"east->west"}
    bins = achieved_rates(trace_targets(events), queues)
    sec = per_second(bins).dropna()
    print(sec.assign(t=sec["target_bps"] / 1e6, a=sec["achieved_bps"] / 1e6)[["second", "t", "a"]])
    slack = edge_resolution(sec, queues, float(bins["start"].min()))
    print(slack / 1e6)
    assert len(sec) >= len(LEVELS) * STEP_S - 2
    # HTB shapes at dequeue: no second carries more than its target (+2% + 0.2 Mbit/s for the
    # token bucket's burst), beyond the measurement's own resolution at the second's edges
    # (edge_resolution: the counter sample straddling a step up, 10 ms of the next level)
    over = sec[sec["achieved_bps"] > 1.02 * sec["target_bps"] + 0.2e6 + slack]
    assert over.empty, over.assign(slack=slack)
    # the last two seconds of each level: the flow has caught up, the link delivers the rate;
    # one second can still dip (seen once in two runs: 0.85 of 90 Mbit/s, a loss of cubic's on
    # the busy machine), so the bound on every second is looser than on their median
    settled = sec[sec["second"] % STEP_S >= STEP_S - 2]
    ratio = settled["achieved_bps"] / settled["target_bps"]
    # wire bytes against the rate: a saturated second reads 1.00, within the edge interpolation
    # (a ~10 ms counter sample: <= 1% of a second per edge, edge_resolution); 0.97 is ~3 of
    # those, over 12 settled seconds. 0.8: below the one dip seen (0.85, a cubic loss). RESULTS.md
    # "Trace replay" gives whole-run means (40 ms RTT), not settled seconds: no spread to cite.
    assert ratio.median() > 0.97 and ratio.min() > 0.8, settled
    table = trace_table(bins).iloc[0]
    # the replay's goal (RESULTS.md "Trace replay": per-second correlation >= 0.9)
    assert table["correlation"] >= 0.9, table
    # the bulk flow's own summary (analysis.dcqcn measure_bulk, DCQCN's comparison): its rate
    # over the settled half (the last 12 s: 10, 40, 90 Mbit/s levels) and the queue it built
    s = exp.summaries[0]
    assert s["bulk_flows"] == 1 and s["bulk_jain"] == pytest.approx(1.0)
    # a sanity range, not derived: the settled half's levels (10, 40, 90 Mbit/s, 4 s each) mean
    # ~46.7 x GOODPUT_FACTOR = 44.6 Mbit/s of payload; 5..90 is half the lowest to the highest
    assert 5e6 < s["bulk_rate_mean_bps"] < 90e6, s
    assert s["bulk_queue_mean_bytes"] >= 0 and "bulk_dropped" in s
