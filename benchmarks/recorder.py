"""``RunRecorder``: the benchmark's run record, one JSON line per training step and per epoch, the
same on every machine (Lightning's loggers are not). The runner attaches it through the plugin's
``diagnostics.callbacks`` (each entry built by ``hydra.utils.instantiate``). Written on global
rank 0, appended to, in the format of every committed record (the older ones also hold per-phase
seconds of an epoch, which nothing reads)::

    {"event": "fit_start", "max_epochs", "num_training_batches", "precision", "world_size",
     "sync_batchnorm_layers"}
    {"event": "step", "step", "epoch", "loss"}
    {"event": "epoch", "epoch" (1-based), "train_seconds", "elapsed_seconds", "val_seconds",
     "peak_rss_mib", "peak_cuda_mib", <every scalar of trainer.callback_metrics>}
    {"event": "fit_end", "elapsed_seconds", "peak_rss_mib", "peak_cuda_mib"}

``train_seconds``: the epoch's start to its last batch's end (validation excluded; on a GPU the
last batch waited for). Step losses stay on the device until the epoch ends: no host sync a step."""

from __future__ import annotations

import json
import math
import resource
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
from lightning.pytorch.callbacks import Callback


def read_records(path: Path, event: Optional[str] = None) -> List[Dict[str, Any]]:
    """A record file's lines (of one ``event``), in order; a half-written line is left out."""
    lines = [ln for ln in Path(path).read_text().splitlines() if ln.endswith("}")]
    return [r for r in map(json.loads, lines) if event is None or r.get("event") == event]


def _scalar(value: Any) -> Optional[float]:
    if isinstance(value, torch.Tensor):
        return float(value.detach().float().cpu()) if value.numel() == 1 else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _json(value: float) -> Optional[float]:
    return value if math.isfinite(value) else None  # JSON has no NaN/inf: null


class RunRecorder(Callback):
    def __init__(self, path: Union[str, Path]) -> None:
        if not str(path):
            raise ValueError("RunRecorder needs a file path, got an empty one")
        self.path = Path(path)
        self._fit_start = self._epoch_start = self._last_batch_end = None
        self._val_start: Optional[float] = None
        self._steps: List[Tuple[int, int, torch.Tensor]] = []  # (step, epoch, loss on device)
        self._val_seconds = 0.0

    def _write(self, trainer: Any, *records: Dict[str, Any]) -> None:
        if trainer.is_global_zero:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as fh:
                fh.writelines(json.dumps(record) + "\n" for record in records)

    def _peaks(self, pl_module: Any) -> Dict[str, Any]:
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
        on_cuda = torch.cuda.is_available() and getattr(pl_module.device, "type", "") == "cuda"
        return {
            "peak_rss_mib": rss / (2**20 if sys.platform == "darwin" else 2**10),
            "peak_cuda_mib": torch.cuda.max_memory_allocated() / 2**20 if on_cuda else None,
        }

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self._fit_start = time.perf_counter()

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        # Here, not at fit start: the training loader (and so its length) exists from now on.
        batches = trainer.num_training_batches
        start = {"event": "fit_start", "max_epochs": trainer.max_epochs}
        start["num_training_batches"] = batches if math.isfinite(batches) else None
        start.update(precision=str(trainer.precision), world_size=trainer.world_size)
        sync = sum(isinstance(m, torch.nn.SyncBatchNorm) for m in pl_module.modules())
        self._write(trainer, {**start, "sync_batchnorm_layers": sync})

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._epoch_start = time.perf_counter()
        self._last_batch_end, self._steps, self._val_seconds = None, [], 0.0

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self._val_start = time.perf_counter()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self._val_start is not None and not trainer.sanity_checking:
            self._val_seconds += time.perf_counter() - self._val_start

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, idx: int
    ) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if isinstance(loss, torch.Tensor):  # global_step already counts this step
            self._steps.append((trainer.global_step - 1, trainer.current_epoch, loss.detach()))
        if pl_module.device.type == "cuda" and idx + 1 >= trainer.num_training_batches:
            torch.cuda.synchronize(pl_module.device)  # the epoch's time includes its last batch
        self._last_batch_end = time.perf_counter()

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        # Lightning 2.x ran the epoch's validation before this hook: its metrics are in
        # callback_metrics, and the training time stopped at the last batch, before it.
        now = time.perf_counter()
        end = self._last_batch_end or now
        losses = torch.stack([x.float() for _, _, x in self._steps]).tolist() if self._steps else []
        steps = [
            {"event": "step", "step": step, "epoch": epoch, "loss": _json(value)}
            for (step, epoch, _), value in zip(self._steps, losses)
        ]
        self._steps = []
        record: Dict[str, Any] = {
            "event": "epoch",
            "epoch": trainer.current_epoch + 1,
            "train_seconds": end - (self._epoch_start or end),
            "elapsed_seconds": now - (self._fit_start or now),
            "val_seconds": self._val_seconds,
            **self._peaks(pl_module),
        }
        metrics = {k: _scalar(v) for k, v in trainer.callback_metrics.items() if k not in record}
        record.update({k: _json(v) for k, v in metrics.items() if v is not None})
        self._write(trainer, *steps, record)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        elapsed = time.perf_counter() - (self._fit_start or time.perf_counter())
        end = {"event": "fit_end", "elapsed_seconds": elapsed, **self._peaks(pl_module)}
        self._write(trainer, end)
