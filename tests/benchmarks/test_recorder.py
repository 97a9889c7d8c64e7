"""The run recorder (benchmarks/recorder.py): a tiny Lightning fit writes one line per epoch with
the keys the committed records' epoch lines have (so old and new read the same), non-finite values
as null."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Callback

from benchmarks.recorder import RunRecorder, read_records

REFERENCE = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "reference"
COMMITTED = REFERENCE / "runs" / "equal-epoch" / "SimCLR" / "seed0" / "record.jsonl"


class Tiny(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, idx):
        loss = self.layer(batch[0]).pow(2).mean()
        self.log("train_nan", float("nan"), on_epoch=True)
        self.log("train_loss", loss, on_epoch=True)
        return loss

    def validation_step(self, batch, idx):
        self.log("val_acc1", 42.0)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_a_fit_writes_an_epoch_line_with_the_keys_the_committed_ones_have(tmp_path: Path) -> None:
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(12, 4)), 4)
    path = tmp_path / "sub" / "record.jsonl"
    quiet = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    quiet.update(enable_model_summary=False, num_sanity_val_steps=0, accelerator="cpu")
    Trainer(max_epochs=2, callbacks=[RunRecorder(path)], **quiet).fit(Tiny(), loader, loader)
    records = read_records(path)
    old = next(
        json.loads(ln) for ln in COMMITTED.read_text().splitlines() if '"event": "epoch"' in ln
    )
    assert [(r["event"], r["epoch"]) for r in records] == [("epoch", 1), ("epoch", 2)]
    base = {"train_seconds", "elapsed_seconds", "peak_rss_mib", "peak_cuda_mib"}
    assert base <= set(records[0]) & set(old), base - (set(records[0]) & set(old))
    assert 0 < records[0]["train_seconds"] <= records[0]["elapsed_seconds"]
    assert records[0]["val_acc1"] == 42.0 and records[0]["train_nan"] is None  # JSON has no NaN
    assert records[0]["train_loss_epoch"] >= 0


def test_a_torn_last_line_is_skipped_with_a_warning_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "record.jsonl"
    path.write_text('{"event": "epoch", "epoch": 1}\n{"event": "epoch", "ep')
    with pytest.warns(UserWarning, match=f"{path}: line 2 is torn"):
        assert read_records(path, "epoch") == [{"event": "epoch", "epoch": 1}]


def test_the_epoch_line_goes_out_before_its_checkpoint_and_once(tmp_path: Path) -> None:
    """A checkpoint saved at an epoch's end (as solo-learn's is) writes the epoch's line first;
    the epoch's end then writes nothing more."""
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4)), 4)
    path, seen = tmp_path / "record.jsonl", []

    class SaveAtEpochEnd(Callback):  # listed first, as the trainer lists solo-learn's
        def on_train_epoch_end(self, trainer, module):
            seen.append(len(read_records(path)))  # before the save
            trainer.save_checkpoint(tmp_path / f"ep{trainer.current_epoch}.ckpt")
            seen.append(len(read_records(path)))

    quiet = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    quiet.update(enable_model_summary=False, accelerator="cpu")
    callbacks = [SaveAtEpochEnd(), RunRecorder(path)]
    Trainer(max_epochs=2, callbacks=callbacks, **quiet).fit(Tiny(), loader)
    assert seen == [0, 1, 1, 2] and [r["epoch"] for r in read_records(path)] == [1, 2]
