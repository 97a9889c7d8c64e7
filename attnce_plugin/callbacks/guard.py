"""Stop training when the training loss becomes NaN or infinite, before it is checkpointed.

Switched on by ``diagnostics.finite_loss_guard: true`` (checks every
``diagnostics.finite_check_every`` batches). Lightning's ``EarlyStopping(check_finite=True)`` sees a
NaN only at an epoch's end, on a logged metric, after the epoch's callbacks may have saved it; a
plain ``if not torch.isfinite(loss)`` each step would make the host wait for the whole step on a
GPU. Instead :meth:`FiniteLossGuard.record` keeps, at each step's end, with tensor ops on the loss's
device and no host sync, the FIRST step whose loss (what ``training_step`` returned) was
non-finite and that value; the guard reads that record every ``check_every`` batches and at the
last batch of every epoch, i.e. before solo-learn's ``Checkpointer`` (an ``on_train_epoch_end``
callback) can save a NaN model over the last good checkpoint. Under DDP the flag is all-reduced
(max) at the check, so every process raises at the same batch and none is left waiting in a
collective.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import torch
from lightning.pytorch.callbacks import Callback
from omegaconf import OmegaConf

from attnce_plugin.checks import check_int_at_least


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite."""


def describe_settings(cfg: Any) -> str:
    """The settings the guard's message prints: the loss scales, the optimizer, the precision."""
    keys = ("temperature", "d_pos", "d_neg", "loss")
    kwargs = OmegaConf.select(cfg, "method_kwargs", default={}) or {}
    shown = ", ".join(f"{k}={kwargs[k]}" for k in keys if k in kwargs)
    opt = OmegaConf.select(cfg, "optimizer", default={}) or {}
    return (
        f"method={OmegaConf.select(cfg, 'method', default=None)}, method_kwargs: {shown}; "
        f"optimizer={opt.get('name')}, lr={opt.get('lr')}, batch_size={opt.get('batch_size')}, "
        f"precision={OmegaConf.select(cfg, 'precision', default=None)}"
    )


class FiniteLossGuard(Callback):
    """Record non-finite losses without a host sync; raise :class:`NonFiniteLossError` at checks.

    Args:
        method_name: the method's registered name, shown in the message.
        check_every: batches between two host-side checks (>= 1).
        describe_settings: returns the settings to print in the message (loss scales, optimizer,
            precision), called only when the guard fires.
    """

    def __init__(
        self, method_name: str, check_every: int, describe_settings: Callable[[], str]
    ) -> None:
        check_int_at_least("check_every", check_every, 1)
        self.method_name = method_name
        self.check_every = check_every
        self.describe_settings = describe_settings
        # Plain tensors, not module buffers: DDP broadcasts buffers from rank 0 at every forward,
        # which would erase another rank's record.
        self._step: Optional[torch.Tensor] = None  # [] int64, -1 = none yet
        self._loss: Optional[torch.Tensor] = None  # [] float32
        self._since_check = 0

    def _state(self, device: torch.device) -> None:
        if self._step is None or self._step.device != device:
            self._step = torch.full((), -1, dtype=torch.long, device=device)
            self._loss = torch.zeros((), dtype=torch.float32, device=device)

    @torch.no_grad()
    def record(self, loss: torch.Tensor, step: int) -> None:
        """Remember the first non-finite value of the scalar ``loss`` [] (no host sync).

        Args:
            loss: the step's self-supervised loss.
            step: the trainer's global step, shown in the message.
        """
        value = loss.detach().float().reshape(())
        self._state(value.device)
        first = ~torch.isfinite(value) & (self._step < 0)
        self._step = torch.where(first, torch.full_like(self._step, step), self._step)
        self._loss = torch.where(first, value, self._loss)

    def check(self, batch_idx: Optional[int] = None, epoch: Any = "?") -> None:
        """Raise :class:`NonFiniteLossError` if any process recorded a non-finite loss (syncs).

        Must be called by every process at the same batch under DDP (it all-reduces).

        Args:
            batch_idx: the batch just trained, shown in the message.
            epoch: the current epoch, shown in the message.
        """
        self._state(self._step.device if self._step is not None else torch.device("cpu"))
        flag = (self._step >= 0).to(torch.float32)
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        if flag.item() == 0:
            return
        local_step = int(self._step.item())
        where = (
            f"first at global step {local_step} (loss = {self._loss.item()})"
            if local_step >= 0
            else "on another process (its message names the step)"
        )
        raise NonFiniteLossError(
            f"the {self.method_name} training loss became NaN/inf, {where}; detected after "
            f"batch {batch_idx} of epoch {epoch} (the guard checks every "
            f"diagnostics.finite_check_every={self.check_every} batches and at each epoch's last "
            f"batch). Training stopped before a NaN model could be checkpointed. Settings: "
            f"{self.describe_settings()}. Usual causes: a learning rate too high for the batch "
            "size, fp16 overflow (try precision=bf16-mixed or 32), or a corrupt input batch"
        )

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Record the step's loss; check every ``check_every`` batches and at each epoch's end."""
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if isinstance(loss, torch.Tensor):
            # trainer.global_step already counts this step: the step's own number is one less.
            self.record(loss, int(trainer.global_step) - 1)
        self._since_check += 1
        num_batches = getattr(trainer, "num_training_batches", math.inf)
        last_of_epoch = math.isfinite(num_batches) and batch_idx + 1 >= num_batches
        if self._since_check >= self.check_every or last_of_epoch:
            self._since_check = 0
            self.check(batch_idx, getattr(trainer, "current_epoch", "?"))
