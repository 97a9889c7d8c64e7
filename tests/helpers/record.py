"""A Lightning callback for the plugin's script tests, attached through ``diagnostics.callbacks`` to
a solo-learn script run as a subprocess: each step's loss and each epoch's scalar metrics, one JSON
line each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

from lightning.pytorch.callbacks import Callback


class StepsAndEpochs(Callback):
    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def _write(self, trainer: Any, record: Dict[str, Any]) -> None:
        if trainer.is_global_zero:
            with self.path.open("a") as fh:
                fh.write(json.dumps(record) + "\n")

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, *_: Any) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        self._write(trainer, {"event": "step", "loss": float(loss)})

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
        self._write(trainer, {"event": "epoch", **metrics})


def read_events(path: Path, event: str) -> List[Dict[str, Any]]:
    """The records of one ``event`` written by :class:`StepsAndEpochs`, in order."""
    records = [json.loads(line) for line in Path(path).read_text().splitlines()]
    return [r for r in records if r["event"] == event]
