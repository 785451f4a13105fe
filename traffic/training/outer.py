"""DiLoCo's outer step and the encodings of its pseudo-gradients (torch, no communication).

This module owns the arithmetic the DiLoCo family shares: the pseudo-gradient (global parameters
minus the local ones after H inner steps), the outer optimizer (SGD with Nesterov momentum, lr 0.7
and momentum 0.9 by default, as in DiLoCo, OpenDiLoCo and torchft), the int8 codes (one fp32 scale
per tensor: int8 cannot be summed in an all-reduce, so codes are gathered and averaged in fp32)
and Streaming DiLoCo's merge of a synced fragment with the local one.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

CAST = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


class OuterOptimizer:
    """Keeps the global copy of some parameters and applies averaged pseudo-gradients to it."""

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float = 0.7,
        momentum: float = 0.9,
        nesterov: bool = True,
    ) -> None:
        self.local = list(params)
        self.glob = [p.detach().clone() for p in self.local]
        self.opt = torch.optim.SGD(
            self.glob, lr=lr, momentum=momentum, nesterov=nesterov and momentum > 0
        )

    def pseudo_gradients(self) -> list[torch.Tensor]:
        """Global minus local, per tensor (fp32)."""
        return [g - p.detach() for g, p in zip(self.glob, self.local, strict=True)]

    @torch.no_grad()
    def step(self, averaged: list[torch.Tensor], alpha: float = 0.0) -> None:
        """Apply the averaged pseudo-gradients to the global copy, then set the local parameters
        to ``alpha * local + (1 - alpha) * global`` (alpha 0: plain DiLoCo)."""
        for g, d in zip(self.glob, averaged, strict=True):
            g.grad = d.to(g.dtype)
        self.opt.step()
        for g, p in zip(self.glob, self.local, strict=True):
            g.grad = None
            p.copy_(torch.lerp(g, p.detach(), alpha) if alpha else g)


def quantize_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-tensor int8 codes and their fp32 scale (max |x| maps to 127)."""
    peak = x.detach().abs().max().float()
    scale = torch.where(peak > 0, peak / 127.0, torch.ones_like(peak))
    codes = torch.round(x.float() / scale).clamp_(-127, 127).to(torch.int8)
    return codes, scale.reshape(1)


def dequantize_int8(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return codes.float() * scale


def encode(x: torch.Tensor, dtype: str) -> torch.Tensor:
    """The tensor in the wire dtype of an all-reduce (fp32, fp16, bf16)."""
    return x.to(CAST[dtype])
