"""Built-in models of ``workload: kind: training`` (``model:``): small enough to train on one
CPU thread per rank in seconds, with a real learning signal.

* ``char-mlp``: 16 characters of context, 16-dim embeddings, one hidden layer of 256: 93 911
  parameters (about 376 KB of fp32 gradients per step) on pydoc-topics.
* ``char-mlp-large``: 32 characters, 32-dim embeddings, two hidden layers of 1024: about 2.2 M
  parameters (8.8 MB per sync), for machines with more cores, so the bytes per sync are closer to
  a real model's.
* ``teacher-mlp``: the student of the teacher-student regression (inputs 32, hidden 64).
"""

from __future__ import annotations

import torch
from torch import nn

MODELS = {
    "char-mlp": "pydoc-topics",
    "char-mlp-large": "pydoc-topics",
    "teacher-mlp": "teacher-student",
}
CONTEXT = {"char-mlp": 16, "char-mlp-large": 32}


class CharMLP(nn.Module):
    def __init__(self, vocab: int, context: int, embed: int, hidden: tuple[int, ...]) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        layers: list[nn.Module] = []
        width = context * embed
        for h in hidden:
            layers += [nn.Linear(width, h), nn.Tanh()]
            width = h
        layers.append(nn.Linear(width, vocab))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(self.embed(x).flatten(1))


def build(name: str, vocab: int = 0, seed: int = 0) -> nn.Module:
    """The named model, its weights drawn from ``seed`` (the same on every rank)."""
    torch.manual_seed(seed)
    if name == "char-mlp":
        return CharMLP(vocab, CONTEXT[name], 16, (256,))
    if name == "char-mlp-large":
        return CharMLP(vocab, CONTEXT[name], 32, (1024, 1024))
    if name == "teacher-mlp":
        return nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 1))
    raise ValueError(f"model {name!r} is unknown; allowed: {', '.join(MODELS)}")


def loss_fn(name: str) -> nn.Module:
    return nn.MSELoss() if MODELS[name] == "teacher-student" else nn.CrossEntropyLoss()
