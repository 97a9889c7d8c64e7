"""The benchmark's hook inside solo-learn's ``main_pretrain.py``, for our methods and solo-learn's
alike: :class:`Bench`, declared under ``hydra.callbacks`` by the runner; Hydra builds it before
the task function runs, in every process. It attaches the run recorder to the Lightning trainer
(solo-learn's own methods have no callback setting), and validates the embedded data at its size:
solo-learn validates ``custom`` data at Resize(256) + CenterCrop(224), which would upscale 32 px
images (~49x the compute, features unlike the training crops)."""

from __future__ import annotations

import functools
from typing import Any, Optional

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


class Bench(HydraCallback):
    """Hydra callback (``hydra.callbacks.bench``): a :class:`RunRecorder` writing ``record`` on
    every Lightning trainer; ``custom`` data validated at ``size`` px where given."""

    def __init__(self, record: str, size: Optional[int] = None) -> None:
        self.record, self.size = record, size

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        """Wraps ``Trainer.__init__`` (main_pretrain.py builds one Trainer, with its callbacks
        as a keyword); solo-learn's ``build_custom_pipeline`` at ``size`` px
        (``prepare_transforms`` looks it up in the module's globals when called)."""
        from lightning.pytorch import Trainer

        from benchmarks.recorder import RunRecorder

        init = Trainer.__init__

        @functools.wraps(init)
        def with_recorder(trainer: Any, *args: Any, **kw: Any) -> None:
            kw["callbacks"] = [*(kw.get("callbacks") or []), RunRecorder(self.record)]
            init(trainer, *args, **kw)

        Trainer.__init__ = with_recorder
        if self.size is not None:
            import solo.data.classification_dataloader as cls_data

            # solo's pretraining normalisation for custom data is the first pipeline's.
            first = config.augmentations[0] if "augmentations" in config else {}
            val = val_transform(int(self.size), first)
            cls_data.build_custom_pipeline = lambda: {"T_train": val, "T_val": val}
