"""ViT-S/16 (Dosovitskiy et al. 2021; DeiT-S sizes): 16x16 patches, 384 wide, 12 pre-norm layers, 6 heads,
MLP 1536, class token, learned positions. Plain torch (attention through F.scaled_dot_product_attention).
~22 M parameters.

build(batch_size=64, image_size=224, patch=16, dim=384, layers=12, heads=6, mlp_dim=1536, classes=1000)
make_batch(batch_size=None, device="cpu", seed=0) -> (images [B,3,H,W], labels [B])
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH_SIZES = (64, 128)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_dim: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.fc1 = nn.Linear(dim, mlp_dim)
        self.fc2 = nn.Linear(mlp_dim, dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class ViT(nn.Module):
    def __init__(self, image_size: int = 224, patch: int = 16, dim: int = 384, layers: int = 12, heads: int = 6,
                 mlp_dim: int = 1536, classes: int = 1000):
        super().__init__()
        n = (image_size // patch) ** 2
        self.patch_embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(dim, heads, mlp_dim) for _ in range(layers)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        return self.head(self.norm(self.blocks(x))[:, 0])


def build(batch_size: int = 64, image_size: int = 224, patch: int = 16, dim: int = 384, layers: int = 12,
          heads: int = 6, mlp_dim: int = 1536, classes: int = 1000, **kw):
    model = ViT(image_size, patch, dim, layers, heads, mlp_dim, classes)

    def make_batch(batch_size: int | None = batch_size, device="cpu", seed: int = 0):
        g = torch.Generator(device="cpu").manual_seed(seed)
        b = batch_size or 64
        x = torch.randn(b, 3, image_size, image_size, generator=g)
        return x.to(device), torch.randint(0, classes, (b,), generator=g).to(device)

    return model, make_batch
