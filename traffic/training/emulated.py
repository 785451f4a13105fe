"""One rank's training loop for an emulated model (``compute: {step: ...}`` with a named shape or
``{synthetic: ...}``): the compute is a timed wait, the communication is real.

No arithmetic: gradients and pseudo-gradients are preallocated buffers of the scaled size and
the wire dtype, sent with the collectives the real algorithms use, when they use them:

* ``ddp``: the forward wait, then the backward wait during which DDP's buckets become ready in
  backward order (torch's assignment on the **unscaled** layout, traffic.training.synthetic:
  the bucket count and order are the real model's, each bucket's bytes x scale), each one's
  all-reduce started when the backward has covered its share of the parameters (``overlap``:
  false starts them all when the backward ends); ``comm`` is what is left after the backward;
* ``diloco`` / ``streaming-diloco``: the schedule's syncs (traffic.training.schedule), blocking
  (``comm``) or overlapped by τ steps and waited for where applied (``wait``); int8 and fp4 are
  all-gathered codes (fp4 packed two to a byte) and scales, as their fp32 accumulation needs;
* ``hierarchical``: DDP's buckets as above, all-reduced inside the cluster (its process group,
  the fabric) every step; every H steps the cluster leaders exchange the pseudo-gradients as
  DiLoCo does (their own group, across the WAN), then each leader broadcasts the new
  parameters (the model's dtype) inside its cluster; both blocking (``comm``), the other ranks
  of a cluster waiting for their leader in the broadcast.

A step's ``compute_s`` is the configured compute (the useful work CU counts); the wait's own
lateness (the emulator's CPU) shows in ``wall_s`` and ``late_s``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from traffic.context import RankContext
from traffic.training.schedule import GATHERED, HOOK_DTYPE, Sync, schedule_from_config, syncs_at
from traffic.training.synthetic import DTYPE_BITS, ddp_buckets, layout_of, parse_scale

TORCH_DTYPE = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def sleep_until(deadline: float) -> None:
    """Wait until ``deadline`` (perf_counter seconds)."""
    left = deadline - time.perf_counter()
    if left > 0:
        time.sleep(left)


def wire_buffer(nbytes: int, dtype: str) -> torch.Tensor:
    """A buffer of ``nbytes`` on the wire: elements of ``dtype``, or raw bytes for codes."""
    if dtype in TORCH_DTYPE:
        return torch.zeros(max(1, nbytes * 8 // DTYPE_BITS[dtype]), dtype=TORCH_DTYPE[dtype])
    return torch.zeros(max(1, nbytes), dtype=torch.uint8)


@dataclass
class Inflight:
    sync: Sync
    works: list[Any]


@dataclass
class EmulatedTrainer:
    """The state of one rank's emulated run; :meth:`step` runs one step and returns its record."""

    ctx: RankContext
    cfg: dict[str, Any]
    pending: list[Inflight] = field(default_factory=list)

    def __post_init__(self) -> None:
        cfg = self.cfg
        self.algorithm = cfg["algorithm"]
        self.scale = parse_scale(cfg.get("scale", 1))
        compute = cfg["compute"]
        self.step_s = float(compute["step"])
        fwd = compute.get("forward")
        self.forward_s = float(fwd) if fwd is not None else self.step_s / 3
        self.schedule = schedule_from_config(cfg)
        self.buckets: list[torch.Tensor] = []
        self.ready: list[float] = []  # each bucket's ready time, a fraction of the backward
        hierarchical = self.algorithm == "hierarchical"
        # DDP's group: the world, or hierarchical's cluster
        self.group = self.ctx.cluster_group if hierarchical else None
        self.overlap = bool(cfg["ddp"].get("overlap", True))
        if self.algorithm in ("ddp", "hierarchical"):
            full = layout_of(cfg["model"])
            hook = cfg["ddp"]["hook"]
            dtype = full.dtype if hook == "none" else HOOK_DTYPE[hook]
            elem = DTYPE_BITS[dtype] / 8
            numels = [t.numel for t in full.tensors]
            cum = 0
            for b in ddp_buckets(numels, elem, cap=int(cfg["ddp"]["bucket"])):
                n = sum(numels[i] for i in b)
                cum += n
                self.buckets.append(wire_buffer(round(n * elem * self.scale), dtype))
                self.ready.append(cum / full.numel)
        # hierarchical: the parameters a leader broadcasts in its cluster after an outer step
        self.params = (
            wire_buffer(layout_of(cfg["model"], self.scale).nbytes(), self.schedule.grad_dtype)
            if hierarchical
            else None
        )
        self.buffers: dict[int, tuple[torch.Tensor, list[torch.Tensor]]] = {}

    def _buffers(self, sync: Sync, members: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The send buffer of a sync's payload (per fragment, reused) and, for gathered codes,
        the receive buffers (one per member of the group)."""
        key = sync.fragment or 0
        if key not in self.buffers:
            dtype = self.schedule.dtype
            send = wire_buffer(sync.payload, dtype)
            got = [torch.empty_like(send) for _ in range(members)] if dtype in GATHERED else []
            self.buffers[key] = (send, got)
        return self.buffers[key]

    def _issue(self, sync: Sync, group: Any = None, members: int | None = None) -> Inflight:
        send, got = self._buffers(sync, members or self.ctx.world_size)
        if got:
            return Inflight(sync, [dist.all_gather(got, send, group=group, async_op=True)])
        return Inflight(sync, [dist.all_reduce(send, group=group, async_op=True)])

    def _leaders_sync(self, sync: Sync) -> None:
        """hierarchical's outer step: the leaders' exchange across the WAN, then the new
        parameters from each leader to its cluster."""
        ctx = self.ctx
        if ctx.is_leader:
            flight = self._issue(sync, ctx.leaders_group, len(ctx.leader_ranks))
            for w in flight.works:
                w.wait()
        assert self.params is not None
        dist.broadcast(self.params, src=ctx.leader, group=ctx.cluster_group)

    def step(self, step: int) -> dict[str, Any]:
        start_unix, t0 = time.time(), time.perf_counter()
        comm = wait = 0.0
        sleep_until(t0 + self.forward_s)
        backward = self.step_s - self.forward_s
        works: list[Any] = []
        if self.buckets and self.overlap:
            for buf, frac in zip(self.buckets, self.ready, strict=True):
                sleep_until(t0 + self.forward_s + backward * frac)
                works.append(dist.all_reduce(buf, group=self.group, async_op=True))
        sleep_until(t0 + self.step_s)
        late = time.perf_counter() - (t0 + self.step_s)
        if self.buckets and not self.overlap:
            works = [dist.all_reduce(buf, group=self.group, async_op=True) for buf in self.buckets]
        due = syncs_at(self.schedule, step)
        t1 = time.perf_counter()
        for w in works:
            w.wait()
        for sync in due:
            if sync.what != "pseudo-gradients":
                continue  # DDP's gradients: the buckets above
            if sync.group == "leaders":
                self._leaders_sync(sync)
                continue
            flight = self._issue(sync)
            if sync.apply_step == sync.step:
                for w in flight.works:
                    w.wait()
            else:
                self.pending.append(flight)
        comm = time.perf_counter() - t1
        t2 = time.perf_counter()
        for flight in [p for p in self.pending if p.sync.apply_step == step]:
            self.pending.remove(flight)
            for w in flight.works:
                w.wait()
        wait = time.perf_counter() - t2
        wall = time.perf_counter() - t0
        return {
            "step": step,
            "start": start_unix,
            "end": start_unix + wall,
            "loss": float("nan"),
            "wall_s": wall,
            "compute_s": self.step_s,
            "comm_s": comm,
            "wait_s": wait,
            "late_s": late,
            "payload_bytes": sum(s.payload for s in due),
        }

    def finish(self) -> None:
        for flight in self.pending:
            for w in flight.works:
                w.wait()
        self.pending.clear()

    def ddp_timers(self) -> dict[str, float]:
        return {}

    def evaluate(self) -> float:
        return float("nan")  # no real math: no loss
