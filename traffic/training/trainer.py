"""One rank's training loop for ``workload: kind: training``: the local step, its timing, the
algorithm's syncs (traffic.training.schedule), evaluation, and one record per step.

This module owns how a step is timed: ``compute`` (forward, backward and optimizer arithmetic),
``comm`` (blocked in a collective: DDP's exposed all-reduce at the end of backward, a DiLoCo or
local-SGD sync) and ``wait`` (blocked on an all-reduce that was overlapped with earlier steps, in
Streaming DiLoCo). ``wall`` is the whole step; the remainder is the harness (data, bookkeeping).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.distributed.algorithms.model_averaging.utils import average_parameters
from torch.nn.parallel import DistributedDataParallel

from traffic.context import RankContext
from traffic.training import data as D
from traffic.training import models as M
from traffic.training.outer import OuterOptimizer, encode, quantize_int8
from traffic.training.param_server import ParameterServer
from traffic.training.schedule import (
    DILOCO_FAMILY,
    Sync,
    fragment_of,
    schedule_from_config,
    syncs_at,
)


@dataclass
class StepTimes:
    compute: float = 0.0
    comm: float = 0.0
    wait: float = 0.0


@dataclass
class Pending:
    """An exchange of pseudo-gradients in flight, applied at ``sync.apply_step``."""

    sync: Sync
    works: list[Any]
    buffers: list[Any]
    shapes: list[torch.Size]
    n: int  # ranks it averages over


def bf16_hook(state, bucket):  # unannotated: DDP compares real annotations, not strings
    """torch's bf16 compression under another name: DDP refuses ``bf16_compress_hook`` by name
    without CUDA/NCCL, but the arithmetic works on gloo."""
    return default_hooks._compress_hook(torch.bfloat16, state, bucket)


HOOKS: dict[str, Callable[..., Any]] = {
    "none": default_hooks.allreduce_hook,
    "fp16": default_hooks.fp16_compress_hook,
    "bf16": bf16_hook,
    "powersgd": powerSGD_hook.powerSGD_hook,
}


@dataclass
class Trainer:
    """The state of one rank's training run; :meth:`step` runs one step and returns its record."""

    ctx: RankContext
    cfg: dict[str, Any]  # the workload's keys (spec["training"])
    hook_marks: list[float] = field(default_factory=list)
    pending: list[Pending] = field(default_factory=list)

    def __post_init__(self) -> None:
        cfg = self.cfg
        self.data = D.load(cfg["data"], M.CONTEXT.get(cfg["model"], 16))
        vocab = len(getattr(self.data, "vocab", ()))
        self.model = M.build(cfg["model"], vocab, cfg["seed"])
        self.loss_fn = M.loss_fn(cfg["model"])
        self.algorithm = cfg["algorithm"]
        diloco = cfg["diloco"]
        shapes = tuple(tuple(p.shape) for p in self.model.parameters())
        self.schedule = schedule_from_config(cfg, shapes)
        self.net: nn.Module = self.model
        if self.algorithm in ("ddp", "hierarchical"):
            group = None if self.algorithm == "ddp" else self.ctx.cluster_group
            self.net = self._ddp(group)
        self.inner = torch.optim.AdamW(self.model.parameters(), lr=cfg["lr"])
        self.ps: ParameterServer | None = None
        if self.algorithm == "parameter-server":
            ps = cfg["parameter_server"]
            ctx = self.ctx
            first = next(iter(ctx.clusters.values()))
            servers = list(first if ps["servers"] == "first-cluster" else ctx.leader_ranks)
            self.ps = ParameterServer(
                self.model, ctx.rank, ctx.world_size, servers, cfg["lr"], ps["staleness"]
            )
        self.outer: list[OuterOptimizer] = []
        if self.algorithm in DILOCO_FAMILY:
            params = list(self.model.parameters())
            nfrag = self.schedule.fragments
            self.outer = [
                OuterOptimizer(
                    [p for i, p in enumerate(params) if fragment_of(i, nfrag) == f],
                    lr=diloco["outer_lr"],
                    momentum=diloco["outer_momentum"],
                    nesterov=diloco["nesterov"],
                )
                for f in range(nfrag)
            ]
        self.validation = self.data.validation_set()

    def _ddp(self, group: Any) -> nn.Module:
        ddp_cfg = self.cfg["ddp"]
        net = DistributedDataParallel(
            self.model, process_group=group, bucket_cap_mb=ddp_cfg["bucket"] / 2**20
        )
        hook = HOOKS[ddp_cfg["hook"]]
        state: Any = group
        if ddp_cfg["hook"] == "powersgd":
            state = powerSGD_hook.PowerSGDState(
                process_group=group,
                matrix_approximation_rank=ddp_cfg["rank"],
                start_powerSGD_iter=ddp_cfg["start"],
            )
        marks = self.hook_marks

        def timed_hook(st, bucket):  # unannotated: see bf16_hook
            marks.append(time.perf_counter())  # this bucket's gradients are all computed
            return hook(st, bucket)

        net.register_comm_hook(state, timed_hook)
        return net

    # -- one step -----------------------------------------------------------------------------
    def step(self, step: int) -> dict[str, Any]:
        t = StepTimes()
        start_unix, t0 = time.time(), time.perf_counter()
        x, y = self.data.batch(self.cfg["seed"], self.ctx.rank, step, self.cfg["batch"])
        t_data = time.perf_counter()
        self.hook_marks.clear()
        loss = self.loss_fn(self.net(x), y)
        self.inner.zero_grad(set_to_none=True)
        loss.backward()
        t_bwd = time.perf_counter()
        if self.hook_marks:  # DDP: compute until the last bucket was ready, then exposed comm
            t.compute += self.hook_marks[-1] - t_data
            t.comm += t_bwd - self.hook_marks[-1]
        else:
            t.compute += t_bwd - t_data
        t_opt = time.perf_counter()
        if self.ps is not None:  # the servers' optimizers step inside the push/pull
            blocked = self.ps.step(step)
            t.comm += blocked
            t.compute += time.perf_counter() - t_opt - blocked
        else:
            self.inner.step()
            t.compute += time.perf_counter() - t_opt
        due = syncs_at(self.schedule, step)
        for sync in due:
            self._sync(sync, t)
        sent = sum(sync.payload for sync in due)
        self._apply_due(step, t)
        wall = time.perf_counter() - t0
        return {
            "step": step,
            "start": start_unix,
            "end": start_unix + wall,
            "loss": float(loss.detach()),
            "wall_s": wall,
            "compute_s": t.compute,
            "comm_s": t.comm,
            "wait_s": t.wait,
            "payload_bytes": sent,
        }

    # -- the syncs ----------------------------------------------------------------------------
    def _sync(self, sync: Sync, t: StepTimes) -> None:
        if sync.what == "gradients":  # DDP's (and hierarchical's inner) all-reduce: in backward
            return
        t0 = time.perf_counter()
        if sync.what == "parameters":  # local SGD: torch's own parameter averaging (one buffer)
            average_parameters(
                iter(self.model.parameters()), cast("dist.ProcessGroup", dist.group.WORLD)
            )
            t.comm += time.perf_counter() - t0
            return
        outer = self.outer[sync.fragment or 0]
        if sync.group == "leaders":
            self._leaders_sync(outer, t)
            return
        pending = self._issue(sync, outer.pseudo_gradients(), None, self.ctx.world_size)
        if sync.apply_step == sync.step:
            self._finish(pending, t, blocked="comm")
        else:
            t.comm += time.perf_counter() - t0  # encoding and posting only
            self.pending.append(pending)

    def _issue(self, sync: Sync, deltas: list[torch.Tensor], group: Any, n: int) -> Pending:
        """Post the exchange of the pseudo-gradients, flattened into one buffer (one collective,
        not one per tensor: each costs a WAN round trip)."""
        flat = torch.cat([d.flatten() for d in deltas])
        shapes = [d.shape for d in deltas]
        if self.schedule.dtype == "int8":
            pairs = [quantize_int8(d.flatten()) for d in deltas]
            codes = torch.cat([c for c, _ in pairs])
            scales = torch.cat([s for _, s in pairs])
            got_codes = [torch.empty_like(codes) for _ in range(n)]
            got_scales = [torch.empty_like(scales) for _ in range(n)]
            works = [
                dist.all_gather(got_codes, codes, group=group, async_op=True),
                dist.all_gather(got_scales, scales, group=group, async_op=True),
            ]
            return Pending(sync, works, [got_codes, got_scales], shapes, n)
        buf = encode(flat, self.schedule.dtype)
        return Pending(sync, [dist.all_reduce(buf, group=group, async_op=True)], [buf], shapes, n)

    def _averaged(self, pending: Pending) -> list[torch.Tensor]:
        numels = [math.prod(s) for s in pending.shapes]
        if self.schedule.dtype == "int8":
            got_codes, got_scales = pending.buffers
            total = torch.zeros(sum(numels))
            for codes, scales in zip(got_codes, got_scales, strict=True):
                per_tensor = torch.repeat_interleave(scales, torch.tensor(numels))
                total += codes.float() * per_tensor
            flat = total / pending.n
        else:
            flat = pending.buffers[0].float() / pending.n
        return [c.view(s) for c, s in zip(flat.split(numels), pending.shapes, strict=True)]

    def _finish(self, pending: Pending, t: StepTimes, blocked: str) -> None:
        t0 = time.perf_counter()
        for w in pending.works:
            w.wait()
        waited = time.perf_counter() - t0
        setattr(t, blocked, getattr(t, blocked) + waited)
        t1 = time.perf_counter()
        alpha = self.cfg["streaming"]["alpha"] if self.algorithm == "streaming-diloco" else 0.0
        self.outer[pending.sync.fragment or 0].step(self._averaged(pending), alpha=alpha)
        t.compute += time.perf_counter() - t1

    def _apply_due(self, step: int, t: StepTimes) -> None:
        due = [p for p in self.pending if p.sync.apply_step == step]
        for p in due:
            self.pending.remove(p)
            self._finish(p, t, blocked="wait")

    def _leaders_sync(self, outer: OuterOptimizer, t: StepTimes) -> None:
        """hierarchical: the leaders run DiLoCo's exchange across clusters, then every cluster
        takes the new parameters from its leader (its ranks were identical after DDP)."""
        ctx = self.ctx
        sync = Sync(-1, -1, "pseudo-gradients", "leaders", "all_reduce", 0)
        if ctx.is_leader:
            n = len(ctx.leader_ranks)
            self._finish(
                self._issue(sync, outer.pseudo_gradients(), ctx.leaders_group, n), t, "comm"
            )
        t0 = time.perf_counter()
        flat = torch.cat([p.data.flatten() for p in outer.local])
        dist.broadcast(flat, src=ctx.leader, group=ctx.cluster_group)
        with torch.no_grad():
            for p, g, chunk in zip(
                outer.local, outer.glob, flat.split([p.numel() for p in outer.local]), strict=True
            ):
                p.copy_(chunk.view(p.shape))
                g.copy_(p)
        t.comm += time.perf_counter() - t0

    def ddp_timers(self) -> dict[str, float]:
        """DDP's own averages over its sampled iterations (``_get_ddp_logging_data``, seconds):
        backward compute, backward communication and their overlap, beside the testbed's split
        (its ``comm`` is the exposed part: communication after the last bucket was ready). Empty
        without DDP or before DDP sampled an iteration."""
        if not isinstance(self.net, DistributedDataParallel):
            return {}
        data = self.net._get_ddp_logging_data()
        keys = {
            "ddp_backward_compute_s": "avg_backward_compute_time",
            "ddp_backward_comm_s": "avg_backward_comm_time",
            "ddp_overlap_s": "avg_backward_compute_comm_overlap_time",
        }
        return {k: data[v] / 1e9 for k, v in keys.items() if data.get(v)}

    def finish(self, t: StepTimes | None = None) -> None:
        """Wait for what is still in flight at the end of the run (streaming, stale pulls)."""
        t = t or StepTimes()
        if self.ps is not None:
            t.wait += self.ps.finish()
        for p in list(self.pending):
            self.pending.remove(p)
            self._finish(p, t, blocked="wait")

    @torch.no_grad()
    def evaluate(self) -> float:
        x, y = self.validation
        self.model.eval()
        loss = float(self.loss_fn(self.model(x), y))
        self.model.train()
        return loss if math.isfinite(loss) else float("nan")
