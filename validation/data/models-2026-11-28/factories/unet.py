"""U-Net (Ronneberger et al. 2015 shape, with BatchNorm): a convolutional encoder-decoder with skip
connections, per-pixel classification. Plain torch. Has BatchNorm buffers (running mean/var, counters).

build(batch_size=8, image_size=256, base_channels=64, depth=4, classes=8) -> (model, make_batch, loss_fn)
make_batch(batch_size=None, device="cpu", seed=0) -> (images [B,3,H,W] float, labels [B,H,W] int64)
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH_SIZES = (8, 16)  # the campaign's two batch sizes (one step ~10-60 ms on an H200)


class DoubleConv(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(x)))


class Down(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.conv = DoubleConv(cin, cout)

    def forward(self, x):
        return self.conv(F.max_pool2d(x, 2))


class Up(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.up = nn.ConvTranspose2d(cin, cin // 2, 2, stride=2)
        self.conv = DoubleConv(cin, cout)

    def forward(self, x, skip):
        return self.conv(torch.cat([skip, self.up(x)], dim=1))


class UNet(nn.Module):
    def __init__(self, in_channels: int = 3, classes: int = 8, base_channels: int = 64, depth: int = 4):
        super().__init__()
        chans = [base_channels * 2 ** i for i in range(depth + 1)]
        self.inc = DoubleConv(in_channels, chans[0])
        self.downs = nn.ModuleList(Down(chans[i], chans[i + 1]) for i in range(depth))
        self.ups = nn.ModuleList(Up(chans[i + 1], chans[i]) for i in reversed(range(depth)))
        self.head = nn.Conv2d(chans[0], classes, 1)

    def forward(self, x):
        skips = [self.inc(x)]
        for down in self.downs:
            skips.append(down(skips[-1]))
        x = skips.pop()
        for up in self.ups:
            x = up(x, skips.pop())
        return self.head(x)


def build(batch_size: int = 8, image_size: int = 256, base_channels: int = 64, depth: int = 4,
          classes: int = 8, **kw):
    model = UNet(3, classes, base_channels, depth)

    def make_batch(batch_size: int | None = batch_size, device="cpu", seed: int = 0):
        g = torch.Generator(device="cpu").manual_seed(seed)
        b = batch_size or 8
        x = torch.randn(b, 3, image_size, image_size, generator=g)
        y = torch.randint(0, classes, (b, image_size, image_size), generator=g)
        return x.to(device), y.to(device)

    def loss_fn(model, batch):
        x, y = batch
        return F.cross_entropy(model(x).float(), y)

    return model, make_batch, loss_fn
