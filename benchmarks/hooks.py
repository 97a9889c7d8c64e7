"""The one change the benchmark makes inside solo-learn's ``main_pretrain.py``: solo-learn always
validates ``custom`` data at Resize(256) + CenterCrop(224), which would upscale 32 px images (~49x
the compute, features unlike the training crops). The runner declares :class:`ValidateAtTrainSize`
under ``hydra.callbacks``; Hydra builds it before the task function runs, in every process."""

from __future__ import annotations

from typing import Any

from hydra.experimental.callback import Callback as HydraCallback


def val_transform(size: int, mean: Any, std: Any) -> Any:
    """Resize + CenterCrop at ``size`` px, the pretraining normalisation: validation and probe."""
    from torchvision import transforms

    resize = transforms.Resize(size, interpolation=transforms.InterpolationMode.BICUBIC)
    tail = [transforms.ToTensor(), transforms.Normalize(mean=mean, std=std)]
    return transforms.Compose([resize, transforms.CenterCrop(size), *tail])


class ValidateAtTrainSize(HydraCallback):
    """Hydra callback (``hydra.callbacks.bench``): ``custom`` data validated at ``size`` px."""

    def __init__(self, size: int) -> None:
        if int(size) < 1:
            raise ValueError(f"hydra.callbacks.bench.size={size}: must be a positive image size")
        self.size = int(size)

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        """solo-learn's ``build_custom_pipeline`` at ``size`` px (``prepare_transforms`` looks it
        up in the module's globals when called); T_train serves main_linear.py only."""
        import solo.data.classification_dataloader as cls_data
        from timm.data.constants import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

        # solo's pretraining normalisation for custom data: the first pipeline's, else ImageNet's.
        first = config.augmentations[0] if "augmentations" in config else {}
        mean = tuple(first.get("mean", IMAGENET_DEFAULT_MEAN))
        val = val_transform(self.size, mean, tuple(first.get("std", IMAGENET_DEFAULT_STD)))
        cls_data.build_custom_pipeline = lambda: {"T_train": val, "T_val": val}
