"""DiLoCo with torchft, written as torchft's own example (examples/diloco/train_diloco.py in
pytorch/torchft) is: one replica group per torchrun, a Manager that finds the others through
the lighthouse (TORCHFT_LIGHTHOUSE), gloo on CPU. The data is synthetic (no download) and the
model small, so that a run takes seconds; it prints one JSON line per inner step."""

import json
import logging
import os
import time
from datetime import timedelta

import torch
from torch import nn, optim
from torchft import Manager, ProcessGroupGloo
from torchft.checkpointing.pg_transport import PGTransport
from torchft.local_sgd import DiLoCo

logging.basicConfig(level=logging.WARNING)


def main() -> None:
    REPLICA_GROUP_ID = int(os.environ.get("REPLICA_GROUP_ID", 0))
    NUM_REPLICA_GROUPS = int(os.environ.get("NUM_REPLICA_GROUPS", 2))
    SYNC_EVERY = int(os.environ.get("SYNC_EVERY", 10))
    OUTER_STEPS = int(os.environ.get("OUTER_STEPS", 10))
    STEP_SLEEP = float(os.environ.get("STEP_SLEEP", 0.05))

    # each replica group its own shard of a synthetic regression task
    torch.manual_seed(REPLICA_GROUP_ID)
    true_w = torch.linspace(-1, 1, 64)
    inputs = torch.randn(4096, 64)
    targets = inputs @ true_w + 0.01 * torch.randn(4096)

    pg = ProcessGroupGloo(timeout=timedelta(seconds=5))
    transport = PGTransport(pg, timeout=timedelta(seconds=10), device=torch.device("cpu"))

    torch.manual_seed(0)  # every replica group starts from the same weights
    m = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1))
    inner_optimizer = optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95))
    outer_optimizer = optim.SGD(m.parameters(), lr=0.7, momentum=0.9, nesterov=True)
    criterion = nn.MSELoss()

    # DiLoCo registers its own state (the outer optimizer, the last synced parameters) with
    # the manager; a recovering group gets both from a healthy one
    def load_state_dict(state_dict):
        m.load_state_dict(state_dict["model"])
        inner_optimizer.load_state_dict(state_dict["inner_optim"])

    def state_dict():
        return {"model": m.state_dict(), "inner_optim": inner_optimizer.state_dict()}

    manager = Manager(
        pg=pg,
        min_replica_size=1,
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        replica_id=f"train_diloco_{REPLICA_GROUP_ID}",
        timeout=timedelta(seconds=5),
        quorum_timeout=timedelta(seconds=5),
        checkpoint_transport=transport,
        use_async_quorum=False,
    )
    print(f"DiLoCo: replica group {REPLICA_GROUP_ID} of {NUM_REPLICA_GROUPS}", flush=True)

    num_local_steps = 0
    with DiLoCo(
        manager, [m], inner_optimizer, outer_optimizer, sync_every=SYNC_EVERY, pin_memory=False
    ):
        while manager.current_step() < OUTER_STEPS:
            start = time.time()
            batch = torch.randint(0, len(inputs), (64,))
            inner_optimizer.zero_grad()
            loss = criterion(m(inputs[batch]).squeeze(-1), targets[batch])
            loss.backward()
            inner_optimizer.step()  # every SYNC_EVERY-th step: the outer (DiLoCo) sync
            num_local_steps += 1
            print(
                json.dumps(
                    {
                        "metric": "inner_step_s",
                        "value": time.time() - start,
                        "step": num_local_steps,
                        "outer_step": manager.current_step(),
                        "participants": manager.num_participants(),
                        "replica_group": REPLICA_GROUP_ID,
                        "loss": loss.item(),
                    }
                ),
                flush=True,
            )
            time.sleep(STEP_SLEEP)
    print(f"DiLoCo: done, {num_local_steps} inner steps, outer step {manager.current_step()}")
    manager.shutdown(wait=False)  # as torchft's own tests end a replica


if __name__ == "__main__":
    main()
