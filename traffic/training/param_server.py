"""The parameter-server pattern over gloo point-to-point sends, for ``algorithm:
parameter-server``.

This module owns the push/pull protocol. The flat parameter vector is cut into contiguous shards,
one per server rank (every rank of the first cluster, or every cluster's leader); a server is
also a worker. Each step every worker pushes its gradient's shard j to server j (``isend``, tag
2t); server j averages the shards of all workers, steps its own AdamW on its shard and sends the
new shard to every worker (tag 2t+1). A worker that pulled version t+1 before its step t+1 is
synchronous (``staleness`` 0); with ``staleness`` k it may run up to k steps on older
parameters, its pulls in flight meanwhile (bounded staleness). The traffic is a star: a server's
links carry every worker's shard in each direction.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn


@dataclass
class _Pull:
    version: int  # the parameters after this many server steps
    works: list[Any]
    buffers: dict[int, torch.Tensor]  # server rank -> its shard


class ParameterServer:
    def __init__(
        self, model: nn.Module, rank: int, world: int, servers: list[int], lr: float, staleness: int
    ) -> None:
        self.params = list(model.parameters())
        self.rank, self.world, self.servers, self.staleness = rank, world, servers, staleness
        flat = torch.cat([p.detach().flatten() for p in self.params])
        self.bounds = [
            (len(flat) * i // len(servers), len(flat) * (i + 1) // len(servers))
            for i in range(len(servers))
        ]
        self.shard: nn.Parameter | None = None
        self.opt: torch.optim.Optimizer | None = None
        if rank in servers:
            lo, hi = self.bounds[servers.index(rank)]
            self.shard = nn.Parameter(flat[lo:hi].clone())
            self.opt = torch.optim.AdamW([self.shard], lr=lr)
        self.pulls: deque[_Pull] = deque()
        self._own: torch.Tensor | None = None  # a server's newest shard
        self._sent: list[Any] = []  # a server's sends of new shards not yet known complete

    def step(self, step: int) -> float:
        """Push this step's gradients, serve (if a server), pull; the seconds blocked."""
        blocked = 0.0
        grad = torch.cat([cast(torch.Tensor, p.grad).flatten() for p in self.params])
        pull = self._post_pull(step)
        sends = []
        for j, server in enumerate(self.servers):
            if server != self.rank:
                lo, hi = self.bounds[j]
                sends.append(dist.isend(grad[lo:hi].contiguous(), dst=server, tag=2 * step))
        if self.shard is not None:
            blocked += self._serve(step, grad)
        self.pulls.append(pull)
        t0 = time.perf_counter()
        for w in sends:
            w.wait()
        # apply every pull that must have arrived (version > step - staleness), newest last
        while self.pulls and self.pulls[0].version <= step + 1 - self.staleness:
            self._apply(self.pulls.popleft())
        blocked += time.perf_counter() - t0
        return blocked

    def finish(self) -> float:
        t0 = time.perf_counter()
        while self.pulls:
            self._apply(self.pulls.popleft())
        return time.perf_counter() - t0

    def _post_pull(self, step: int) -> _Pull:
        works, buffers = [], {}
        for j, server in enumerate(self.servers):
            if server != self.rank:
                lo, hi = self.bounds[j]
                buffers[server] = torch.empty(hi - lo)
                works.append(dist.irecv(buffers[server], src=server, tag=2 * step + 1))
        return _Pull(step + 1, works, buffers)

    def _serve(self, step: int, grad: torch.Tensor) -> float:
        """Average every worker's shard, step the optimizer, send the new shard to all."""
        assert self.shard is not None and self.opt is not None
        j = self.servers.index(self.rank)
        lo, hi = self.bounds[j]
        others = [r for r in range(self.world) if r != self.rank]
        got = {r: torch.empty(hi - lo) for r in others}
        t0 = time.perf_counter()
        for w in [dist.irecv(got[r], src=r, tag=2 * step) for r in others]:
            cast(dist.Work, w).wait()  # None only for a rank outside the group
        blocked = time.perf_counter() - t0
        total = grad[lo:hi].clone()
        for g in got.values():
            total += g
        self.shard.grad = total / self.world
        self.opt.step()
        new = self.shard.detach().clone()
        self._sent += [dist.isend(new, dst=r, tag=2 * step + 1) for r in others]
        self._own = new
        return blocked

    @torch.no_grad()
    def _apply(self, pull: _Pull) -> None:
        for w in pull.works:
            w.wait()
        flat = torch.cat([p.detach().flatten() for p in self.params])
        for j, server in enumerate(self.servers):
            lo, hi = self.bounds[j]
            flat[lo:hi] = (
                cast(torch.Tensor, self._own) if server == self.rank else pull.buffers[server]
            )
        offset = 0
        for p in self.params:
            p.copy_(flat[offset : offset + p.numel()].view(p.shape))
            offset += p.numel()
        for w in self._sent:
            w.wait()
        self._sent = []
