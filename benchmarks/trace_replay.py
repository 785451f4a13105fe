"""Benchmark: does the emulated link follow a recorded rate trace, second by second?

    sudo .venv/bin/python -m benchmarks.trace_replay [--write] [--quick]

2 clusters x 1 host, 20 ms one way, the east->west direction replaying a trace in 100 ms bins
for 60 s, one bulk TCP flow east-h0 -> west-h0 (cubic, then bbr) measuring what the link
delivers, on the backend ``auto`` picks (this kernel: HTB + the userspace delay line). Traces:

* ``steps-60s.csv``: this project's synthetic trace (``scenarios/trace-replay.yaml``: 20 levels
  of 3 s between 0 and 95 Mbit/s, one of them a 3 s outage);
* ``ATT-LTE-driving-2016.up`` x 10: Mahimahi's AT&T LTE uplink (GPL-3.0, read from
  ``../shared/traces``, never copied here; skipped with a message when that directory is
  absent), its first 60 s scaled by 10 (19.5 Mbit/s mean, bins up to 169 Mbit/s) so that this
  machine carries it; its zero-rate bins (outages of 0.8-3.9 s) hold the bottleneck queue, as
  Mahimahi's mm-link does.

Two buffers: ``1bdp`` (the default, re-evaluated at each bin's rate) and ``4MB`` fixed, the deep
queue of Mahimahi's default (its droptail queue has no limit), which keeps a saturating flow's
backlog across a step up.

Per run (analysis.faults): the Pearson correlation of the per-second achieved rate (the
bottleneck's byte counter) and the trace's target, over every second and with the seconds
overlapping the trace's outages left out, the mean achieved / target and the counts. The goal
is a correlation >= 0.9. Each case runs ``--repeat`` times (2): a trace with outages
varies a lot from run to run (when TCP's backoff probes fall against the outages' ends decides
whether the flow carries the trace's best seconds). ``--quick``: cubic only, once.
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.loader import load
from analysis.trace_replay import achieved_rates, per_second, trace_targets, zero_rate_spans
from benchmarks._results import Tee, heading, write_section
from testbed.config.sweep import expand
from testbed.experiment.sweep import Experiment

ROOT = Path(__file__).resolve().parent.parent
SYNTHETIC = ROOT / "scenarios" / "traces" / "steps-60s.csv"
SHARED = ROOT.parent / "shared" / "traces"
MAHIMAHI = SHARED / "ATT-LTE-driving-2016.up"
SCALE = 10  # the trace's 1.95 Mbit/s mean and 16.9 Mbit/s best bin, times 10
DURATION = "60s"


def scenario(
    trace: dict, congestions: list[str], buffers: list[str], repeat: int, backend: str = "auto"
) -> dict:
    """One link replaying ``trace`` forward, one bulk flow per congestion control and buffer
    (a sweep)."""
    return {
        "name": "bench-trace",
        "backend": backend,
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": [
            {
                "between": ["east", "west"],
                "rate": "100mbit",
                "delay": "20ms",
                "trace": {"direction": "forward", "bin": "100ms", "loop": False, **trace},
            }
        ],
        "traffic": [
            {
                "kind": "bulk",
                "from": "east-h0",
                "to": "west-h0",
                "start": "0s",
                "duration": DURATION,
            }
        ],
        "trace": {"queues": "10ms"},  # the bottleneck's counter: what the link delivered
        "sweep": {"traffic[0].congestion": congestions, "wan[0].buffer": buffers},
        "repeat": repeat,
    }


def correlation(sec: pd.DataFrame) -> float | None:
    sec = sec.dropna()
    if len(sec) < 3 or sec["target_bps"].std() == 0 or sec["achieved_bps"].std() == 0:
        return None
    return float(np.corrcoef(sec["target_bps"], sec["achieved_bps"])[0, 1])


def rows_of(name: str, data: dict, source: str) -> list[str]:
    """Run one trace's sweep and return its table rows."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        exp = Experiment(expand(data, source), source, tmp, resume=False)
        exp.run(selfcheck_seconds=0.5)
        res = load(exp.results.path)
        backend = {r.run_id: r.backend for r in res.runs.itertuples()}
        specs = {s.run_id: s for s in exp.runs}
        bins = achieved_rates(trace_targets(res.events), res.queues, res.flows_goodput)
        for (run_id, _direction), g in bins.groupby(["run_id", "direction"], sort=True):
            every = per_second(g).dropna()
            lit = per_second(g, zero_rate_spans(g)).dropna()
            c_all, c_lit = correlation(every), correlation(lit)
            ratio = every["achieved_bps"].mean() / every["target_bps"].mean()
            out.append(
                f"| {name} | {specs[run_id].params['traffic[0].congestion']} | "
                f"{specs[run_id].params['wan[0].buffer']} | {specs[run_id].repeat + 1} | "
                f"{backend.get(run_id, '-')} | {'-' if c_all is None else f'{c_all:.3f}'} | "
                f"{'-' if c_lit is None else f'{c_lit:.3f}'} | {ratio:.3f} | {len(g)} | "
                f"{len(every)} | {len(every) - len(lit)} |"
            )
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    p.add_argument("--quick", action="store_true", help="cubic only, once")
    p.add_argument("--repeat", type=int, default=2, help="runs per case (2)")
    p.add_argument("--buffers", default="1bdp,4MB", help="bottleneck buffers (1bdp,4MB)")
    p.add_argument("--backend", default="auto", help="auto | kernel | userspace")
    p.add_argument("--scale", type=float, default=SCALE, help=f"the Mahimahi trace's ({SCALE})")
    p.add_argument("--traces", default="synthetic,mahimahi", help="synthetic,mahimahi")
    args = p.parse_args()
    traces = args.traces.split(",")
    congestions = ["cubic"] if args.quick else ["cubic", "bbr"]
    buffers = args.buffers.split(",")
    repeat = 1 if args.quick else args.repeat
    buf = io.StringIO()
    sys.stdout = Tee(sys.__stdout__, buf)
    heading(
        "Trace replay",
        f"{DURATION} of one bulk flow, 20 ms one way, 100 ms bins; achieved = the bottleneck's "
        "byte counter per bin, folded into seconds.",
    )
    print(
        "| trace | congestion | buffer | run | backend | correlation | "
        "correlation, outages excluded | mean achieved/target | bins | seconds | "
        "seconds excluded |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    if "synthetic" in traces:
        synthetic = scenario(
            {"file": str(SYNTHETIC), "format": "csv"}, congestions, buffers, repeat, args.backend
        )
        source = str(ROOT / "scenarios" / "trace-replay.yaml")
        for row in rows_of(SYNTHETIC.name, synthetic, source):
            print(row)
    if "mahimahi" in traces and MAHIMAHI.exists():
        att = scenario(
            {"file": str(MAHIMAHI), "format": "mahimahi", "scale": args.scale},
            congestions,
            buffers,
            repeat,
            args.backend,
        )
        for row in rows_of(f"{MAHIMAHI.name} x {args.scale:g}", att, str(MAHIMAHI)):
            print(row)
    elif "mahimahi" in traces:
        print(
            f"\n{MAHIMAHI.name}: skipped, {SHARED} is absent (the Mahimahi traces are GPL-3.0 "
            "and are not shipped with this package)."
        )
    sys.stdout = sys.__stdout__
    defaults = (args.backend, args.scale, args.traces) == ("auto", SCALE, "synthetic,mahimahi")
    if args.write and not args.quick and defaults:
        write_section("trace_replay.py", buf.getvalue())


if __name__ == "__main__":
    main()
