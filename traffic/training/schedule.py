"""Which training step synchronises what, for every algorithm of ``workload: kind: training``. PURE.

This module owns the communication schedule of the training algorithms (no torch, no I/O): the
ranks follow it to decide when to talk, and the runner uses the same function to predict the
communication and to account the bytes each sync puts on the wire. Steps count from 0; a sync
"at step s" is issued after step s's local update.

The algorithms (``ddp``, ``localsgd``, ``diloco``, ``streaming-diloco``, ``hierarchical``,
``parameter-server``) and what each one synchronises when: docs/training.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from traffic.training.synthetic import (
    DTYPE_BITS,
    is_emulated,
    layer_fragments,
    layout_of,
    parse_scale,
)
from traffic.training.synthetic import payload_bytes as _payload_bytes

ALGORITHMS = ("ddp", "localsgd", "diloco", "streaming-diloco", "hierarchical", "parameter-server")
DILOCO_FAMILY = ("diloco", "streaming-diloco", "hierarchical")  # an outer step on pseudo-gradients
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1}
GATHERED = ("int8", "fp4")  # codes cannot be summed on the wire: all-gathered, averaged in fp32
HOOK_DTYPE = {"none": "fp32", "fp16": "fp16", "bf16": "bf16"}


class ScheduleError(ValueError):
    """The training configuration cannot be scheduled (the message says why)."""


@dataclass(frozen=True)
class Sync:
    """One collective of the schedule.

    ``step`` is the step after which it is issued, ``apply_step`` the step after which its result
    is used (later than ``step`` only when streaming overlaps it). ``what`` is ``gradients``,
    ``parameters`` or ``pseudo-gradients``; ``group`` is ``world``, ``cluster`` or ``leaders``;
    ``fragment`` is None for the whole model; ``payload`` is the bytes each rank contributes.
    """

    step: int
    apply_step: int
    what: str
    group: str
    collective: str
    payload: int
    fragment: int | None = None


@dataclass(frozen=True)
class TrainingSchedule:
    """What the schedule depends on: the algorithm, its knobs and the model's tensor sizes."""

    algorithm: str
    steps: int
    tensor_shapes: tuple[tuple[int, ...], ...]  # the model's parameter tensors, in order
    inner_steps: int = 1  # H (localsgd, diloco, streaming-diloco, hierarchical)
    dtype: str = "fp32"  # of the pseudo-gradients (diloco family)
    hook: str = "none"  # ddp, hierarchical's inner DDP
    fragments: int = 1  # streaming-diloco
    overlap_steps: int = 0  # streaming-diloco's tau
    powersgd_rank: int = 1  # hook powersgd: matrix approximation rank
    powersgd_start: int = 2  # hook powersgd: plain all-reduce before this step
    grad_dtype: str = "fp32"  # the gradients' dtype (DDP's payload without a hook)
    # each tensor's fragment (streaming-diloco); None: tensor i in fragment i mod F
    tensor_fragments: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ScheduleError(
                f"algorithm {self.algorithm!r} is unknown; allowed: {', '.join(ALGORITHMS)}"
            )
        if self.steps < 1 or self.inner_steps < 1:
            raise ScheduleError("steps and inner_steps must be at least 1")
        if self.dtype not in DTYPE_BITS:
            raise ScheduleError(f"dtype {self.dtype!r}; allowed: {', '.join(DTYPE_BITS)}")
        if self.algorithm == "streaming-diloco":
            if self.fragments < 1 or self.inner_steps % self.fragments:
                raise ScheduleError(
                    f"streaming-diloco needs inner_steps ({self.inner_steps}) divisible by "
                    f"fragments ({self.fragments})"
                )
            if self.fragments > len(self.tensor_numels):
                raise ScheduleError(
                    f"{self.fragments} fragments but the model has only "
                    f"{len(self.tensor_numels)} parameter tensors"
                )
            if not 0 <= self.overlap_steps < self.inner_steps // self.fragments:
                raise ScheduleError(
                    f"overlap_steps ({self.overlap_steps}) must be below inner_steps/fragments "
                    f"({self.inner_steps // self.fragments}): a fragment's all-reduce must land "
                    "before that fragment syncs again"
                )

    @property
    def tensor_numels(self) -> tuple[int, ...]:
        return tuple(math.prod(shape) for shape in self.tensor_shapes)

    @property
    def numel(self) -> int:
        return sum(self.tensor_numels)

    def fragment_tensors(self, fragment: int) -> list[int]:
        """The indices of the tensors of ``fragment``."""
        n = len(self.tensor_shapes)
        if self.tensor_fragments is None:
            return list(range(fragment, n, self.fragments))
        return [i for i in range(n) if self.tensor_fragments[i] == fragment]

    def fragment_numel(self, fragment: int) -> int:
        return sum(self.tensor_numels[i] for i in self.fragment_tensors(fragment))


def schedule_from_config(
    cfg: dict[str, Any], shapes: tuple[tuple[int, ...], ...] | None = None
) -> TrainingSchedule:
    """The schedule of a workload's keys as the ranks get them (``spec["training"]``: algorithm,
    steps, ddp, diloco, streaming, localsgd), for a model of these parameter ``shapes``. An
    emulated model (traffic.training.synthetic) brings its own, times ``scale``, its gradient
    dtype and its layer fragments; ``shapes`` is then ignored."""
    algorithm = cfg["algorithm"]
    streaming = algorithm == "streaming-diloco"
    grad_dtype, fragments_of = "fp32", None
    if is_emulated(cfg["model"]):
        layout = layout_of(cfg["model"], parse_scale(cfg.get("scale", 1)))
        shapes, grad_dtype = layout.shapes, layout.dtype
        if streaming:
            fragments_of = layer_fragments(layout, cfg["streaming"]["fragments"])
    if shapes is None:
        raise ScheduleError(f"model {cfg['model']!r}: no parameter shapes")
    return TrainingSchedule(
        algorithm,
        int(cfg["steps"]),
        shapes,
        inner_steps=int(
            cfg["localsgd"]["period"] if algorithm == "localsgd" else cfg["diloco"]["inner_steps"]
        ),
        dtype=cfg["diloco"]["dtype"] if algorithm in DILOCO_FAMILY else "fp32",
        hook=cfg["ddp"]["hook"],
        fragments=cfg["streaming"]["fragments"] if streaming else 1,
        overlap_steps=cfg["streaming"]["overlap_steps"] if streaming else 0,
        powersgd_rank=cfg["ddp"]["rank"],
        powersgd_start=cfg["ddp"]["start"],
        grad_dtype=grad_dtype,
        tensor_fragments=fragments_of,
    )


def fragment_of(tensor_index: int, fragments: int) -> int:
    """Tensor ``i`` belongs to fragment ``i mod F``: fragments strided over layers, so each holds
    a share of every depth (Streaming DiLoCo)."""
    return tensor_index % fragments


def pseudo_gradient_payload(numel: int, dtype: str, tensors: int) -> int:
    """Bytes per rank of one pseudo-gradient exchange; int8 and fp4 (4 bits an element) add
    one fp32 scale per tensor."""
    return _payload_bytes(numel, dtype) + (4 * tensors if dtype in GATHERED else 0)


def syncs(s: TrainingSchedule) -> list[Sync]:
    """Every collective of the run, in the order the ranks issue them."""
    out: list[Sync] = []
    for step in range(s.steps):
        out += syncs_at(s, step)
    return out


def syncs_at(s: TrainingSchedule, step: int) -> list[Sync]:
    """The collectives issued after ``step``."""
    full = s.numel * 4
    outer = (step + 1) % s.inner_steps == 0
    if s.algorithm == "ddp":
        return [
            Sync(step, step, "gradients", "world", "all_reduce", b) for b in ddp_rounds(s, step)
        ]
    if s.algorithm == "parameter-server":
        return [Sync(step, step, "gradients", "world", "push-pull", full)]
    if s.algorithm == "localsgd":
        return [Sync(step, step, "parameters", "world", "all_reduce", full)] if outer else []
    collective = "all_gather" if s.dtype in GATHERED else "all_reduce"
    if s.algorithm == "diloco":
        if not outer:
            return []
        payload = pseudo_gradient_payload(s.numel, s.dtype, len(s.tensor_numels))
        return [Sync(step, step, "pseudo-gradients", "world", collective, payload)]
    if s.algorithm == "hierarchical":
        inner = [
            Sync(step, step, "gradients", "cluster", "all_reduce", b) for b in ddp_rounds(s, step)
        ]
        if not outer:
            return inner
        payload = pseudo_gradient_payload(s.numel, s.dtype, len(s.tensor_numels))
        return [*inner, Sync(step, step, "pseudo-gradients", "leaders", collective, payload)]
    # streaming-diloco: fragment k % F applies at step (k + 1) * H/F - 1, issued tau steps before.
    period = s.inner_steps // s.fragments
    applied = step + s.overlap_steps
    if (applied + 1) % period or applied >= s.steps:
        return []
    k = (applied + 1) // period - 1
    f = k % s.fragments
    tensors = len(s.fragment_tensors(f))
    payload = pseudo_gradient_payload(s.fragment_numel(f), s.dtype, tensors)
    return [Sync(step, applied, "pseudo-gradients", "world", collective, payload, fragment=f)]


def ddp_rounds(s: TrainingSchedule, step: int) -> list[int]:
    """The payloads of DDP's sequential all-reduces in ``step``: one, except for PowerSGD."""
    if s.hook == "powersgd" and step >= s.powersgd_start:
        return [r for r in powersgd_rounds(s.tensor_shapes, s.powersgd_rank) if r]
    dtype = s.grad_dtype if s.hook == "none" else HOOK_DTYPE.get(s.hook, "fp32")
    return [_payload_bytes(s.numel, dtype)]


def powersgd_rounds(
    shapes: tuple[tuple[int, ...], ...], rank: int, min_compression_rate: float = 2.0
) -> tuple[int, int, int]:
    """Bytes per rank of PowerSGD's three sequential all-reduces, as torch's ``powerSGD_hook``
    sends them (fp32): the tensors it leaves uncompressed, then every P (rows x r), then every Q
    (columns x r). A tensor is flattened to (first dimension, the rest) and compressed when that
    is at least ``min_compression_rate`` times smaller; 1-D tensors always go whole."""
    whole = p = q = 0
    for shape in shapes:
        numel = math.prod(shape)
        if len(shape) < 2:
            whole += numel
            continue
        n, m = shape[0], numel // shape[0]
        r = min(rank, n, m)
        if numel > min_compression_rate * (n + m) * r:
            p, q = p + n * r, q + m * r
        else:
            whole += numel
    return whole * 4, p * 4, q * 4


def powersgd_payload(shapes: tuple[tuple[int, ...], ...], rank: int) -> int:
    return sum(powersgd_rounds(shapes, rank))


def bytes_per_step(s: TrainingSchedule) -> float:
    """Mean payload per rank per step over the whole run."""
    return sum(x.payload for x in syncs(s)) / s.steps
