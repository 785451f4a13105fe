"""Train a small MLP on random data with DistributedDataParallel over gloo.

Launch it with torchrun on every node; it reads its rank and the rendezvous from torchrun's
environment:

    torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint HOST:PORT \
        train.py --steps 200

Every rank prints one JSON line per step: {"metric": "step_time", "step": k, "value": seconds}.
"""

import argparse
import json
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

DESCRIPTION = "Train a small MLP on random data with DistributedDataParallel over gloo."


def main() -> None:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--features", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()

    dist.init_process_group("gloo")  # MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE from torchrun
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(args.features, args.hidden),
        nn.ReLU(),
        nn.Linear(args.hidden, args.hidden),
        nn.ReLU(),
        nn.Linear(args.hidden, 10),
    )
    ddp = DDP(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    params = sum(p.numel() for p in model.parameters())
    if rank == 0:
        print(f"training {params} parameters on {world} ranks for {args.steps} steps", flush=True)

    data = torch.Generator().manual_seed(rank)
    for step in range(args.steps):
        x = torch.randn(args.batch_size, args.features, generator=data)
        y = torch.randint(0, 10, (args.batch_size,), generator=data)
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = F.cross_entropy(ddp(x), y)
        loss.backward()  # DDP all-reduces the gradients here
        optimizer.step()
        took = time.perf_counter() - start
        line = {"metric": "step_time", "step": step, "value": took, "rank": rank}
        print(json.dumps(line | {"loss": round(loss.item(), 4)}), flush=True)

    # every rank done before any leaves: without it, rank 0 tearing its group down first once
    # aborted rank 1's own teardown after both had finished all 100 steps ("terminate called
    # without an active exception", SIGABRT)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
