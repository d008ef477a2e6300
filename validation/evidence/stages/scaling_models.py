"""The PyTorch DDP benchmark's torchvision models that ddpsim's zoo lacks, as factories of the harness's
convention (``build(batch_size=...) -> (model, make_batch, loss_fn)``) for the torch importer: ResNet-101 and
ResNeXt-50 32x4d / ResNeXt-101 32x8d with torchvision's parameter structure (bottleneck width
``planes * width_per_group / 64 * groups``, grouped 3x3 convolution, stride on the 3x3: v1.5). Torch only,
imported inside the factories."""

from __future__ import annotations

from typing import Any


def _images(batch: int, device: Any, seed: int = 0) -> Any:
    import torch

    return torch.randn(batch, 3, 224, 224, device=device), torch.zeros(batch, dtype=torch.long, device=device)


def _resnext(layers: tuple[int, int, int, int], groups: int, width_per_group: int) -> Any:
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, inplanes: int, planes: int, stride: int, downsample: nn.Module | None) -> None:
            super().__init__()
            width = int(planes * (width_per_group / 64.0)) * groups
            self.conv1 = nn.Conv2d(inplanes, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, groups=groups, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, planes * 4, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * 4)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = downsample

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + (x if self.downsample is None else self.downsample(x)))

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
            inplanes = 64
            for index, (planes, blocks) in enumerate(zip((64, 128, 256, 512), layers, strict=True), 1):
                stride = 1 if index == 1 else 2
                downsample = nn.Sequential(nn.Conv2d(inplanes, planes * 4, 1, stride=stride, bias=False),
                                           nn.BatchNorm2d(planes * 4))
                stage = [Block(inplanes, planes, stride, downsample)]
                stage += [Block(planes * 4, planes, 1, None) for _ in range(1, blocks)]
                setattr(self, f"layer{index}", nn.Sequential(*stage))
                inplanes = planes * 4
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(2048, 1000)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return Net()


def resnet101(**_: Any) -> Any:
    return _resnext((3, 4, 23, 3), 1, 64), _images, None


def resnext50_32x4d(**_: Any) -> Any:
    return _resnext((3, 4, 6, 3), 32, 4), _images, None


def resnext101_32x8d(**_: Any) -> Any:
    return _resnext((3, 4, 23, 3), 32, 8), _images, None
