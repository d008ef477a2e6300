"""DLRM style recommender (Naumov et al. 2019): dense features through a bottom MLP, sparse features
through large nn.EmbeddingBag tables (multi-hot, summed), pairwise dot-product interactions, top MLP,
binary click loss. Plain torch. The tables dominate the parameters (default 8 x 500k x 128 fp32 = 2 GB) and
get dense gradients (sparse=False), so DDP all-reduces them in full.

build(batch_size=2048, tables=8, rows=500_000, dim=128, hot=20, dense_features=13)
make_batch(batch_size=None, device="cpu", seed=0) -> (dense [B,13], indices [T,B*hot], clicks [B] float)
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH_SIZES = (2048, 8192)


def mlp(sizes: list[int], last_act: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_act:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    def __init__(self, tables: int = 8, rows: int = 500_000, dim: int = 128, dense_features: int = 13,
                 hot: int = 20):
        super().__init__()
        self.hot = hot
        self.bottom = mlp([dense_features, 512, 256, dim])
        self.embeddings = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(tables))
        n = tables + 1
        self.top = mlp([dim + n * (n - 1) // 2, 1024, 1024, 512, 256, 1], last_act=False)
        self.register_buffer("tri", torch.triu_indices(n, n, offset=1), persistent=False)

    def forward(self, dense, indices):
        b = dense.shape[0]
        x = self.bottom(dense)
        offsets = torch.arange(0, b * self.hot, self.hot, device=dense.device)
        feats = [x] + [emb(indices[i], offsets) for i, emb in enumerate(self.embeddings)]
        t = torch.stack(feats, dim=1)  # [B, n, dim]
        inter = torch.bmm(t, t.transpose(1, 2))[:, self.tri[0], self.tri[1]]
        return self.top(torch.cat([x, inter], dim=1)).squeeze(1)


def build(batch_size: int = 2048, tables: int = 8, rows: int = 500_000, dim: int = 128, hot: int = 20,
          dense_features: int = 13, **kw):
    model = DLRM(tables, rows, dim, dense_features, hot)

    def make_batch(batch_size: int | None = batch_size, device="cpu", seed: int = 0):
        g = torch.Generator(device="cpu").manual_seed(seed)
        b = batch_size or 2048
        dense = torch.randn(b, dense_features, generator=g)
        idx = torch.randint(0, rows, (tables, b * hot), generator=g)
        clicks = torch.randint(0, 2, (b,), generator=g).float()
        return dense.to(device), idx.to(device), clicks.to(device)

    def loss_fn(model, batch):
        dense, idx, clicks = batch
        return F.binary_cross_entropy_with_logits(model(dense, idx).float(), clicks)

    return model, make_batch, loss_fn
