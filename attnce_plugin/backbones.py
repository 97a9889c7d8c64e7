"""The authors' ResNet for 32 px images, as solo-learn backbones (``backbone.name: cifar_resnet50``).

The authors' code (inherited from the HCL/DCL code base) builds ResNet-50 with a 3x3, stride-1,
padding-1 first convolution, no max-pool and no classification layer, for every dataset: STL-10
too, whose images it trains at 32 px. solo-learn gives that stem only to ``cifar10`` / ``cifar100``
(with padding 2), and ResNet's ImageNet stem (7x7, stride 2, max-pool) to STL-10, which at 32 px
leaves 8x8 feature maps after the stem. The paper configs therefore use these backbones, which
:func:`attnce_plugin.seam.register` adds to solo-learn's ``BaseMethod._BACKBONES`` (new
names only). Their names do not start with ``resnet``, so solo-learn's scripts leave the stem as
built here on every dataset and read the feature size from ``num_features``.
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

    build.__name__ = f"cifar_resnet{depth}"
    return build


#: The backbones the plugin adds to solo-learn, by name.
BACKBONES: Dict[str, Callable[..., nn.Module]] = {
    "cifar_resnet18": _cifar_resnet(18),
    "cifar_resnet50": _cifar_resnet(50),
}
