"""Small models the torch importer tests build through 'torch:tests.fixtures_models:<factory>'."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def tiny_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 8))


class TinyLM(nn.Module):
    """Embedding, one attention block whose softmax runs in the block itself, tied output head;
    registers its norm after the projections but runs it first (as LLaMA does)."""

    def __init__(self, vocab: int = 100, d: int = 32) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.emb.weight
        self.frozen = nn.Linear(d, d)
        self.frozen.requires_grad_(False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.emb(idx))
        q, k, v = self.qkv(x).split(x.shape[-1], -1)
        y = F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None], is_causal=True)[:, 0]
        return self.head(x + self.proj(y))


def tiny_lm() -> nn.Module:
    return TinyLM()


class NeedsInput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(4, 4))

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a @ self.w) * b


def needs_input() -> nn.Module:
    return NeedsInput()


class WithExample(NeedsInput):
    def example_input(self, batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(batch_size, 4), torch.randn(batch_size, 4)


def with_example() -> nn.Module:
    return WithExample()


def not_a_module() -> int:
    return 3
