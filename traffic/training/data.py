"""Built-in training data that needs no download: text that ships with every Python, and a
synthetic teacher-student regression with a known optimum.

This module owns the datasets of ``workload: kind: training`` (``data:``), their fixed
train/validation split and the batches each rank draws: a batch depends only on (seed, rank,
step), so two runs with the same seed see the same data, and ranks see different data.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

DATASETS = ("pydoc-topics", "teacher-student")
VALIDATION_FRACTION = 0.1


def pydoc_text() -> str:
    """CPython's ``pydoc_data.topics`` (about 465 000 characters of English prose and code),
    keys sorted so every Python build yields the same text."""
    from pydoc_data.topics import topics

    return "".join(topics[k] for k in sorted(topics))


@dataclass
class CharData:
    """Next-character prediction on a text: inputs are ``context`` characters, the target is
    the next one. The last ``VALIDATION_FRACTION`` of the text is held out."""

    context: int = 16
    text: str = ""

    def __post_init__(self) -> None:
        text = self.text or pydoc_text()
        self.vocab = sorted(set(text))
        index = {c: i for i, c in enumerate(self.vocab)}
        codes = torch.tensor([index[c] for c in text], dtype=torch.long)
        cut = int(len(codes) * (1 - VALIDATION_FRACTION))
        self.train, self.validation = codes[:cut], codes[cut:]

    def _windows(self, codes: torch.Tensor, starts: torch.Tensor) -> tuple[torch.Tensor, ...]:
        offsets = torch.arange(self.context + 1)
        rows = codes[starts[:, None] + offsets]
        return rows[:, :-1], rows[:, -1]

    def batch(self, seed: int, rank: int, step: int, size: int) -> tuple[torch.Tensor, ...]:
        g = torch.Generator().manual_seed(_mix(seed, rank, step))
        starts = torch.randint(0, len(self.train) - self.context - 1, (size,), generator=g)
        return self._windows(self.train, starts)

    def validation_set(self, size: int = 4096) -> tuple[torch.Tensor, ...]:
        """A fixed, evenly spaced sample of the held-out text (the same on every rank)."""
        last = len(self.validation) - self.context - 1
        starts = torch.linspace(0, last, min(size, last)).long()
        return self._windows(self.validation, starts)


@dataclass
class TeacherStudent:
    """Regression on the outputs of a fixed random teacher network plus Gaussian noise of std
    ``noise``: the best possible mean squared error is ``noise**2``."""

    inputs: int = 32
    hidden: int = 64
    noise: float = 0.1
    data_seed: int = 12345

    def __post_init__(self) -> None:
        g = torch.Generator().manual_seed(self.data_seed)
        self.w1 = torch.randn(self.inputs, self.hidden, generator=g) / self.inputs**0.5
        self.w2 = torch.randn(self.hidden, 1, generator=g) / self.hidden**0.5

    def _label(self, x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        clean = torch.tanh(x @ self.w1) @ self.w2
        return clean + self.noise * torch.randn(clean.shape, generator=g)

    def batch(self, seed: int, rank: int, step: int, size: int) -> tuple[torch.Tensor, ...]:
        g = torch.Generator().manual_seed(_mix(seed, rank, step))
        x = torch.randn(size, self.inputs, generator=g)
        return x, self._label(x, g)

    def validation_set(self, size: int = 4096) -> tuple[torch.Tensor, ...]:
        g = torch.Generator().manual_seed(self.data_seed + 1)
        x = torch.randn(size, self.inputs, generator=g)
        return x, self._label(x, g)


def _mix(seed: int, rank: int, step: int) -> int:
    """One generator seed per (seed, rank, step), well apart for neighbouring values."""
    return (seed * 1_000_003 + rank * 7_919 + step * 104_729 + 1) % (1 << 62)


def load(name: str, context: int = 16) -> CharData | TeacherStudent:
    if name == "pydoc-topics":
        return CharData(context=context)
    if name == "teacher-student":
        return TeacherStudent()
    raise ValueError(f"data {name!r} is unknown; allowed: {', '.join(DATASETS)}")
