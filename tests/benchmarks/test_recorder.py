"""The run recorder (benchmarks/recorder.py): a tiny Lightning fit writes one line per epoch with
the keys the committed records' epoch lines have (so old and new read the same), non-finite values
as null."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.demos.boring_classes import BoringModel

from benchmarks.recorder import RunRecorder, read_records

REFERENCE = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "reference"
COMMITTED = REFERENCE / "runs" / "equal-epoch" / "SimCLR" / "seed0" / "record.jsonl"


class Tiny(BoringModel):
    def training_step(self, batch, idx):
        loss = self.step(batch)
        self.log("train_nan", float("nan"), on_epoch=True)
        self.log("train_loss", loss, on_epoch=True)
        return loss

    def validation_step(self, batch, idx):
        self.log("val_acc1", 42.0)


#: Lightning's BoringModel brings its own loaders: 3 training steps and 1 validation step an epoch.
QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, max_epochs=2)
QUIET.update(enable_model_summary=False, accelerator="cpu", limit_train_batches=3)


def test_a_fit_writes_an_epoch_line_with_the_keys_the_committed_ones_have(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "record.jsonl"
    Trainer(callbacks=[RunRecorder(path)], limit_val_batches=1, **QUIET).fit(Tiny())
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
    path, seen = tmp_path / "record.jsonl", []

    class SaveAtEpochEnd(Callback):  # listed first, as the trainer lists solo-learn's
        def on_train_epoch_end(self, trainer, module):
            seen.append(len(read_records(path)))  # before the save
            trainer.save_checkpoint(tmp_path / f"ep{trainer.current_epoch}.ckpt")
            seen.append(len(read_records(path)))

    callbacks = [SaveAtEpochEnd(), RunRecorder(path)]
    Trainer(callbacks=callbacks, limit_val_batches=0, **QUIET).fit(Tiny())
    assert seen == [0, 1, 1, 2] and [r["epoch"] for r in read_records(path)] == [1, 2]
