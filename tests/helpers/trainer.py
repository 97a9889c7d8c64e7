"""A quiet one-epoch CPU Lightning Trainer for in-process method tests."""

from __future__ import annotations

from typing import Any, Dict

import lightning.pytorch as pl


def cpu_trainer(**kwargs: Any) -> pl.Trainer:
    """One epoch on one CPU process with no logger, checkpoints, progress bar or model summary,
    so nothing is written and the result does not depend on tensorboard being installed;
    ``kwargs`` (callbacks, deterministic, max_epochs, ...) are added or replace these."""
    settings: Dict[str, Any] = dict(
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    return pl.Trainer(**{**settings, **kwargs})
