"""Two models of "the user's own" for the memory campaign (torch only): a LLaMA-style decoder and a ViT-style
encoder. Each factory follows the convention `ddpsim measure --model file:build` and a scenario's
`torch:module:factory` take: ``build() -> (model, make_batch, loss_fn)`` with ``make_batch(batch_size, device,
seed)`` and ``loss_fn(model, batch)``. Blocks live in ``model.layers`` (a ModuleList), the units FSDP2 and
activation checkpointing wrap."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 32000
SEQ = 1024


class RMSNorm(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class DecoderBlock(nn.Module):
    def __init__(self, d: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.heads = heads
        self.attention_norm = RMSNorm(d)
        self.wqkv = nn.Linear(d, 3 * d, bias=False)
        self.wo = nn.Linear(d, d, bias=False)
        self.ffn_norm = RMSNorm(d)
        self.w1 = nn.Linear(d, hidden, bias=False)
        self.w3 = nn.Linear(d, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.wqkv(self.attention_norm(x)).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, d)
        x = x + self.wo(a)
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Decoder(nn.Module):
    def __init__(self, d: int = 1024, layers: int = 12, heads: int = 16, hidden: int = 2816) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, d)
        self.layers = nn.ModuleList(DecoderBlock(d, heads, hidden) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.output = nn.Linear(d, VOCAB, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(ids)
        for block in self.layers:
            h = block(h)
        return self.output(self.norm(h))


def _tokens(batch_size: int, device: str | torch.device, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    tok = torch.randint(0, VOCAB, (batch_size, SEQ + 1), generator=g).to(device)
    return tok[:, :-1].contiguous(), tok[:, 1:].contiguous()


def _lm_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    ids, target = batch
    logits = model(ids)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1))


def build_decoder(**kw: int):  # noqa: ANN201 - the factory convention
    return Decoder(**kw), _tokens, _lm_loss


class EncoderBlock(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class Encoder(nn.Module):
    """ViT-B/16-shaped: 224 x 224 images, 196 patches plus a class token."""

    def __init__(self, d: int = 768, layers: int = 12, heads: int = 12, classes: int = 1000) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, d, 16, 16)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.zeros(1, 197, d))
        self.layers = nn.ModuleList(EncoderBlock(d, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.patch(x).flatten(2).transpose(1, 2)
        h = torch.cat([self.cls.expand(h.shape[0], -1, -1), h], dim=1) + self.pos
        for block in self.layers:
            h = block(h)
        return self.head(self.norm(h[:, 0]))


def _images(batch_size: int, device: str | torch.device, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch_size, 3, 224, 224, generator=g).to(device)
    return x, torch.randint(0, 1000, (batch_size,), generator=g).to(device)


def build_encoder(**kw: int):  # noqa: ANN201 - the factory convention
    return Encoder(**kw), _images, None
