"""Hooks the benchmark installs inside solo-learn's ``main_pretrain.py``, via a Hydra callback.

``main_pretrain.py`` builds its own Trainer and callback list, and for ``custom`` datasets always
validates at Resize(256) + CenterCrop(224). The benchmark needs two things it cannot pass on the
command line, so it declares :class:`BenchHooks` under ``hydra.callbacks``; Hydra builds it before
the task function runs, in every process (Lightning's DDP children re-run the same command line):

1. a validation transform at the training crop size (Resize + CenterCrop to ``val_size``, the
   pretraining normalisation), so 32 px images are validated at 32 px, not upscaled to 224 px
   (~49x the compute, and features unlike the training crops);
2. a Lightning callback that writes one JSON line per epoch to ``log_file``: the training seconds
   of the epoch (first batch start to last batch end, validation excluded), the online kNN and
   linear-probe accuracies, and the process's peak RSS. The bench runner reads this file for its
   progress bar and its tables.
"""

from __future__ import annotations

import functools
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any, Dict, Optional

from hydra.experimental.callback import Callback as HydraCallback

#: Metrics copied from ``trainer.callback_metrics`` into the epoch log when present.
_LOGGED_METRICS = (
    "val_acc1",
    "val_acc5",
    "val_knn_acc1",
    "val_knn_acc5",
    "val_loss",
    "train_loss",
    "train_nce_loss",
    "train_acc1",
)


def _peak_rss_mib() -> float:
    """Peak resident set size of this process (MiB); ru_maxrss is KiB on Linux, bytes on macOS."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024.0 * 1024.0) if sys.platform == "darwin" else peak / 1024.0


def make_epoch_logger(log_file: str) -> Any:
    """A Lightning callback writing per-epoch timing and metrics to ``log_file`` (JSON lines).

    Built lazily so that importing this module does not import Lightning.
    """
    from lightning.pytorch.callbacks import Callback

    class EpochLogger(Callback):
        def __init__(self) -> None:
            self.path = Path(log_file)
            self.epoch_start: Optional[float] = None
            self.last_batch_end: Optional[float] = None
            self.fit_start: Optional[float] = None

        def _write(self, trainer: Any, record: Dict[str, Any]) -> None:
            if not trainer.is_global_zero:
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as fh:
                fh.write(json.dumps(record) + "\n")

        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            self.fit_start = time.perf_counter()
            self._write(
                trainer,
                {
                    "event": "fit_start",
                    "max_epochs": trainer.max_epochs,
                    "num_training_batches": trainer.num_training_batches,
                },
            )

        def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
            self.epoch_start = time.perf_counter()
            self.last_batch_end = None

        def on_train_batch_end(self, trainer: Any, *args: Any, **kwargs: Any) -> None:
            self.last_batch_end = time.perf_counter()

        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            # In Lightning 2.x the end-of-epoch validation has already run here, so its metrics
            # are in callback_metrics; the training time stops at the last batch, before it.
            end = self.last_batch_end or time.perf_counter()
            record: Dict[str, Any] = {
                "event": "epoch",
                "epoch": trainer.current_epoch + 1,
                "train_seconds": end - (self.epoch_start or end),
                "elapsed_seconds": time.perf_counter() - (self.fit_start or end),
                "peak_rss_mib": _peak_rss_mib(),
            }
            for key in _LOGGED_METRICS:
                value = trainer.callback_metrics.get(key)
                if value is not None:
                    record[key] = float(value)
            self._write(trainer, record)

        def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
            self._write(trainer, {"event": "fit_end", "peak_rss_mib": _peak_rss_mib()})

    return EpochLogger()


def _patch_trainer(log_file: str) -> None:
    """Make every Trainer built in this process also run the epoch logger.

    main_pretrain.py imported ``Trainer`` by name before Hydra calls us, so the class itself is
    patched (not the module attribute): both names point at the same class object.
    """
    from lightning.pytorch import Trainer

    if getattr(Trainer.__init__, "_attnce_bench_patched", False):
        return
    original = Trainer.__init__

    # functools.wraps keeps the signature visible: main_pretrain.py filters its config keys by
    # inspect.signature(Trainer.__init__), which follows __wrapped__.
    @functools.wraps(original)
    def patched(self: Any, *args: Any, **kwargs: Any) -> None:
        callbacks = list(kwargs.get("callbacks") or [])
        callbacks.append(make_epoch_logger(log_file))
        kwargs["callbacks"] = callbacks
        original(self, *args, **kwargs)

    patched._attnce_bench_patched = True  # type: ignore[attr-defined]
    Trainer.__init__ = patched  # type: ignore[method-assign]


def _patch_custom_val_transform(val_size: int, mean: Any, std: Any) -> None:
    """Validate ``custom`` datasets at ``val_size`` px instead of Resize(256) + CenterCrop(224).

    The replacement follows solo-learn's own ``build_custom_pipeline``
    (``solo/data/classification_dataloader.py``), with the crop size changed.

    ``prepare_transforms`` looks ``build_custom_pipeline`` up in its module's globals at call
    time, so replacing the module attribute is enough.
    """
    import solo.data.classification_dataloader as cls_data
    from torchvision import transforms

    def build_custom_pipeline() -> Dict[str, Any]:
        t_val = transforms.Compose(
            [
                transforms.Resize(val_size, interpolation=transforms.InterpolationMode.BICUBIC),
                transforms.CenterCrop(val_size),
                transforms.ToTensor(),
                transforms.Normalize(mean=mean, std=std),
            ]
        )
        # T_train is only used by main_linear.py; keep the same size so it would not upscale.
        t_train = transforms.Compose(
            [
                transforms.RandomResizedCrop(val_size, scale=(0.08, 1.0)),
                transforms.RandomHorizontalFlip(),
                transforms.ToTensor(),
                transforms.Normalize(mean=mean, std=std),
            ]
        )
        return {"T_train": t_train, "T_val": t_val}

    cls_data.build_custom_pipeline = build_custom_pipeline


class BenchHooks(HydraCallback):
    """Hydra callback: declared by the bench runner under ``hydra.callbacks.attnce_bench``.

    Args:
        log_file: JSON-lines file for per-epoch records ("" disables the epoch logger).
        val_size: validation image side for ``custom`` datasets; 0 keeps solo-learn's 224 px.
    """

    def __init__(self, log_file: str = "", val_size: int = 0) -> None:
        self.log_file = str(log_file)
        self.val_size = int(val_size)
        if self.val_size < 0:
            raise ValueError(
                f"attnce_bench.val_size={val_size}: must be 0 (off) or a positive size"
            )

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        if self.val_size > 0:
            from timm.data.constants import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

            # Same normalisation as solo's pretraining pipeline for custom data: the first
            # augmentation's mean/std when given, ImageNet's otherwise.
            first = config.augmentations[0] if "augmentations" in config else {}
            mean = tuple(first.get("mean", IMAGENET_DEFAULT_MEAN))
            std = tuple(first.get("std", IMAGENET_DEFAULT_STD))
            _patch_custom_val_transform(self.val_size, mean, std)
        if self.log_file:
            _patch_trainer(self.log_file)
