"""The run recorder (benchmarks/recorder.py): a tiny Lightning fit writes one line per epoch with
the keys the committed records' epoch lines have (so old and new read the same), non-finite values
as null."""

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
