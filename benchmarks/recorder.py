"""``RunRecorder``: the benchmark's run record, one JSON line per epoch, the same on every machine
(Lightning's loggers are not), for our methods and solo-learn's alike: the benchmark's Hydra
callback (benchmarks/hooks.py) attaches it to the trainer. Written on global rank 0, appended
to::

    {"event": "epoch", "epoch" (1-based), "train_seconds", "elapsed_seconds", "peak_rss_mib",
     "peak_cuda_mib", <every scalar of trainer.callback_metrics>}

``train_seconds``: the epoch's start to its last batch's end (validation excluded; on a GPU the
last batch waited for). The line goes out before the epoch's checkpoint file is written (solo-learn
saves in its own ``on_train_epoch_end``, which runs before this callback's): a run killed at any
moment has a record line for every epoch its last checkpoint holds, and a resumed run appends the
epochs after it. Older records also hold lines of other events."""

from __future__ import annotations

import json
import math
import resource
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import torch
from lightning.pytorch.callbacks import Callback


def read_records(path: Path, event: Optional[str] = None) -> List[Dict[str, Any]]:
    """A record file's lines (of one ``event``), in order; none before the file exists. A torn
    line (a process killed while writing it) is left out, with a warning that names the file."""
    text = Path(path).read_text() if Path(path).is_file() else ""
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            records.append(json.loads(line))
        except ValueError:
            warnings.warn(f"{path}: line {number} is torn (a killed write?); skipped", stacklevel=2)
    return [r for r in records if event is None or r.get("event") == event]


class RunRecorder(Callback):
    def __init__(self, path: Union[str, Path]) -> None:
        self.path = Path(path)
        self._fit_start = self._epoch_start = self._last_batch_end = None
        self._written = 0  # the last epoch (1-based) whose line is out

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self._fit_start = time.perf_counter()

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._epoch_start, self._last_batch_end = time.perf_counter(), None

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, idx: int
    ) -> None:
        if pl_module.device.type == "cuda" and idx + 1 >= trainer.num_training_batches:
            torch.cuda.synchronize(pl_module.device)  # the epoch's time includes its last batch
        self._last_batch_end = time.perf_counter()

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: Dict) -> None:
        if self._last_batch_end is not None:  # at an epoch's end, before its file is written
            self.on_train_epoch_end(trainer, pl_module)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        # Lightning 2.x ran the epoch's validation before this hook: its metrics are in
        # callback_metrics, and the training time stopped at the last batch, before it.
        if self._written == trainer.current_epoch + 1:
            return
        self._written = trainer.current_epoch + 1
        now = time.perf_counter()
        end = self._last_batch_end or now
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
        on_cuda = torch.cuda.is_available() and pl_module.device.type == "cuda"
        record: Dict[str, Any] = {
            "event": "epoch",
            "epoch": trainer.current_epoch + 1,
            "train_seconds": end - (self._epoch_start or end),
            "elapsed_seconds": now - (self._fit_start or now),
            "peak_rss_mib": rss / (2**20 if sys.platform == "darwin" else 2**10),
            "peak_cuda_mib": torch.cuda.max_memory_allocated() / 2**20 if on_cuda else None,
        }
        for key, value in trainer.callback_metrics.items():  # tensors: Lightning keeps them so
            if key not in record and value.numel() == 1:
                record[key] = float(value) if math.isfinite(value) else None  # JSON has no NaN
        if trainer.is_global_zero:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as fh:
                fh.write(json.dumps(record) + "\n")
