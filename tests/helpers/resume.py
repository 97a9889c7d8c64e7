"""Lightning callbacks for the kill-and-resume tests, attached through ``diagnostics.callbacks``
(after solo-learn's checkpointer, whose callbacks the trainer lists first): one that kills its own
process once, after an epoch's checkpoint is written, and one that saves what a resumed fit starts
from."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback


class KillOnce(Callback):
    """SIGKILL at the end of ``epoch`` (1-based), unless ``marker`` exists; creates it first, so
    the same command run again trains on."""

    def __init__(self, marker: str, epoch: int = 1) -> None:
        self.marker, self.epoch = Path(marker), epoch

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.current_epoch + 1 == self.epoch and not self.marker.exists():
            self.marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)


class StateAtStart(Callback):
    """Saves to ``path``, as the fit starts (after a checkpoint is restored): the weights, the
    optimizers' and schedulers' states, the epoch and the step."""

    def __init__(self, path: str) -> None:
        self.path = path

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        state = {
            "state_dict": pl_module.state_dict(),
            "optimizer_states": [o.state_dict() for o in trainer.optimizers],
            "lr_schedulers": [c.scheduler.state_dict() for c in trainer.lr_scheduler_configs],
            "epoch": trainer.current_epoch,
            "global_step": trainer.global_step,
        }
        torch.save(state, self.path)
