"""Benchmark: the terms behind emulated Table 4's misses, each measured on its own.

    sudo .venv/bin/python -m benchmarks.table4_terms [--prefix h5x]

A live testbed of two clusters of one host (`testbed up`, named ``<prefix>-terms``), its WAN set
per case with `testbed link` (rate, 1 ms one way or none, buffer), and two torch gloo ranks
started by `testbed launch` running the collectives the emulated trainer runs
(traffic.training.emulated), timed one by one:

* ``call``: one gloo all-reduce of each DDP bucket size of the 1B model at 1/1000 (28 and 56 KB
  of bf16) on an unshaped link, then across 1 ms one way: the per-call cost and its round trips;
* ``chain``: the 48 buckets of a step issued back to back (as a backward that is already over),
  on the unshaped 1 ms link and at the DP sweep's rates: what each bucket costs in a queue;
* ``ddp``: DDP's schedule itself (forward wait, buckets issued over the backward, wait), CU;
* ``gather``: the fp4 fragment (625 KB at 1/100) all-gathered (as a list and into one tensor)
  vs all-reduced (the same bytes) at 3 Mbit/s, blocking and overlapped with a 0.2 s wait as the
  trainer's τ = 2, at the default buffer and at 512 KB.

Prints one JSON line per measurement (medians over repeats) and the host's load average before
and after. The testbed is taken down at the end. Numbers on a shared 2-core host are noisy:
quote the load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BUCKETS_1000 = [55_600, 27_800] * 24  # bytes: the 48 DDP buckets of a 1B bf16 model at 1/1000
ROOT = Path(__file__).resolve().parent.parent
SCENARIO = """name: {name}
description: two ranks across one WAN link, for benchmarks.table4_terms
clusters:
  east: {{hosts: 1}}
  west: {{hosts: 1}}
wan:
  - between: [east, west]
    rate: 600mbit
    delay: 1ms
workload: {{kind: collectives, collectives: [all_reduce], sizes: [1MiB]}}
"""
FP4_FRAGMENT = 625_000  # bytes: one of 8 fp4 fragments of 1B at 1/100 (+ scales, negligible)
STEP_S, FORWARD_S = 0.1, 0.1 / 3


def tb(*args: str, check: bool = True) -> str:
    """A `testbed` verb; its stdout."""
    cmd = [sys.executable, "-m", "testbed.cli", *args]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=ROOT)
    if check and done.returncode:
        raise RuntimeError(
            f"testbed {args[0]}: exit {done.returncode}\n{done.stdout[-1500:]}{done.stderr[-1500:]}"
        )
    return done.stdout


def setup(name: str) -> None:
    """`testbed up` of two clusters of one host, 1 ms one way (the Table 4 scenario's WAN)."""
    path = Path(f"/tmp/{name}.yaml")
    path.write_text(SCENARIO.format(name=name))
    tb("up", str(path), "--name", name)


def shape(name: str, rate: str, delay_ms: float, buffer: str) -> None:
    tb("link", name, "east-west", "set", f"rate={rate}", f"delay={delay_ms}ms", f"buffer={buffer}")


def teardown(name: str) -> None:
    tb("down", name, check=False)


def ranks(name: str, case: dict) -> dict:
    """Run ``case`` on the testbed's two ranks (one per cluster); rank 0's result line."""
    out = tb(
        "launch",
        name,
        "--out",
        "/tmp/" + name + "-runs",
        "--",
        sys.executable,
        "-m",
        "benchmarks.table4_terms",
        "--rank",
        json.dumps(case).replace("{", "{{").replace("}", "}}"),
    )
    lines = [ln.partition(" ")[2] for ln in out.splitlines() if ln.startswith('[rank-0] {"case"')]
    if not lines:
        raise RuntimeError(f"no result from rank 0 for {case}:\n{out[-2000:]}")
    return json.loads(lines[-1])


def rank_main(case: dict) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method="env://")
    reps = int(case.get("reps", 20))

    def bufs(sizes: list[int], dtype: torch.dtype) -> list[torch.Tensor]:
        return [
            torch.zeros(max(1, n // torch.tensor([], dtype=dtype).element_size()), dtype=dtype)
            for n in sizes
        ]

    out: dict = {"case": case["what"]}
    for _ in range(3):
        dist.all_reduce(torch.zeros(1000))
    if case["what"] == "call":
        for n in (27_800, 55_600):
            b = bufs([n], torch.bfloat16)[0]
            for _ in range(10):
                dist.all_reduce(b)
            ts = []
            for _ in range(reps):
                dist.barrier()
                t = time.perf_counter()
                dist.all_reduce(b)
                ts.append(time.perf_counter() - t)
            out[str(n)] = statistics.median(ts)
    elif case["what"] == "chain":
        bs = bufs(BUCKETS_1000, torch.bfloat16)
        ts = []
        for _ in range(reps):
            dist.barrier()
            t = time.perf_counter()
            works: list[Any] = [dist.all_reduce(b, async_op=True) for b in bs]
            for w in works:
                w.wait()
            ts.append(time.perf_counter() - t)
        out["chain_s"] = statistics.median(ts)
    elif case["what"] == "ddp":
        bs = bufs(BUCKETS_1000, torch.bfloat16)
        total = sum(BUCKETS_1000)
        walls, comms = [], []
        for _ in range(reps):
            dist.barrier()
            t0 = time.perf_counter()
            _sleep_to(t0 + FORWARD_S)
            works, cum = [], 0
            for b, n in zip(bs, BUCKETS_1000, strict=True):
                cum += n
                _sleep_to(t0 + FORWARD_S + (STEP_S - FORWARD_S) * cum / total)
                works.append(dist.all_reduce(b, async_op=True))
            _sleep_to(t0 + STEP_S)
            t1 = time.perf_counter()
            for w in works:
                w.wait()
            comms.append(time.perf_counter() - t1)
            walls.append(time.perf_counter() - t0)
        out |= {
            "wall_s": statistics.median(walls),
            "comm_s": statistics.median(comms),
            "cu": STEP_S / statistics.median(walls),
        }
    elif case["what"] == "gather":
        send = torch.zeros(FP4_FRAGMENT, dtype=torch.uint8)
        got = [torch.empty_like(send) for _ in range(2)]
        red = torch.zeros(FP4_FRAGMENT // 2, dtype=torch.bfloat16)
        flat = torch.empty(2 * FP4_FRAGMENT, dtype=torch.uint8)
        ops = {
            "all_gather": lambda: dist.all_gather(got, send, async_op=True),
            "all_reduce": lambda: dist.all_reduce(red, async_op=True),
            "all_gather_into_tensor": lambda: dist.all_gather_into_tensor(
                flat, send, async_op=True
            ),
        }
        for name, op in ops.items():
            ts = []
            for _ in range(reps):
                dist.barrier()
                t = time.perf_counter()
                work = op()
                _sleep_to(t + float(case.get("overlap_s", 0.0)))
                work.wait()
                ts.append(time.perf_counter() - t)
            out[name + "_s"] = statistics.median(ts)
    dist.barrier()
    dist.destroy_process_group()
    print(json.dumps(out))


def _sleep_to(deadline: float) -> None:
    left = deadline - time.perf_counter()
    if left > 0:
        time.sleep(left)


def main() -> int:
    p = argparse.ArgumentParser(description="the terms behind emulated Table 4's misses")
    p.add_argument("--prefix", default="h5x")
    p.add_argument("--rank", help=argparse.SUPPRESS)
    p.add_argument("--only", help="comma-separated: call,chain,ddp,gather")
    args = p.parse_args()
    if args.rank:
        rank_main(json.loads(args.rank))
        return 0
    only = set(args.only.split(",")) if args.only else {"call", "chain", "ddp", "gather"}
    print(json.dumps({"load_before": os.getloadavg()}), flush=True)
    name = f"{args.prefix}-terms"
    teardown(name)
    setup(name)
    try:
        # (rate, one-way delay ms, buffer, case); 10gbit and 0 ms: as good as unshaped here
        plan: list[tuple[str, float, str, dict]] = []
        if "call" in only:
            plan += [
                ("10gbit", 0, "1bdp", {"what": "call", "reps": 50}),
                ("10gbit", 1, "1bdp", {"what": "call", "reps": 50}),
            ]
        if "chain" in only:
            plan += [("10gbit", 1, "1bdp", {"what": "chain", "reps": 15})]
            plan += [(f"{r}mbit", 1, "1bdp", {"what": "chain", "reps": 15}) for r in (200, 600)]
        if "ddp" in only:
            plan += [(f"{r}mbit", 1, "1bdp", {"what": "ddp", "reps": 15}) for r in (200, 600)]
        if "gather" in only:
            plan += [
                ("3mbit", 1, buf, {"what": "gather", "reps": 7, "overlap_s": o})
                for buf, o in (("1bdp", 0.0), ("1bdp", 0.2), ("512kb", 0.2))
            ]
        for rate, delay, buffer, case in plan:
            shape(name, rate, delay, buffer)
            res = ranks(name, case)
            print(
                json.dumps({"rate": rate, "delay_ms": delay, "buffer": buffer, **res}), flush=True
            )
    finally:
        teardown(name)
    print(json.dumps({"load_after": os.getloadavg()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
