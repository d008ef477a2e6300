"""ConvNeXt-T style classifier (Liu et al. 2022): 7x7 depthwise convs, LayerNorm (channels-last), inverted
MLP blocks with GELU, layer scale. Plain torch, no BatchNorm, no buffers.

build(batch_size=32, image_size=224, dims=(96,192,384,768), depths=(3,3,9,3), classes=1000)
make_batch(batch_size=None, device="cpu", seed=0) -> (images [B,3,H,W], labels [B])
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH_SIZES = (32, 64)


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channel dim of an NCHW tensor."""

    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class Block(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(1e-6 * torch.ones(dim))

    def forward(self, x):
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.pwconv2(F.gelu(self.pwconv1(self.norm(y))))
        return x + (self.gamma * y).permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    def __init__(self, dims=(96, 192, 384, 768), depths=(3, 3, 9, 3), classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 4, stride=4), LayerNorm2d(dims[0], eps=1e-6))
        self.downsample = nn.ModuleList(
            nn.Sequential(LayerNorm2d(dims[i], eps=1e-6), nn.Conv2d(dims[i], dims[i + 1], 2, stride=2))
            for i in range(len(dims) - 1))
        self.stages = nn.ModuleList(nn.Sequential(*[Block(d) for _ in range(n)]) for d, n in zip(dims, depths, strict=True))
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.head = nn.Linear(dims[-1], classes)

    def forward(self, x):
        x = self.stages[0](self.stem(x))
        for down, stage in zip(self.downsample, self.stages[1:], strict=True):
            x = stage(down(x))
        return self.head(self.norm(x.mean(dim=(2, 3))))


def build(batch_size: int = 32, image_size: int = 224, dims=(96, 192, 384, 768), depths=(3, 3, 9, 3),
          classes: int = 1000, **kw):
    model = ConvNeXt(dims, depths, classes)

    def make_batch(batch_size: int | None = batch_size, device="cpu", seed: int = 0):
        g = torch.Generator(device="cpu").manual_seed(seed)
        b = batch_size or 32
        x = torch.randn(b, 3, image_size, image_size, generator=g)
        return x.to(device), torch.randint(0, classes, (b,), generator=g).to(device)

    return model, make_batch
