"""The run recorder (benchmarks/recorder.py): a tiny Lightning fit writes records with the keys of
the committed ones (so old and new records read the same), non-finite values as null."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from lightning.pytorch import LightningModule, Trainer

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


def test_a_fit_writes_the_committed_records_keys(tmp_path: Path) -> None:
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(12, 4)), 4)
    path = tmp_path / "sub" / "record.jsonl"
    quiet = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    quiet.update(enable_model_summary=False, num_sanity_val_steps=0, accelerator="cpu")
    Trainer(max_epochs=2, callbacks=[RunRecorder(path)], **quiet).fit(Tiny(), loader, loader)
    records = read_records(path)
    old = [json.loads(line) for line in COMMITTED.read_text().splitlines()]
    epochs = (["step"] * 3 + ["epoch"]) * 2
    assert [r["event"] for r in records] == ["fit_start", *epochs, "fit_end"]
    for event in ("fit_start", "step", "fit_end"):
        new = next(r for r in records if r["event"] == event)
        assert set(new) == set(next(r for r in old if r["event"] == event)), event
    epoch, old_epoch = records[4], next(r for r in old if r["event"] == "epoch")
    base = {"epoch", "train_seconds", "elapsed_seconds", "val_seconds", "peak_rss_mib"}
    assert base <= set(epoch) & set(old_epoch), base - (set(epoch) & set(old_epoch))
    assert epoch["epoch"] == 1 and epoch["train_seconds"] > 0
    assert epoch["val_acc1"] == 42.0 and epoch["train_nan"] is None  # JSON has no NaN
    assert [r["step"] for r in records if r["event"] == "step"] == list(range(6))
    assert records[0]["num_training_batches"] == 3 and records[0]["world_size"] == 1
