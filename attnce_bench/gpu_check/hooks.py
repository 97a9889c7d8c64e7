"""Hydra callback that records what a ``main_pretrain.py`` run of the GPU check really did.

``main_pretrain.py`` builds its own Trainer and logger (TensorBoard where tensorboard is installed,
as on the GPU machine; CSV elsewhere), so instead of reading a logger's files the check declares::

    +hydra.callbacks.gpucheck._target_=attnce_bench.gpu_check.hooks.GpuCheckHooks
    +hydra.callbacks.gpucheck.record=<file.json>

and every Trainer built in the run gets a Lightning callback that writes ``record`` (JSON, rewritten
after every step so a killed run leaves what it had): the precision, strategy and device Lightning
used, the number of SyncBatchNorm / BatchNorm layers, whether the backbone is channels_last, the
crop roles the method received, every training step's loss, and the final logged metrics.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any, Dict

from hydra.experimental.callback import Callback as HydraCallback


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def make_recorder(record: str) -> Any:
    """The Lightning callback (built lazily: importing this module does not import Lightning)."""
    import torch
    from lightning.pytorch.callbacks import Callback

    class RunRecorder(Callback):
        def __init__(self) -> None:
            self.path = Path(record)
            self.state: Dict[str, Any] = {"losses": [], "finished": False}

        def _write(self, trainer: Any) -> None:
            if not trainer.is_global_zero:
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            # json writes NaN / Infinity as bare words, which json.loads reads back.
            tmp.write_text(json.dumps(self.state, indent=1))
            tmp.replace(self.path)

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            modules = list(pl_module.modules())
            convs = [m for m in modules if isinstance(m, torch.nn.Conv2d)]
            first = next(iter(p for p in pl_module.parameters() if p.dim() == 4), None)
            self.state.update(
                {
                    "precision": str(trainer.precision),
                    "strategy": type(trainer.strategy).__name__,
                    "accelerator": type(trainer.accelerator).__name__,
                    "device": str(pl_module.device),
                    "world_size": int(trainer.world_size),
                    "sync_batchnorm_layers": sum(
                        isinstance(m, torch.nn.SyncBatchNorm) for m in modules
                    ),
                    "batchnorm_layers": sum(
                        isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in modules
                    ),
                    "conv_layers": len(convs),
                    "channels_last": bool(
                        first is not None and first.is_contiguous(memory_format=torch.channels_last)
                    ),
                    # The plugin's methods hide their positives from solo-learn's step
                    # (num_small_crops becomes 0) and keep M in num_positive_crops.
                    "num_large_crops": int(getattr(pl_module, "num_large_crops", -1)),
                    "num_small_crops": int(getattr(pl_module, "num_small_crops", -1)),
                    "num_positive_crops": int(getattr(pl_module, "num_positive_crops", -1)),
                    "method": type(pl_module).__name__,
                }
            )
            self._write(trainer)

        def on_train_batch_end(
            self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, *args: Any, **kwargs: Any
        ) -> None:
            if "crop_sizes" not in self.state:  # what the data pipeline really delivered
                self.state["crop_sizes"] = [int(c.shape[-1]) for c in batch[1]]
            loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
            self.state["losses"].append(_float(loss.detach() if hasattr(loss, "detach") else loss))
            self._write(trainer)

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            self.state["metrics"] = {k: _float(v) for k, v in trainer.callback_metrics.items()}
            self.state["finished"] = True
            self._write(trainer)

    return RunRecorder()


def _patch_trainer(record: str) -> None:
    """Add the recorder to every Trainer built in this process (see attnce_bench.hooks for why the
    class, not the module attribute, is patched)."""
    from lightning.pytorch import Trainer

    if getattr(Trainer.__init__, "_attnce_gpucheck_patched", False):
        return
    original = Trainer.__init__

    # wraps keeps the signature: main_pretrain.py filters its config by inspect.signature.
    @functools.wraps(original)
    def patched(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["callbacks"] = [*(kwargs.get("callbacks") or []), make_recorder(record)]
        original(self, *args, **kwargs)

    patched._attnce_gpucheck_patched = True  # type: ignore[attr-defined]
    Trainer.__init__ = patched  # type: ignore[method-assign]


class GpuCheckHooks(HydraCallback):
    """Hydra callback: ``record`` is the JSON file the run's recorder writes."""

    def __init__(self, record: str) -> None:
        if not record:
            raise ValueError("hydra.callbacks.gpucheck.record must name a file")
        self.record = str(record)

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        _patch_trainer(self.record)
