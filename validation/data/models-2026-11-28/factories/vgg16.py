"""VGG-16 (configuration D, no BatchNorm) on small images. Plain torch with torchvision's vgg16 module
layout and parameter names (features.N, avgpool to 7x7, classifier 25088-4096-4096-classes: ~138 M
parameters, most of them in the first classifier Linear).

build(batch_size=32, image_size=128, classes=1000)
make_batch(batch_size=None, device="cpu", seed=0) -> (images [B,3,H,W], labels [B])
"""
from __future__ import annotations

import torch
import torch.nn as nn

BATCH_SIZES = (32, 64)
CFG_D = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]


class VGG(nn.Module):
    def __init__(self, classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for v in CFG_D:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(cin, int(v), 3, padding=1), nn.ReLU(inplace=True)]
                cin = int(v)
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096), nn.ReLU(True), nn.Dropout(0.5),
            nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(0.5), nn.Linear(4096, classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def build(batch_size: int = 32, image_size: int = 128, classes: int = 1000, **kw):
    model = VGG(classes)

    def make_batch(batch_size: int | None = batch_size, device="cpu", seed: int = 0):
        g = torch.Generator(device="cpu").manual_seed(seed)
        b = batch_size or 32
        x = torch.randn(b, 3, image_size, image_size, generator=g)
        return x.to(device), torch.randint(0, classes, (b,), generator=g).to(device)

    return model, make_batch
