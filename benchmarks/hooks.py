"""The one change the benchmark makes inside solo-learn's ``main_pretrain.py``: solo-learn always
validates ``custom`` data at Resize(256) + CenterCrop(224), which would upscale 32 px images (~49x
the compute, features unlike the training crops). The runner declares :class:`ValidateAtTrainSize`
under ``hydra.callbacks``; Hydra builds it before the task function runs, in every process."""

from __future__ import annotations

from typing import Any

from hydra.experimental.callback import Callback as HydraCallback


def val_transform(size: int, pipeline: Any) -> Any:
    """Resize + CenterCrop at ``size`` px, normalised as solo-learn's ``build_transform_pipeline``
    does ``custom`` data (the ``pipeline``'s mean and std, else ImageNet's)."""
    from timm.data.constants import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
    from torchvision import transforms

    mean = tuple(pipeline.get("mean", IMAGENET_DEFAULT_MEAN))
    norm = transforms.Normalize(mean=mean, std=tuple(pipeline.get("std", IMAGENET_DEFAULT_STD)))
    resize = transforms.Resize(size, interpolation=transforms.InterpolationMode.BICUBIC)
    return transforms.Compose([resize, transforms.CenterCrop(size), transforms.ToTensor(), norm])


class ValidateAtTrainSize(HydraCallback):
    """Hydra callback (``hydra.callbacks.bench``): ``custom`` data validated at ``size`` px."""

    def __init__(self, size: int) -> None:
        self.size = int(size)  # the runner's CROP

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        """solo-learn's ``build_custom_pipeline`` at ``size`` px (``prepare_transforms`` looks it
        up in the module's globals when called); T_train serves main_linear.py only."""
        import solo.data.classification_dataloader as cls_data

        # solo's pretraining normalisation for custom data is the first pipeline's.
        val = val_transform(self.size, config.augmentations[0] if "augmentations" in config else {})
        cls_data.build_custom_pipeline = lambda: {"T_train": val, "T_val": val}
