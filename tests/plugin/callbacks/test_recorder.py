"""``RunRecorder`` (``diagnostics.record``) and the ``trainer=cpu`` config piece."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import List

import lightning.pytorch as pl
import pytest
import torch
from helpers.trainer import cpu_trainer
from hydra import compose, initialize_config_module

from attnce_plugin.callbacks import DiagnosticsConfigError, check_diagnostics, diagnostic_callbacks
from attnce_plugin.callbacks.recorder import RunRecorder, read_records


class _Tiny(pl.LightningModule):
    """A linear model whose step losses the test writes down itself (the reference)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)
        self.losses: List[float] = []

    def training_step(self, batch, batch_idx):
        loss = self.layer(batch).pow(2).mean()
        self.losses.append(float(loss))
        self.log("train_loss", loss, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_metric", torch.tensor(0.25))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_records_every_step_and_epoch_in_the_documented_format(tmp_path: Path) -> None:
    torch.manual_seed(0)
    data = torch.utils.data.DataLoader(torch.randn(6, 3), batch_size=2)
    path = tmp_path / "out" / "run.jsonl"
    model = _Tiny()
    trainer = cpu_trainer(max_epochs=2, callbacks=[RunRecorder(path)], num_sanity_val_steps=0)
    trainer.fit(model, train_dataloaders=data, val_dataloaders=data)

    records = read_records(path)
    events = [r["event"] for r in records]
    assert events == ["fit_start"] + (["step"] * 3 + ["epoch"]) * 2 + ["fit_end"]
    assert records[0] == {
        "event": "fit_start",
        "max_epochs": 2,
        "num_training_batches": 3,
        "precision": "32-true",
        "world_size": 1,
        "sync_batchnorm_layers": 0,
    }
    steps = [r for r in records if r["event"] == "step"]
    assert [(r["step"], r["epoch"]) for r in steps] == [(i, i // 3) for i in range(6)]
    assert [r["loss"] for r in steps] == pytest.approx(model.losses, rel=1e-6)
    epochs = [r for r in records if r["event"] == "epoch"]
    assert [r["epoch"] for r in epochs] == [1, 2]
    for r in epochs:
        assert r["peak_cuda_mib"] is None and r["peak_rss_mib"] > 0
        assert 0 < r["train_seconds"] <= r["elapsed_seconds"]
        assert r["val_metric"] == 0.25
    assert epochs[1]["train_loss_epoch"] == pytest.approx(sum(model.losses[3:]) / 3, rel=1e-6)
    end = records[-1]
    assert set(end) == {"event", "elapsed_seconds", "peak_rss_mib", "peak_cuda_mib"}
    assert end["elapsed_seconds"] >= epochs[-1]["elapsed_seconds"]
    assert all(json.loads(line) for line in path.read_text().splitlines())  # plain JSON lines


def test_non_finite_loss_is_recorded_as_null(tmp_path: Path) -> None:
    class _NaN(_Tiny):
        def training_step(self, batch, batch_idx):
            return self.layer(batch).sum() * float("nan")

    path = tmp_path / "run.jsonl"
    trainer = cpu_trainer(callbacks=[RunRecorder(path)], limit_train_batches=1)
    trainer.fit(_NaN(), train_dataloaders=torch.utils.data.DataLoader(torch.randn(2, 3)))
    steps = [r for r in read_records(path) if r["event"] == "step"]
    assert steps == [{"event": "step", "step": 0, "epoch": 0, "loss": None}]


def test_diagnostics_record_key_switches_the_recorder_on(tmp_path: Path) -> None:
    assert diagnostic_callbacks({}) == []
    assert diagnostic_callbacks({"diagnostics": {"record": None}}) == []
    assert diagnostic_callbacks({"diagnostics": {"record": ""}}) == []
    (rec,) = diagnostic_callbacks({"diagnostics": {"record": str(tmp_path / "r.jsonl")}})
    assert isinstance(rec, RunRecorder) and rec.path == tmp_path / "r.jsonl"
    with pytest.raises(DiagnosticsConfigError, match=r"diagnostics\.record must be a file path"):
        check_diagnostics({"diagnostics": {"record": 3}})
    with pytest.raises(DiagnosticsConfigError, match=r"diagnostics\.recrod is not .*record"):
        check_diagnostics({"diagnostics": {"recrod": "x"}})


@pytest.mark.parametrize("config", ["pretrain/cifar/attentionnce", "linear/stl10/attentionnce"])
def test_trainer_cpu_is_one_quiet_cpu_process_without_wandb(config: str) -> None:
    with initialize_config_module("attnce_plugin.configs", version_base="1.2"):
        cfg = compose(config, overrides=["trainer=cpu"])
    assert cfg.accelerator == "cpu" and cfg.devices == "1" and cfg.strategy == "auto"
    assert cfg.sync_batchnorm is False and cfg.precision == 32 and cfg.num_sanity_val_steps == 0
    assert cfg.wandb.enabled is False
    assert cfg.checkpoint.enabled is True  # the rest as trainer/gpu.yaml


class _Slow(_Tiny):
    """Sleeps a known time in training_step and in backward (the reference for the phases)."""

    def training_step(self, batch, batch_idx):
        time.sleep(0.05)
        return super().training_step(batch, batch_idx)

    def backward(self, loss, *args, **kwargs):
        time.sleep(0.03)
        super().backward(loss, *args, **kwargs)


def test_epoch_phases_add_up_to_the_training_time(tmp_path: Path) -> None:
    data = torch.utils.data.DataLoader(torch.randn(6, 3), batch_size=2)
    path = tmp_path / "run.jsonl"
    trainer = cpu_trainer(max_epochs=1, callbacks=[RunRecorder(path)], num_sanity_val_steps=0)
    trainer.fit(_Slow(), train_dataloaders=data, val_dataloaders=data)
    (epoch,) = [r for r in read_records(path) if r["event"] == "epoch"]
    phases = [epoch[f"{p}_seconds"] for p in ("data", "forward", "backward", "optimizer")]
    assert min(phases) >= 0
    assert sum(phases) == pytest.approx(epoch["train_seconds"], abs=1e-3)
    assert epoch["forward_seconds"] >= 3 * 0.05 and epoch["backward_seconds"] >= 3 * 0.03
    assert epoch["forward_seconds"] < epoch["train_seconds"] - 3 * 0.03
    assert 0 < epoch["val_seconds"] < epoch["elapsed_seconds"]
