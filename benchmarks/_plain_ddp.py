"""One rank of plain torch DDP on loopback, no testbed: the baseline of benchmarks/training.py's
harness overhead. Same model, data, batch and optimizer as ``workload: kind: training``'s ddp.

    python -m benchmarks._plain_ddp --rank R --world N --port P --steps S [--master ADDR]

Prints one JSON line (rank 0 only): the per-step wall times in seconds.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from traffic.training import data as D
from traffic.training import models as M


def main() -> None:
    p = argparse.ArgumentParser()
    for name in ("rank", "world", "port", "steps", "batch"):
        p.add_argument(f"--{name}", type=int, default=32 if name == "batch" else None)
    p.add_argument("--master", default="127.0.0.1")
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{a.master}:{a.port}",
        rank=a.rank,
        world_size=a.world,
        timeout=timedelta(seconds=120),
    )
    text = D.load("pydoc-topics")
    net = DistributedDataParallel(M.build("char-mlp", len(text.vocab), 0))
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    walls = []
    for step in range(a.steps):
        t0 = time.perf_counter()
        x, y = text.batch(0, a.rank, step, a.batch)
        loss = loss_fn(net(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        walls.append(time.perf_counter() - t0)
    dist.barrier()
    dist.destroy_process_group()
    if a.rank == 0:
        print(json.dumps(walls))


if __name__ == "__main__":
    main()
