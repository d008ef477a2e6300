"""A plain MLP: Linear + ReLU layers of one width, a classifier on top. Plain torch.

build(batch_size=1024, width=4096, layers=8, in_features=1024, classes=1000)
make_batch(batch_size=None, device="cpu", seed=0) -> (x [B,in_features], labels [B])
"""
from __future__ import annotations

import torch
import torch.nn as nn

BATCH_SIZES = (1024, 4096)


def build(batch_size: int = 1024, width: int = 4096, layers: int = 8, in_features: int = 1024,
          classes: int = 1000, **kw):
    mods: list[nn.Module] = [nn.Linear(in_features, width), nn.ReLU()]
    for _ in range(layers - 1):
        mods += [nn.Linear(width, width), nn.ReLU()]
    mods.append(nn.Linear(width, classes))
    model = nn.Sequential(*mods)

    def make_batch(batch_size: int | None = batch_size, device="cpu", seed: int = 0):
        g = torch.Generator(device="cpu").manual_seed(seed)
        b = batch_size or 1024
        x = torch.randn(b, in_features, generator=g)
        return x.to(device), torch.randint(0, classes, (b,), generator=g).to(device)

    return model, make_batch
