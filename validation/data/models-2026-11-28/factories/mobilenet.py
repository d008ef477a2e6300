"""MobileNetV2 style classifier (Sandler et al. 2018): inverted residuals with 3x3 depthwise convs,
BatchNorm, ReLU6. Plain torch; same layer configuration as torchvision's mobilenet_v2 (width 1.0).

build(batch_size=64, image_size=224, width=1.0, classes=1000)
make_batch(batch_size=None, device="cpu", seed=0) -> (images [B,3,H,W], labels [B])
"""
from __future__ import annotations

import torch
import torch.nn as nn

BATCH_SIZES = (64, 128)

# (expansion t, channels c, repeats n, stride s), as in the paper's Table 2
CONFIG = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
          (6, 320, 1, 1)]


def conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1, act: bool = True):
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
                               nn.BatchNorm2d(cout)]
    if act:
        layers.append(nn.ReLU6(inplace=True))
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(conv_bn(cin, hidden, 1))
        layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden), conv_bn(hidden, cout, 1, act=False)]
        self.conv = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.conv(x) if self.residual else self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, width: float = 1.0, classes: int = 1000):
        super().__init__()
        cin = int(32 * width)
        layers: list[nn.Module] = [conv_bn(3, cin, 3, 2)]
        for t, c, n, s in CONFIG:
            cout = int(c * width)
            for i in range(n):
                layers.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        last = int(1280 * max(1.0, width))
        layers.append(conv_bn(cin, last, 1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, classes))

    def forward(self, x):
        return self.classifier(self.features(x).mean(dim=(2, 3)))


def build(batch_size: int = 64, image_size: int = 224, width: float = 1.0, classes: int = 1000, **kw):
    model = MobileNetV2(width, classes)

    def make_batch(batch_size: int | None = batch_size, device="cpu", seed: int = 0):
        g = torch.Generator(device="cpu").manual_seed(seed)
        b = batch_size or 64
        x = torch.randn(b, 3, image_size, image_size, generator=g)
        return x.to(device), torch.randint(0, classes, (b,), generator=g).to(device)

    return model, make_batch
