"""Synthetic models at real byte counts, for emulated compute (``model: llama-3-1b`` or
``model: {synthetic: {params, dtype, layers}}``). PURE: no torch, no I/O.

This module owns the tensor layout of a model that is never computed: the named shapes are the
published Llama 3 architectures (tensor by tensor, so DDP's buckets and Streaming DiLoCo's
fragments are the real ones), a ``synthetic`` model is ``layers`` transformer blocks of two
tensors each (attention 1/3, MLP 2/3, as a block with a 4x MLP: 4h² and 8h²). DDP's bucketing
follows torch's reducer; fragments group whole layers, strided (layer l in fragment l mod F),
as Streaming DiLoCo's strided pattern. ``scale`` shrinks every tensor by one factor (the link
rates and buffers are shrunk by the same factor in the scenario; delays and compute stay).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

# bits per element on the wire; fp4 is E3M0 (sign and 3 exponent bits), packed two per byte
DTYPE_BITS = {"fp32": 32, "fp16": 16, "bf16": 16, "int8": 8, "fp4": 4}
DDP_FIRST_BUCKET = 1 << 20  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
DDP_BUCKET = 25 << 20  # DistributedDataParallel's bucket_cap_mb default (25 MiB)


@dataclass(frozen=True)
class TransformerShape:
    """A Llama-style decoder: per layer two RMSNorm weights, q/k/v/o and a gated MLP."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied: bool  # the output head shares the embedding


# config.json of meta-llama/Llama-3.2-1B, Llama-3.1-8B, Llama-3.1-70B
NAMED_SHAPES = {
    "llama-3-1b": TransformerShape(2048, 16, 32, 8, 8192, 128256, tied=True),
    "llama-3-8b": TransformerShape(4096, 32, 32, 8, 14336, 128256, tied=False),
    "llama-3-70b": TransformerShape(8192, 80, 64, 8, 28672, 128256, tied=False),
}


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    layer: int  # the block it belongs to; the embedding is layer 0's, the head the last's

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class Layout:
    """A model's parameter tensors in registration (forward) order, and their dtype."""

    tensors: tuple[Tensor, ...]
    layers: int
    dtype: str = "bf16"

    @property
    def numel(self) -> int:
        return sum(t.numel for t in self.tensors)

    @property
    def shapes(self) -> tuple[tuple[int, ...], ...]:
        return tuple(t.shape for t in self.tensors)

    def nbytes(self, dtype: str | None = None) -> int:
        return payload_bytes(self.numel, dtype or self.dtype)


def payload_bytes(numel: int, dtype: str) -> int:
    """Bytes of ``numel`` elements of ``dtype`` on the wire (fp4: 4 bits, rounded up)."""
    return math.ceil(numel * DTYPE_BITS[dtype] / 8)


def transformer_layout(s: TransformerShape, dtype: str = "bf16") -> Layout:
    h, head_dim = s.hidden, s.hidden // s.heads
    kv = s.kv_heads * head_dim
    out = [Tensor("embed", (s.vocab, h), 0)]
    for i in range(s.layers):
        out += [
            Tensor(f"{i}.attn_norm", (h,), i),
            Tensor(f"{i}.q", (h, h), i),
            Tensor(f"{i}.k", (kv, h), i),
            Tensor(f"{i}.v", (kv, h), i),
            Tensor(f"{i}.o", (h, h), i),
            Tensor(f"{i}.mlp_norm", (h,), i),
            Tensor(f"{i}.gate", (s.intermediate, h), i),
            Tensor(f"{i}.up", (s.intermediate, h), i),
            Tensor(f"{i}.down", (h, s.intermediate), i),
        ]
    out.append(Tensor("norm", (h,), s.layers - 1))
    if not s.tied:
        out.append(Tensor("head", (s.vocab, h), s.layers - 1))
    return Layout(tuple(out), s.layers, dtype)


def synthetic_layout(params: int, layers: int, dtype: str = "bf16") -> Layout:
    """``layers`` blocks of an attention tensor (1/3) and an MLP tensor (2/3) holding exactly
    ``params`` elements (the remainder in the last block)."""
    if params < 2 * layers or layers < 1:
        raise ValueError(f"{params} parameters cannot fill {layers} layers of two tensors")
    per, extra = divmod(params, layers)
    out: list[Tensor] = []
    for i in range(layers):
        n = per + (extra if i == layers - 1 else 0)
        attn = n // 3
        out += [Tensor(f"{i}.attn", (attn,), i), Tensor(f"{i}.mlp", (n - attn,), i)]
    return Layout(tuple(out), layers, dtype)


def parse_scale(value: Any) -> float:
    """``1/1000``, ``0.001`` or 1e-3 -> 0.001."""
    if isinstance(value, str):
        return float(Fraction(value.strip().replace(" ", "")))
    return float(value)


def layout_of(model: Any, scale: float = 1.0) -> Layout:
    """The layout of a workload's ``model`` (a named shape or ``{synthetic: {...}}``), every
    tensor's elements times ``scale`` (at least one each)."""
    if isinstance(model, str):
        if model not in NAMED_SHAPES:
            raise ValueError(f"model {model!r} is not a named shape; {', '.join(NAMED_SHAPES)}")
        full = transformer_layout(NAMED_SHAPES[model])
    else:
        spec = model["synthetic"]
        full = synthetic_layout(
            int(float(spec["params"])), int(spec["layers"]), spec.get("dtype", "bf16")
        )
    return scaled(full, scale)


def scaled(layout: Layout, scale: float) -> Layout:
    if not 0 < scale <= 1:
        raise ValueError(f"scale must be in (0, 1], got {scale}")
    if scale == 1:
        return layout
    tensors = tuple(
        Tensor(t.name, (max(1, round(t.numel * scale)),), t.layer) for t in layout.tensors
    )
    return Layout(tensors, layout.layers, layout.dtype)


def is_emulated(model: Any) -> bool:
    """True for a model that is never computed (a named shape or ``{synthetic: ...}``)."""
    return isinstance(model, dict) or model in NAMED_SHAPES


def ddp_buckets(
    numels: tuple[int, ...] | list[int],
    elem_bytes: float,
    cap: int = DDP_BUCKET,
    first: int = DDP_FIRST_BUCKET,
) -> list[list[int]]:
    """DDP's buckets as tensor indices, in the order their all-reduces start: gradients become
    ready in reverse registration order, and torch's ``_compute_bucket_assignment_by_size``
    closes a bucket once it holds at least its limit (``first`` for the first bucket, then
    ``cap``), so a tensor larger than the cap is a bucket of its own."""
    buckets: list[list[int]] = []
    current: list[int] = []
    size = 0.0
    for i in reversed(range(len(numels))):
        current.append(i)
        size += numels[i] * elem_bytes
        limit = first if not buckets and first < cap else cap
        if size >= limit:
            buckets.append(current)
            current, size = [], 0.0
    if current:
        buckets.append(current)
    return buckets


def layer_fragments(layout: Layout, fragments: int) -> tuple[int, ...]:
    """Each tensor's fragment: whole layers, strided (layer l in fragment l mod F)."""
    if not 1 <= fragments <= layout.layers:
        raise ValueError(f"{fragments} fragments for {layout.layers} layers")
    return tuple(t.layer % fragments for t in layout.tensors)
