"""ResNet-50 (He et al., 2015; torchvision's v1.5 layout) written in plain torch."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["ResNet", "resnet50"]

# Bottleneck blocks per stage for ResNet-50.
RESNET50_LAYERS: tuple[int, int, int, int] = (3, 4, 6, 3)


class Bottleneck(nn.Module):
    """1x1 reduce -> 3x3 (carries the stride) -> 1x1 expand, plus the shortcut."""

    expansion = 4

    def __init__(self, in_ch: int, width: int, stride: int) -> None:
        super().__init__()
        out_ch = width * self.expansion
        self.conv1 = nn.Conv2d(in_ch, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_ch, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False), nn.BatchNorm2d(out_ch)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """Stem, four bottleneck stages, global average pool and a linear classifier."""

    def __init__(
        self,
        layers: tuple[int, int, int, int] = RESNET50_LAYERS,
        *,
        base_width: int = 64,
        num_classes: int = 1000,
    ) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, base_width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(base_width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        in_ch = base_width
        stages: list[nn.Module] = []
        for index, blocks in enumerate(layers):
            width = base_width * (2**index)
            stride = 1 if index == 0 else 2
            stage: list[nn.Module] = []
            for block in range(blocks):
                stage.append(Bottleneck(in_ch, width, stride if block == 0 else 1))
                in_ch = width * Bottleneck.expansion
            stages.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_ch, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet50(*, base_width: int = 64, seed: int = 0) -> ResNet:
    """A ResNet-50 in eval mode with deterministic random weights.

    `base_width` 64 is the real network (25.6 M parameters, ~100 MB as FP32); a smaller width
    keeps all 50 layers and the 3x224x224 -> 1000 contract but shrinks the weights, for tests.
    """
    torch.manual_seed(seed)
    model = ResNet(base_width=base_width)
    # Random BatchNorm statistics, so that eval-mode outputs are not trivially zero-centred.
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d) and module.running_var is not None:
                module.running_mean.uniform_(-0.1, 0.1)  # type: ignore[union-attr]
                module.running_var.uniform_(0.5, 1.5)
    return model.eval()
