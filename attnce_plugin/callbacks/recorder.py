"""``RunRecorder``: one JSON line per training step and per epoch, for benchmarks and tests.

Switched on by ``diagnostics.record=<path>``. Lightning's loggers differ between machines
(TensorBoard where it is installed, a CSV file otherwise, wandb when enabled); this file is the
same everywhere. Written on global rank 0 only, appended to (a resumed run continues the file)::

    {"event": "fit_start", "max_epochs", "num_training_batches", "precision", "world_size",
     "sync_batchnorm_layers"}
    {"event": "step", "step", "epoch", "loss"}                       # each training step
    {"event": "epoch", "epoch" (1-based), "train_seconds", "elapsed_seconds",
     "{data,forward,backward,optimizer}_seconds", "val_seconds", "peak_rss_mib",
     "peak_cuda_mib", <every scalar of trainer.callback_metrics>}
    {"event": "fit_end", "elapsed_seconds", "peak_rss_mib", "peak_cuda_mib"}

``train_seconds`` runs from the epoch's start (the loader's first fetch included) to its last batch end (validation
excluded; on a GPU the last batch is waited for). The step losses stay on the device until the
epoch ends, so recording adds no host sync per step. ``peak_cuda_mib`` is null on a CPU.
"""

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


def peak_rss_mib() -> float:
    """Peak resident set size of this process (MiB); ru_maxrss is KiB on Linux, bytes on macOS."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def _on_cuda(pl_module: Any) -> bool:
    device = getattr(pl_module, "device", None)
    return torch.cuda.is_available() and getattr(device, "type", None) == "cuda"


def _scalar(value: Any) -> Optional[float]:
    """``value`` as a float when it is a one-element tensor or a real number, else None."""
    if isinstance(value, torch.Tensor):
        return float(value.detach().float().cpu()) if value.numel() == 1 else None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _json_number(value: float) -> Optional[float]:
    # JSON has no NaN/inf: a non-finite value is written as null.
    return value if math.isfinite(value) else None


#: The phases of a training step the epoch record sums: loader wait, training_step, backward,
#: the rest of the step (the optimizer). Lightning runs this callback's on_train_batch_end before
#: the module's, so a momentum method's EMA update (solo-learn's, in that hook) lands in the next
#: step's "data" phase, and the epoch's last one after train_seconds stops.
PHASES = ("data", "forward", "backward", "optimizer")


class RunRecorder(Callback):
    """Write the run's timing and metrics to ``path`` as JSON lines (see the module docstring).

    Args:
        path: the file, created with its folder if missing, appended to.
    """

    def __init__(self, path: Union[str, Path]) -> None:
        if not str(path):
            raise ValueError("RunRecorder needs a file path, got an empty one")
        self.path = Path(path)
        self._fit_start: Optional[float] = None
        self._epoch_start: Optional[float] = None
        self._last_batch_end: Optional[float] = None
        self._steps: List[Tuple[int, int, torch.Tensor]] = []  # (step, epoch, loss on device)
        # Host-side seconds of the epoch's phases, summed over its steps (see _mark).
        self._phases: Dict[str, float] = {}
        self._mark_at: Optional[float] = None
        self._val_start: Optional[float] = None
        self._val_seconds = 0.0

    def _write(self, trainer: Any, *records: Dict[str, Any]) -> None:
        if not trainer.is_global_zero:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as fh:
            for record in records:
                fh.write(json.dumps(record) + "\n")

    def _peaks(self, pl_module: Any) -> Dict[str, Any]:
        cuda = torch.cuda.max_memory_allocated() / 2**20 if _on_cuda(pl_module) else None
        return {"peak_rss_mib": peak_rss_mib(), "peak_cuda_mib": cuda}

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self._fit_start = time.perf_counter()

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        # Here, not at fit start: the training loader (and so its length) exists from now on.
        batches = trainer.num_training_batches
        sync_bn = sum(isinstance(m, torch.nn.SyncBatchNorm) for m in pl_module.modules())
        self._write(
            trainer,
            {
                "event": "fit_start",
                "max_epochs": trainer.max_epochs,
                "num_training_batches": batches if math.isfinite(batches) else None,
                "precision": str(trainer.precision),
                "world_size": trainer.world_size,
                "sync_batchnorm_layers": sync_bn,
            },
        )

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._epoch_start = self._mark_at = time.perf_counter()
        self._last_batch_end = None
        self._steps = []
        self._phases = dict.fromkeys(PHASES, 0.0)
        self._val_seconds = 0.0

    def _mark(self, phase: str) -> None:
        """Add the seconds since the last mark to ``phase``: host time, so on a GPU a phase ends
        when its kernels are queued, not when they have run (only the epoch total waits)."""
        now = time.perf_counter()
        if self._mark_at is not None and phase in self._phases:
            self._phases[phase] += now - self._mark_at
        self._mark_at = now

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        self._mark("data")  # since the last batch ended: waiting for the loader

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        self._mark("forward")  # training_step: backbone, projector, loss

    def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
        self._mark("backward")

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self._val_start = time.perf_counter()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self._val_start is not None and not trainer.sanity_checking:
            self._val_seconds += time.perf_counter() - self._val_start

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if isinstance(loss, torch.Tensor):
            # trainer.global_step already counts this step: the step's own number is one less.
            self._steps.append((trainer.global_step - 1, trainer.current_epoch, loss.detach()))
        if _on_cuda(pl_module) and batch_idx + 1 >= trainer.num_training_batches:
            torch.cuda.synchronize(pl_module.device)  # the epoch's time includes its last batch
        self._mark("optimizer")  # the optimizer step and Lightning's bookkeeping of the step
        self._last_batch_end = time.perf_counter()

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        # In Lightning 2.x the epoch's validation has run before this hook, so its metrics are in
        # callback_metrics; the training time stopped at the last batch, before it.
        now = time.perf_counter()
        end = self._last_batch_end or now
        losses = (
            torch.stack([loss.float() for _, _, loss in self._steps]).tolist()
            if self._steps
            else []
        )
        steps = [
            {"event": "step", "step": step, "epoch": epoch, "loss": _json_number(value)}
            for (step, epoch, _), value in zip(self._steps, losses)
        ]
        self._steps = []
        record: Dict[str, Any] = {
            "event": "epoch",
            "epoch": trainer.current_epoch + 1,
            "train_seconds": end - (self._epoch_start or end),
            "elapsed_seconds": now - (self._fit_start or now),
            **{f"{phase}_seconds": value for phase, value in self._phases.items()},
            "val_seconds": self._val_seconds,
            **self._peaks(pl_module),
        }
        for key, value in trainer.callback_metrics.items():
            number = _scalar(value)
            if number is not None and key not in record:
                record[key] = _json_number(number)
        self._write(trainer, *steps, record)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        now = time.perf_counter()
        record = {"event": "fit_end", "elapsed_seconds": now - (self._fit_start or now)}
        self._write(trainer, {**record, **self._peaks(pl_module)})


def parse_records(lines: List[str], event: Optional[str] = None) -> List[Dict[str, Any]]:
    """The records of a :class:`RunRecorder` file's lines (of one ``event`` when given), in
    order; a line that is not JSON (the one a running process is writing) is left out."""
    out = []
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if event is None or rec.get("event") == event:
            out.append(rec)
    return out


def read_records(path: Union[str, Path], event: Optional[str] = None) -> List[Dict[str, Any]]:
    """The records of a :class:`RunRecorder` file (of one ``event`` when given), in order."""
    return parse_records(Path(path).read_text().splitlines(), event)
