"""The authors' ResNet for 32 px images as solo-learn backbones (``backbone.name: cifar_resnet50``).

The authors' code (from HCL/DCL) gives ResNet-50 a 3x3, stride-1, padding-1 stem without max-pool
on every dataset, STL-10 at 32 px too; solo-learn gives that stem (padding 2) to CIFAR only, and
STL-10 the ImageNet stem (8x8 maps after it at 32 px). The names do not start with ``resnet``, so
solo-learn's scripts keep this stem on every dataset and read the size from ``num_features``.
"""

from __future__ import annotations

from typing import Any, Callable, Dict

import torch.nn as nn


def _cifar_resnet(depth: int) -> Callable[..., nn.Module]:
    def build(method: str, *args: Any, **kwargs: Any) -> nn.Module:
        """solo-learn's factory signature: ``method`` (unused by ResNets) then torchvision's
        keyword arguments. Returns [b, 3, H, W] -> [b, num_features]."""
        from torchvision.models import resnet18, resnet50

        net = {18: resnet18, 50: resnet50}[depth](*args, **kwargs)
        net.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
        net.maxpool = nn.Identity()
        net.num_features = net.fc.in_features
        net.fc = nn.Identity()
        return net

    return build


#: The backbones the plugin adds to solo-learn, by name.
BACKBONES: Dict[str, Callable[..., nn.Module]] = {
    "cifar_resnet18": _cifar_resnet(18),
    "cifar_resnet50": _cifar_resnet(50),
}
